package kernel_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/skein-net/skein/dataplane/kernel"
	"github.com/skein-net/skein/internal/netnstest"
)

var (
	extIP   = netip.MustParseAddr("10.250.0.11")
	podCIDR = netip.MustParsePrefix("10.244.0.0/16")
	remote1 = netip.MustParsePrefix("10.71.0.0/16")
	remote2 = netip.MustParsePrefix("10.72.0.0/16")

	extIP6   = netip.MustParseAddr("fd00:70::b")
	podCIDR6 = netip.MustParsePrefix("fd00:244::/56")
	remote6  = netip.MustParsePrefix("fd00:71::/48")
)

// TestEnsureHostSNAT programs the table from inside the namespace (netnsFd 0) and reads it
// back with the nftables library.
func TestEnsureHostSNAT(t *testing.T) {
	requireNFTNAT(t)
	node := netnstest.New(t, "snat")
	s := kernel.HostSNAT{ExternalIP: extIP, PodCIDRs: []netip.Prefix{podCIDR}, Remote: []netip.Prefix{remote1, remote2}}
	if err := node.Do(func() error { return kernel.EnsureHostSNAT(0, s) }); err != nil {
		t.Fatal(err)
	}
	got := readHostSNAT(t, nftConn(t, nsFd(t, node)))
	want := hostSNATState{
		Remote: []string{"10.71.0.0-10.72.255.255"}, // adjacent prefixes merge into one interval
		Pods:   []string{"10.244.0.0-10.244.255.255"},
		Exprs:  snatExprs("10.250.0.11"),
		Chains: plainChains,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("table ip %s:\n got %s\nwant %s", kernel.NFTable, got, want)
	}
}

// TestHostSNATIntervals checks how prefixes become interval set elements: masked, merged
// when they overlap or touch, and open-ended at the top of the address space.
func TestHostSNATIntervals(t *testing.T) {
	requireNFTNAT(t)
	node := netnstest.New(t, "snat")
	c := nftConn(t, nsFd(t, node))
	p := netip.MustParsePrefix
	for _, tc := range []struct {
		remote []netip.Prefix
		want   []string
	}{
		{[]netip.Prefix{p("10.71.2.7/16")}, []string{"10.71.0.0-10.71.255.255"}},
		{[]netip.Prefix{p("10.71.3.0/24"), p("10.71.0.0/16"), p("10.73.0.0/16")}, []string{"10.71.0.0-10.71.255.255", "10.73.0.0-10.73.255.255"}},
		{[]netip.Prefix{p("10.0.0.5/32"), p("10.0.0.4/32"), p("10.0.0.6/31")}, []string{"10.0.0.4-10.0.0.7"}},
		{[]netip.Prefix{p("0.0.0.0/8"), p("192.168.0.0/16")}, []string{"0.0.0.0-0.255.255.255", "192.168.0.0-192.168.255.255"}},
		{[]netip.Prefix{p("255.255.255.255/32"), p("10.0.0.0/8")}, []string{"10.0.0.0-10.255.255.255", "255.255.255.255-255.255.255.255"}},
		{[]netip.Prefix{p("0.0.0.0/0"), p("10.0.0.0/8")}, []string{"0.0.0.0-255.255.255.255"}},
	} {
		s := kernel.HostSNAT{ExternalIP: extIP, Remote: tc.remote}
		if err := kernel.EnsureHostSNAT(nsFd(t, node), s); err != nil {
			t.Fatalf("remote %v: %v", tc.remote, err)
		}
		got := readHostSNAT(t, c)
		if !slices.Equal(got.Remote, tc.want) || len(got.Pods) != 0 {
			t.Errorf("remote %v: got remote %v pods %v, want remote %v and no pods", tc.remote, got.Remote, got.Pods, tc.want)
		}
	}
}

