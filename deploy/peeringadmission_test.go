package deploy

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/kube"
	"github.com/skein-net/skein/internal/apitest"
)

// TestPeeringAdmission (found by the attack review of issue #40, high): a tenant who may write
// Configurations, gateways and Secrets in its own namespace set up a peering of its own (a
// Configuration, a GatewayClient, credentials pointing at an API server it controls), and
// skein-controller imported that "peer's" endpoints into every namespace of the cluster and
// every node routed its CIDRs (public ones included) to the tenant's gateway. With the chart's
// peering policy, writing those objects (and Secrets labelled as a peer's credentials) needs
// the verb manage on peerings.peering.skein.io in the namespace: RBAC on the objects alone is
// refused, the grant admits, and the controller's account (finalizers, token renewal) has it.
func TestPeeringAdmission(t *testing.T) {
	helmBinary(t)
	env := apiServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	install := env.Namespace(t, "peering-install")
	installChartRBAC(t, env, install, "ClusterRole", "ClusterRoleBinding", "ServiceAccount", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
	ns := env.Namespace(t, "tenant")
	writer := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "writer"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"*"}},
		{APIGroups: []string{netv1alpha1.SchemeGroupVersion.Group}, Resources: []string{"configurations", "gatewayclients", "gatewayservers", "publickeys"}, Verbs: []string{"*"}},
	}}
	apitest.Must(t, env.Client.Create(ctx, writer))
	bind := func(name, role string) {
		apitest.Must(t, env.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "tenant"}},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role}}))
	}
	bind("writer", "writer")
	as := func(user string, groups ...string) client.Client {
		cfg := rest.CopyConfig(env.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append(groups, "system:authenticated")}
		c, err := client.New(cfg, client.Options{Scheme: kube.Scheme()})
		apitest.Must(t, err)
		return c
	}
	tenant := as("tenant")
	conf := func(name string) *netv1alpha1.Configuration {
		return &netv1alpha1.Configuration{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{netv1alpha1.RemoteClusterIDLabel: "evil-" + name}},
			Spec: netv1alpha1.ConfigurationSpec{Remote: netv1alpha1.ClusterConfig{CIDR: netv1alpha1.ClusterConfigCIDR{Pod: "52.0.0.0/8", External: "10.73.0.0/16"}}}}
	}
	refused := func(err error) bool { return err != nil && strings.Contains(err.Error(), "peerings.peering.skein.io") }
	// The policy takes a moment to be in force.
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		err := tenant.Create(ctx, conf("probe"))
		if refused(err) {
			break
		}
		if err == nil {
			apitest.Must(t, env.Client.Delete(ctx, conf("probe")))
		}
		if time.Now().After(deadline) {
			t.Fatalf("a tenant with RBAC on Configurations alone creates one: %v", err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	for _, obj := range []client.Object{
		conf("c"),
		&netv1alpha1.GatewayClient{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw"},
			Spec: netv1alpha1.GatewayClientSpec{Endpoint: netv1alpha1.Endpoint{Addresses: []netv1alpha1.Address{"192.0.2.1"}, Port: 51820, Protocol: "UDP"}, MTU: 1340,
				ClientTemplateRef: netv1alpha1.TemplateRef{Name: "wireguard-client", Namespace: install, Kind: "WgGatewayClientTemplate"}}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "creds", Labels: map[string]string{"skein.io/peer-credentials": "services", netv1alpha1.RemoteClusterIDLabel: "evil"}}},
	} {
		if err := tenant.Create(ctx, obj); !refused(err) {
			t.Errorf("a tenant without the peering permission creates %T %s: %v", obj, obj.GetName(), err)
		}
	}
	// Secrets that are not a peer's credentials are the tenant's business; labelling one as
	// credentials afterwards is not.
	plain := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain"}, StringData: map[string]string{"k": "v"}}
	if err := tenant.Create(ctx, plain); err != nil {
		t.Fatalf("a tenant's own Secret: %v", err)
	}
	plain.Labels = map[string]string{"skein.io/peer-credentials": "services"}
	if err := tenant.Update(ctx, plain); !refused(err) {
		t.Errorf("a tenant labels its Secret as a peer's credentials: %v", err)
	}
	// Granted, the same tenant may.
	apitest.Must(t, env.Client.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "peerings"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"peering.skein.io"}, Resources: []string{"peerings"}, Verbs: []string{"manage"}}}}))
	bind("peerings", "peerings")
	granted := conf("granted")
	deadline = time.Now().Add(30 * time.Second)
	for {
		err := tenant.Create(ctx, granted)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a tenant granted manage on peerings: %v", err)
		}
		time.Sleep(300 * time.Millisecond)
		granted = conf("granted")
	}
	// skein-controller's account updates what it must (finalizers) on a Configuration.
	ctl := as(saUser(install, fullname+"-controller"), saGroups(install)...)
	var cur netv1alpha1.Configuration
	apitest.Must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(granted), &cur))
	cur.Finalizers = append(cur.Finalizers, "test.skein.io/hold")
	if err := ctl.Update(ctx, &cur); err != nil {
		t.Errorf("skein-controller's account updating a Configuration: %v", err)
	}
	apitest.Must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(granted), &cur))
	cur.Finalizers = nil
	apitest.Must(t, env.Client.Update(ctx, &cur))
}
