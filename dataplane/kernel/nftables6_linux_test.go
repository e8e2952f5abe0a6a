package kernel_test

import (
	"net"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"

	"github.com/skein-net/skein/dataplane/kernel"
	"github.com/skein-net/skein/internal/netnstest"
)

// TestHostSNATDualStack programs both families at once: table ip6 skein-agent beside table ip
// skein-agent, each with its family's remote and pod CIDRs and external address, written in
// one transaction, left alone when nothing changed, and each removed with its family's last
// remote CIDR while the other stays.
func TestHostSNATDualStack(t *testing.T) {
	requireNFTNAT(t)
	node := netnstest.New(t, "snat")
	fd := nsFd(t, node)
	c := nftConn(t, fd)
	s := kernel.HostSNAT{
		ExternalIP: extIP, ExternalIP6: extIP6,
		PodCIDRs: []netip.Prefix{podCIDR, podCIDR6},
		// Adjacent IPv6 prefixes merge like IPv4 ones; one runs to the last address.
		Remote: []netip.Prefix{remote1, remote6, netip.MustParsePrefix("fd00:71:1::/48"), netip.MustParsePrefix("ffff::/16")},
	}
	gen := rulesetGeneration(t, fd)
	if err := kernel.EnsureHostSNAT(fd, s); err != nil {
		t.Fatal(err)
	}
	if g := rulesetGeneration(t, fd); g != gen+1 {
		t.Errorf("both tables took %d transactions, want 1", g-gen)
	}
	want4 := hostSNATState{Remote: []string{"10.71.0.0-10.71.255.255"}, Pods: []string{"10.244.0.0-10.244.255.255"}, Exprs: snatExprs("10.250.0.11"), Chains: plainChains}
	want6 := hostSNATState{
		Remote: []string{"fd00:71::-fd00:71:1:ffff:ffff:ffff:ffff:ffff", "ffff::-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"},
		Pods:   []string{"fd00:244::-fd00:244:0:ff:ffff:ffff:ffff:ffff"},
		Exprs:  snatExprs("fd00:70::b"),
		Chains: plainChains,
	}
	if got := readHostSNAT(t, c); !reflect.DeepEqual(got, want4) {
		t.Errorf("table ip %s:\n got %s\nwant %s", kernel.NFTable, got, want4)
	}
	if got := readHostSNATFamily(t, c, nftables.TableFamilyIPv6); !reflect.DeepEqual(got, want6) {
		t.Errorf("table ip6 %s:\n got %s\nwant %s", kernel.NFTable, got, want6)
	}

	gen, before := rulesetGeneration(t, fd), dumpRuleset(t, c)
	if err := kernel.EnsureHostSNAT(fd, s); err != nil {
		t.Fatal(err)
	}
	if g := rulesetGeneration(t, fd); g != gen {
		t.Errorf("the same dual-stack SNAT again committed %d transactions", g-gen)
	}
	if after := dumpRuleset(t, c); after != before {
		t.Errorf("the same dual-stack SNAT again changed the ruleset:\n%s\nwas\n%s", after, before)
	}

	// The IPv6 peer goes: table ip6 goes with it, table ip is not rewritten.
	s4 := s
	s4.Remote = []netip.Prefix{remote1}
	if err := kernel.EnsureHostSNAT(fd, s4); err != nil {
		t.Fatal(err)
	}
	dump := dumpRuleset(t, c)
	if strings.Contains(dump, "table ip6 ") || !strings.Contains(dump, "table ip "+kernel.NFTable) {
		t.Errorf("with IPv4 remote CIDRs only the ruleset is\n%s\nwant table ip %s alone", dump, kernel.NFTable)
	}
	if got := readHostSNAT(t, c); !reflect.DeepEqual(got, want4) {
		t.Errorf("table ip %s after the IPv6 peer went:\n got %s\nwant %s", kernel.NFTable, got, want4)
	}

	// IPv6 only (an IPv6-only cluster): no IPv4 external address needed, table ip goes.
	s6 := kernel.HostSNAT{ExternalIP6: extIP6, PodCIDRs: []netip.Prefix{podCIDR6}, Remote: []netip.Prefix{remote6}}
	if err := kernel.EnsureHostSNAT(fd, s6); err != nil {
		t.Fatal(err)
	}
	dump = dumpRuleset(t, c)
	if strings.Contains(dump, "table ip "+kernel.NFTable) || !strings.Contains(dump, "table ip6 "+kernel.NFTable) {
		t.Errorf("with IPv6 remote CIDRs only the ruleset is\n%s\nwant table ip6 %s alone", dump, kernel.NFTable)
	}
	if n, ok, err := kernel.MasqueradedConnections(fd); err != nil || !ok || n != 0 {
		t.Errorf("MasqueradedConnections with table ip6 alone = %d, %v, %v; want 0, true, nil", n, ok, err)
	}

	if err := kernel.DeleteHostSNAT(fd); err != nil {
		t.Fatal(err)
	}
	if got := dumpRuleset(t, c); got != "" {
		t.Errorf("after DeleteHostSNAT the ruleset is\n%s", got)
	}
}

