// Package lab runs real Kubernetes clusters in network namespaces on this machine. This file
// is its network: a router namespace (the WAN) with one bridge per cluster underlay, a
// control-plane namespace and node namespaces per cluster plugged into their underlay, and a
// workstation namespace that reaches every underlay through the router. Every address lives in
// the lab's namespaces; nothing is added to the machine's own namespace; Down removes every
// namespace (and so every link) whose name starts with the lab's prefix.
package lab

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Options size the lab.
type Options struct {
	// Prefix starts every namespace name (default "skl"); two labs need two prefixes.
	Prefix   string
	Clusters int // default 2
	Nodes    int // per cluster, default 2
	// PodBlocks gives pods addresses from per-node blocks of BlockPools (alternating pools,
	// node j's block is the /24 numbered j) instead of the Node's spec.podCIDR, the way CNIs
	// with their own IPAM do (Calico): no pod is inside any Node's spec.podCIDRs, and the
	// cluster's pods come from two CIDRs. The nodes then run no flannel: bridge and host-local
	// on the block, routes between the nodes, pod traffic leaving the pools masqueraded (as
	// Calico's natOutgoing does).
	PodBlocks bool
	// DualStack gives the clusters IPv6 too: pods get an address of each family from their
	// Node's spec.podCIDRs (PodCIDR and PodCIDR6, the same in every cluster), Services a
	// ClusterIP range of each (ServiceCIDR and ServiceCIDR6), and nodes an IPv6 address on their
	// underlay link (Underlay6) that only the nodes of the cluster use: the pod network routes
	// each node's pod CIDRs to it, IPv4 via its IPv4 address and IPv6 via its IPv6 one, in place
	// of flannel. The router, the control plane and the workstation stay IPv4 only. It excludes
	// PodBlocks.
	DualStack bool
	// IPv6Only makes every cluster IPv6 only: pods get an address from PodCIDR6 only (the same
	// in every cluster), Services from ServiceCIDR6, and every namespace of the lab (router,
	// workstation, control planes, nodes) is addressed by IPv6 alone: the underlays are
	// Underlay6, the workstation's link WorkstationNet6, the control plane serves on its IPv6
	// address and the registry on RegistryAddr6. The pod network is DualStack's host-gw one
	// with the IPv6 family only. The kernel still has IPv4 (127.0.0.1 on lo, the IPv4
	// addresses skein's overlay device takes), but no lab link carries IPv4. It excludes
	// PodBlocks and DualStack.
	IPv6Only bool
	// WANMTU narrows the path between every two clusters (the router's routing between
	// their underlays) to this many bytes (WANMinMTU-WANMaxMTU; 0: the underlay's 1500), as a
	// VPN or a tunnel between sites does; each cluster's own traffic and the workstation's keep
	// 1500. Topology.NarrowWAN changes it on a running lab.
	WANMTU int
	// WANDropICMP drops the router's "fragmentation needed" (IPv6: Packet Too Big) on their
	// way into the clusters: with WANMTU, a path MTU black hole.
	WANDropICMP bool
}

// NS is a network namespace of the lab.
type NS struct {
	Name string
	// Addr is the namespace's address on its network (underlay for cluster members).
	Addr netip.Addr
	// Addr6 is a node's IPv6 address on its cluster's Underlay6 in a lab with DualStack, and
	// the same as Addr (its only address) in a lab with IPv6Only.
	Addr6 netip.Addr `json:",omitzero"`
}

// Cluster is one cluster's namespaces.
type Cluster struct {
	Name         string
	Underlay     netip.Prefix // such as 192.168.10.0/24 (2001:db8:0:10::/64 with IPv6Only); the router holds .1 (::1)
	ControlPlane NS
	Nodes        []NS
}

// Topology is the lab's network.
type Topology struct {
	Prefix      string
	Router      NS
	Workstation NS
	Clusters    []Cluster
}

