package controller_test

import (
	"context"
	"encoding/json"
	"net/netip"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/dataplane/overlay"
	"github.com/skein-net/skein/internal/apitest"
)

// TestRemovedGatewayWithdrawsItsVTEP (the fourth attack review: medium): the active replica
// publishes its pod address and its node's VTEP, which every node routes the peering to and
// admits the overlay's frames from. When skein-controller removes the gateway's Deployment (its
// template turned bad: ForbiddenTemplate), no pod holds that address any more and the pod
// network gives it to the next pod: the controller withdraws vtep, node and nodeVTEP from the
// status (the overlay IP, which it assigns, stays).
func TestRemovedGatewayWithdrawsItsVTEP(t *testing.T) {
	env := apitest.Start(t)
	c := env.Client
	ns := env.Namespace(t, "gone-vtep")
	ctx := context.Background()
	installTemplates(t, c, ns)
	serverTemplateVariant(t, c, ns, "later", func(map[string]any) {})
	stop := startGateways(t, env)
	defer stop()

	gs := serverGateway(ns, "gone")
	gs.Spec.ServerTemplateRef.Name = "later"
	apitest.Must(t, c.Create(ctx, gs))
	key := client.ObjectKeyFromObject(gs)
	apitest.Eventually(t, "the gateway deployed with its overlay IP", 30*time.Second, func() bool {
		return c.Get(ctx, key, &appsv1.Deployment{}) == nil && c.Get(ctx, key, gs) == nil &&
			gs.Status.InternalEndpoint != nil && gs.Status.InternalEndpoint.IP != nil
	})
	// What the active replica publishes (control/gateway PublishActive): its pod IP and MAC,
	// its node and the node's VTEP.
	oip := netip.MustParseAddr(string(*gs.Status.InternalEndpoint.IP))
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"internalEndpoint": map[string]any{
		"vtep":     map[string]any{"ip": "10.244.1.77", "mac": overlay.MACString(overlay.GatewayMAC(oip))},
		"node":     "node-a",
		"nodeVTEP": map[string]any{"ip": "192.168.77.1", "mac": overlay.MACString(overlay.NodeMAC(netip.MustParseAddr("192.168.77.1")))},
	}}})
	apitest.Must(t, c.Status().Patch(ctx, gs, client.RawPatch(types.MergePatchType, patch)))

	// The template turns bad: the Deployment (and so the pod holding 10.244.1.77) goes.
	tmpl := &netv1alpha1.WgGatewayServerTemplate{}
	apitest.Must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "later"}, tmpl))
	var tree map[string]any
	apitest.Must(t, json.Unmarshal(tmpl.Spec.Template.Raw, &tree))
	dig(tree, "spec", "service")["externalIPs"] = []any{"8.8.8.8"}
	raw, err := json.Marshal(tree)
	apitest.Must(t, err)
	tmpl.Spec.Template.Raw = raw
	apitest.Must(t, c.Update(ctx, tmpl))
	apitest.Eventually(t, "the gateway's Deployment removed", 30*time.Second, func() bool {
		return apierrors.IsNotFound(c.Get(ctx, key, &appsv1.Deployment{}))
	})

	deadline := time.Now().Add(10 * time.Second)
	for {
		apitest.Must(t, c.Get(ctx, key, gs))
		ie := gs.Status.InternalEndpoint
		if ie == nil || ie.VTEP == nil && ie.NodeVTEP == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway's Deployment is gone, yet its status still names the pod address %s (and node VTEP %v) every node routes the peering to and admits the overlay's frames from",
				ie.VTEP.IP, ie.NodeVTEP)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