// TestHostSNATTraffic6 is TestHostSNATTraffic over IPv6: host traffic to IPv6 remote CIDRs
// leaves with the IPv6 external address and its replies come back, pod traffic keeps its
// source, and IPv4 host traffic is SNATed by its own table at the same time.
func TestHostSNATTraffic6(t *testing.T) {
	requireNFTNAT(t)
	node, peer := snatNetwork(t)
	// IPv6 beside snatNetwork's IPv4: the node's underlay address, a pod address on lo; the
	// peer owns addresses in and beside the remote CIDR and routes the external and pod
	// CIDRs back. nodad: the addresses are usable at once.
	node.Run(t, "ip", "addr", "add", "2001:db8:50::1/64", "dev", "veth0", "nodad")
	node.Run(t, "ip", "addr", "add", "fd00:244:0:1::5/128", "dev", "lo")
	node.Run(t, "ip", "route", "add", "fd00::/16", "via", "2001:db8:50::2")
	peer.Run(t, "ip", "addr", "add", "2001:db8:50::2/64", "dev", "veth0", "nodad") // snatNetwork names both ends veth0
	for _, addr := range []string{"fd00:71::7/128", "fd00:73::9/128"} {
		peer.Run(t, "ip", "addr", "add", addr, "dev", "lo")
	}
	peer.Run(t, "ip", "route", "add", "fd00:70::/112", "via", "2001:db8:50::1")
	peer.Run(t, "ip", "route", "add", "fd00:244::/56", "via", "2001:db8:50::1")

	const host, pod6 = "", "fd00:244:0:1::5"
	check := sourceCheck(t, node, peer)
	check("before SNAT", host, "fd00:71::7", "2001:db8:50::1")
	s := kernel.HostSNAT{ExternalIP: extIP, ExternalIP6: extIP6, PodCIDRs: []netip.Prefix{podCIDR, podCIDR6}, Remote: []netip.Prefix{remote1, remote6}}
	if err := kernel.EnsureHostSNAT(nsFd(t, node), s); err != nil {
		t.Fatal(err)
	}
	check("host to IPv6 remote", host, "fd00:71::7", "fd00:70::b")
	check("pod to IPv6 remote", pod6, "fd00:71::7", pod6)
	check("host to IPv6 non-remote", host, "fd00:73::9", "2001:db8:50::1")
	check("host to IPv4 remote beside it", host, "10.71.2.7", "10.250.0.11")
	check("IPv4 pod to remote beside it", "10.244.1.5", "10.71.2.7", "10.244.1.5")
}

