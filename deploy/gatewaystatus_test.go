package deploy

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/kube"
	"github.com/skein-net/skein/internal/apitest"
)

// TestGatewayCannotRewriteAnotherGatewaysStatus (found by the attack review of issue #40, medium):
// the shared skein-gateway ClusterRole granted patch on every gateway's status in the
// namespace, so gateway gw-a's ServiceAccount (root on gw-a's node, the code in gw-a's pod)
// rewrote gw-b's status.internalEndpoint: its vtep (where every node's agent sends the traffic
// bound for gw-b's peer) and node, taking over or black-holing another peering's traffic. Now
// each gateway may patch its own status only (its Role, by name), and still may.
func TestGatewayCannotRewriteAnotherGatewaysStatus(t *testing.T) {
	helmBinary(t)
	env := apiServer(t)
	c := env.Client
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	install := env.Namespace(t, "atk-install")
	objs := installChartRBAC(t, env, install, "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount",
		"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "WgGatewayClientTemplate")
	startControllerAs(t, env, install, objs)
	ns := env.Namespace(t, "atk-tenant")
	gatewayClient(t, c, ns, install, "gw-a")
	gatewayClient(t, c, ns, install, "gw-b")

	asA := rest.CopyConfig(env.Config)
	asA.Impersonate = rest.ImpersonationConfig{UserName: saUser(ns, "gw-a"), Groups: saGroups(ns)}
	a, err := client.New(asA, client.Options{Scheme: kube.Scheme()})
	apitest.Must(t, err)

	b := &netv1alpha1.GatewayClient{}
	b.Namespace, b.Name = ns, "gw-b"
	body := []byte(`{"status":{"internalEndpoint":{"node":"attacker-node","vtep":{"ip":"10.244.9.9","mac":"02:00:00:00:00:99"}}}}`)
	err = a.Status().Patch(ctx, b, client.RawPatch(types.MergePatchType, body))
	if err == nil {
		got := &netv1alpha1.GatewayClient{}
		apitest.Must(t, c.Get(ctx, client.ObjectKeyFromObject(b), got))
		t.Errorf("gateway gw-a rewrote gw-b's status.internalEndpoint: %+v (vtep %+v), want Forbidden",
			got.Status.InternalEndpoint, got.Status.InternalEndpoint.VTEP)
	}
	// Its own status, as the gateway publishes it, still works.
	own := &netv1alpha1.GatewayClient{}
	own.Namespace, own.Name = ns, "gw-a"
	if err := a.Status().Patch(ctx, own, client.RawPatch(types.MergePatchType, []byte(`{"status":{"internalEndpoint":{"node":"node-a"}}}`))); err != nil {
		t.Errorf("gateway gw-a patching its own status: %v", err)
	}
	// The same for a condition the controller and users read.
	body = []byte(`{"status":{"conditions":[{"type":"Ready","status":"False","reason":"Forged","message":"by gw-a","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`)
	if err := a.Status().Patch(ctx, b, client.RawPatch(types.MergePatchType, body)); err == nil {
		t.Errorf("gateway gw-a rewrote gw-b's conditions, want Forbidden")
	}
}
