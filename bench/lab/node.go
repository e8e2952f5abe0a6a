package lab

// This file is a lab node on the real node stack: containerd (with runc and the CNI reference
// plugins), the real kubelet and flanneld, all built from the module proxy (internal/k8sbin),
// run by `lab node` in the node's network namespace.
//
// Several kubelets and containerds on one host collide on paths they hard-code
// (/var/lib/kubelet/device-plugins, /var/log/containers, /run/containerd/s, /var/lib/cni, ...),
// and kubelet and containerd must see the same mounts (kubelet mounts secrets and projected
// volumes that runc bind-mounts into containers). So each node gets a mount namespace of its own,
// shared by its containerd, kubelet and flanneld, with per-node directories bound over those
// paths and a tmpfs on /run; and a PID namespace of its own, whose init is `lab node-init`: when
// the lab kills it, the kernel kills every shim and container of the node, and the node's mounts
// and pod network namespaces (under containerd's state dir) go with the mount namespace.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skein-net/skein/deploy/images"
)

// NodeConfig is what `lab node` needs to run a node; lab up writes it as node.json in the
// node's directory.
type NodeConfig struct {
	Name string
	Addr netip.Addr
	// Dir is the node's directory in the lab's state dir: the directories bound into the
	// node's mount namespace, its configuration files.
	Dir string
	// LogDir receives containerd.log, kubelet.log and flanneld.log, as <Cluster>-<Name>-*.log.
	LogDir  string
	Cluster string
	// StackBin is the node stack's bin directory (internal/k8sbin.EnsureNodeStack).
	StackBin string
	// Kubeconfig is the kubelet's; FlannelKubeconfig flanneld's; CACert the cluster CA, which
	// the kubelet trusts for client certificates (the API server's).
	Kubeconfig, FlannelKubeconfig, CACert string
	// CgroupRoot is the kubelet's cgroup root, in every cgroup v1 hierarchy.
	CgroupRoot string
	// ClusterCIDR is flannel's network; the Node's spec.podCIDR comes from it.
	ClusterCIDR netip.Prefix
	// Registry is the lab's registry (host:port), served over plain HTTP; PauseImage the pod
	// sandbox image in it.
	Registry, PauseImage string
	// ClusterDNS is the cluster DNS Service's ClusterIP (the kubelet's clusterDNS).
	ClusterDNS netip.Addr `json:",omitzero"`
	// PodBlock, when set, replaces flannel with a pod network like Calico's IPAM makes: the
	// node's pods get addresses from PodBlock (outside the Node's spec.podCIDR), the node routes
	// the other nodes' blocks to them (BlockRoutes), and pod traffic leaving PodPools is
	// masqueraded (as Calico's natOutgoing does).
	PodBlock    netip.Prefix
	PodPools    []netip.Prefix
	BlockRoutes []BlockRoute
	// DualStack replaces flannel with a dual-stack pod network (dualstack.go): pods get an
	// address of each family from the Node's spec.podCIDRs, which the node routes to the other
	// nodes (Neighbours) by their addresses of that family; Addr6 is this node's IPv6 address
	// and ClusterCIDR6 the IPv6 pod CIDR.
	DualStack bool
	// IPv6Only is the same pod network with the IPv6 family only (ClusterCIDR is then unset,
	// Addr is the node's IPv6 address and Addr6 the same); the node's local endpoints (the
	// kubelet's health, containerd's stream server) listen on ::1.
	IPv6Only     bool         `json:",omitempty"`
	Addr6        netip.Addr   `json:",omitzero"`
	ClusterCIDR6 netip.Prefix `json:",omitzero"`
	Neighbours   []Neighbour  `json:",omitempty"`
}

// Neighbour is another node of the cluster: its Kubernetes name and its addresses.
type Neighbour struct {
	Name        string
	Addr, Addr6 netip.Addr
}

// BlockRoute is another node's pod block and the node's address.
type BlockRoute struct {
	Block netip.Prefix
	Via   netip.Addr
}