// run runs a command and wraps its output into the error.
func run(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// In runs a command inside namespace ns.
func In(ns string, args ...string) error {
	return run(append([]string{"ip", "netns", "exec", ns}, args...)...)
}

// Up builds the topology. On error, what was built is removed.
func Up(o Options) (_ *Topology, err error) {
	if o.Prefix == "" {
		o.Prefix = "skl"
	}
	if err := CheckPrefix(o.Prefix); err != nil {
		return nil, err
	}
	if o.Clusters == 0 {
		o.Clusters = 2
	}
	if o.Nodes == 0 {
		o.Nodes = 2
	}
	if o.Clusters > 20 || o.Nodes > 50 {
		return nil, fmt.Errorf("lab: at most 20 clusters of 50 nodes")
	}
	if o.DualStack && o.PodBlocks {
		return nil, errors.New("lab: DualStack and PodBlocks are two different pod networks: choose one")
	}
	if o.IPv6Only && (o.DualStack || o.PodBlocks) {
		return nil, errors.New("lab: IPv6Only excludes DualStack and PodBlocks: choose one")
	}
	if o.WANMTU != 0 && (o.WANMTU < WANMinMTU || o.WANMTU > WANMaxMTU) {
		return nil, fmt.Errorf("lab: WANMTU %d: want %d-%d, or 0 for the full MTU", o.WANMTU, WANMinMTU, WANMaxMTU)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, fmt.Errorf("lab: the ip command (Debian package iproute2) is needed: %w", err)
	}
	t := &Topology{Prefix: o.Prefix}
	defer func() {
		if err != nil {
			_ = Down(o.Prefix)
		}
	}()
	// The workstation's link and each cluster's underlay, of the lab's one family.
	wsNet := netip.MustParsePrefix("10.255.0.0/24")
	underlay := func(c int) netip.Prefix {
		return netip.PrefixFrom(netip.AddrFrom4([4]byte{192, 168, byte(10 + c), 0}), 24)
	}
	if o.IPv6Only {
		wsNet, underlay = WorkstationNet6, Underlay6
	}
	t.Router = NS{Name: o.Prefix + "-router", Addr: hostIn(wsNet, 1)}
	t.Workstation = NS{Name: o.Prefix + "-ws", Addr: hostIn(wsNet, 2)}
	for _, ns := range []NS{t.Router, t.Workstation} {
		if err := addNS(ns.Name); err != nil {
			return nil, err
		}
	}
	forwarding := "net.ipv4.ip_forward=1"
	if o.IPv6Only {
		forwarding = "net.ipv6.conf.all.forwarding=1"
	}
	if err := In(t.Router.Name, "sysctl", "-qw", forwarding); err != nil {
		return nil, err
	}
	if err := veth(t.Router.Name, "ws", t.Workstation.Name, "eth0", prefixOf(t.Router.Addr, wsNet), prefixOf(t.Workstation.Addr, wsNet)); err != nil {
		return nil, err
	}
	// The workstation reaches every cluster's underlay through the router.
	underlays := "192.168.0.0/16"
	if o.IPv6Only {
		underlays = LabNet6.String()
	}
	if err := In(t.Workstation.Name, ipFor(t.Router.Addr, "route", "add", underlays, "via", t.Router.Addr.String())...); err != nil {
		return nil, err
	}
	for c := range o.Clusters {
		cl := Cluster{Name: fmt.Sprintf("c%d", c), Underlay: underlay(c)}
		br := "br-" + cl.Name
		gw := hostIn(cl.Underlay, 1)
		if err := In(t.Router.Name, "ip", "link", "add", br, "type", "bridge"); err != nil {
			return nil, err
		}
		if err := In(t.Router.Name, addrAdd(prefixOf(gw, cl.Underlay), br)...); err != nil {
			return nil, err
		}
		if err := In(t.Router.Name, "ip", "link", "set", br, "up"); err != nil {
			return nil, err
		}
		members := []*NS{&cl.ControlPlane}
		cl.ControlPlane = NS{Name: fmt.Sprintf("%s-%s-cp", o.Prefix, cl.Name), Addr: hostIn(cl.Underlay, 10)}
		for n := range o.Nodes {
			cl.Nodes = append(cl.Nodes, NS{Name: fmt.Sprintf("%s-%s-n%d", o.Prefix, cl.Name, n), Addr: hostIn(cl.Underlay, 20+n)})
		}
		for i := range cl.Nodes {
			members = append(members, &cl.Nodes[i])
		}
		for i, m := range members {
			if err := addNS(m.Name); err != nil {
				return nil, err
			}
			port := fmt.Sprintf("%s-%d", cl.Name, i) // router side, at most 15 characters
			if err := veth(t.Router.Name, port, m.Name, "eth0", "", prefixOf(m.Addr, cl.Underlay)); err != nil {
				return nil, err
			}
			if err := In(t.Router.Name, "ip", "link", "set", port, "master", br); err != nil {
				return nil, err
			}
			if err := In(m.Name, ipFor(gw, "route", "add", "default", "via", gw.String())...); err != nil {
				return nil, err
			}
		}
		if o.DualStack || o.IPv6Only {
			for i := range cl.Nodes {
				n := &cl.Nodes[i]
				if o.IPv6Only {
					n.Addr6 = n.Addr // its only address, added above
				} else {
					n.Addr6 = host6(Underlay6(c), 20+i)
					if err := In(n.Name, addrAdd(prefixOf(n.Addr6, Underlay6(c)), "eth0")...); err != nil {
						return nil, err
					}
				}
				// Pods' traffic of both families goes through the node (the bridge plugin would
				// switch forwarding on for the families it configures; here it is on from the
				// start, as the agent needs it for IPv6).
				if err := In(n.Name, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"); err != nil {
					return nil, err
				}
			}
		}
		t.Clusters = append(t.Clusters, cl)
	}
	if o.WANMTU != 0 || o.WANDropICMP {
		if err := t.NarrowWAN(o.WANMTU, o.WANDropICMP); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// hostIn is address n of prefix p (its last byte set to n), of either family.
func hostIn(p netip.Prefix, n int) netip.Addr {
	if p.Addr().Is6() {
		return host6(p, n)
	}
	return host(p, n)
}

// prefixOf is a written as an address on network p ("10.255.0.2/24").
func prefixOf(a netip.Addr, p netip.Prefix) string { return netip.PrefixFrom(a, p.Bits()).String() }

// ipFor is the ip command line args for the family of a ("ip -6 ..." for IPv6).
func ipFor(a netip.Addr, args ...string) []string {
	if a.Is6() {
		return append([]string{"ip", "-6"}, args...)
	}
	return append([]string{"ip"}, args...)
}

// addrAdd is the ip command that adds address prefix (as prefixOf writes it) to dev. An IPv6
// address is added without duplicate address detection ("nodad"): each namespace of the lab has
// addresses of its own, and a tentative address (for a second or two) would fail the binds of
// the processes started right after (kube-apiserver on its advertise address).
func addrAdd(prefix, dev string) []string {
	args := []string{"ip", "addr", "add", prefix, "dev", dev}
	if p, err := netip.ParsePrefix(prefix); err == nil && p.Addr().Is6() {
		args = append(args, "nodad")
	}
	return args
}

// WorkstationNet6 is the link between the router and the workstation in a lab with IPv6Only
// (the router holds ::1, where the registry listens, the workstation ::2).
var WorkstationNet6 = netip.MustParsePrefix("2001:db8:0:ff::/64")

// LabNet6 holds every underlay address of a lab with IPv6Only (the workstation's link and the
// clusters' Underlay6): a documentation prefix, outside every pod, service and remapped CIDR.
var LabNet6 = netip.MustParsePrefix("2001:db8::/32")

func host(p netip.Prefix, n int) netip.Addr {
	a := p.Addr().As4()
	a[3] = byte(n)
	return netip.AddrFrom4(a)
}

// Underlay6 is cluster c's IPv6 underlay in a lab with DualStack or IPv6Only (2001:db8:0:<10+c>::/64, a
// documentation prefix: outside the IPv6 pools peers' pod CIDRs are remapped into, fd00::/8).
func Underlay6(c int) netip.Prefix {
	var a [16]byte
	a[0], a[1], a[2], a[3], a[7] = 0x20, 0x01, 0x0d, 0xb8, byte(10+c)
	return netip.PrefixFrom(netip.AddrFrom16(a), 64)
}

func host6(p netip.Prefix, n int) netip.Addr {
	a := p.Addr().As16()
	a[15] = byte(n)
	return netip.AddrFrom16(a)
}

func addNS(name string) error {
	if err := run("ip", "netns", "add", name); err != nil {
		return err
	}
	return In(name, "ip", "link", "set", "lo", "up")
}

// veth connects namespace a (interface an, address aAddr or none) to b (bn, bAddr).
func veth(a, an, b, bn, aAddr, bAddr string) error {
	if err := In(a, "ip", "link", "add", an, "type", "veth", "peer", "name", bn, "netns", b); err != nil {
		return err
	}
	for _, side := range []struct{ ns, dev, addr string }{{a, an, aAddr}, {b, bn, bAddr}} {
		if side.addr != "" {
			if err := In(side.ns, addrAdd(side.addr, side.dev)...); err != nil {
				return err
			}
		}
		if err := In(side.ns, "ip", "link", "set", side.dev, "up"); err != nil {
			return err
		}
	}
	return nil
}

// Namespaces lists the namespaces whose names start with prefix.
func Namespaces(prefix string) ([]string, error) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return nil, fmt.Errorf("ip netns list: %w", err)
	}
	var names []string
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], prefix+"-") {
			names = append(names, f[0])
		}
	}
	return names, nil
}

