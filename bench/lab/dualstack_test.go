package lab

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
)

// TestDualStackCNIConfig: a node's CNI configuration waits for a pod CIDR of each family inside
// the cluster's, and then has one host-local range per family, IPv4 first.
func TestDualStackCNIConfig(t *testing.T) {
	c := NodeConfig{ClusterCIDR: PodCIDR, ClusterCIDR6: PodCIDR6}
	p := netip.MustParsePrefix
	for _, cidrs := range [][]netip.Prefix{nil, {p("10.244.3.0/24")}, {p("fd00:244:0:3::/64")},
		{p("10.244.3.0/24"), p("fd00:245::/64")}} {
		if conf, ok := c.dualStackCNIConfig(cidrs); ok {
			t.Errorf("pod CIDRs %v: configuration written before the node has one of each family in the cluster's:\n%s", cidrs, conf)
		}
	}
	conf, ok := c.dualStackCNIConfig([]netip.Prefix{p("fd00:244:0:3::/64"), p("10.244.3.0/24")})
	if !ok {
		t.Fatal("no configuration for a node with a pod CIDR of each family")
	}
	typ, r := cniRanges(t, conf)
	if typ != "bridge" || len(r) != 2 || r[0][0].Subnet != "10.244.3.0/24" || r[1][0].Subnet != "fd00:244:0:3::/64" {
		t.Errorf("want the bridge plugin with ranges 10.244.3.0/24 and fd00:244:0:3::/64:\n%s", conf)
	}
}

// cniRanges reads the first plugin's type and its host-local ranges from a CNI configuration list.
func cniRanges(t *testing.T, conf string) (string, [][]struct{ Subnet string }) {
	t.Helper()
	var list struct {
		Plugins []struct {
			Type string
			IPAM struct {
				Ranges [][]struct{ Subnet string }
			}
		}
	}
	if err := json.Unmarshal([]byte(conf), &list); err != nil || len(list.Plugins) == 0 {
		t.Fatalf("%v (or no plugin):\n%s", err, conf)
	}
	return list.Plugins[0].Type, list.Plugins[0].IPAM.Ranges
}

// TestIPv6OnlyCNIConfig: on an IPv6-only node (no IPv4 cluster CIDR) the configuration has the
// IPv6 range alone, waits for the Node's IPv6 pod CIDR, and ignores an IPv4 one.
func TestIPv6OnlyCNIConfig(t *testing.T) {
	c := NodeConfig{IPv6Only: true, ClusterCIDR6: PodCIDR6}
	p := netip.MustParsePrefix
	for _, cidrs := range [][]netip.Prefix{nil, {p("10.244.3.0/24")}, {p("fd00:245::/64")}} {
		if conf, ok := c.dualStackCNIConfig(cidrs); ok {
			t.Errorf("pod CIDRs %v: configuration written before the node has an IPv6 one in the cluster's:\n%s", cidrs, conf)
		}
	}
	conf, ok := c.dualStackCNIConfig([]netip.Prefix{p("10.244.3.0/24"), p("fd00:244:0:3::/64")})
	if !ok {
		t.Fatal("no configuration for a node with an IPv6 pod CIDR")
	}
	_, r := cniRanges(t, conf)
	if len(r) != 1 || r[0][0].Subnet != "fd00:244:0:3::/64" {
		t.Errorf("want the one range fd00:244:0:3::/64:\n%s", conf)
	}
}

// TestIPv6OnlyMasquerade: an IPv6-only node masquerades its pods' IPv6 traffic to the lab's
// underlay only (the API server, the registry, the peer's nodes), so that pods reach them, and
// nothing else: traffic to a peer's pods as remapped here (in fd00::/8) keeps its source, which
// the peer's gateway translates. A dual-stack node keeps the IPv4 masquerade.
func TestIPv6OnlyMasquerade(t *testing.T) {
	got := NodeConfig{IPv6Only: true, ClusterCIDR6: PodCIDR6}.masqueradeRules()
	for _, want := range []string{"table ip6 skein-lab-podnet", "ip6 saddr fd00:244::/56 ip6 daddr 2001:db8::/32 masquerade"} {
		if !strings.Contains(got, want) {
			t.Errorf("IPv6-only masquerade lacks %q:\n%s", want, got)
		}
	}
	if LabNet6.Overlaps(netip.MustParsePrefix("fd00::/8")) || !LabNet6.Contains(WorkstationNet6.Addr()) || !LabNet6.Contains(Underlay6(19).Addr()) {
		t.Errorf("LabNet6 %v must hold the workstation's link and every underlay, and nothing of the IPv6 pools", LabNet6)
	}
	got = NodeConfig{DualStack: true, ClusterCIDR: PodCIDR, ClusterCIDR6: PodCIDR6}.masqueradeRules()
	if !strings.Contains(got, "table ip skein-lab-podnet") || !strings.Contains(got, "ip saddr 10.244.0.0/16 ip daddr != 10.244.0.0/16 masquerade") || strings.Contains(got, "ip6") {
		t.Errorf("dual-stack masquerade:\n%s", got)
	}
}