// nodeBinds are the paths each node has of its own: the node directory's subdirectory (key)
// is bound over the path (value).
var nodeBinds = [][2]string{
	{"var-lib-kubelet", "/var/lib/kubelet"},
	{"var-lib-containerd", "/var/lib/containerd"},
	{"var-lib-cni", "/var/lib/cni"},
	{"var-log", "/var/log"},
	{"etc-cni-net.d", "/etc/cni/net.d"},
	{"etc-containerd", "/etc/containerd"},
}

// hostMountpoints are the directories a node's binds need on the host; those missing are
// created, with hostMountpointMarker in them, and removed once no lab is left.
var hostMountpoints = []string{"/var/lib/kubelet", "/var/lib/containerd", "/var/lib/cni", "/etc/cni/net.d", "/etc/containerd"}

// hostMountpointMarker marks a mountpoint directory the lab made on the machine.
const hostMountpointMarker = ".made-by-skein-lab"

// kubeletTunables are the host-wide kernel settings the kubelet sets when it starts
// (container_manager_linux.go, setupKernelTunables), with its values. The kernel.* and vm.*
// sysctls are not per network namespace: on a shared machine the lab must not switch on
// panic-on-oops for everybody. Each node shows the kubelet a file with the value it wants
// instead, bound over the sysctl in the node's mount namespace: the kubelet reads its value and
// writes nothing.
var kubeletTunables = [][2]string{
	{"vm/overcommit_memory", "1"},
	{"vm/panic_on_oom", "0"},
	{"kernel/panic", "10"},
	{"kernel/panic_on_oops", "1"},
	{"kernel/keys/root_maxkeys", "1000000"},
	{"kernel/keys/root_maxbytes", "25000000"},
}

// RunNode is `lab node`: it starts `lab node-init` (self, with args) as the init of new mount,
// PID and UTS namespaces, passes SIGINT and SIGTERM on, and returns when it exits. If this
// process dies, the kernel kills node-init, and with it the node.
func RunNode(self string, args []string) error {
	cmd := exec.Command(self, append([]string{"node-init"}, args...)...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWUTS,
		Pdeathsig:  syscall.SIGKILL,
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start node-init in new mount, PID and UTS namespaces: %w", err)
	}
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	return cmd.Wait()
}

// LoadNodeConfig reads a node.json.
func LoadNodeConfig(path string) (NodeConfig, error) {
	var c NodeConfig
	b, err := os.ReadFile(path)
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// NodeInit is `lab node-init`, PID 1 of the node's PID namespace: it sets up the node's mounts
// and cgroups, then runs containerd, flanneld and the kubelet, restarting each a second after it
// exits, and writes the CNI configuration once flanneld has the node's subnet. It reaps every
// orphan of the namespace (the shims). SIGTERM stops the node.
func NodeInit(c NodeConfig) error {
	if os.Getpid() != 1 {
		return errors.New("node-init must be the init of its PID namespace (run lab node)")
	}
	if err := unix.Sethostname([]byte(c.Name)); err != nil {
		return fmt.Errorf("sethostname: %w", err)
	}
	if err := c.mounts(); err != nil {
		return err
	}
	if err := c.cgroups(); err != nil {
		return err
	}
	// Every sandbox of a previous node-init died with its PID namespace, without a CNI DEL:
	// host-local's leases of theirs would never be released.
	if err := os.RemoveAll("/var/lib/cni/networks"); err != nil {
		return err
	}
	if err := c.writeConfigs(); err != nil {
		return err
	}
	s := &supervisor{procs: map[int]*child{}, logf: func(f string, a ...any) {
		fmt.Fprintf(os.Stderr, "%s node-init: %s\n", time.Now().UTC().Format(time.RFC3339), fmt.Sprintf(f, a...))
	}}
	env := append(os.Environ(), "PATH="+c.StackBin+":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "NODE_NAME="+c.Name)
	log := func(n string) string { return filepath.Join(c.LogDir, c.Cluster+"-"+c.Name+"-"+n+".log") }
	containerd := &child{name: "containerd", log: log("containerd"), env: env,
		argv: []string{filepath.Join(c.StackBin, "containerd"), "--config", filepath.Join(c.Dir, "containerd.toml")}}
	flanneld := &child{name: "flanneld", log: log("flanneld"), env: env,
		argv: []string{filepath.Join(c.StackBin, "flanneld"), "--kube-subnet-mgr", "--kubeconfig-file", c.FlannelKubeconfig,
			"--iface", "eth0", "--ip-masq", "--subnet-file", "/run/flannel/subnet.env",
			"--net-config-path", filepath.Join(c.Dir, "net-conf.json"), "--healthz-port", "0"}}
	kubelet := &child{name: "kubelet", log: log("kubelet"), env: env,
		argv: []string{filepath.Join(c.StackBin, "kubelet"), "--config", filepath.Join(c.Dir, "kubelet.yaml"),
			"--kubeconfig", c.Kubeconfig, "--node-ip", c.Addr.String(), "--hostname-override", c.Name, "--v", "1"}}

	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT)
	s.start(containerd)
	// The kubelet asks containerd for the cgroup driver when it starts: containerd first.
	sock := "/run/containerd/containerd.sock"
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		s.reap()
	}
	switch {
	case c.PodBlock.IsValid():
		if err := c.blockNetwork(); err != nil {
			return err
		}
		s.logf("pod network: block %s, routes to %d other blocks, pods masqueraded outside %v", c.PodBlock, len(c.BlockRoutes), c.PodPools)
	case c.DualStack || c.IPv6Only:
		if err := c.dualStackMasquerade(); err != nil {
			return err
		}
		go c.dualStackNetwork(s.logf)
	default:
		s.start(flanneld)
		go c.cniWriter(s.logf)
	}
	s.start(kubelet)
	for sig := range sigs {
		switch sig {
		case syscall.SIGCHLD:
			s.reap()
		default:
			s.stop()
			return nil
		}
	}
	return nil
}

