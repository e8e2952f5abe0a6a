package controller_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/controller/mcs"
	"github.com/skein-net/skein/internal/apitest"
)

// tenantClient is a client of env acting as user "tenant", who may write Secrets,
// Configurations, GatewayClients and GatewayServers in namespace ns and nothing else (the
// brief's "user who may create GatewayServer/GatewayClient/Configuration in their namespace").
func tenantClient(t *testing.T, ctx context.Context, env *apitest.Env, c client.Client, ns string) client.Client {
	t.Helper()
	if err := env.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"*"}},
		{APIGroups: []string{netv1alpha1.SchemeGroupVersion.Group}, Resources: []string{"configurations", "gatewayclients", "gatewayservers"}, Verbs: []string{"*"}},
	}}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "tenant"}},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "tenant"}}
	for _, o := range []client.Object{role, rb} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "tenant"}
	tc, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	// The tenant really cannot write in shop.
	err = tc.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "probe"}})
	if err == nil {
		t.Fatal("the tenant may write in shop: the test's premise is wrong")
	}
	return tc
}

// TestSecondConfigurationKeepsPeerImports (found by the attack review of issue #40, medium): a
// Configuration labelled with a peered cluster's id, written by a tenant in its own namespace,
// made the import reconciler find two Configurations for that id (addressMap wanted exactly
// one), and every endpoint that peer exports was removed from every namespace of this cluster.
// The peering is the oldest Configuration of the id, as the Configuration reconciler decides:
// a later one changes nothing of the import.
func TestSecondConfigurationKeepsPeerImports(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	x := startImportPairWith(t, ctx, netip.MustParsePrefix("10.243.0.0/16"), "", time.Second)
	x.exportOrders(t, ctx, "10.244.1.5")
	waitUntil(t, ctx, "A imports B's endpoint", func() bool {
		var sls discoveryv1.EndpointSliceList
		return x.ca.List(ctx, &sls, client.InNamespace("shop"), client.MatchingLabels{mcs.SourceClusterLabel: x.idB}) == nil && len(sls.Items) > 0
	})
	tc := tenantClient(t, ctx, x.a, x.ca, "tenant-evil")
	if err := tc.Create(ctx, &netv1alpha1.Configuration{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-evil", Name: "b",
		Labels: map[string]string{netv1alpha1.RemoteClusterIDLabel: x.idB}},
		Spec: netv1alpha1.ConfigurationSpec{Remote: netv1alpha1.ClusterConfig{CIDR: netv1alpha1.ClusterConfigCIDR{Pod: "10.251.0.0/16", External: "10.72.0.0/16"}}}}); err != nil {
		t.Fatalf("as the tenant: %v", err)
	}
	// Touch the import so that it is computed again (any event of B's would do the same).
	var svc corev1.Service
	if err := x.cb.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "orders"}, &svc); err != nil {
		t.Fatal(err)
	}
	svc.Labels = map[string]string{"touched": "1"}
	if err := x.cb.Update(ctx, &svc); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		var sls discoveryv1.EndpointSliceList
		if err := x.ca.List(ctx, &sls, client.InNamespace("shop"), client.MatchingLabels{mcs.SourceClusterLabel: x.idB}); err == nil {
			n := 0
			for _, sl := range sls.Items {
				n += len(sl.Endpoints)
			}
			if n == 0 {
				t.Fatalf("a tenant's Configuration in tenant-evil naming %s removed that peer's endpoints from shop", x.idB)
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
}
