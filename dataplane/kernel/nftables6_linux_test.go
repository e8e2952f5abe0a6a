package kernel_test

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

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
		Exprs:  snatExprs6("fd00:70::b"),
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
	peerLink := strings.Fields(peer.Run(t, "ip", "-o", "link", "show", "type", "veth"))[1]
	peer.Run(t, "ip", "addr", "add", "2001:db8:50::2/64", "dev", strings.TrimSuffix(strings.Split(peerLink, "@")[0], ":"), "nodad")
	for _, addr := range []string{"fd00:71::7/128", "fd00:73::9/128"} {
		peer.Run(t, "ip", "addr", "add", addr, "dev", "lo")
	}
	peer.Run(t, "ip", "route", "add", "fd00:70::/112", "via", "2001:db8:50::1")
	peer.Run(t, "ip", "route", "add", "fd00:244::/56", "via", "2001:db8:50::1")

	const host, pod6 = "", "fd00:244:0:1::5"
	check := func(step, from, to, wantSrc string) {
		t.Helper()
		if got := udpRoundTrip(t, node, peer, from, to); got != netip.MustParseAddr(wantSrc) {
			t.Errorf("%s: a datagram from %q to %s arrived from %s, want %s", step, from, to, got, wantSrc)
		}
	}
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
