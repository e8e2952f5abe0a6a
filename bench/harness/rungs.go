package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// InnerMTU is the MTU of the path every rung measures: the tunnel MTU of the spec (1340), set
// on the plain veth too so that every rung moves packets of the same size.
const InnerMTU = 1340

// Env is what rungs build with.
type Env struct {
	// Prefix starts every namespace and interface name of the harness.
	Prefix string
	// Bin holds wireguard-go, skein-probe and skein-gateway (see Prepare).
	Bin string
	// Work is a scratch directory (keys, configs, logs).
	Work string
	Log  *os.File
	// Profile turns on the skein gateways' profiler (see Options.ProfileDir).
	Profile bool
}

// Path is a built rung: where the client and server run and what carries the traffic.
type Path struct {
	Client, Server netns
	// Addr is the server's address as the client dials it.
	Addr string
	// Gateways are the processes in the middle (wireguard-go, skein-gateway): their CPU time
	// counts towards the rung's CPU per GB, their peak RSS is reported.
	Gateways []*exec.Cmd
	// Profiled are the namespaces of gateways serving Go's profiler on 127.0.0.1:9471.
	Profiled []netns
	// Only, if set, are the figures measured (ipv6Metrics): the rest, and the CPU breakdown
	// unless listed as "cpu-breakdown", are left out.
	Only []string
}

// wants reports whether the path measures figure k.
func (p *Path) wants(k string) bool { return p.Only == nil || slices.Contains(p.Only, k) }

// ipv6Metrics are what the IPv6 rungs measure (issue #24: one stream both ways, latency, CPU
// per GB, the gateways' idle RSS): the rest is the IPv4 rungs' business, and each IPv6 rung
// costs the ladder seconds, not a minute.
var ipv6Metrics = []string{"tcp1", "tcp1-reverse", "rr-p50", "rr-p99", "cpu-per-gb", "gateway-rss-idle", "gateway-anon-idle"}

// Rung is one topology of the ladder.
type Rung interface {
	Name() string
	// Describe says in a line what carries the traffic.
	Describe() string
	Up(e *Env) (*Path, error)
	Down() error
}

// vethRung is the physical limit: two namespaces, one veth pair.
type vethRung struct{ ns []netns }

func (r *vethRung) Name() string { return "veth" }
func (r *vethRung) Describe() string {
	return fmt.Sprintf("two namespaces joined by one veth pair (MTU %d): the machine's limit", InnerMTU)
}

func (r *vethRung) Up(e *Env) (*Path, error) {
	c, err := addNetns(e.Prefix + "-veth-c")
	if err != nil {
		return nil, err
	}
	r.ns = append(r.ns, c)
	s, err := addNetns(e.Prefix + "-veth-s")
	if err != nil {
		return nil, err
	}
	r.ns = append(r.ns, s)
	if err := vethPair(c, "eth0", "10.97.0.1/24", s, "eth0", "10.97.0.2/24", InnerMTU); err != nil {
		return nil, err
	}
	return &Path{Client: c, Server: s, Addr: "10.97.0.2"}, nil
}

func (r *vethRung) Down() error { return removeAll(r.ns) }