// mounts makes the node's mount namespace: private to the node (nothing propagates to the host
// or back), then shared within it (kubelet's and containerd's mount propagation needs shared
// mounts), a /proc of the node's PID namespace, the kubelet's kernel tunables shadowed, the
// node's directories bound over the paths the stack hard-codes, and a tmpfs on /run.
func (c NodeConfig) mounts() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SHARED, ""); err != nil {
		return fmt.Errorf("make / shared within the node: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	sysctlDir := filepath.Join(c.Dir, "sysctl")
	if err := os.MkdirAll(sysctlDir, 0o755); err != nil {
		return err
	}
	for _, t := range kubeletTunables {
		f := filepath.Join(sysctlDir, strings.ReplaceAll(t[0], "/", "."))
		if err := os.WriteFile(f, []byte(t[1]+"\n"), 0o644); err != nil {
			return err
		}
		if err := unix.Mount(f, "/proc/sys/"+t[0], "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("shadow /proc/sys/%s: %w", t[0], err)
		}
	}
	for _, b := range nodeBinds {
		src := filepath.Join(c.Dir, b[0])
		if err := os.MkdirAll(src, 0o755); err != nil {
			return err
		}
		if err := makeMountpoint(b[1]); err != nil {
			return err
		}
		if err := unix.Mount(src, b[1], "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s on %s: %w", src, b[1], err)
		}
	}
	if err := unix.Mount("tmpfs", "/run", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=755"); err != nil {
		return fmt.Errorf("mount a tmpfs on /run: %w", err)
	}
	for _, d := range []string{"/run/flannel", "/run/containerd", "/var/log/pods", "/var/log/containers"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// makeMountpoint makes dir on the machine if it is missing, each directory it creates marked
// as the lab's (removeHostMountpoints removes only those). It runs before the bind over dir,
// so the marker stays on the machine's side of the mount.
func makeMountpoint(dir string) error {
	var missing []string
	for d := dir; d != "/"; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		missing = append([]string{d}, missing...)
	}
	for _, d := range missing {
		if err := os.Mkdir(d, 0o755); err != nil && !os.IsExist(err) {
			return fmt.Errorf("create the mountpoint %s: %w", d, err)
		}
		if err := os.WriteFile(filepath.Join(d, hostMountpointMarker), nil, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// cgroupV1Root is where the cgroup v1 hierarchies are mounted.
const cgroupV1Root = "/sys/fs/cgroup"

// cgroupHierarchies lists the mounted cgroup v1 hierarchies (directories of /sys/fs/cgroup but
// the unified one).
func cgroupHierarchies() ([]string, error) {
	ents, err := os.ReadDir(cgroupV1Root)
	if err != nil {
		return nil, err
	}
	var hs []string
	for _, e := range ents {
		if e.IsDir() && e.Name() != "unified" {
			hs = append(hs, filepath.Join(cgroupV1Root, e.Name()))
		}
	}
	return hs, nil
}

// cgroups creates the kubelet's cgroup root in every hierarchy (the kubelet checks that it
// exists in each) and gives its cpuset the parent's CPUs and memory nodes (an empty cpuset
// admits no task).
func (c NodeConfig) cgroups() error {
	if _, err := os.Stat(filepath.Join(cgroupV1Root, "unified", "cgroup.controllers")); err == nil {
		if _, err := os.Stat(filepath.Join(cgroupV1Root, "memory")); err != nil {
			return errors.New("the host is on cgroup v2 only; the lab's node stack is set up for cgroup v1 (this machine's)")
		}
	}
	hs, err := cgroupHierarchies()
	if err != nil {
		return fmt.Errorf("cgroups: %w", err)
	}
	for _, h := range hs {
		dir := h
		for _, part := range strings.Split(strings.Trim(c.CgroupRoot, "/"), "/") {
			parent := dir
			dir = filepath.Join(dir, part)
			if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
				return fmt.Errorf("cgroup %s: %w", dir, err)
			}
			if filepath.Base(h) == "cpuset" {
				for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
					v, err := os.ReadFile(filepath.Join(parent, f))
					if err != nil {
						return err
					}
					if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
						return fmt.Errorf("cgroup %s/%s: %w", dir, f, err)
					}
				}
			}
		}
	}
	return nil
}

// writeConfigs writes containerd's, the kubelet's and flannel's configuration and the
// registry's hosts.toml.
func (c NodeConfig) writeConfigs() error {
	containerd := fmt.Sprintf(`# Written by skein's lab (bench/lab/node.go) for node %[1]s.
version = 3
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
  address = "/run/containerd/containerd.sock"

[ttrpc]
  address = "/run/containerd/containerd.sock.ttrpc"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '%[2]s'
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = '/etc/containerd/certs.d'

[plugins.'io.containerd.cri.v1.runtime']
  netns_mounts_under_state_dir = true
  # No process here holds CAP_SYS_RESOURCE, which lowering an OOM score needs: the kubelet's
  # -998 for sandboxes would fail in runc. Containers get at least containerd's own score.
  restrict_oom_score_adj = %[5]t
  tolerate_missing_hugetlb_controller = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = '%[3]s'
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['%[4]s']
    conf_dir = '/etc/cni/net.d'
    max_conf_num = 1

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = '%[8]s'

[plugins.'io.containerd.nri.v1.nri']
  disable = true

# Paths of the machine containerd would use (and create) otherwise.
[plugins.'io.containerd.internal.v1.opt']
  path = '%[6]s'

[plugins.'io.containerd.image-verifier.v1.bindir']
  bin_dir = '%[7]s'
`, c.Name, c.PauseImage, filepath.Join(c.StackBin, "runc"), filepath.Join(c.StackBin, "cni"), !hasCapSysResource(),
		filepath.Join(c.Dir, "opt"), filepath.Join(c.Dir, "image-verifiers"), c.loopback())
	hosts := fmt.Sprintf("# The lab's registry, plain HTTP.\nserver = \"http://%[1]s\"\n\n[host.\"http://%[1]s\"]\n  capabilities = [\"pull\", \"resolve\"]\n", c.Registry)
	kubelet := fmt.Sprintf(`# Written by skein's lab (bench/lab/node.go) for node %[1]s.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine is on cgroup v1 (deprecated, still supported) without systemd.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %[2]s
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[3]s}
authorization: {mode: Webhook}
readOnlyPort: 0
healthzBindAddress: "%[6]s"
# Where the kubelet serves (the API server reaches it at the node's InternalIP): every address.
address: "%[7]s"
healthzPort: 10248
resolvConf: %[4]s
clusterDomain: cluster.local
%[8]sfailSwapOn: false
serializeImagePulls: false
# Every node shares one disk: no image garbage collection or disk-pressure eviction.
imageGCHighThresholdPercent: 100
evictionHard: {nodefs.available: "0%%", nodefs.inodesFree: "0%%", imagefs.available: "0%%"}
# The node's own FlexVolume directory (the default, /usr/libexec/kubernetes/..., is the machine's).
volumePluginDir: %[5]s
`, c.Name, c.CgroupRoot, c.CACert, filepath.Join(c.Dir, "resolv.conf"), filepath.Join(c.Dir, "volume-plugins"), c.loopback(), c.anyAddr(), c.clusterDNSConfig())
	// The node's own resolver (resolvConf: what pods with dnsPolicy Default, CoreDNS among
	// them, get): nothing in the lab serves DNS there, so lookups fail at once instead of
	// timing out.
	resolver := "nameserver 127.0.0.1\n"
	if c.IPv6Only {
		resolver = "nameserver ::1\n"
	}
	files := map[string]string{
		// An IPv6 registry's directory is named with its brackets ("[2001:db8:0:ff::1]:5000"),
		// one of the names containerd looks for.
		filepath.Join(c.Dir, "containerd.toml"):                                     containerd,
		filepath.Join(c.Dir, "etc-containerd", "certs.d", c.Registry, "hosts.toml"): hosts,
		filepath.Join(c.Dir, "kubelet.yaml"):                                        kubelet,
		filepath.Join(c.Dir, "resolv.conf"):                                         resolver,
	}
	if c.ClusterCIDR.IsValid() { // flannel's network (unused, but harmless, with the host-gw networks)
		files[filepath.Join(c.Dir, "net-conf.json")] = fmt.Sprintf(`{"Network": %q, "EnableNFTables": true, "Backend": {"Type": "vxlan"}}`+"\n", c.ClusterCIDR.String())
	}
	for path, text := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// clusterDNSConfig is the kubelet's clusterDNS setting (pods with dnsPolicy ClusterFirst get
// this nameserver), or a comment when the node has none.
func (c NodeConfig) clusterDNSConfig() string {
	if !c.ClusterDNS.IsValid() {
		return "# No cluster DNS.\n"
	}
	return fmt.Sprintf("# The kube-dns Service's ClusterIP (CoreDNS, bench/lab/coredns.go).\nclusterDNS: [%q]\n", c.ClusterDNS.String())
}

// loopback is where the node's local endpoints listen: ::1 on an IPv6-only node.
func (c NodeConfig) loopback() string {
	if c.IPv6Only {
		return "::1"
	}
	return "127.0.0.1"
}

// anyAddr is the unspecified address of the node's family, for servers on every address.
func (c NodeConfig) anyAddr() string {
	if c.IPv6Only {
		return "::"
	}
	return "0.0.0.0"
}

// cniWriter writes the CNI configuration flannel's own CNI plugin would generate (its plugin is
// not on the module proxy): the bridge plugin on cni0 with host-local IPAM on the node's flannel
// subnet and a route to the cluster network, chained with portmap. It rewrites it when
// flanneld's subnet file changes.
func (c NodeConfig) cniWriter(logf func(string, ...any)) {
	var last string
	for ; ; time.Sleep(500 * time.Millisecond) {
		env, err := readSubnetEnv("/run/flannel/subnet.env")
		if err != nil {
			continue
		}
		subnet, err := netip.ParsePrefix(env["FLANNEL_SUBNET"])
		if err != nil {
			continue
		}
		mtu, err := strconv.Atoi(env["FLANNEL_MTU"])
		if err != nil || mtu < 576 {
			continue
		}
		conf := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "cbr0",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "isDefaultGateway": true, "hairpinMode": true,
     "ipMasq": false, "mtu": %d,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": %q}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, mtu, subnet.Masked().String(), env["FLANNEL_NETWORK"])
		if conf == last {
			continue
		}
		tmp := "/etc/cni/net.d/.10-flannel.conflist.tmp"
		if err := os.WriteFile(tmp, []byte(conf), 0o644); err == nil {
			if err := os.Rename(tmp, "/etc/cni/net.d/10-flannel.conflist"); err == nil {
				last = conf
				logf("CNI configuration written: bridge cni0 on %s, MTU %d", subnet.Masked(), mtu)
			}
		}
	}
}

// blockNetwork sets up the pod network of a node with a pod block: the CNI configuration
// (bridge + host-local on the block + portmap), routes to the other nodes' blocks through their
// nodes, and an nftables table that masquerades pod traffic leaving the pools.
func (c NodeConfig) blockNetwork() error {
	conf := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "blocks",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "isDefaultGateway": true, "hairpinMode": true,
     "ipMasq": false, "mtu": 1500,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, c.PodBlock.Masked().String())
	if err := os.WriteFile("/etc/cni/net.d/10-blocks.conflist", []byte(conf), 0o644); err != nil {
		return err
	}
	for _, r := range c.BlockRoutes {
		if out, err := exec.Command("ip", "route", "replace", r.Block.String(), "via", r.Via.String()).CombinedOutput(); err != nil {
			return fmt.Errorf("route %s via %s: %w: %s", r.Block, r.Via, err, out)
		}
	}
	var pools []string
	for _, p := range c.PodPools {
		pools = append(pools, p.String())
	}
	set := strings.Join(pools, ", ")
	rules := fmt.Sprintf(`table ip skein-lab-podnet {
	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		ip saddr { %[1]s } ip daddr != { %[1]s } masquerade
	}
}
`, set)
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft: %w: %s", err, out)
	}
	return nil
}

