package deploy

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/kube"
	"github.com/skein-net/skein/internal/apitest"
)

// TestPeeringStatusNeedsPermission (the fourth attack review: medium): the nodes act on a
// peering's status (a GatewayServer's status.internalEndpoint.vtep is where every node sends
// the peering's traffic, a Configuration's status.remote.cidr what they route there), so the
// chart's peering policy covers the status subresources as it covers the objects: a tenant
// whose Role grants skein's kinds as a whole ("*" of networking.liqo.io), without manage on
// peerings, can patch neither.
func TestPeeringStatusNeedsPermission(t *testing.T) {
	helmBinary(t)
	env := apiServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	install := env.Namespace(t, "a6-install")
	installChartRBAC(t, env, install, "ClusterRole", "ClusterRoleBinding", "ServiceAccount", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
	ns := env.Namespace(t, "a6-tenant")
	apitest.Must(t, env.Client.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "skein-kinds"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{netv1alpha1.SchemeGroupVersion.Group}, Resources: []string{"*"}, Verbs: []string{"*"}},
	}}))
	apitest.Must(t, env.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "skein-kinds"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "tenant"}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "skein-kinds"}}))
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "tenant", Groups: []string{"system:authenticated"}}
	tenant, err := client.New(cfg, client.Options{Scheme: kube.Scheme()})
	apitest.Must(t, err)
	refused := func(err error) bool { return err != nil && strings.Contains(err.Error(), "peerings.peering.skein.io") }

	// A peering the platform team set up in the namespace (with the permission).
	lb := map[string]string{netv1alpha1.RemoteClusterIDLabel: "peer-b"}
	conf := &netv1alpha1.Configuration{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "b", Labels: lb},
		Spec: netv1alpha1.ConfigurationSpec{Remote: netv1alpha1.ClusterConfig{CIDR: netv1alpha1.ClusterConfigCIDR{Pod: "10.244.0.0/16", External: "10.70.0.0/16"}}}}
	apitest.Must(t, env.Client.Create(ctx, conf))
	gs := &netv1alpha1.GatewayServer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw", Labels: lb},
		Spec: netv1alpha1.GatewayServerSpec{MTU: netv1alpha1.DefaultMTU, Endpoint: netv1alpha1.ServerEndpoint{Port: netv1alpha1.DefaultPort, ServiceType: netv1alpha1.ServiceTypeClusterIP},
			ServerTemplateRef: netv1alpha1.TemplateRef{Kind: "WgGatewayServerTemplate", Name: "wireguard-server", Namespace: install}}}
	apitest.Must(t, env.Client.Create(ctx, gs))

	// The policy is in force: the tenant cannot change the spec.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var cur netv1alpha1.Configuration
		apitest.Must(t, tenant.Get(ctx, client.ObjectKeyFromObject(conf), &cur))
		cur.Spec.Remote.CIDR.Pod = "52.0.0.0/8"
		err := tenant.Update(ctx, &cur)
		if refused(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tenant changes a Configuration's spec: %v (the policy is not in force, the test proves nothing)", err)
		}
		time.Sleep(300 * time.Millisecond)
		if err == nil {
			apitest.Must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(conf), &cur))
			cur.Spec.Remote.CIDR.Pod = "10.244.0.0/16"
			apitest.Must(t, env.Client.Update(ctx, &cur))
		}
	}

	patch := func(obj client.Object, status map[string]any) error {
		b, _ := json.Marshal(map[string]any{"status": status})
		return tenant.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, b))
	}
	if err := patch(gs, map[string]any{"internalEndpoint": map[string]any{"ip": "10.80.0.1",
		"vtep": map[string]any{"ip": "10.244.9.66", "mac": "02:5b:7a:69:e7:c7"}}}); !refused(err) {
		t.Errorf("a tenant without the peering permission rewrites the GatewayServer's status.internalEndpoint.vtep (where every node sends the peering's traffic): %v", err)
	}
	if err := patch(conf, map[string]any{"remote": map[string]any{"cidr": map[string]any{"pod": "10.96.0.0/12", "external": "10.70.0.0/16"}}}); !refused(err) {
		t.Errorf("a tenant without the peering permission rewrites the Configuration's status.remote.cidr (what every node routes to the peer): %v", err)
	}
}
