package identity

import (
	"net/netip"
	"reflect"
	"testing"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
)

// TestPublishedExternals: what peers are told of this cluster's external CIDRs in each kind
// of cluster (the IPv6 one of a dual-stack cluster as an additional external; an IPv6-only
// cluster's as external).
func TestPublishedExternals(t *testing.T) {
	p := netip.MustParsePrefix
	for _, tc := range []struct {
		name string
		n    Network
		want netv1alpha1.ClusterConfigCIDR
	}{
		{"IPv4", Network{PodCIDRs: []netip.Prefix{p("10.244.0.0/16")}, ExternalCIDR: p("10.70.0.0/16")},
			netv1alpha1.ClusterConfigCIDR{Pod: "10.244.0.0/16", External: "10.70.0.0/16"}},
		{"dual-stack", Network{PodCIDRs: []netip.Prefix{p("10.244.0.0/16"), p("fd00:244::/56")}, ExternalCIDR: p("10.70.0.0/16"), ExternalCIDR6: p("fd00:70::/112")},
			netv1alpha1.ClusterConfigCIDR{Pod: "10.244.0.0/16", External: "10.70.0.0/16", AdditionalPods: []netv1alpha1.CIDR{"fd00:244::/56"}, AdditionalExternals: []netv1alpha1.CIDR{"fd00:70::/112"}}},
		{"IPv6-only", Network{PodCIDRs: []netip.Prefix{p("fd00:244::/56")}, ExternalCIDR6: p("fd00:70::/112")},
			netv1alpha1.ClusterConfigCIDR{Pod: "fd00:244::/56", External: "fd00:70::/112"}},
	} {
		if got := tc.n.Published(); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: published %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
