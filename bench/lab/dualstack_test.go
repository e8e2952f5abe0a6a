package lab

import (
	"encoding/json"
	"net/netip"
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
	var list struct {
		Plugins []struct {
			Type string
			IPAM struct {
				Ranges [][]struct{ Subnet string }
			}
		}
	}
	if err := json.Unmarshal([]byte(conf), &list); err != nil {
		t.Fatalf("%v:\n%s", err, conf)
	}
	r := list.Plugins[0].IPAM.Ranges
	if list.Plugins[0].Type != "bridge" || len(r) != 2 || r[0][0].Subnet != "10.244.3.0/24" || r[1][0].Subnet != "fd00:244:0:3::/64" {
		t.Errorf("want the bridge plugin with ranges 10.244.3.0/24 and fd00:244:0:3::/64:\n%s", conf)
	}
}