// TestHostSNATRPFilter6: with Overlay set, the ip6 table drops IPv6 arriving on the overlay
// device from a source the node routes elsewhere (a local pod's address: what a forged VXLAN
// packet would claim) and counts it, while a peer's pod (routed back through the device by a
// policy rule into table 18952, as the agent programs it) and neighbour discovery pass;
// without Overlay the forged source gets through, so the check is what stops it.
func TestHostSNATRPFilter6(t *testing.T) {
	requireNFTNAT(t)
	node, gw := netnstest.New(t, "node"), netnstest.New(t, "gw")
	// ov0 stands for liqo.vxlan (a veth: the filter looks at the device, not its kind), gw
	// for the gateway behind it; the node's own pods live behind another device.
	node.Run(t, "ip", "link", "add", "ov0", "type", "veth", "peer", "name", "ov0", "netns", gw.Name)
	node.Run(t, "ip", "addr", "add", "64:ff9b:1::a50:b/96", "dev", "ov0", "nodad")
	gw.Run(t, "ip", "addr", "add", "64:ff9b:1::a50:1/96", "dev", "ov0", "nodad")
	// No duplicate address detection on the link-local addresses either: until it ends the
	// first datagrams wait on neighbour discovery and are lost.
	for _, ns := range []*netnstest.NS{node, gw} {
		ns.Run(t, "sysctl", "-qw", "net.ipv6.conf.ov0.accept_dad=0")
		ns.Run(t, "ip", "link", "set", "ov0", "up")
	}
	node.Run(t, "ip", "link", "add", "pods0", "type", "veth", "peer", "name", "pods1") // no dummy module here
	node.Run(t, "ip", "link", "set", "pods0", "up")
	node.Run(t, "ip", "link", "set", "pods1", "up")
	node.Run(t, "ip", "-6", "route", "add", "fd00:244::/56", "dev", "pods0")
	node.Run(t, "ip", "-6", "rule", "add", "to", "fd00:0:244::/56", "lookup", "18952", "pref", "1000")
	node.Run(t, "ip", "-6", "route", "add", "fd00:0:244::/56", "via", "64:ff9b:1::a50:1", "dev", "ov0", "table", "18952")
	for _, a := range []string{"fd00:0:244::5/128", "fd00:244:0:1::9/128"} {
		gw.Run(t, "ip", "addr", "add", a, "dev", "lo")
	}
	// Permanent neighbour entries both ways, as the agent and the gateway's dataplane have:
	// neighbour discovery from an address the other side routes elsewhere never completes.
	macOf := func(ns *netnstest.NS) string {
		return strings.TrimSpace(ns.Run(t, "cat", "/sys/class/net/ov0/address"))
	}
	node.Run(t, "ip", "-6", "neigh", "replace", "64:ff9b:1::a50:1", "lladdr", macOf(gw), "dev", "ov0", "nud", "permanent")
	gw.Run(t, "ip", "-6", "neigh", "replace", "64:ff9b:1::a50:b", "lladdr", macOf(node), "dev", "ov0", "nud", "permanent")
	fd := nsFd(t, node)
	arrives := func(from string) bool {
		t.Helper()
		var conn *net.UDPConn
		if err := node.Do(func() (err error) {
			conn, err = net.ListenUDP("udp6", &net.UDPAddr{IP: net.ParseIP("64:ff9b:1::a50:b"), Port: 7777})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if err := gw.Do(func() error {
			c, err := net.DialUDP("udp6", &net.UDPAddr{IP: net.ParseIP(from)}, &net.UDPAddr{IP: net.ParseIP("64:ff9b:1::a50:b"), Port: 7777})
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Write([]byte("x"))
			return err
		}); err != nil {
			t.Fatalf("send from %s: %v", from, err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(time.Second))
		_, _, err := conn.ReadFromUDP(make([]byte, 16))
		return err == nil
	}
	if !arrives("fd00:244:0:1::9") {
		t.Fatal("without the filter a datagram claiming a local pod's address did not arrive: the test proves nothing")
	}
	s := kernel.HostSNAT{ExternalIP6: extIP6, PodCIDRs: []netip.Prefix{podCIDR6}, Remote: []netip.Prefix{netip.MustParsePrefix("fd00:0:244::/56")}, Overlay: "ov0"}
	if err := kernel.EnsureHostSNAT(fd, s); err != nil {
		t.Fatal(err)
	}
	if arrives("fd00:244:0:1::9") {
		t.Error("a datagram from the overlay claiming a local pod's address arrived")
	}
	if !arrives("fd00:0:244::5") {
		t.Error("a datagram from a peer's pod (routed back through the overlay) did not arrive")
	}
	// Link-local traffic (neighbour discovery, here a ping of the node's link-local address,
	// which needs it) is not filtered.
	ll := strings.Fields(node.Run(t, "ip", "-6", "-o", "addr", "show", "dev", "ov0", "scope", "link"))
	if len(ll) < 4 {
		t.Fatalf("no link-local address on the node's ov0: %q", ll)
	}
	if out, err := gw.Try("ping", "-6", "-c", "1", "-W", "2", strings.Split(ll[3], "/")[0]+"%ov0"); err != nil {
		t.Errorf("ping of the node's link-local address through the filter: %v: %s", err, out)
	}
	dump := node.Run(t, "nft", "list", "counter", "ip6", kernel.NFTable, "rpfilter-dropped")
	if !strings.Contains(dump, "packets 1 ") {
		t.Errorf("counter rpfilter-dropped, want 1 packet:\n%s", dump)
	}
	gen := rulesetGeneration(t, fd)
	if err := kernel.EnsureHostSNAT(fd, s); err != nil {
		t.Fatal(err)
	}
	if g := rulesetGeneration(t, fd); g != gen {
		t.Errorf("the same filter again committed %d transactions (the table does not read back as written)", g-gen)
	}
	// Without IPv6 SNAT (a node whose InternalNode has no usable IPv6 external address, while
	// IPv6 is still routed through the device) the filter stays, alone in its table: it
	// must not depend on what the node SNATs.
	s4 := kernel.HostSNAT{ExternalIP: extIP, PodCIDRs: []netip.Prefix{podCIDR}, Remote: []netip.Prefix{remote1}, Overlay: "ov0"}
	for _, s := range []kernel.HostSNAT{s4, {Overlay: "ov0"}} {
		if err := kernel.EnsureHostSNAT(fd, s); err != nil {
			t.Fatal(err)
		}
		if arrives("fd00:244:0:1::9") {
			t.Errorf("%+v: a datagram from the overlay claiming a local pod's address arrived", s)
		}
		if !arrives("fd00:0:244::5") {
			t.Errorf("%+v: a datagram from a peer's pod did not arrive", s)
		}
		gen := rulesetGeneration(t, fd)
		if err := kernel.EnsureHostSNAT(fd, s); err != nil {
			t.Fatal(err)
		}
		if g := rulesetGeneration(t, fd); g != gen {
			t.Errorf("%+v: the same filter again committed %d transactions", s, g-gen)
		}
	}
	// Both had the same ip6 table: written once, it counted both forged datagrams.
	if dump := node.Run(t, "nft", "list", "table", "ip6", kernel.NFTable); strings.Contains(dump, "snat") || !strings.Contains(dump, "packets 2 ") {
		t.Errorf("table ip6 %s without IPv6 SNAT, want the filter alone, its counter at 2:\n%s", kernel.NFTable, dump)
	}
	if err := kernel.EnsureHostSNAT(fd, kernel.HostSNAT{}); err != nil {
		t.Fatal(err)
	}
	if !arrives("fd00:244:0:1::9") {
		t.Error("with neither remote CIDRs nor Overlay, the filter is still there")
	}
	for _, bad := range []string{"a-name-longer-than-15", "ov\x000"} {
		s.Overlay = bad
		if err := kernel.EnsureHostSNAT(fd, s); err == nil || !strings.Contains(err.Error(), "is not a network interface name") {
			t.Errorf("Overlay %q: %v", bad, err)
		}
	}
}