// readSubnetEnv parses flanneld's subnet file (KEY=VALUE lines).
func readSubnetEnv(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "="); ok {
			env[k] = v
		}
	}
	return env, sc.Err()
}

// child is one supervised program of a node.
type child struct {
	name string
	argv []string
	env  []string
	log  string
	pid  int
}

// supervisor starts children, restarts them a second after they exit, and reaps every process
// of the PID namespace (as its init).
type supervisor struct {
	mu       sync.Mutex
	procs    map[int]*child
	stopping bool
	logf     func(string, ...any)
}

func (s *supervisor) start(c *child) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return
	}
	f, err := os.OpenFile(c.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.logf("%s: open its log: %v", c.name, err)
		go func() { time.Sleep(time.Second); s.start(c) }()
		return
	}
	defer f.Close()
	p, err := os.StartProcess(c.argv[0], c.argv, &os.ProcAttr{Env: c.env, Files: []*os.File{nil, f, f},
		Sys: &syscall.SysProcAttr{Setsid: true}})
	if err != nil {
		s.logf("%s: start: %v; again in 1s", c.name, err)
		go func() { time.Sleep(time.Second); s.start(c) }()
		return
	}
	c.pid = p.Pid
	s.procs[p.Pid] = c
	s.logf("%s: started, pid %d", c.name, p.Pid)
}