func removeAll(ns []netns) error {
	var first error
	for _, n := range ns {
		if err := removeNetns(n); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// wireguardRung is the stock wireguard-go engine on a kernel TUN in each of two namespaces,
// joined by a veth underlay: the engine's own limit, configured with wg.
type wireguardRung struct {
	// v6 carries IPv6 inside the tunnel (the underlay stays IPv4).
	v6    bool
	ns    []netns
	socks []string
}

func (r *wireguardRung) Name() string {
	if r.v6 {
		return "wireguard-go" + ipv6Suffix
	}
	return "wireguard-go"
}

func (r *wireguardRung) Describe() string {
	if r.v6 {
		return "the wireguard-go rung carrying IPv6 (fd99::/64) inside the tunnel"
	}
	return fmt.Sprintf("stock wireguard-go (the version skein pins) on a kernel TUN in two namespaces over a veth, tunnel MTU %d", InnerMTU)
}

func (r *wireguardRung) Up(e *Env) (*Path, error) {
	type side struct {
		ns             netns
		dev, under, in string
		key, pub       string
	}
	sides := []*side{
		{dev: e.Prefix + "wgc", under: "10.98.0.1", in: "10.99.0.1"},
		{dev: e.Prefix + "wgs", under: "10.98.0.2", in: "10.99.0.2"},
	}
	tag, inBits, hostBits := "wg", "/24", "/32"
	if r.v6 {
		sides[0].dev, sides[1].dev = e.Prefix+"wg6c", e.Prefix+"wg6s"
		sides[0].in, sides[1].in = "fd99::1", "fd99::2"
		tag, inBits, hostBits = "wg6", "/64", "/128"
	}
	for i, sd := range sides {
		n, err := addNetns(fmt.Sprintf("%s-%s-%c", e.Prefix, tag, "cs"[i]))
		if err != nil {
			return nil, err
		}
		r.ns = append(r.ns, n)
		sd.ns = n
		key, err := exec.Command("wg", "genkey").Output()
		if err != nil {
			return nil, fmt.Errorf("wg genkey (Debian package wireguard-tools): %w", err)
		}
		sd.key = strings.TrimSpace(string(key))
		pub := exec.Command("wg", "pubkey")
		pub.Stdin = strings.NewReader(sd.key)
		out, err := pub.Output()
		if err != nil {
			return nil, fmt.Errorf("wg pubkey: %w", err)
		}
		sd.pub = strings.TrimSpace(string(out))
	}
	if err := vethPair(sides[0].ns, "eth0", sides[0].under+"/24", sides[1].ns, "eth0", sides[1].under+"/24", 1500); err != nil {
		return nil, err
	}
	p := &Path{Client: sides[0].ns, Server: sides[1].ns, Addr: sides[1].in}
	if r.v6 {
		p.Only = ipv6Metrics
	}
	for i, sd := range sides {
		peer := sides[1-i]
		cmd, err := sd.ns.start(e.Log, filepath.Join(e.Bin, "wireguard-go"), "-f", sd.dev)
		if err != nil {
			return nil, err
		}
		p.Gateways = append(p.Gateways, cmd)
		sock := "/var/run/wireguard/" + sd.dev + ".sock"
		r.socks = append(r.socks, sock)
		if err := waitFile(sock, 5*time.Second); err != nil {
			return nil, fmt.Errorf("wireguard-go %s: %w", sd.dev, err)
		}
		keyFile := filepath.Join(e.Work, sd.dev+".key")
		if err := os.WriteFile(keyFile, []byte(sd.key+"\n"), 0o600); err != nil {
			return nil, err
		}
		if err := sd.ns.run("wg", "set", sd.dev, "private-key", keyFile, "listen-port", "51820",
			"peer", peer.pub, "allowed-ips", peer.in+hostBits, "endpoint", peer.under+":51820"); err != nil {
			return nil, err
		}
		addr := []string{"ip", "addr", "add", sd.in + inBits, "dev", sd.dev}
		if r.v6 {
			addr = append(addr, "nodad") // no duplicate address detection to wait for
		}
		for _, c := range [][]string{
			addr,
			{"ip", "link", "set", sd.dev, "mtu", fmt.Sprint(InnerMTU), "up"},
		} {
			if err := sd.ns.run(c...); err != nil {
				return nil, err
			}
		}
	}
	return p, nil
}

func (r *wireguardRung) Down() error {
	err := removeAll(r.ns)
	for _, s := range r.socks {
		_ = os.Remove(s)
	}
	return err
}

func waitFile(path string, d time.Duration) error {
	for deadline := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear in %s", path, d)
		}
	}
}

// skeinRung is skein between two sites, each a pod namespace behind a node namespace with a
// kernel VXLAN device (as skein-agent programs it) and a gateway namespace running
// skein-gateway from a standalone config; the gateways talk WireGuard over a veth WAN. With
// nat, both sites number their pods in 10.244.0.0/16 and the gateways remap (the client sees
// the server's pods as 10.71.0.0/16); without, the server's pods are 10.245.0.0/16 and no
// address is rewritten.
type skeinRung struct {
	nat bool
	// v6: dual-stack sites (pods in 10.244.0.0/16 and fd00:244::/48 on both sides), measured
	// over IPv6: the client sees the server's pods as fd71::/48.
	v6 bool
	ns []netns
}

func (r *skeinRung) Name() string {
	switch {
	case r.v6:
		return "skein" + ipv6Suffix
	case r.nat:
		return "skein"
	}
	return "skein-nonat"
}

func (r *skeinRung) Describe() string {
	if r.v6 {
		return "the skein rung between dual-stack sites, measured over IPv6: both sites' pods in fd00:244::/48 too, remapped in the gateways (fd71::/48 and fd72::/48)"
	}
	if r.nat {
		return fmt.Sprintf("pod -> node (kernel VXLAN) -> skein-gateway -> WireGuard -> skein-gateway -> node -> pod; overlapping pod CIDRs remapped in the gateways; tunnel MTU %d", InnerMTU)
	}
	return "the skein rung with disjoint pod CIDRs: no NAT in the gateways"
}

// site is one end of the skein and kernel-NAT rungs: a pod namespace behind a node namespace
// with a kernel VXLAN device (as skein-agent programs it) towards a gateway namespace.
type site struct {
	pod, node, gw             netns
	podIP, podNet, under, wan string
	key, pub                  string
	nodeMAC, gwMAC            string
	// podIP6 and podNet6 (a /64) are the pod's IPv6 address and network on dual-stack sites.
	podIP6, podNet6 string
}

