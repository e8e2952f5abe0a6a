package main

import (
	"net/netip"
	"testing"
)

// TestOverlayMTU: the MTU the agent derives from the underlay link leaves room for the outer
// header of the node address's family, so that it matches what the gateways assume (1450 over
// IPv4, 1430 over IPv6 on a 1500-byte link; found by the IPv6-only lab, whose nodes had 1450).
func TestOverlayMTU(t *testing.T) {
	for _, c := range []struct {
		under int
		ip    string
		want  int
	}{
		{1500, "192.168.10.20", 1450},
		{1500, "2001:db8:0:a::14", 1430},
		{9000, "2001:db8:0:a::14", 8930},
	} {
		if got := overlayMTU(c.under, netip.MustParseAddr(c.ip)); got != c.want {
			t.Errorf("underlay MTU %d, node IP %s: overlay MTU %d, want %d", c.under, c.ip, got, c.want)
		}
	}
}
