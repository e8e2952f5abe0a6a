package kernel_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skein-net/skein/dataplane/kernel"
	"github.com/skein-net/skein/dataplane/overlay"
	"github.com/skein-net/skein/dataplane/packet"
	pt "github.com/skein-net/skein/dataplane/packet/packettest"
	"github.com/skein-net/skein/internal/netnstest"
)

// site is a node namespace with a pod namespace behind a veth, and gateway namespaces on the
// node's underlay whose kernel VXLAN devices stand in for the gateway's VTEP.
type site struct {
	node, pod *netnstest.NS
	k         *kernel.Netlink
}

var gwMAC = packet.MAC{0x02, 0x5b, 0, 0, 0, 0x01}

func newSite(t *testing.T) *site {
	netnstest.RequireRoot(t)
	s := &site{node: netnstest.New(t, "knode"), pod: netnstest.New(t, "kpod")}
	netnstest.Veth(t, s.node, s.pod, "pod0", "10.244.1.1/24", "10.244.1.5/24")
	s.pod.Run(t, "ip", "route", "add", "default", "via", "10.244.1.1")
	s.node.Run(t, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	k, err := kernel.NewNetlink("/var/run/netns/"+s.node.Name, s.node.Do)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	s.k = k
	return s
}

// gateway adds a namespace on the node's underlay at underlay (192.168.77.x) whose VXLAN
// device has the gateway's overlay IP and MAC and which answers for 10.71.2.7.
func (s *site) gateway(t *testing.T, name, underlay string) *netnstest.NS {
	g := netnstest.New(t, name)
	if _, err := s.node.Try("ip", "link", "show", "br0"); err != nil {
		// The node's underlay: a bridge the gateway namespaces plug into.
		s.node.Run(t, "ip", "link", "add", "br0", "type", "bridge")
		s.node.Run(t, "ip", "addr", "add", "192.168.77.1/24", "dev", "br0")
		s.node.Run(t, "ip", "link", "set", "br0", "up")
	}
	s.node.Run(t, "ip", "link", "add", "v-"+name, "type", "veth", "peer", "name", "eth0", "netns", g.Name)
	s.node.Run(t, "ip", "link", "set", "v-"+name, "master", "br0", "up")
	g.Run(t, "ip", "addr", "add", underlay+"/24", "dev", "eth0")
	g.Run(t, "ip", "link", "set", "eth0", "up")
	g.Run(t, "ip", "link", "add", "vx", "address", overlay.MACString(gwMAC), "type", "vxlan", "id", "18952", "dstport", "4789", "local", underlay, "nolearning")
	g.Run(t, "ip", "addr", "add", "10.80.0.1/16", "dev", "vx")
	g.Run(t, "ip", "link", "set", "vx", "up")
	g.Run(t, "ip", "addr", "add", "10.71.2.7/32", "dev", "lo")
	node, _ := s.k.Link("liqo.vxlan")
	g.Run(t, "bridge", "fdb", "append", overlay.MACString(node.MAC), "dev", "vx", "dst", "192.168.77.1")
	g.Run(t, "ip", "neigh", "replace", "10.80.0.11", "lladdr", overlay.MACString(node.MAC), "dev", "vx", "nud", "permanent")
	g.Run(t, "ip", "route", "add", "10.244.1.0/24", "via", "10.80.0.11", "dev", "vx", "onlink")
	return g
}

// underlayHost adds a namespace on the node's underlay (the bridge gateway makes) at addr
// (192.168.77.x): another node, or a host that is none.
func (s *site) underlayHost(t *testing.T, name, addr string) *netnstest.NS {
	t.Helper()
	ns := netnstest.New(t, name)
	s.node.Run(t, "ip", "link", "add", "v-"+name, "type", "veth", "peer", "name", "eth0", "netns", ns.Name)
	s.node.Run(t, "ip", "link", "set", "v-"+name, "master", "br0", "up")
	ns.Run(t, "ip", "addr", "add", addr+"/24", "dev", "eth0")
	ns.Run(t, "ip", "link", "set", "eth0", "up")
	return ns
}

func siteDesired(vtep string) kernel.Desired {
	return kernel.Desired{
		Overlay: kernel.Overlay{Name: "liqo.vxlan", Kind: overlay.VXLAN, VNI: 18952, Port: 4789,
			Local: netip.MustParseAddr("192.168.77.1"), Address: netip.MustParsePrefix("10.80.0.11/16"), MTU: 1450},
		Peers: []kernel.Peer{{OverlayIP: netip.MustParseAddr("10.80.0.1"), MAC: gwMAC, VTEP: netip.MustParseAddr(vtep),
			Routes: []netip.Prefix{netip.MustParsePrefix("10.71.0.0/16"), netip.MustParsePrefix("10.70.0.0/16")}}},
	}
}

// ping sends an ICMP echo from the pod to 10.71.2.7 and reports whether a reply came.
func ping(t *testing.T, pod *netnstest.NS) bool {
	t.Helper()
	var c net.PacketConn
	if err := pod.Do(func() (err error) {
		c, err = net.ListenPacket("ip4:icmp", "10.244.1.5")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	id := [4]byte{0x4b, 0x1d, 0, 1}
	for range 3 {
		c.SetDeadline(time.Now().Add(time.Second))
		c.WriteTo(pt.ICMP(8, 0, id, []byte("over the overlay")), &net.IPAddr{IP: net.ParseIP("10.71.2.7")})
		buf := make([]byte, 1500)
		for {
			n, _, err := c.ReadFrom(buf)
			if err != nil {
				break
			}
			if n >= 8 && buf[0] == 0 && bytes.Equal(buf[4:8], id[:]) {
				return true
			}
		}
	}
	return false
}

// dump is the namespace's state that the agent may touch, as text, without what the kernel
// changes by itself (IPv6 duplicate address detection, neighbour reachability).
func dump(t *testing.T, ns *netnstest.NS) string {
	var b strings.Builder
	for _, cmd := range [][]string{
		// Brief link and address lines: the detailed forms name a veth's peer namespace,
		// which ip fails to resolve now and then while other tests add and remove namespaces.
		{"ip", "-br", "link", "show"}, {"ip", "-4", "-br", "addr", "show"}, {"ip", "rule", "show"},
		{"ip", "route", "show", "table", "all"}, {"ip", "neigh", "show", "nud", "permanent"},
		{"ip", "-6", "-br", "addr", "show"}, {"ip", "-6", "rule", "show"}, {"ip", "-6", "route", "show", "table", "all"},
	} {
		for _, l := range strings.Split(ns.Run(t, cmd...), "\n") {
			// IPv6 link-local addresses and their local routes come and go with the kernel's
			// address autoconfiguration, on its own time after a link comes up.
			// Of the IPv6 routes, only table 18952's are the agent's (the rest come and go
			// with the links' IPv6 autoconfiguration).
			if cmd[1] == "-6" && cmd[2] == "route" && !strings.Contains(l, "table 18952") {
				continue
			}
			if f := strings.Fields(l); strings.Contains(l, "valid_lft") || len(f) > 0 && (strings.HasPrefix(f[0], "fe80::") || len(f) > 1 && f[0] == "local" && strings.HasPrefix(f[1], "fe80::")) {
				continue
			}
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func TestNetlink(t *testing.T) {
	s := newSite(t)
	before := dump(t, s.node)
	d := siteDesired("192.168.77.2")
	ch, err := kernel.Reconcile(s.k, d)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Total() == 0 {
		t.Fatal("nothing programmed")
	}

	// Read back through netlink: exactly the desired objects.
	l, err := s.k.Link("liqo.vxlan")
	if err != nil || l == nil {
		t.Fatalf("link: %v %v", l, err)
	}
	if l.Kind != "vxlan" || l.VNI != 18952 || l.Port != 4789 || l.Local.String() != "192.168.77.1" || l.MTU != 1450 || !l.Up ||
		!slices.Equal(l.Addrs, []netip.Prefix{netip.MustParsePrefix("10.80.0.11/16")}) {
		t.Errorf("link %+v", l)
	}
	if fdb, _ := s.k.FDB("liqo.vxlan"); !slices.Equal(fdb, []kernel.FDBEntry{{MAC: gwMAC, Dst: netip.MustParseAddr("192.168.77.2")}}) {
		t.Errorf("FDB %+v", fdb)
	}
	if nb, _ := s.k.Neighbors("liqo.vxlan"); !slices.Equal(nb, []kernel.Neigh{{IP: netip.MustParseAddr("10.80.0.1"), MAC: gwMAC}}) {
		t.Errorf("neighbours %+v", nb)
	}
	routes, _ := s.k.Routes()
	rules, _ := s.k.Rules()
	if len(routes) != 2 || len(rules) != 2 {
		t.Errorf("routes %+v rules %+v", routes, rules)
	}
	if out := s.node.Run(t, "ip", "rule", "show"); !strings.Contains(out, "1900:\tfrom all to 10.71.0.0/16 lookup 18952") {
		t.Errorf("ip rule:\n%s", out)
	}
	if out := s.node.Run(t, "ip", "route", "show", "table", "18952"); !strings.Contains(out, "10.71.0.0/16 via 10.80.0.1 dev liqo.vxlan onlink") {
		t.Errorf("table 18952:\n%s", out)
	}
	// The node's own networks: the pod veth's (the test's node has no other address); the
	// overlay device is left out when named.
	if nets, err := s.k.LocalNetworks("liqo.vxlan"); err != nil || !slices.Equal(nets, []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}) {
		t.Errorf("LocalNetworks(liqo.vxlan) = %v, %v; want [10.244.1.0/24]", nets, err)
	}
	if nets, _ := s.k.LocalNetworks(); !slices.Contains(nets, netip.MustParsePrefix("10.80.0.0/16")) {
		t.Errorf("LocalNetworks() = %v, want the overlay's 10.80.0.0/16 too", nets)
	}
	// The policy rules send a packet to a peer CIDR into table 18952 and out of the overlay;
	// a rule of higher precedence to another table takes it first.
	if dev, table, err := s.k.RouteGet(netip.MustParseAddr("10.71.3.4")); err != nil || dev != "liqo.vxlan" || table != kernel.Table {
		t.Errorf("route get 10.71.3.4: dev %q table %d, %v; want liqo.vxlan, table %d", dev, table, err, kernel.Table)
	}
	s.node.Run(t, "ip", "route", "add", "10.71.0.0/16", "via", "10.244.1.5", "table", "100")
	s.node.Run(t, "ip", "rule", "add", "to", "10.71.0.0/16", "lookup", "100", "priority", "100")
	if dev, table, err := s.k.RouteGet(netip.MustParseAddr("10.71.3.4")); err != nil || dev != "pod0" || table != 100 {
		t.Errorf("route get 10.71.3.4 with a rule to table 100 first: dev %q table %d, %v; want pod0, table 100", dev, table, err)
	}
	s.node.Run(t, "ip", "rule", "del", "to", "10.71.0.0/16", "lookup", "100", "priority", "100")
	s.node.Run(t, "ip", "route", "del", "10.71.0.0/16", "table", "100")
	if out := strings.TrimSpace(s.node.Run(t, "cat", "/proc/sys/net/ipv4/conf/liqo.vxlan/rp_filter")); out != "2" {
		t.Errorf("rp_filter %s, want 2 (loose)", out)
	}

	// Idempotent.
	if ch, err := kernel.Reconcile(s.k, d); err != nil || ch.Total() != 0 {
		t.Errorf("second reconcile: %+v, %v", ch, err)
	}

	// A pod on the node reaches the remote CIDR through the overlay to the gateway's VTEP.
	s.gateway(t, "kgw1", "192.168.77.2")
	if !ping(t, s.pod) {
		t.Fatal("no ping reply through the overlay")
	}

	// Drift: a route deleted by hand comes back.
	s.node.Run(t, "ip", "route", "del", "10.71.0.0/16", "table", "18952")
	s.node.Run(t, "ip", "rule", "del", "to", "10.70.0.0/16", "lookup", "18952")
	if ch, err := kernel.Reconcile(s.k, d); err != nil || ch.Routes != 1 || ch.Rules != 1 {
		t.Errorf("drift repair: %+v, %v", ch, err)
	}

	// Failover: the gateway's active replica moves to another VTEP.
	s.gateway(t, "kgw2", "192.168.77.3")
	start := time.Now()
	ch, err = kernel.Reconcile(s.k, siteDesired("192.168.77.3"))
	took := time.Since(start)
	if err != nil || ch.FDB != 1 || ch.Total() != 1 {
		t.Errorf("failover: %+v, %v; want one FDB change", ch, err)
	}
	t.Logf("failover repoint: one reconcile of %v", took)
	s.node.Run(t, "ip", "link", "set", "v-kgw1", "down") // the old replica is gone
	if !ping(t, s.pod) {
		t.Fatal("no ping reply after the failover")
	}

	// Cleanup leaves the node as it was (but for the test's own bridge and gateway veths).
	if err := kernel.Cleanup(s.k, "liqo.vxlan", 18952); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"v-kgw1", "v-kgw2", "br0"} {
		s.node.Try("ip", "link", "del", l)
	}
	if after := dump(t, s.node); after != before {
		t.Errorf("cleanup left the namespace changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if err := kernel.Cleanup(s.k, "liqo.vxlan", 18952); err != nil {
		t.Errorf("a second cleanup: %v", err)
	}
}

// BenchmarkReconcile500 programs 100 peerings with 5 remote CIDRs each (500 routes and rules,
// 100 FDB and neighbour entries) into a fresh namespace, and measures a failover repoint.
func BenchmarkReconcile500(b *testing.B) {
	netnstest.RequireRoot(b)
	d := kernel.Desired{Overlay: kernel.Overlay{Name: "liqo.vxlan", Kind: overlay.VXLAN, VNI: 18952, Port: 4789,
		Local: netip.MustParseAddr("192.168.77.1"), Address: netip.MustParsePrefix("10.80.0.11/16"), MTU: 1450}}
	for p := range 100 {
		peer := kernel.Peer{OverlayIP: netip.AddrFrom4([4]byte{10, 80, 1, byte(p)}), MAC: packet.MAC{2, 0x5b, 0, 0, 1, byte(p)},
			VTEP: netip.AddrFrom4([4]byte{10, 244, 9, byte(p)})}
		for r := range 5 {
			peer.Routes = append(peer.Routes, netip.PrefixFrom(netip.AddrFrom4([4]byte{100, byte(p), byte(r), 0}), 24))
		}
		d.Peers = append(d.Peers, peer)
	}
	var first, repoint time.Duration
	for i := range b.N {
		ns := netnstest.New(b, fmt.Sprintf("kbench%d", i))
		ns.Run(b, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth1")
		ns.Run(b, "ip", "addr", "add", "192.168.77.1/24", "dev", "eth0")
		ns.Run(b, "ip", "link", "set", "eth0", "up")
		k, err := kernel.NewNetlink("/var/run/netns/"+ns.Name, ns.Do)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		ch, err := kernel.Reconcile(k, d)
		first += time.Since(start)
		if err != nil || ch.Routes != 500 || ch.Rules != 500 {
			b.Fatalf("%+v %v", ch, err)
		}
		moved := d
		moved.Peers = slices.Clone(d.Peers)
		moved.Peers[42].VTEP = netip.MustParseAddr("10.244.10.42")
		start = time.Now()
		if ch, err := kernel.Reconcile(k, moved); err != nil || ch.Total() != 1 {
			b.Fatalf("repoint %+v %v", ch, err)
		}
		repoint += time.Since(start)
		k.Close()
	}
	b.ReportMetric(first.Seconds()/float64(b.N), "s/program-500")
	b.ReportMetric(float64(repoint.Microseconds())/float64(b.N), "µs/repoint")
}

// TestMonitor: a route of table 18952 deleted by hand is noticed at once.
func TestMonitor(t *testing.T) {
	s := newSite(t)
	if _, err := kernel.Reconcile(s.k, siteDesired("192.168.77.2")); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	defer close(done)
	changes := make(chan struct{}, 100)
	if err := kernel.Monitor("/var/run/netns/"+s.node.Name, func() {
		select {
		case changes <- struct{}{}:
		default:
		}
	}, done); err != nil {
		t.Fatal(err)
	}
	for len(changes) > 0 {
		<-changes
	}
	s.node.Run(t, "ip", "route", "del", "10.71.0.0/16", "table", "18952")
	select {
	case <-changes:
	case <-time.After(5 * time.Second):
		t.Fatal("no notification for a deleted route")
	}
	if ch, err := kernel.Reconcile(s.k, siteDesired("192.168.77.2")); err != nil || ch.Routes != 1 {
		t.Errorf("repair: %+v %v", ch, err)
	}
}

// TestRPFilterReadOnlyProcSys: container runtimes mount /proc/sys read-only for unprivileged
// containers (the agent has NET_ADMIN, not a writable /proc/sys); SetRPFilter must still work.
// The test runs itself again in a mount namespace of its own where /proc/sys is a read-only
// bind mount, as in such a container.
func TestRPFilterReadOnlyProcSys(t *testing.T) {
	if ns := os.Getenv("SKEIN_TEST_RO_PROCSYS_NS"); ns != "" {
		if err := os.WriteFile("/proc/sys/net/ipv4/conf/all/rp_filter", []byte("0"), 0o644); err == nil {
			t.Fatal("/proc/sys is writable in the child: the test does not test anything")
		}
		k, err := kernel.NewNetlink("/var/run/netns/"+ns, kernel.InNamespace("/var/run/netns/"+ns))
		if err != nil {
			t.Fatal(err)
		}
		if err := k.SetRPFilter("dummy0", 2); err != nil {
			t.Fatal(err)
		}
		return
	}
	netnstest.RequireRoot(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skipf("unshare (util-linux) not found: %v", err)
	}
	ns := netnstest.New(t, "krpf")
	ns.Run(t, "ip", "link", "add", "dummy0", "type", "veth", "peer", "name", "dummy1")
	ns.Run(t, "sysctl", "-qw", "net.ipv4.conf.dummy0.rp_filter=1")
	script := `mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys && exec "$0" -test.run '^TestRPFilterReadOnlyProcSys$' -test.v`
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script, os.Args[0])
	cmd.Env = append(os.Environ(), "SKEIN_TEST_RO_PROCSYS_NS="+ns.Name)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child with a read-only /proc/sys: %v\n%s", err, out)
	}
	if out := strings.TrimSpace(ns.Run(t, "cat", "/proc/sys/net/ipv4/conf/dummy0/rp_filter")); out != "2" {
		t.Errorf("rp_filter %s after SetRPFilter with a read-only /proc/sys, want 2", out)
	}
}

// TestForeignLinksKept: skein-agent deletes and replaces only the device it created. In a
// real namespace, `--cleanup --device eth0` leaves eth0; a VXLAN device of another VNI that
// happens to be called liqo.vxlan (another product's) is neither replaced nor deleted, and the
// error says why; a device of our VNI made before the mark existed is adopted and marked.
func TestForeignLinksKept(t *testing.T) {
	netnstest.RequireRoot(t)
	ns := netnstest.New(t, "kforeign")
	k, err := kernel.NewNetlink("/var/run/netns/"+ns.Name, ns.Do)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	// The node's own interface (a veth: this kernel may have no dummy links).
	ns.Run(t, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0p")
	ns.Run(t, "ip", "addr", "add", "192.168.77.1/24", "dev", "eth0")
	ns.Run(t, "ip", "link", "set", "eth0", "up")
	ns.Run(t, "ip", "link", "set", "eth0p", "up")
	if err := kernel.Cleanup(k, "eth0", 18952); !errors.Is(err, kernel.ErrForeignLink) {
		t.Errorf("cleanup of eth0: %v, want ErrForeignLink", err)
	}
	if l, _ := k.Link("eth0"); l == nil {
		t.Fatal("cleanup deleted eth0")
	}

	d := kernel.Desired{Overlay: kernel.Overlay{Name: "liqo.vxlan", Kind: overlay.VXLAN, VNI: 18952, Port: 4789,
		Local: netip.MustParseAddr("192.168.77.1"), Address: netip.MustParsePrefix("10.80.0.11/16"), MTU: 1450}}
	ns.Run(t, "ip", "link", "add", "liqo.vxlan", "type", "vxlan", "id", "1", "dstport", "8472", "local", "192.168.77.1")
	if _, err := kernel.Reconcile(k, d); !errors.Is(err, kernel.ErrForeignLink) || !strings.Contains(err.Error(), "VNI 1") {
		t.Errorf("reconcile over another product's liqo.vxlan: %v", err)
	}
	if err := kernel.Cleanup(k, "liqo.vxlan", 18952); !errors.Is(err, kernel.ErrForeignLink) {
		t.Errorf("cleanup of another product's liqo.vxlan: %v", err)
	}
	if l, _ := k.Link("liqo.vxlan"); l == nil || l.VNI != 1 || l.Port != 8472 {
		t.Fatalf("the foreign liqo.vxlan was replaced or deleted: %+v", l)
	}

	// A device of ours from before the mark: adopted, not recreated.
	ns.Run(t, "ip", "link", "del", "liqo.vxlan")
	ns.Run(t, "ip", "link", "add", "liqo.vxlan", "type", "vxlan", "id", "18952", "dstport", "4789", "local", "192.168.77.1", "nolearning")
	before, _ := k.Link("liqo.vxlan")
	if _, err := kernel.Reconcile(k, d); err != nil {
		t.Fatal(err)
	}
	after, _ := k.Link("liqo.vxlan")
	if after == nil || after.Alias != kernel.OwnerAlias || after.MAC != before.MAC {
		t.Errorf("the legacy device was not adopted in place: before %+v, after %+v", before, after)
	}
	if err := kernel.Cleanup(k, "liqo.vxlan", 18952); err != nil {
		t.Fatal(err)
	}
	if l, _ := k.Link("liqo.vxlan"); l != nil {
		t.Error("cleanup kept skein's own device")
	}
	if out := ns.Run(t, "ip", "-o", "link", "show", "eth0"); !strings.Contains(out, "eth0") {
		t.Errorf("eth0 gone: %s", out)
	}
}

// TestMonitorRulesAndNFTables: Monitor reports a policy rule added or deleted by hand (as it does routes
// of table 18952), and skein's nftables table deleted by hand (but not another table's
// changes), so the agent repairs both at once instead of at its next resync.
func TestMonitorRulesAndNFTables(t *testing.T) {
	netnstest.RequireRoot(t)
	ns := netnstest.New(t, "kmon")
	changed := make(chan struct{}, 16)
	done := make(chan struct{})
	defer close(done)
	if err := kernel.Monitor("/var/run/netns/"+ns.Name, func() { changed <- struct{}{} }, done); err != nil {
		t.Fatal(err)
	}
	expect := func(what string, want bool) {
		t.Helper()
		select {
		case <-changed:
			if !want {
				t.Errorf("%s: a change reported", what)
			}
		case <-time.After(2 * time.Second):
			if want {
				t.Fatalf("%s: no change reported", what)
			}
		}
		for len(changed) > 0 {
			<-changed
		}
	}
	for _, op := range []string{"add", "del"} {
		ns.Run(t, "ip", "rule", op, "to", "10.99.0.0/16", "lookup", "18952", "priority", "1900")
		expect("ip rule "+op, true)
	}
	ns.Run(t, "nft", "add", "table", "ip", "someone-else")
	expect("another product's nftables table", false)
	ns.Run(t, "nft", "add", "table", "ip", kernel.NFTable)
	expect("skein's nftables table added", true)
	ns.Run(t, "nft", "delete", "table", "ip", kernel.NFTable)
	expect("skein's nftables table deleted", true)
}