// reap collects every exited process; a supervised child is started again a second later.
func (s *supervisor) reap() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
		s.mu.Lock()
		c, ok := s.procs[pid]
		delete(s.procs, pid)
		stopping := s.stopping
		s.mu.Unlock()
		if ok && !stopping {
			s.logf("%s (pid %d) exited: %s; starting it again in 1s", c.name, pid, describeWait(ws))
			go func() { time.Sleep(time.Second); s.start(c) }()
		}
	}
}

// stop sends SIGTERM to the children and waits up to 10 s for them; the kernel kills what is
// left when init returns.
func (s *supervisor) stop() {
	s.mu.Lock()
	s.stopping = true
	for pid := range s.procs {
		_ = unix.Kill(pid, unix.SIGTERM)
	}
	s.mu.Unlock()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		s.reap()
		s.mu.Lock()
		n := len(s.procs)
		s.mu.Unlock()
		if n == 0 {
			return
		}
	}
}

func describeWait(ws unix.WaitStatus) string {
	if ws.Signaled() {
		return "killed by " + unix.SignalName(ws.Signal())
	}
	return fmt.Sprintf("exit status %d", ws.ExitStatus())
}

// pauseLayout writes the pod sandbox image (PauseImage: the lab's pause binary from binDir,
// bench/cmd/pause) into an OCI layout at dir, for the lab's registry.
func pauseLayout(binDir, dir string) error {
	b, err := os.ReadFile(filepath.Join(binDir, "pause"))
	if err != nil {
		return fmt.Errorf("lab: the pause binary (bench/cmd/pause, built by lab.Build): %w", err)
	}
	c := images.Component{Name: "pause", Package: "./bench/cmd/pause", Description: "skein lab's pod sandbox"}
	p := images.Platform{OS: "linux", Arch: runtime.GOARCH}
	idx, err := images.Index(c, []images.Platform{p}, map[images.Platform][]byte{p: b},
		images.Meta{Version: "lab", Revision: "lab", Created: time.Unix(0, 0)}, nil)
	if err != nil {
		return fmt.Errorf("lab: pause image: %w", err)
	}
	_, tag, _ := strings.Cut(strings.TrimPrefix(PauseRef, "skein-net/"), ":")
	return images.WriteLayout(dir, "pause:"+tag, idx)
}