// buildSites makes the two sites (client first) and the WAN between their gateway namespaces.
// The client site's pods are 10.244.1.0/24; the server's are 10.244.2.0/24 with nat (both
// clusters on 10.244.0.0/16: the client sees the server's pods as 10.71.0.0/16, the server the
// client's as 10.72.0.0/16) and 10.245.2.0/24 without. Each node routes the peer's pods, as it
// sees them, to the gateway's overlay address 10.80.0.1.
//
// With v6 the sites are dual-stack: their pods are also in fd00:244::/48 (fd00:244:0:1::/64
// and fd00:244:0:2::/64), the client sees the server's as fd71::/48 and the server the client's
// as fd72::/48, and each node routes those via the gateway's IPv6 overlay address
// (64:ff9b:1::a50:1, its IPv4 one inside 64:ff9b:1::/96) with a permanent neighbour entry, as
// skein-agent programs it.
func buildSites(e *Env, tag string, nat, v6 bool) ([]*site, []netns, error) {
	var made []netns
	serverPods := "10.245"
	if nat {
		serverPods = "10.244"
	}
	sites := []*site{
		{podIP: "10.244.1.2", podNet: "10.244.1", under: "192.168.77", wan: "198.51.100.1"},
		{podIP: serverPods + ".2.2", podNet: serverPods + ".2", under: "192.168.78", wan: "198.51.100.2"},
	}
	for i, s := range sites {
		for _, role := range []struct {
			name string
			ns   *netns
		}{{"pod", &s.pod}, {"node", &s.node}, {"gw", &s.gw}} {
			n, err := addNetns(fmt.Sprintf("%s-%s-%s%c", e.Prefix, tag, role.name, "cs"[i]))
			if err != nil {
				return nil, made, err
			}
			made = append(made, n)
			*role.ns = n
		}
		key, err := exec.Command("wg", "genkey").Output()
		if err != nil {
			return nil, made, fmt.Errorf("wg genkey (Debian package wireguard-tools): %w", err)
		}
		s.key = strings.TrimSpace(string(key))
		pub := exec.Command("wg", "pubkey")
		pub.Stdin = strings.NewReader(s.key)
		out, err := pub.Output()
		if err != nil {
			return nil, made, err
		}
		s.pub = strings.TrimSpace(string(out))
		if err := vethPair(s.pod, "eth0", s.podIP+"/24", s.node, "pod0", s.podNet+".1/24", InnerMTU); err != nil {
			return nil, made, err
		}
		if err := s.pod.run("ip", "route", "add", "default", "via", s.podNet+".1"); err != nil {
			return nil, made, err
		}
		if v6 {
			s.podNet6 = fmt.Sprintf("fd00:244:0:%d::", i+1)
			s.podIP6 = s.podNet6 + "2"
			for _, c := range []struct {
				ns   netns
				args []string
			}{
				{s.pod, []string{"ip", "addr", "add", s.podIP6 + "/64", "dev", "eth0", "nodad"}},
				{s.pod, []string{"ip", "-6", "route", "add", "default", "via", s.podNet6 + "1"}},
				{s.node, []string{"sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"}},
				{s.node, []string{"ip", "addr", "add", s.podNet6 + "1/64", "dev", "pod0", "nodad"}},
			} {
				if err := c.ns.run(c.args...); err != nil {
					return nil, made, err
				}
			}
		}
		// node <-> gateway (the pod network carrying VXLAN to the gateway pod)
		if err := vethPair(s.node, "eth0", s.under+".1/24", s.gw, "eth0", s.under+".2/24", 1500); err != nil {
			return nil, made, err
		}
		s.nodeMAC = fmt.Sprintf("02:5b:00:00:01:%02x", i)
		s.gwMAC = fmt.Sprintf("02:5b:00:00:02:%02x", i)
		remote := map[int]string{0: "10.245.0.0/16", 1: "10.244.0.0/16"}[i]
		if nat {
			remote = map[int]string{0: "10.71.0.0/16", 1: "10.72.0.0/16"}[i]
		}
		for _, c := range [][]string{
			{"sysctl", "-qw", "net.ipv4.ip_forward=1"},
			{"ip", "link", "add", "liqo.vxlan", "address", s.nodeMAC, "type", "vxlan", "id", "18952", "dstport", "4789", "local", s.under + ".1", "nolearning"},
			{"ip", "link", "set", "liqo.vxlan", "mtu", "1450", "up"},
			{"ip", "addr", "add", "10.80.0.12/16", "dev", "liqo.vxlan"},
			{"bridge", "fdb", "append", "00:00:00:00:00:00", "dev", "liqo.vxlan", "dst", s.under + ".2"},
			{"bridge", "fdb", "append", s.gwMAC, "dev", "liqo.vxlan", "dst", s.under + ".2"},
			{"ip", "route", "add", remote, "via", "10.80.0.1", "dev", "liqo.vxlan", "onlink"},
		} {
			if err := s.node.run(c...); err != nil {
				return nil, made, err
			}
		}
		if !v6 {
			continue
		}
		// The overlay device's IPv6 address, the gateway's neighbour entry and the route to
		// the peer's pods as seen here.
		remote6 := map[int]string{0: "fd71::/48", 1: "fd72::/48"}[i]
		for _, c := range [][]string{
			{"ip", "addr", "add", "64:ff9b:1::a50:c/96", "dev", "liqo.vxlan", "nodad"},
			{"ip", "-6", "neigh", "replace", "64:ff9b:1::a50:1", "lladdr", s.gwMAC, "dev", "liqo.vxlan", "nud", "permanent"},
			{"ip", "-6", "route", "add", remote6, "via", "64:ff9b:1::a50:1", "dev", "liqo.vxlan"},
		} {
			if err := s.node.run(c...); err != nil {
				return nil, made, err
			}
		}
	}
	if err := vethPair(sites[0].gw, "wan0", sites[0].wan+"/24", sites[1].gw, "wan0", sites[1].wan+"/24", 1500); err != nil {
		return nil, made, err
	}
	return sites, made, nil
}