// Down kills every process in the lab's namespaces, deletes them (their links go with them)
// and removes the lab's state dir. It is safe to call on a lab that is partly or not at all
// there.
func Down(prefix string) error {
	if err := CheckPrefix(prefix); err != nil {
		return err
	}
	unlock, err := lockLabs()
	if err != nil {
		return err
	}
	defer unlock()
	var errs []error
	// Kill first, everywhere, so that no kubelet makes a pod namespace behind our back; twice,
	// for what a dying process may have started.
	for range 2 {
		names, err := Namespaces(prefix)
		if err != nil {
			return err
		}
		for _, n := range names {
			if out, err := exec.Command("ip", "netns", "pids", n).Output(); err == nil {
				for _, pid := range strings.Fields(string(out)) {
					_ = exec.Command("kill", "-9", pid).Run()
				}
			}
		}
	}
	names, err := Namespaces(prefix)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := run("ip", "netns", "del", n); err != nil {
			errs = append(errs, err)
		}
	}
	// A process spawned as the namespaces were scanned may have entered one after the scan and
	// outlive its name: find it by its tag. Twice, for a supervisor that restarts its child.
	for range 2 {
		killTagged(DefaultStateDir(prefix))
	}
	if err := removeCgroups(prefix); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(DefaultStateDir(prefix)); err != nil {
		errs = append(errs, err)
	}
	removeHostMountpoints()
	return errors.Join(errs...)
}