// hasCapSysResource reports whether this process holds CAP_SYS_RESOURCE (some sandboxes run
// without it in their bounding set).
func hasCapSysResource() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<unix.CAP_SYS_RESOURCE) != 0
		}
	}
	return false
}

// PodProcesses finds a running pod of a lab from the machine's namespaces: the processes of
// its network namespace, found by a container process below the node's node-init (in network
// namespace nodeNS) whose environment names the pod (HOSTNAME=name, as the kubelet sets it)
// and whose namespace holds ip. It returns the namespace as a path (/proc/PID/ns/net, for
// nsenter --net) and every process in it (the sandbox's pause too).
func PodProcesses(nodeNS, name string, ip netip.Addr) (netns string, pids []int, err error) {
	init, err := nodeInit(nodeNS)
	if err != nil {
		return "", nil, err
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return "", nil, err
	}
	byNS := map[string][]int{}
	var candidates []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err != nil {
			continue
		}
		byNS[ns] = append(byNS[ns], pid)
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil || !slices.Contains(strings.Split(string(env), "\x00"), "HOSTNAME="+name) || !descendsFrom(pid, init) {
			continue
		}
		candidates = append(candidates, ns)
	}
	for _, ns := range candidates {
		path := fmt.Sprintf("/proc/%d/ns/net", byNS[ns][0])
		// Both families: a pod of an IPv6-only cluster has no IPv4 address.
		out, err := exec.Command("nsenter", "--net="+path, "ip", "-o", "addr", "show").Output()
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(out)) {
			if p, err := netip.ParsePrefix(f); err == nil && p.Addr() == ip {
				return path, byNS[ns], nil
			}
		}
	}
	return "", nil, fmt.Errorf("lab: no process of pod %s with address %s on the node of %s (is it running?)", name, ip, nodeNS)
}