// serverAddr is how the client dials the server's pod.
func serverAddr(sites []*site, nat bool) string {
	if nat {
		return "10.71.2.2"
	}
	return sites[1].podIP
}

func (r *skeinRung) Up(e *Env) (*Path, error) {
	tag := "sknat"
	switch {
	case r.v6:
		tag = "sk6"
	case !r.nat:
		tag = "skraw"
	}
	sites, made, err := buildSites(e, tag, r.nat, r.v6)
	r.ns = append(r.ns, made...)
	if err != nil {
		return nil, err
	}

	p := &Path{Client: sites[0].pod, Server: sites[1].pod, Addr: serverAddr(sites, r.nat)}
	if r.v6 {
		p.Addr, p.Only = "fd71:0:0:2::2", ipv6Metrics // the server's pod as the client sees it
	}
	for i, s := range sites {
		peer := sites[1-i]
		keyFile := filepath.Join(e.Work, fmt.Sprintf("skein-%s-%d.key", tag, i))
		// The gateway runs as nobody (65534): its key file is its own.
		if err := os.WriteFile(keyFile, []byte(s.key+"\n"), 0o600); err != nil {
			return nil, err
		}
		if err := os.Chown(keyFile, 65534, 65534); err != nil {
			return nil, err
		}
		role := "role: client\nendpoint: " + peer.wan + ":51820\n"
		if i == 1 {
			role = "role: server\nlistenPort: 51820\n"
		}
		peerPods, remapped := "10.244.0.0/16", ""
		if r.nat {
			remapped = map[int]string{0: "10.71.0.0/16", 1: "10.72.0.0/16"}[i]
		} else if i == 0 {
			peerPods = "10.245.0.0/16"
		}
		cfg := role + fmt.Sprintf(`privateKeyFile: %s
peerPublicKey: %s
mtu: %d
remote:
  podCIDR: %s
`, keyFile, peer.pub, InnerMTU, peerPods)
		if remapped != "" {
			cfg += "  remappedPodCIDR: " + remapped + "\n"
		}
		podCIDRs := s.podNet + ".0/24"
		if r.v6 {
			cfg += "  podCIDR6: fd00:244::/48\n  remappedPodCIDR6: " + map[int]string{0: "fd71::/48", 1: "fd72::/48"}[i] + "\n"
			podCIDRs += ", '" + s.podNet6 + "/64'"
		}
		cfg += fmt.Sprintf(`overlay:
  kind: vxlan
  listen: %[1]s.2
  ip: 10.80.0.1
  mac: 02:5b:00:00:02:%02[2]x
nodes:
- name: node
  vtep: %[1]s.1
  mac: 02:5b:00:00:01:%02[2]x
  podCIDRs: [%[3]s]
`, s.under, i, podCIDRs)
		if e.Profile {
			cfg += "httpListen: 127.0.0.1:9471\npprof: true\n"
			p.Profiled = append(p.Profiled, s.gw)
		}
		cfgFile := filepath.Join(e.Work, fmt.Sprintf("skein-%s-%d.yaml", tag, i))
		if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
			return nil, err
		}
		cmd, err := s.gw.start(e.Log, "setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "--inh-caps", "-all",
			filepath.Join(e.Bin, "skein-gateway"), "--config", cfgFile)
		if err != nil {
			return nil, err
		}
		p.Gateways = append(p.Gateways, cmd)
	}
	return p, nil
}

func (r *skeinRung) Down() error { return removeAll(r.ns) }