// TestHostSNATIdempotent checks that a second EnsureHostSNAT with the same input commits
// nothing: the ruleset generation, which every committed nftables transaction bumps, stays.
func TestHostSNATIdempotent(t *testing.T) {
	requireNFTNAT(t)
	node := netnstest.New(t, "snat")
	fd := nsFd(t, node)
	c := nftConn(t, fd)
	s := kernel.HostSNAT{ExternalIP: extIP, PodCIDRs: []netip.Prefix{podCIDR}, Remote: []netip.Prefix{remote1}}
	if err := kernel.EnsureHostSNAT(fd, s); err != nil {
		t.Fatal(err)
	}
	gen, before := rulesetGeneration(t, fd), dumpRuleset(t, c)
	// The same SNAT spelt differently is the same table.
	again := kernel.HostSNAT{ExternalIP: extIP, PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.7.1/16")}, Remote: []netip.Prefix{netip.MustParsePrefix("10.71.128.0/17"), remote1}}
	for _, s := range []kernel.HostSNAT{s, again} {
		if err := kernel.EnsureHostSNAT(fd, s); err != nil {
			t.Fatal(err)
		}
	}
	if g := rulesetGeneration(t, fd); g != gen {
		t.Errorf("repeated EnsureHostSNAT committed a transaction: generation %d, was %d", g, gen)
	}
	if after := dumpRuleset(t, c); after != before {
		t.Errorf("repeated EnsureHostSNAT changed the ruleset:\n%s\nwas\n%s", after, before)
	}
	if n := strings.Count(before, "\n    rule "); n != len(plainChains) {
		t.Errorf("%d rules, want %d:\n%s", n, len(plainChains), before)
	}
}

// TestHostSNATUpdate checks that a changed HostSNAT replaces the old sets and rule, leaving
// what a fresh namespace gets from the new HostSNAT alone.
func TestHostSNATUpdate(t *testing.T) {
	requireNFTNAT(t)
	node, fresh := netnstest.New(t, "snat"), netnstest.New(t, "snatref")
	fd := nsFd(t, node)
	c := nftConn(t, fd)
	old := kernel.HostSNAT{ExternalIP: extIP, PodCIDRs: []netip.Prefix{podCIDR}, Remote: []netip.Prefix{remote1}}
	updated := kernel.HostSNAT{
		ExternalIP: netip.MustParseAddr("10.250.0.12"),
		PodCIDRs:   []netip.Prefix{netip.MustParsePrefix("10.245.0.0/16")},
		Remote:     []netip.Prefix{netip.MustParsePrefix("10.90.0.0/16"), netip.MustParsePrefix("10.92.0.0/24")},
	}
	if err := kernel.EnsureHostSNAT(fd, old); err != nil {
		t.Fatal(err)
	}
	gen := rulesetGeneration(t, fd)
	if err := kernel.EnsureHostSNAT(fd, updated); err != nil {
		t.Fatal(err)
	}
	if g := rulesetGeneration(t, fd); g != gen+1 {
		t.Errorf("the update took %d transactions, want 1", g-gen)
	}
	got := readHostSNAT(t, c)
	want := hostSNATState{
		Remote: []string{"10.90.0.0-10.90.255.255", "10.92.0.0-10.92.0.255"},
		Pods:   []string{"10.245.0.0-10.245.255.255"},
		Exprs:  snatExprs("10.250.0.12"),
		Chains: plainChains,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("after the update:\n got %s\nwant %s", got, want)
	}
	if err := kernel.EnsureHostSNAT(nsFd(t, fresh), updated); err != nil {
		t.Fatal(err)
	}
	if got, want := dumpRuleset(t, c), dumpRuleset(t, nftConn(t, nsFd(t, fresh))); got != want {
		t.Errorf("updated ruleset:\n%s\nwant, as programmed from scratch:\n%s", got, want)
	}

	// Without remote CIDRs there is nothing to SNAT: the table goes.
	if err := kernel.EnsureHostSNAT(fd, kernel.HostSNAT{ExternalIP: extIP, PodCIDRs: []netip.Prefix{podCIDR}}); err != nil {
		t.Fatal(err)
	}
	if got := dumpRuleset(t, c); got != "" {
		t.Errorf("with no remote CIDRs the ruleset is\n%s\nwant it empty", got)
	}
}

// TestHostSNATRepairs checks that EnsureHostSNAT puts back what others changed in its table.
func TestHostSNATRepairs(t *testing.T) {
	requireNFTNAT(t)
	node, fresh := netnstest.New(t, "snat"), netnstest.New(t, "snatref")
	fd := nsFd(t, node)
	c := nftConn(t, fd)
	s := kernel.HostSNAT{ExternalIP: extIP, PodCIDRs: []netip.Prefix{podCIDR}, Remote: []netip.Prefix{remote1, netip.MustParsePrefix("10.90.0.0/16")}}
	if err := kernel.EnsureHostSNAT(nsFd(t, fresh), s); err != nil {
		t.Fatal(err)
	}
	want := dumpRuleset(t, nftConn(t, nsFd(t, fresh)))
	table := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: kernel.NFTable}
	chain := &nftables.Chain{Table: table, Name: "postrouting"}
	remote := &nftables.Set{Table: table, Name: "remote", KeyType: nftables.TypeIPAddr, Interval: true}
	for _, tc := range []struct {
		name   string
		tamper func() error
	}{
		{"extra rule", func() error {
			c.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{&expr.Counter{}}})
			return nil
		}},
		{"extra chain", func() error {
			c.AddChain(&nftables.Chain{Table: table, Name: "input", Type: nftables.ChainTypeFilter,
				Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter})
			return nil
		}},
		{"missing element", func() error {
			return c.SetDeleteElements(remote, []nftables.SetElement{{Key: []byte{10, 90, 0, 0}}, {Key: []byte{10, 91, 0, 0}, IntervalEnd: true}})
		}},
		{"extra element", func() error {
			return c.SetAddElements(remote, []nftables.SetElement{{Key: []byte{10, 100, 0, 0}}, {Key: []byte{10, 101, 0, 0}, IntervalEnd: true}})
		}},
		{"changed rule", func() error {
			c.FlushChain(chain)
			c.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{
				&expr.Immediate{Register: 1, Data: []byte{10, 250, 0, 99}},
				&expr.NAT{Type: expr.NATTypeSourceNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegAddrMax: 1},
			}})
			return nil
		}},
		{"deleted table", func() error { c.DelTable(table); return nil }},
	} {
		if err := kernel.EnsureHostSNAT(fd, s); err != nil {
			t.Fatal(err)
		}
		if err := tc.tamper(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if err := c.Flush(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if dumpRuleset(t, c) == want {
			t.Fatalf("%s: tampering changed nothing", tc.name)
		}
		if err := kernel.EnsureHostSNAT(fd, s); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := dumpRuleset(t, c); got != want {
			t.Errorf("%s: EnsureHostSNAT left\n%s\nwant\n%s", tc.name, got, want)
		}
	}
}

// TestHostSNATTraffic sends UDP from a node namespace to a peer namespace owning remote
// addresses: host traffic to remote CIDRs leaves with the external IP and its replies come
// back; pod traffic and traffic to other destinations keep their source.
func TestHostSNATTraffic(t *testing.T) {
	requireNFTNAT(t)
	node, peer := snatNetwork(t)
	fd := nsFd(t, node)

	const host, pod = "", "10.244.1.5"
	check := sourceCheck(t, node, peer)
	check("before SNAT", host, "10.71.2.7", "192.168.50.1")

	s := kernel.HostSNAT{ExternalIP: extIP, PodCIDRs: []netip.Prefix{podCIDR}, Remote: []netip.Prefix{remote1}}
	if err := kernel.EnsureHostSNAT(fd, s); err != nil {
		t.Fatal(err)
	}
	check("host to remote", host, "10.71.2.7", "10.250.0.11")
	check("pod to remote", pod, "10.71.2.7", pod)
	check("host to non-remote above", host, "10.72.0.9", "192.168.50.1")
	check("host to non-remote below", host, "10.70.0.9", "192.168.50.1")

	s.ExternalIP, s.Remote = netip.MustParseAddr("10.250.0.12"), []netip.Prefix{remote1, remote2}
	if err := kernel.EnsureHostSNAT(fd, s); err != nil {
		t.Fatal(err)
	}
	check("after update, host to new remote", host, "10.72.0.9", "10.250.0.12")
	check("after update, host to remote", host, "10.71.2.7", "10.250.0.12")
	check("after update, pod to remote", pod, "10.72.0.9", pod)
	check("after update, host to non-remote", host, "10.70.0.9", "192.168.50.1")

	if err := kernel.DeleteHostSNAT(fd); err != nil {
		t.Fatal(err)
	}
	check("after delete", host, "10.71.2.7", "192.168.50.1")
}

// snatNetwork is a node namespace with a pod address (10.244.1.5 on lo) and a peer namespace
// behind a veth that owns 10.70.0.9, 10.71.2.7 and 10.72.0.9 and routes the external CIDR
// (the tunnel, really) and the pod CIDR back to the node.
func snatNetwork(t *testing.T) (node, peer *netnstest.NS) {
	t.Helper()
	node, peer = netnstest.New(t, "node"), netnstest.New(t, "peer")
	netnstest.Veth(t, node, peer, "veth0", "192.168.50.1/24", "192.168.50.2/24")
	node.Run(t, "ip", "addr", "add", "10.244.1.5/32", "dev", "lo")
	node.Run(t, "ip", "route", "add", "10.0.0.0/8", "via", "192.168.50.2")
	for _, addr := range []string{"10.70.0.9/32", "10.71.2.7/32", "10.72.0.9/32"} {
		peer.Run(t, "ip", "addr", "add", addr, "dev", "lo")
	}
	peer.Run(t, "ip", "route", "add", "10.250.0.0/16", "via", "192.168.50.1")
	peer.Run(t, "ip", "route", "add", "10.244.0.0/16", "via", "192.168.50.1")
	return node, peer
}

// TestMasqueradeBypass runs a CNI-style masquerade of everything pods send outside their CIDR
// (at the same priority as iptables' nat table, the worst case): the watch counts pod
// connections to remote CIDRs that it rewrote, and not host traffic skein itself SNATs; with
// MasqueradeBypass pod traffic to remote CIDRs keeps its source, nothing is counted, and the
// CNI's masquerade still applies to every other destination.
func TestMasqueradeBypass(t *testing.T) {
	requireNFTNAT(t)
	// iptables' nat table runs at srcnat; the lab's pod network at srcnat + 10.
	for _, prio := range []string{"srcnat", "srcnat + 10"} {
		t.Run(strings.ReplaceAll(prio, " ", ""), func(t *testing.T) { masqueradeBypass(t, prio) })
	}
}

func masqueradeBypass(t *testing.T, prio string) {
	node, peer := snatNetwork(t)
	cni := filepath.Join(t.TempDir(), "cni.nft")
	if err := os.WriteFile(cni, []byte(`table ip cni {
	chain postrouting {
		type nat hook postrouting priority `+prio+`; policy accept;
		ip saddr 10.244.0.0/16 ip daddr != 10.244.0.0/16 masquerade
	}
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	node.Run(t, "nft", "-f", cni)
	fd := nsFd(t, node)
	const host, pod = "", "10.244.1.5"
	check := sourceCheck(t, node, peer)
	count := func(step string, want uint64) {
		t.Helper()
		n, ok, err := kernel.MasqueradedConnections(fd)
		if err != nil || !ok || n != want {
			t.Errorf("%s: masqueraded connections %d (table there: %v, %v), want %d", step, n, ok, err, want)
		}
	}

	s := kernel.HostSNAT{ExternalIP: extIP, PodCIDRs: []netip.Prefix{podCIDR}, Remote: []netip.Prefix{remote1}}
	if err := kernel.EnsureHostSNAT(fd, s); err != nil {
		t.Fatal(err)
	}
	count("before any traffic", 0)
	check("pod to remote, masqueraded by the CNI", pod, "10.71.2.7", "192.168.50.1")
	count("after one masqueraded connection", 1)
	check("pod to remote again", pod, "10.71.2.7", "192.168.50.1")
	count("after two", 2)
	check("host to remote, skein's SNAT", host, "10.71.2.7", "10.250.0.11")
	check("pod elsewhere", pod, "10.70.0.9", "192.168.50.1")
	count("after skein's own SNAT and traffic elsewhere", 2)

	s.MasqueradeBypass = true
	if err := kernel.EnsureHostSNAT(fd, s); err != nil {
		t.Fatal(err)
	}
	got := readHostSNAT(t, nftConn(t, fd))
	if want := []string{"masquerade-bypass", "masquerade-watch", "postrouting"}; !slices.Equal(got.Chains, want) {
		t.Errorf("chains with the bypass: %v, want %v", got.Chains, want)
	}
	check("pod to remote with the bypass", pod, "10.71.2.7", pod)
	check("host to remote with the bypass", host, "10.71.2.7", "10.250.0.11")
	check("pod elsewhere with the bypass", pod, "10.70.0.9", "192.168.50.1")
	count("with the bypass", 0)
	if err := kernel.EnsureHostSNAT(fd, s); err != nil {
		t.Fatal(err)
	}
	count("a second EnsureHostSNAT keeps the counter", 0)
	check("pod to remote with the bypass, again", pod, "10.71.2.7", pod)

	s.MasqueradeBypass = false
	if err := kernel.EnsureHostSNAT(fd, s); err != nil {
		t.Fatal(err)
	}
	check("pod to remote without the bypass again", pod, "10.71.2.7", "192.168.50.1")
	count("without the bypass again", 1)
}

// TestDeleteHostSNAT checks that DeleteHostSNAT removes our table and nothing else (not
// even a table of the same name in another family), and that deleting twice is fine.
func TestDeleteHostSNAT(t *testing.T) {
	requireNFTNAT(t)
	node := netnstest.New(t, "snat")
	fd := nsFd(t, node)
	c := nftConn(t, fd)
	addForeignTables(t, c)
	before := dumpRuleset(t, c)

	if err := kernel.EnsureHostSNAT(fd, kernel.HostSNAT{ExternalIP: extIP, Remote: []netip.Prefix{remote1}}); err != nil {
		t.Fatal(err)
	}
	if got := dumpRuleset(t, c); !strings.HasPrefix(got, before) || !strings.Contains(got, "table ip "+kernel.NFTable+"\n") {
		t.Fatalf("EnsureHostSNAT did not just add table ip %s to\n%s\ngot\n%s", kernel.NFTable, before, got)
	}
	if err := kernel.DeleteHostSNAT(fd); err != nil {
		t.Fatal(err)
	}
	if got := dumpRuleset(t, c); got != before {
		t.Errorf("after DeleteHostSNAT the ruleset is\n%s\nwant it as before\n%s", got, before)
	}
	gen := rulesetGeneration(t, fd)
	if err := kernel.DeleteHostSNAT(fd); err != nil {
		t.Errorf("deleting an absent table: %v", err)
	}
	if g := rulesetGeneration(t, fd); g != gen {
		t.Errorf("deleting an absent table committed a transaction")
	}
	if err := node.Do(func() error { return kernel.DeleteHostSNAT(0) }); err != nil {
		t.Errorf("deleting an absent table from inside the namespace: %v", err)
	}
}

// TestHostSNATBadInput checks that invalid input is refused with an error naming it, before
// anything is programmed.
func TestHostSNATBadInput(t *testing.T) {
	requireNFTNAT(t)
	node := netnstest.New(t, "snat")
	fd := nsFd(t, node)
	gen := rulesetGeneration(t, fd)
	remote := []netip.Prefix{remote1}
	for _, tc := range []struct {
		s    kernel.HostSNAT
		want string
	}{
		{kernel.HostSNAT{Remote: remote}, "external IP is not set"},
		{kernel.HostSNAT{ExternalIP: netip.MustParseAddr("2001:db8::1"), Remote: remote}, "external IP 2001:db8::1 is not an IPv4 address"},
		{kernel.HostSNAT{ExternalIP: netip.MustParseAddr("::ffff:10.250.0.11"), Remote: remote}, "external IP ::ffff:10.250.0.11 is not an IPv4 address"},
		{kernel.HostSNAT{ExternalIP: netip.MustParseAddr("127.0.0.1"), Remote: remote}, "external IP 127.0.0.1 is not a unicast address"},
		{kernel.HostSNAT{ExternalIP: netip.MustParseAddr("0.0.0.0"), Remote: remote}, "external IP 0.0.0.0 is not a unicast address"},
		{kernel.HostSNAT{ExternalIP: extIP, Remote: []netip.Prefix{remote1, {}}}, `remote CIDR "invalid Prefix" is invalid`},
		{kernel.HostSNAT{ExternalIP: extIP, Remote: []netip.Prefix{remote1, remote6}}, "the IPv6 external IP is not set (it is the node's address in the cluster's IPv6 external CIDR), but remote CIDR fd00:71::/48 is IPv6"},
		{kernel.HostSNAT{ExternalIP6: extIP6, Remote: []netip.Prefix{remote6, remote1}}, "the external IP is not set (it is the node's address in the cluster's IPv4 external CIDR), but remote CIDR 10.71.0.0/16 is IPv4"},
		{kernel.HostSNAT{ExternalIP6: extIP, Remote: []netip.Prefix{remote6}}, "IPv6 external IP 10.250.0.11 is not an IPv6 address"},
		{kernel.HostSNAT{ExternalIP6: netip.MustParseAddr("::ffff:10.250.0.11"), Remote: []netip.Prefix{remote6}}, "IPv6 external IP ::ffff:10.250.0.11 is not an IPv6 address"},
		{kernel.HostSNAT{ExternalIP6: netip.MustParseAddr("fe80::1%eth0"), Remote: []netip.Prefix{remote6}}, "IPv6 external IP fe80::1%eth0 is not an IPv6 address"},
		{kernel.HostSNAT{ExternalIP6: netip.MustParseAddr("fe80::1"), Remote: []netip.Prefix{remote6}}, "IPv6 external IP fe80::1 is not a unicast address"},
		{kernel.HostSNAT{ExternalIP6: netip.MustParseAddr("::1"), Remote: []netip.Prefix{remote6}}, "IPv6 external IP ::1 is not a unicast address"},
		{kernel.HostSNAT{ExternalIP6: extIP6, Remote: []netip.Prefix{netip.MustParsePrefix("::ffff:10.71.0.0/112")}}, "remote CIDR ::ffff:10.71.0.0/112 is an IPv4-mapped IPv6 CIDR"},
		{kernel.HostSNAT{ExternalIP: extIP, Remote: remote, PodCIDRs: []netip.Prefix{netip.PrefixFrom(netip.MustParseAddr("10.244.0.0"), 33)}}, `pod CIDR "invalid Prefix" is invalid`},
		{kernel.HostSNAT{ExternalIP: extIP, ExternalIP6: extIP6, Remote: []netip.Prefix{remote1, remote6}, PodCIDRs: []netip.Prefix{netip.PrefixFrom(netip.MustParseAddr("fd00::"), 129)}}, `pod CIDR "invalid Prefix" is invalid`},
	} {
		err := kernel.EnsureHostSNAT(fd, tc.s)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("EnsureHostSNAT(%+v) = %v, want an error containing %q", tc.s, err, tc.want)
		}
	}
	// No remote CIDRs is not an error: it means no SNAT, whatever the other fields say, and
	// there is nothing to delete.
	for _, s := range []kernel.HostSNAT{{ExternalIP: extIP}, {}, {PodCIDRs: []netip.Prefix{{}}}} {
		if err := kernel.EnsureHostSNAT(fd, s); err != nil {
			t.Errorf("EnsureHostSNAT(%+v) without remote CIDRs: %v", s, err)
		}
	}
	if g := rulesetGeneration(t, fd); g != gen {
		t.Errorf("bad input committed %d transactions", g-gen)
	}
	if got := dumpRuleset(t, nftConn(t, fd)); got != "" {
		t.Errorf("bad input left a ruleset:\n%s", got)
	}
}

// hostSNATState is table ip skein-agent as read back: set elements as address ranges, the
// one rule of its postrouting chain, and the names of its chains.
type hostSNATState struct {
	Remote, Pods []string
	Exprs        []expr.Any
	Chains       []string
}

func (s hostSNATState) String() string {
	return fmt.Sprintf("remote %v pods %v rule %s chains %v", s.Remote, s.Pods, exprsString(s.Exprs), s.Chains)
}

// plainChains are the chains of a table without the masquerade bypass, sorted.
var plainChains = []string{"masquerade-watch", "postrouting"}

// snatExprs is "ip daddr @remote ip saddr != @pods snat to ip" as the kernel reports it, or
// its ip6 twin for an IPv6 ip (the addresses at bytes 24 and 8 of the IPv6 header, 16 long).
func snatExprs(ip string) []expr.Any {
	a := netip.MustParseAddr(ip)
	daddr, saddr, n, family := uint32(16), uint32(12), uint32(4), uint32(unix.NFPROTO_IPV4)
	if a.Is6() {
		daddr, saddr, n, family = 24, 8, 16, unix.NFPROTO_IPV6
	}
	return []expr.Any{
		&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: daddr, Len: n},
		&expr.Lookup{SourceRegister: 1, SetName: "remote"},
		&expr.Payload{OperationType: expr.PayloadLoad, DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: saddr, Len: n},
		&expr.Lookup{SourceRegister: 1, SetName: "pods", Invert: true},
		&expr.Fib{Register: 1, FlagSADDR: true, ResultADDRTYPE: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)},
		&expr.Immediate{Register: 1, Data: a.AsSlice()},
		&expr.NAT{Type: expr.NATTypeSourceNAT, Family: family, RegAddrMin: 1, RegAddrMax: 1},
	}
}

// readHostSNAT reads table ip skein-agent and checks its fixed parts: the postrouting chain,
// a comment on every rule, the kinds of the sets and the counter.
func readHostSNAT(t *testing.T, c *nftables.Conn) hostSNATState {
	t.Helper()
	return readHostSNATFamily(t, c, nftables.TableFamilyIPv4)
}

// readHostSNATFamily is readHostSNAT for the table of family (ip or ip6).
func readHostSNATFamily(t *testing.T, c *nftables.Conn, family nftables.TableFamily) hostSNATState {
	t.Helper()
	table, err := c.ListTableOfFamily(kernel.NFTable, family)
	if err != nil {
		t.Fatalf("table %s %s: %v", familyName(family), kernel.NFTable, err)
	}
	keyType := "ipv4_addr"
	if family == nftables.TableFamilyIPv6 {
		keyType = "ipv6_addr"
	}
	chains, err := c.ListChainsOfTableFamily(family)
	if err != nil {
		t.Fatal(err)
	}
	var state hostSNATState
	var chain *nftables.Chain
	for _, ch := range chains {
		if ch.Table.Name != kernel.NFTable {
			continue
		}
		state.Chains = append(state.Chains, ch.Name)
		rules, err := c.GetRules(table, ch)
		if err != nil {
			t.Fatal(err)
		}
		if len(rules) != 1 {
			t.Errorf("chain %s: %d rules, want 1", ch.Name, len(rules))
		}
		for _, r := range rules {
			if comment, ok := userdata.GetString(r.UserData, userdata.TypeComment); !ok || !strings.HasPrefix(comment, "skein:") {
				t.Errorf("chain %s: rule comment %q, want one saying it is skein's", ch.Name, comment)
			}
		}
		if ch.Name == "postrouting" {
			chain = ch
			if len(rules) > 0 {
				state.Exprs = rules[0].Exprs
			}
		}
	}
	slices.Sort(state.Chains)
	if chain == nil {
		t.Fatal("no postrouting chain")
	}
	if chain.Type != nftables.ChainTypeNAT ||
		chain.Hooknum == nil || *chain.Hooknum != *nftables.ChainHookPostrouting ||
		chain.Priority == nil || *chain.Priority != 100 ||
		chain.Policy == nil || *chain.Policy != nftables.ChainPolicyAccept {
		t.Errorf("chain %s: %s", chain.Name, chainString(chain))
	}

	sets, err := c.GetSets(table)
	if err != nil {
		t.Fatal(err)
	}
	if len(sets) != 2 {
		t.Errorf("%d sets, want remote and pods", len(sets))
	}
	for _, set := range sets {
		if set.KeyType.Name != keyType || !set.Interval || set.IsMap || set.Constant || set.HasTimeout {
			t.Errorf("set %s: %s", set.Name, setString(set))
		}
		elems, err := c.GetSetElements(set)
		if err != nil {
			t.Fatal(err)
		}
		switch set.Name {
		case "remote":
			state.Remote = intervals(t, elems)
		case "pods":
			state.Pods = intervals(t, elems)
		default:
			t.Errorf("unexpected set %s", set.Name)
		}
	}
	objs, err := c.GetObjects(table)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 {
		t.Errorf("%d objects, want the counter masqueraded", len(objs))
	}
	for _, o := range objs {
		if counter, ok := o.(*nftables.CounterObj); !ok || counter.Name != "masqueraded" {
			t.Errorf("object %#v, want the counter masqueraded", o)
		}
	}
	return state
}

// intervals turns the elements of an IPv4 or IPv6 interval set into "first-last" ranges.
func intervals(t *testing.T, elems []nftables.SetElement) []string {
	t.Helper()
	elems = slices.Clone(elems)
	slices.SortFunc(elems, func(a, b nftables.SetElement) int { return bytes.Compare(a.Key, b.Key) })
	var out []string
	for i := 0; i < len(elems); i++ {
		e := elems[i]
		first, ok := netip.AddrFromSlice(e.Key)
		if e.IntervalEnd || !ok {
			t.Fatalf("element %d of %v is not an interval start", i, elems)
		}
		last := netip.MustParseAddr("255.255.255.255")
		if first.Is6() {
			last = netip.MustParseAddr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")
		}
		if i+1 < len(elems) && elems[i+1].IntervalEnd {
			i++
			end, _ := netip.AddrFromSlice(elems[i].Key)
			last = end.Prev()
		}
		out = append(out, first.String()+"-"+last.String())
	}
	return out
}

// sourceCheck returns a check that a datagram from node (from: a local address, "" for the
// one routing picks) to to in peer, answered, arrived from wantSrc.
func sourceCheck(t *testing.T, node, peer *netnstest.NS) func(step, from, to, wantSrc string) {
	return func(step, from, to, wantSrc string) {
		t.Helper()
		if got := udpRoundTrip(t, node, peer, from, to); got != netip.MustParseAddr(wantSrc) {
			t.Errorf("%s: a datagram from %q to %s arrived from %s, want %s", step, from, to, got, wantSrc)
		}
	}
}

// udpRoundTrip sends a datagram from node (from: a local address to bind to, "" for the
// one routing picks) to a listener on to in peer, answers it, waits for the answer in node
// and returns the source address the datagram arrived with in peer.
func udpRoundTrip(t *testing.T, node, peer *netnstest.NS, from, to string) netip.Addr {
	t.Helper()
	var server, client *net.UDPConn
	dst := net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(to), 7777))
	err := peer.Do(func() (err error) {
		server, err = net.ListenUDP("udp", dst)
		return err
	})
	if err != nil {
		t.Fatalf("listen on %s in %s: %v", dst, peer.Name, err)
	}
	defer server.Close()
	var src *net.UDPAddr
	if from != "" {
		src = net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(from), 0))
	}
	err = node.Do(func() (err error) {
		client, err = net.DialUDP("udp", src, dst)
		return err
	})
	if err != nil {
		t.Fatalf("dial %s from %q in %s: %v", dst, from, node.Name, err)
	}
	defer client.Close()

	deadline := time.Now().Add(5 * time.Second)
	if _, err := client.Write([]byte("ping")); err != nil {
		t.Fatalf("send to %s: %v", dst, err)
	}
	buf := make([]byte, 16)
	_ = server.SetReadDeadline(deadline)
	n, seen, err := server.ReadFromUDPAddrPort(buf)
	if err != nil || string(buf[:n]) != "ping" {
		t.Fatalf("receive in %s: %q, %v", peer.Name, buf[:n], err)
	}
	if _, err := server.WriteToUDPAddrPort([]byte("pong"), seen); err != nil {
		t.Fatalf("answer %s: %v", seen, err)
	}
	_ = client.SetReadDeadline(deadline)
	if n, err := client.Read(buf); err != nil || string(buf[:n]) != "pong" {
		t.Fatalf("the answer to %s (sent to %s) did not come back: %q, %v", from, seen, buf[:n], err)
	}
	return seen.Addr().Unmap()
}

// addForeignTables gives the namespace tables that are not ours, one of them with our
// table's name in another family.
func addForeignTables(t *testing.T, c *nftables.Conn) {
	t.Helper()
	for _, table := range []*nftables.Table{
		{Family: nftables.TableFamilyIPv4, Name: "other"},
		{Family: nftables.TableFamilyINet, Name: kernel.NFTable},
	} {
		c.AddTable(table)
		set := &nftables.Set{Table: table, ID: 1, Name: "remote", KeyType: nftables.TypeIPAddr, Interval: true}
		if err := c.AddSet(set, []nftables.SetElement{{Key: []byte{10, 71, 0, 0}}, {Key: []byte{10, 72, 0, 0}, IntervalEnd: true}}); err != nil {
			t.Fatal(err)
		}
		chain := c.AddChain(&nftables.Chain{Table: table, Name: "postrouting", Type: nftables.ChainTypeNAT,
			Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
		c.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{&expr.Counter{}}})
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("add foreign tables: %v", err)
	}
}

// dumpRuleset renders every table of the namespace's ruleset with its chains, sets,
// elements and rules, sorted, as text ("" for an empty ruleset).
func dumpRuleset(t *testing.T, c *nftables.Conn) string {
	t.Helper()
	tables, err := c.ListTables()
	if err != nil {
		t.Fatal(err)
	}
	chains, err := c.ListChains()
	if err != nil {
		t.Fatal(err)
	}
	key := func(family nftables.TableFamily, name string) string { return fmt.Sprintf("%d %s", family, name) }
	slices.SortFunc(tables, func(a, b *nftables.Table) int {
		return strings.Compare(key(a.Family, a.Name), key(b.Family, b.Name))
	})
	slices.SortFunc(chains, func(a, b *nftables.Chain) int { return strings.Compare(a.Name, b.Name) })
	var b strings.Builder
	for _, table := range tables {
		fmt.Fprintf(&b, "table %s %s\n", familyName(table.Family), table.Name)
		sets, err := c.GetSets(table)
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(sets, func(a, b *nftables.Set) int { return strings.Compare(a.Name, b.Name) })
		for _, set := range sets {
			elems, err := c.GetSetElements(set)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "  set %s %s elements %s\n", set.Name, setString(set), intervals(t, elems))
		}
		for _, ch := range chains {
			if key(ch.Table.Family, ch.Table.Name) != key(table.Family, table.Name) {
				continue
			}
			fmt.Fprintf(&b, "  chain %s %s\n", ch.Name, chainString(ch))
			rules, err := c.GetRules(table, ch)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rules {
				comment, _ := userdata.GetString(r.UserData, userdata.TypeComment)
				fmt.Fprintf(&b, "    rule handle %d %s comment %q\n", r.Handle, exprsString(r.Exprs), comment)
			}
		}
	}
	return b.String()
}

func familyName(f nftables.TableFamily) string {
	switch f {
	case nftables.TableFamilyIPv4:
		return "ip"
	case nftables.TableFamilyIPv6:
		return "ip6"
	case nftables.TableFamilyINet:
		return "inet"
	}
	return fmt.Sprint(int(f))
}

func chainString(ch *nftables.Chain) string {
	s := "type " + string(ch.Type)
	if ch.Hooknum != nil {
		s += fmt.Sprintf(" hook %d", *ch.Hooknum)
	}
	if ch.Priority != nil {
		s += fmt.Sprintf(" priority %d", *ch.Priority)
	}
	if ch.Policy != nil {
		s += fmt.Sprintf(" policy %d", *ch.Policy)
	}
	return s
}

func setString(s *nftables.Set) string {
	return fmt.Sprintf("type %s interval %v map %v constant %v timeout %v", s.KeyType.Name, s.Interval, s.IsMap, s.Constant, s.HasTimeout)
}

func exprsString(exprs []expr.Any) string {
	var parts []string
	for _, e := range exprs {
		parts = append(parts, fmt.Sprintf("%T%+v", e, e))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// nsFd opens ns's namespace for the rest of the test and returns the descriptor.
func nsFd(t *testing.T, ns *netnstest.NS) int {
	t.Helper()
	f, err := os.Open(filepath.Join("/var/run/netns", ns.Name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return int(f.Fd())
}

// nftConn opens an nftables connection into the namespace fd refers to.
func nftConn(t *testing.T, fd int) *nftables.Conn {
	t.Helper()
	c, err := nftables.New(nftables.AsLasting(), nftables.WithNetNSFd(fd))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseLasting() })
	return c
}

// rulesetGeneration returns the nftables ruleset generation of the namespace fd refers to;
// every committed transaction increments it (the library has no call for it).
func rulesetGeneration(t *testing.T, fd int) uint32 {
	t.Helper()
	conn, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: fd})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	msgs, err := conn.Execute(netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETGEN), Flags: netlink.Request},
		Data:   []byte{unix.AF_UNSPEC, 0, 0, 0}, // struct nfgenmsg
	})
	if err != nil || len(msgs) != 1 || len(msgs[0].Data) < 4 {
		t.Fatalf("get nftables generation: %v, %d messages", err, len(msgs))
	}
	ad, err := netlink.NewAttributeDecoder(msgs[0].Data[4:])
	if err != nil {
		t.Fatal(err)
	}
	ad.ByteOrder = binary.BigEndian
	for ad.Next() {
		if ad.Type() == unix.NFTA_GEN_ID {
			return ad.Uint32()
		}
	}
	t.Fatalf("get nftables generation: no NFTA_GEN_ID: %v", ad.Err())
	return 0
}

var natProbe struct {
	once sync.Once
	err  error
}

// requireNFTNAT needs root and skips the test when the kernel cannot do nftables NAT, found
// by trying it, with the nftables library alone, in a namespace of its own.
func requireNFTNAT(t *testing.T) {
	t.Helper()
	netnstest.RequireRoot(t)
	natProbe.once.Do(func() {
		c := nftConn(t, nsFd(t, netnstest.New(t, "nftprobe")))
		table := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: "probe"})
		chain := c.AddChain(&nftables.Chain{Table: table, Name: "postrouting", Type: nftables.ChainTypeNAT,
			Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
		c.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{
			&expr.Immediate{Register: 1, Data: []byte{10, 0, 0, 1}},
			&expr.NAT{Type: expr.NATTypeSourceNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1},
		}})
		natProbe.err = c.Flush()
	})
	if natProbe.err != nil {
		t.Skipf("the kernel lacks nftables NAT (nf_tables with the nat chain type and the nat expression, CONFIG_NFT_NAT): %v", natProbe.err)
	}
}

// TestHostSNATRelay: a node that relays other nodes' frames to a gateway pod
// (status.internalEndpoint.nodeVTEP) forwards traffic that arrives on the overlay device; with
// Relay set to that device the SNAT rule leaves it alone (another node's host traffic keeps
// that node's external address), while this node's own host traffic is still SNATed. Without
// Relay the relayed traffic would leave with this node's external address. (A veth named like
// the device stands for it: the rule matches the input interface by name.)
func TestHostSNATRelay(t *testing.T) {
	requireNFTNAT(t)
	node, peer := snatNetwork(t)
	other := netnstest.New(t, "other")
	netnstest.Veth(t, node, other, "ovl0", "192.168.60.1/24", "192.168.60.2/24")
	node.Run(t, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	other.Run(t, "ip", "addr", "add", "10.250.0.21/32", "dev", "lo")
	other.Run(t, "ip", "route", "add", "10.0.0.0/8", "via", "192.168.60.1")
	node.Run(t, "ip", "route", "add", "10.250.0.21/32", "via", "192.168.60.2")
	peer.Run(t, "ip", "route", "add", "192.168.60.0/24", "via", "192.168.50.1")
	fd := nsFd(t, node)
	fromNode := sourceCheck(t, node, peer)
	fromOther := sourceCheck(t, other, peer)

	s := kernel.HostSNAT{ExternalIP: extIP, PodCIDRs: []netip.Prefix{podCIDR}, Remote: []netip.Prefix{remote1}}
	if err := kernel.EnsureHostSNAT(fd, s); err != nil {
		t.Fatal(err)
	}
	// What the node forwards for another host keeps its source (fib saddr type local: found
	// by the attack review, a LAN host routing the peers' CIDRs via a node reached them as the
	// node), relayed or not.
	fromOther("without Relay, another node's host traffic", "10.250.0.21", "10.71.2.7", "10.250.0.21")

	s.Relay = "ovl0"
	if err := kernel.EnsureHostSNAT(fd, s); err != nil {
		t.Fatal(err)
	}
	fromOther("relayed host traffic of another node", "10.250.0.21", "10.71.2.7", "10.250.0.21")
	fromNode("this node's host traffic", "", "10.71.2.7", "10.250.0.11")
	fromNode("this node's pod", "10.244.1.5", "10.71.2.7", "10.244.1.5")
	// Idempotent: the rule with its interface match reads back as written.
	if err := kernel.EnsureHostSNAT(fd, s); err != nil {
		t.Fatal(err)
	}
	before := node.Run(t, "nft", "list", "table", "ip", "skein-agent")
	if err := kernel.EnsureHostSNAT(fd, s); err != nil {
		t.Fatal(err)
	}
	if after := node.Run(t, "nft", "list", "table", "ip", "skein-agent"); after != before || !strings.Contains(after, `iifname != "ovl0"`) {
		t.Errorf("the table changed on a second apply, or lacks the relay's match:\n%s\n%s", before, after)
	}
	s.Relay = "a-name-too-long-for-linux"
	if err := kernel.EnsureHostSNAT(fd, s); err == nil {
		t.Error("an interface name longer than 15 bytes was accepted")
	}
}
