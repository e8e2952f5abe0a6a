package plan_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/skein-net/skein/control/agent/plan"
	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
)

func ipp(s string) *netv1alpha1.IP { v := netv1alpha1.IP(s); return &v }

func objects() plan.Objects {
	lb := func(id string) map[string]string { return map[string]string{netv1alpha1.RemoteClusterIDLabel: id} }
	return plan.Objects{
		InternalNode: &netv1alpha1.InternalNode{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
			Spec: netv1alpha1.InternalNodeSpec{OverlayIP: ipp("10.80.0.11"), ExternalIP: ipp("10.70.0.11")}},
		Configurations: []netv1alpha1.Configuration{
			{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "t-b", Labels: lb("b")},
				Status: netv1alpha1.ConfigurationStatus{Remote: &netv1alpha1.ClusterConfig{CIDR: netv1alpha1.ClusterConfigCIDR{Pod: "10.71.0.0/16", External: "10.72.0.0/16"}}}},
			{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "t-c", Labels: lb("c")}}, // not mapped yet
		},
		Servers: []netv1alpha1.GatewayServer{
			{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: "t-b", Labels: lb("b")},
				Status: netv1alpha1.GatewayServerStatus{InternalEndpoint: &netv1alpha1.InternalEndpoint{IP: ipp("10.80.0.1"),
					VTEP: &netv1alpha1.VTEP{IP: "10.244.1.20", MAC: "02:5b:00:00:00:01"}}}},
		},
		Clients: []netv1alpha1.GatewayClient{
			{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: "t-c", Labels: lb("c")}},
		},
	}
}

var node = plan.Node{Name: "n1", IP: netip.MustParseAddr("192.168.77.1"), PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}}

func TestFromObjects(t *testing.T) {
	p, err := plan.FromObjects(node, objects())
	if err != nil {
		t.Fatal(err)
	}
	o := p.Kernel.Overlay
	if o.Name != "liqo.vxlan" || o.Address.String() != "10.80.0.11/16" || o.Local != node.IP || o.MTU != 1450 || o.Port != 4789 || o.VNI != 18952 {
		t.Errorf("overlay %+v", o)
	}
	if len(p.Kernel.Peers) != 1 {
		t.Fatalf("peers %+v", p.Kernel.Peers)
	}
	peer := p.Kernel.Peers[0]
	if peer.OverlayIP.String() != "10.80.0.1" || peer.VTEP.String() != "10.244.1.20" || len(peer.Routes) != 2 {
		t.Errorf("peer %+v", peer)
	}
	if p.SNAT == nil || p.SNAT.ExternalIP.String() != "10.70.0.11" || len(p.SNAT.Remote) != 2 || p.SNAT.PodCIDRs[0].String() != "10.244.0.0/16" {
		t.Errorf("SNAT %+v", p.SNAT)
	}
	waiting := strings.Join(p.Waiting, "; ")
	if !strings.Contains(waiting, "t-c/c: not mapped yet") || !strings.Contains(waiting, "gatewayclient t-c/gw: no mapped Configuration") {
		t.Errorf("waiting: %s", waiting)
	}
}

func TestFromObjectsNoOverlayIP(t *testing.T) {
	o := objects()
	o.InternalNode.Spec.OverlayIP = nil
	if _, err := plan.FromObjects(node, o); !errors.Is(err, plan.ErrNoOverlayIP) {
		t.Errorf("%v", err)
	}
	o = objects()
	o.Servers = nil
	p, err := plan.FromObjects(node, o)
	if err != nil || len(p.Kernel.Peers) != 0 || p.SNAT != nil {
		t.Errorf("no gateways: %+v %v", p, err)
	}
}