// killTagged kills every process whose environment says it belongs to the lab in stateDir.
func killTagged(stateDir string) {
	tag := []byte(stateEnv + "=" + stateDir + "\x00")
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && bytes.Contains(env, tag) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// removeCgroups removes the cgroups the kubelets and runc of the lab made
// (cgroupParent/<prefix>-<node> in every hierarchy, the unified one included), deepest first,
// once the processes in them are gone (they die with their node's PID namespace, a moment
// after its init); and those of labs that left nothing else behind (no namespace, no state
// dir: a lab killed before its Down). Names are compared, never globbed. Call it under the
// labs' lock.
func removeCgroups(prefix string) error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return nil // no cgroup v1 here: nothing was made
	}
	// runc makes each container's cgroup in the unified hierarchy too (hybrid mode).
	if _, err := os.Stat(filepath.Join(cgroupV1Root, "unified", "cgroup.procs")); err == nil {
		hs = append(hs, filepath.Join(cgroupV1Root, "unified"))
	}
	gone := map[string]bool{prefix: true}
	ours := func(name string) bool {
		p, _, ok := strings.Cut(name, "-")
		if !ok || CheckPrefix(p) != nil {
			return false
		}
		if v, seen := gone[p]; seen {
			return v
		}
		names, _ := Namespaces(p)
		_, statErr := os.Stat(DefaultStateDir(p))
		gone[p] = len(names) == 0 && os.IsNotExist(statErr)
		return gone[p]
	}
	var last error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		last = nil
		for _, h := range hs {
			parent := filepath.Join(h, cgroupParent)
			ents, _ := os.ReadDir(parent)
			for _, e := range ents {
				if e.IsDir() && ours(e.Name()) {
					if err := removeCgroupTree(filepath.Join(parent, e.Name())); err != nil {
						last = err
					}
				}
			}
			_ = syscall.Rmdir(parent) // only when no other lab has a node there
		}
		if last == nil || time.Now().After(deadline) {
			return last
		}
	}
}

// removeCgroupTree removes a cgroup directory and the cgroups below it (rmdir only: a cgroup's
// files go with it).
func removeCgroupTree(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	for _, e := range ents {
		if e.IsDir() {
			if err := removeCgroupTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := syscall.Rmdir(dir); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("remove cgroup %s: %w", dir, err)
	}
	return nil
}

// removeHostMountpoints removes the empty directories the nodes made as mountpoints (those
// holding only hostMountpointMarker), once no lab is left on the machine and nothing is mounted
// on them in any mount namespace (removing a mountpoint would detach it from a node that still
// uses it). Directories the machine had are never marked, so never removed. Call it under the
// labs' lock.
func removeHostMountpoints() {
	if others, _ := filepath.Glob("/var/tmp/skein-lab-*"); len(others) > 0 {
		return
	}
	mounted := mountTargets()
	for _, d := range append(slices.Clone(hostMountpoints), "/etc/cni") {
		if mounted[d] {
			continue
		}
		ents, err := os.ReadDir(d)
		if err != nil || len(ents) != 1 || ents[0].Name() != hostMountpointMarker {
			continue
		}
		_ = os.Remove(filepath.Join(d, hostMountpointMarker))
		_ = syscall.Rmdir(d)
	}
}

// mountTargets are the mount points of every mount namespace on the machine (as paths in
// that namespace's root, which is the machine's for the lab's nodes).
func mountTargets() map[string]bool {
	targets := map[string]bool{}
	infos, _ := filepath.Glob("/proc/[0-9]*/mountinfo")
	seen := map[string]bool{}
	for _, mi := range infos {
		ns, err := os.Readlink(filepath.Join(filepath.Dir(mi), "ns", "mnt"))
		if err != nil || seen[ns] {
			continue
		}
		seen[ns] = true
		b, err := os.ReadFile(mi)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 4 {
				targets[f[4]] = true
			}
		}
	}
	return targets
}
