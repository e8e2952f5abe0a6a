package kernel_test

import (
	"bytes"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skein-net/skein/dataplane/kernel"
	"github.com/skein-net/skein/dataplane/overlay"
	"github.com/skein-net/skein/internal/netnstest"
)

// dualDesired is siteDesired with IPv6: the device's IPv6 overlay address and the peer's
// IPv6 pods (fd71::/48) via the gateway's IPv6 overlay address.
func dualDesired(vtep string) kernel.Desired {
	d := siteDesired(vtep)
	d.Overlay.Address6 = netip.MustParsePrefix("64:ff9b:1::a50:b/96")
	d.Peers[0].OverlayIP6 = netip.MustParseAddr("64:ff9b:1::a50:1")
	d.Peers[0].Routes = append(d.Peers[0].Routes, netip.MustParsePrefix("fd71::/48"))
	return d
}

// ping6 sends an ICMPv6 echo from the pod to dst and reports whether a reply came.
func ping6(t *testing.T, pod *netnstest.NS, src, dst string) bool {
	t.Helper()
	var c net.PacketConn
	if err := pod.Do(func() (err error) {
		c, err = net.ListenPacket("ip6:ipv6-icmp", src)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := []byte{128, 0, 0, 0, 0x4b, 0x1d, 0, 1, 'v', '6'} // the kernel fills in the checksum
	for range 3 {
		c.SetDeadline(time.Now().Add(time.Second))
		c.WriteTo(msg, &net.IPAddr{IP: net.ParseIP(dst)})
		buf := make([]byte, 1500)
		for {
			n, _, err := c.ReadFrom(buf)
			if err != nil {
				break
			}
			if n >= 8 && buf[0] == 129 && bytes.Equal(buf[4:8], msg[4:8]) {
				return true
			}
		}
	}
	return false
}

// TestNetlinkIPv6: the agent's IPv6 state in a real kernel. The overlay device gets its IPv6
// address without duplicate address detection, the gateway a permanent IPv6 neighbour entry,
// the peer's IPv6 network a route in table 18952 via the gateway's IPv6 overlay address and a
// `ip -6 rule`. A pod on the node reaches an IPv6 address behind the gateway's VXLAN device,
// through that rule and route; drift in the IPv6 state is repaired; cleanup removes it all.
func TestNetlinkIPv6(t *testing.T) {
	s := newSite(t)
	s.node.Run(t, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
	s.node.Run(t, "ip", "addr", "add", "fd00:244:0:1::1/64", "dev", "pod0", "nodad")
	s.pod.Run(t, "ip", "addr", "add", "fd00:244:0:1::5/64", "dev", "pod0", "nodad")
	s.pod.Run(t, "ip", "-6", "route", "add", "default", "via", "fd00:244:0:1::1")
	before := dump(t, s.node)
	d := dualDesired("192.168.77.2")
	ch, err := kernel.Reconcile(s.k, d)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Addrs != 2 || ch.Routes != 3 || ch.Rules != 3 || ch.Neighbors != 2 {
		t.Errorf("changes %+v: want 2 addresses, 3 routes, 3 rules and 2 neighbours", ch)
	}
	l, _ := s.k.Link("liqo.vxlan")
	if l == nil || !slices.Contains(l.Addrs, d.Overlay.Address6) {
		t.Fatalf("link %+v: want its IPv6 address %v", l, d.Overlay.Address6)
	}
	if out := s.node.Run(t, "ip", "-6", "addr", "show", "dev", "liqo.vxlan"); !strings.Contains(out, "inet6 64:ff9b:1::a50:b/96 scope global nodad \n") {
		t.Errorf("the overlay's IPv6 address is not there, or waits for duplicate address detection:\n%s", out)
	}
	if nb, _ := s.k.Neighbors("liqo.vxlan"); !slices.Contains(nb, kernel.Neigh{IP: d.Peers[0].OverlayIP6, MAC: gwMAC}) {
		t.Errorf("neighbours %+v: want the gateway's IPv6 overlay address", nb)
	}
	if out := s.node.Run(t, "ip", "-6", "rule", "show"); !strings.Contains(out, "1900:\tfrom all to fd71::/48 lookup 18952") {
		t.Errorf("ip -6 rule:\n%s", out)
	}
	if out := s.node.Run(t, "ip", "-6", "route", "show", "table", "18952"); !strings.Contains(out, "fd71::/48 via 64:ff9b:1::a50:1 dev liqo.vxlan") {
		t.Errorf("ip -6 route table 18952:\n%s", out)
	}
	if dev, table, err := s.k.RouteGet(netip.MustParseAddr("fd71:0:0:2::7")); err != nil || dev != "liqo.vxlan" || table != kernel.Table {
		t.Errorf("route get fd71:0:0:2::7: dev %q table %d, %v; want liqo.vxlan, table %d", dev, table, err, kernel.Table)
	}
	if ch, err := kernel.Reconcile(s.k, d); err != nil || ch.Total() != 0 {
		t.Errorf("second reconcile: %+v, %v", ch, err)
	}

	// A pod reaches the peer's IPv6 address behind the gateway's VXLAN device.
	g := s.gateway(t, "kgw6", "192.168.77.2")
	node, _ := s.k.Link("liqo.vxlan")
	g.Run(t, "ip", "addr", "add", "64:ff9b:1::a50:1/96", "dev", "vx", "nodad")
	g.Run(t, "ip", "addr", "add", "fd71:0:0:2::7/128", "dev", "lo")
	g.Run(t, "ip", "neigh", "replace", "64:ff9b:1::a50:b", "lladdr", overlay.MACString(node.MAC), "dev", "vx", "nud", "permanent")
	g.Run(t, "ip", "-6", "route", "add", "fd00:244:0:1::/64", "via", "64:ff9b:1::a50:b", "dev", "vx")
	if !ping6(t, s.pod, "fd00:244:0:1::5", "fd71:0:0:2::7") {
		t.Fatal("no IPv6 ping reply through the overlay")
	}

	// Drift: the IPv6 route, rule, neighbour and address deleted by hand come back.
	s.node.Run(t, "ip", "-6", "route", "del", "fd71::/48", "table", "18952")
	s.node.Run(t, "ip", "-6", "rule", "del", "to", "fd71::/48", "lookup", "18952")
	s.node.Run(t, "ip", "-6", "neigh", "del", "64:ff9b:1::a50:1", "dev", "liqo.vxlan")
	s.node.Run(t, "ip", "addr", "del", "64:ff9b:1::a50:b/96", "dev", "liqo.vxlan")
	if ch, err := kernel.Reconcile(s.k, d); err != nil || ch.Routes != 1 || ch.Rules != 1 || ch.Neighbors != 1 || ch.Addrs != 1 {
		t.Errorf("drift repair: %+v, %v; want one of each", ch, err)
	}
	if !ping6(t, s.pod, "fd00:244:0:1::5", "fd71:0:0:2::7") {
		t.Fatal("no IPv6 ping reply after the repair")
	}

	// The peering drops IPv6: its route, rule, neighbour and the device's address go.
	v4 := siteDesired("192.168.77.2")
	if ch, err := kernel.Reconcile(s.k, v4); err != nil || ch.Routes != 1 || ch.Rules != 1 || ch.Neighbors != 1 || ch.Addrs != 1 {
		t.Errorf("back to IPv4 only: %+v, %v", ch, err)
	}
	if out := s.node.Run(t, "ip", "-6", "route", "show", "table", "18952"); strings.TrimSpace(out) != "" {
		t.Errorf("IPv6 routes left in table 18952:\n%s", out)
	}

	if _, err := kernel.Reconcile(s.k, d); err != nil {
		t.Fatal(err)
	}
	if err := kernel.Cleanup(s.k, "liqo.vxlan", 18952); err != nil {
		t.Fatal(err)
	}
	s.node.Try("ip", "link", "del", "v-kgw6")
	s.node.Try("ip", "link", "del", "br0")
	if after := dump(t, s.node); after != before {
		t.Errorf("cleanup left the namespace changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// TestNetlinkIPv6Underlay: in an IPv6-only cluster the node's overlay device sends from its
// IPv6 underlay address to the gateway's IPv6 VTEP (FDB entry with an IPv6 destination); a
// pod's packets to the peer (IPv4 and IPv6 alike) cross the overlay encapsulated in IPv6.
func TestNetlinkIPv6Underlay(t *testing.T) {
	s := newSite(t)
	s.node.Run(t, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
	s.node.Run(t, "ip", "addr", "add", "fd00:244:0:1::1/64", "dev", "pod0", "nodad")
	s.pod.Run(t, "ip", "addr", "add", "fd00:244:0:1::5/64", "dev", "pod0", "nodad")
	s.pod.Run(t, "ip", "-6", "route", "add", "default", "via", "fd00:244:0:1::1")
	// The node's IPv6 underlay, and a gateway namespace on it whose VXLAN device (local
	// fd00:77::2) stands in for the gateway's VTEP.
	g := netnstest.New(t, "kgw6u")
	s.node.Run(t, "ip", "link", "add", "v-kgw6u", "type", "veth", "peer", "name", "eth0", "netns", g.Name)
	s.node.Run(t, "ip", "addr", "add", "fd00:77::1/64", "dev", "v-kgw6u", "nodad")
	s.node.Run(t, "ip", "link", "set", "v-kgw6u", "up")
	g.Run(t, "ip", "addr", "add", "fd00:77::2/64", "dev", "eth0", "nodad")
	g.Run(t, "ip", "link", "set", "eth0", "up")

	d := dualDesired("fd00:77::2")
	d.Overlay.Local = netip.MustParseAddr("fd00:77::1")
	d.Overlay.MTU = 1430
	if _, err := kernel.Reconcile(s.k, d); err != nil {
		t.Fatal(err)
	}
	l, _ := s.k.Link("liqo.vxlan")
	if l == nil || l.Local.String() != "fd00:77::1" {
		t.Fatalf("overlay device %+v: want local fd00:77::1", l)
	}
	if fdb, _ := s.k.FDB("liqo.vxlan"); !slices.Contains(fdb, kernel.FDBEntry{MAC: gwMAC, Dst: netip.MustParseAddr("fd00:77::2")}) {
		t.Errorf("FDB %+v: want the gateway's MAC at fd00:77::2", fdb)
	}
	if ch, err := kernel.Reconcile(s.k, d); err != nil || ch.Total() != 0 {
		t.Errorf("second reconcile: %+v, %v", ch, err)
	}

	g.Run(t, "ip", "link", "add", "vx", "address", overlay.MACString(gwMAC), "type", "vxlan", "id", "18952", "dstport", "4789", "local", "fd00:77::2", "nolearning")
	g.Run(t, "ip", "addr", "add", "10.80.0.1/16", "dev", "vx")
	g.Run(t, "ip", "addr", "add", "64:ff9b:1::a50:1/96", "dev", "vx", "nodad")
	g.Run(t, "ip", "link", "set", "vx", "up")
	g.Run(t, "ip", "addr", "add", "10.71.2.7/32", "dev", "lo")
	g.Run(t, "ip", "addr", "add", "fd71:0:0:2::7/128", "dev", "lo")
	g.Run(t, "bridge", "fdb", "append", overlay.MACString(l.MAC), "dev", "vx", "dst", "fd00:77::1")
	g.Run(t, "ip", "neigh", "replace", "10.80.0.11", "lladdr", overlay.MACString(l.MAC), "dev", "vx", "nud", "permanent")
	g.Run(t, "ip", "neigh", "replace", "64:ff9b:1::a50:b", "lladdr", overlay.MACString(l.MAC), "dev", "vx", "nud", "permanent")
	g.Run(t, "ip", "route", "add", "10.244.1.0/24", "via", "10.80.0.11", "dev", "vx", "onlink")
	g.Run(t, "ip", "-6", "route", "add", "fd00:244:0:1::/64", "via", "64:ff9b:1::a50:b", "dev", "vx")
	if !ping(t, s.pod) {
		t.Error("no IPv4 ping reply over the IPv6 underlay")
	}
	if !ping6(t, s.pod, "fd00:244:0:1::5", "fd71:0:0:2::7") {
		t.Error("no IPv6 ping reply over the IPv6 underlay")
	}
	if err := kernel.Cleanup(s.k, "liqo.vxlan", 18952); err != nil {
		t.Fatal(err)
	}
}
