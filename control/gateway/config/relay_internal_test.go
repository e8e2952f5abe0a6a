package config

import (
	"net/netip"
	"testing"

	"github.com/skein-net/skein/dataplane"
)

// TestHostOf: the gateway's relay node is the node that hosts its pod address, a pod /32 of
// one node winning over another's pod CIDR; none when no node hosts it.
func TestHostOf(t *testing.T) {
	nodes := []dataplane.Node{
		{Name: "n1", PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:244:0:1::/64")}},
		{Name: "n2", PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24")}, Pods: []netip.Addr{netip.MustParseAddr("10.244.1.77")}},
	}
	for addr, want := range map[string]string{"10.244.1.5": "n1", "10.244.2.5": "n2", "10.244.1.77": "n2", "fd00:244:0:1::5": "n1", "10.9.9.9": "", "": ""} {
		var a netip.Addr
		if addr != "" {
			a = netip.MustParseAddr(addr)
		}
		if got := hostOf(nodes, a); got != want {
			t.Errorf("hostOf(%q) = %q, want %q", addr, got, want)
		}
	}
}