// nodeInit is the PID (in the machine's namespace) of the node-init of the node in network
// namespace nodeNS: the process there that is PID 1 of a PID namespace one level below ours
// (a hostNetwork pod's container is PID 1 of a namespace one level further down).
func nodeInit(nodeNS string) (int, error) {
	out, err := exec.Command("ip", "netns", "pids", nodeNS).Output()
	if err != nil {
		return 0, fmt.Errorf("lab: processes of %s: %w", nodeNS, err)
	}
	levels := len(procStatusField(os.Getpid(), "NSpid")) + 1
	for _, f := range strings.Fields(string(out)) {
		pid, _ := strconv.Atoi(f)
		if ids := procStatusField(pid, "NSpid"); len(ids) == levels && ids[levels-1] == "1" {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("lab: no node-init in %s (is the node up?)", nodeNS)
}

// descendsFrom reports whether ancestor is pid or one of its ancestors.
func descendsFrom(pid, ancestor int) bool {
	for range 64 {
		if pid == ancestor {
			return true
		}
		ppid := procStatusField(pid, "PPid")
		if len(ppid) != 1 {
			return false
		}
		next, err := strconv.Atoi(ppid[0])
		if err != nil || next <= 1 {
			return false
		}
		pid = next
	}
	return false
}

// procStatusField is the fields of a line of /proc/PID/status.
func procStatusField(pid int, key string) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			return strings.Fields(v)
		}
	}
	return nil
}
