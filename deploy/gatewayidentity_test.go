package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crconfig "sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/controller"
	"github.com/skein-net/skein/control/controller/ipam"
	"github.com/skein-net/skein/control/gateway"
	"github.com/skein-net/skein/control/gateway/config"
	"github.com/skein-net/skein/control/kube"
	"github.com/skein-net/skein/internal/apitest"
	"github.com/skein-net/skein/internal/safebuffer"
)

// installChartRBAC creates what the chart renders (default values, install namespace ns) of
// the kinds given, and removes it when the test ends: the chart's roles, bindings, accounts
// and admission policies without a helm release, so the test may run its components in-process.
func installChartRBAC(t *testing.T, env *apitest.Env, ns string, kinds ...string) []*unstructured.Unstructured {
	t.Helper()
	objs := renderChart(t, ns, map[string]any{})
	ctx := context.Background()
	for _, o := range objs {
		if !slices.Contains(kinds, o.GetKind()) {
			continue
		}
		if !clusterScoped[o.GetKind()] {
			o.SetNamespace(ns)
		}
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
		}
		t.Cleanup(func() {
			if err := env.Client.Delete(context.Background(), o); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("delete %s %s: %v", o.GetKind(), o.GetName(), err)
			}
		})
	}
	return objs
}

// startControllerAs runs skein-controller's gateway reconcilers (GatewayClients) in-process
// with the chart's gateway policy, as the controller's ServiceAccount of install: with the
// permissions the chart grants it and nothing more, so RBAC's escalation check judges every
// Role it writes. It stops when the test ends.
func startControllerAs(t *testing.T, env *apitest.Env, install string, objs []*unstructured.Unstructured) {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: saUser(install, fullname+"-controller"), Groups: saGroups(install)}
	policy, err := controllerGatewayPolicy(objs)
	if err != nil {
		t.Fatal(err)
	}
	ctrl.SetLogger(logr.Discard())
	skip := true
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: kube.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: controller.CacheOptions(), Controller: crconfig.Controller{SkipNameValidation: &skip}})
	if err != nil {
		t.Fatal(err)
	}
	hosts, err := ipam.NewHosts(netip.MustParsePrefix("10.80.0.0/16"), 0)
	if err != nil {
		t.Fatal(err)
	}
	r := &controller.GatewayReconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Policy: policy,
		Overlay: &controller.OverlayAddresses{Hosts: hosts, Reader: mgr.GetAPIReader()}}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller: %v", err)
		}
	})
}

// gatewayClient creates GatewayClient name in ns from the chart's default client template
// (in install), and deletes it when the test ends, waiting until the controller has removed
// what it made for it (its ClusterRoleBinding is cluster-scoped).
func gatewayClient(t *testing.T, c client.Client, ns, install, name string) *netv1alpha1.GatewayClient {
	t.Helper()
	ctx := context.Background()
	gc := &netv1alpha1.GatewayClient{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
		Labels: map[string]string{netv1alpha1.RemoteClusterIDLabel: "peer-of-" + name}},
		Spec: netv1alpha1.GatewayClientSpec{MTU: 1340, Endpoint: netv1alpha1.Endpoint{Addresses: []netv1alpha1.Address{"192.0.2.10"}, Port: 51820, Protocol: "UDP"},
			ClientTemplateRef: netv1alpha1.TemplateRef{Kind: "WgGatewayClientTemplate", Name: "wireguard-client", Namespace: install}}}
	apitest.Must(t, c.Create(ctx, gc))
	t.Cleanup(func() {
		_ = c.Delete(context.Background(), gc)
		apitest.Eventually(t, "GatewayClient "+name+" removed", 60*time.Second, func() bool {
			return apierrors.IsNotFound(c.Get(context.Background(), client.ObjectKeyFromObject(gc), &netv1alpha1.GatewayClient{}))
		})
	})
	apitest.Eventually(t, "gateway "+name+" deployed", 60*time.Second, func() bool {
		got := &netv1alpha1.GatewayClient{}
		return c.Get(ctx, client.ObjectKeyFromObject(gc), got) == nil && meta.IsStatusConditionTrue(got.Status.Conditions, netv1alpha1.ConditionReady)
	}, func() string {
		got := &netv1alpha1.GatewayClient{}
		_ = c.Get(ctx, client.ObjectKeyFromObject(gc), got)
		return fmt.Sprintf("conditions: %+v", got.Status.Conditions)
	})
	return gc
}

// TestGatewayIdentity: a gateway's ServiceAccount, with what skein-controller (as the chart runs
// it) grants it and the chart's admission policy, reads its own key Secret and no other Secret,
// renews its own Lease and writes its own Connection and no other, and patches only the active
// label of its own gateway's pods (issue 40, gateway identity per gateway); and the gateway's
// API side works with that alone.
func TestGatewayIdentity(t *testing.T) {
	helmBinary(t)
	env := apiServer(t)
	c := env.Client
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	install := env.Namespace(t, "gwid-install")
	objs := installChartRBAC(t, env, install, "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount",
		"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "WgGatewayClientTemplate")
	startControllerAs(t, env, install, objs)
	ns := env.Namespace(t, "gwid-tenant")
	gatewayClient(t, c, ns, install, "gw-a")
	gatewayClient(t, c, ns, install, "gw-b")

	// What else lives in a tenant's namespace: the peer's reader token (skeinctl's), pods.
	reader := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "skein-services-peer", Namespace: ns}, StringData: map[string]string{"token": "t"}}
	apitest.Must(t, c.Create(ctx, reader))
	pod := func(name string, labels map[string]string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "gateway", Image: "skein-gateway"}}}}
		apitest.Must(t, c.Create(ctx, p))
		return p
	}
	podA := pod("gw-a-0", map[string]string{controller.GatewayPodLabel: "gw-a"})
	podB := pod("gw-b-0", map[string]string{controller.GatewayPodLabel: "gw-b"})
	other := pod("web-0", map[string]string{"app": "web"})
	leaseB := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "gw-b", Namespace: ns},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("gw-b-0"), LeaseDurationSeconds: ptr.To[int32](6)}}
	apitest.Must(t, c.Create(ctx, leaseB))

	asA := rest.CopyConfig(env.Config)
	asA.Impersonate = rest.ImpersonationConfig{UserName: saUser(ns, "gw-a"), Groups: saGroups(ns)}
	a, err := client.NewWithWatch(asA, client.Options{Scheme: kube.Scheme()})
	apitest.Must(t, err)
	forbidden := func(t *testing.T, what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Errorf("gateway gw-a %s: %v, want Forbidden", what, err)
		}
	}
	allowed := func(t *testing.T, what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("gateway gw-a %s: %v", what, err)
		}
	}

	t.Run("secrets", func(t *testing.T) {
		own := config.KeySecretName("gw-a")
		allowed(t, "gets its key Secret", a.Get(ctx, client.ObjectKey{Namespace: ns, Name: own}, &corev1.Secret{}))
		allowed(t, "lists its key Secret by name", a.List(ctx, &corev1.SecretList{}, client.InNamespace(ns), client.MatchingFields{"metadata.name": own}))
		w, err := a.Watch(ctx, &corev1.SecretList{}, client.InNamespace(ns), client.MatchingFields{"metadata.name": own})
		allowed(t, "watches its key Secret by name", err)
		if err == nil {
			w.Stop()
		}
		forbidden(t, "gets gw-b's key Secret", a.Get(ctx, client.ObjectKey{Namespace: ns, Name: config.KeySecretName("gw-b")}, &corev1.Secret{}))
		forbidden(t, "gets the peer's reader token", a.Get(ctx, client.ObjectKeyFromObject(reader), &corev1.Secret{}))
		forbidden(t, "lists the namespace's Secrets", a.List(ctx, &corev1.SecretList{}, client.InNamespace(ns)))
		forbidden(t, "lists gw-b's key Secret by name", a.List(ctx, &corev1.SecretList{}, client.InNamespace(ns), client.MatchingFields{"metadata.name": config.KeySecretName("gw-b")}))
		_, err = a.Watch(ctx, &corev1.SecretList{}, client.InNamespace(ns))
		forbidden(t, "watches the namespace's Secrets", err)
	})

	t.Run("leases", func(t *testing.T) {
		own := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "gw-a", Namespace: ns}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("gw-a-0")}}
		allowed(t, "creates its Lease", a.Create(ctx, own))
		allowed(t, "gets its Lease", a.Get(ctx, client.ObjectKeyFromObject(own), own))
		own.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
		allowed(t, "renews its Lease", a.Update(ctx, own))
		forbidden(t, "gets gw-b's Lease", a.Get(ctx, client.ObjectKeyFromObject(leaseB), &coordinationv1.Lease{}))
		steal := leaseB.DeepCopy()
		steal.Spec.HolderIdentity = ptr.To("gw-a-0")
		forbidden(t, "takes gw-b's Lease", a.Update(ctx, steal))
		forbidden(t, "lists the namespace's Leases", a.List(ctx, &coordinationv1.LeaseList{}, client.InNamespace(ns)))
		forbidden(t, "deletes gw-b's Lease", a.Delete(ctx, leaseB.DeepCopy()))
	})

	t.Run("connections", func(t *testing.T) {
		conn := func(name string) *netv1alpha1.Connection {
			return &netv1alpha1.Connection{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Spec: netv1alpha1.ConnectionSpec{Type: netv1alpha1.ConnectionTypeClient, GatewayRef: netv1alpha1.ObjectRef{Name: name, Namespace: ns}}}
		}
		b := conn("gw-b")
		apitest.Must(t, c.Create(ctx, b))
		own := conn("gw-a")
		allowed(t, "creates its Connection", a.Create(ctx, own))
		own.Status.Value = netv1alpha1.Connected
		allowed(t, "writes its Connection's status", a.Status().Update(ctx, own))
		forbidden(t, "gets gw-b's Connection", a.Get(ctx, client.ObjectKeyFromObject(b), &netv1alpha1.Connection{}))
		b.Status.Value = netv1alpha1.ConnectionError
		forbidden(t, "writes gw-b's Connection's status", a.Status().Update(ctx, b))
		forbidden(t, "updates gw-b's Connection", a.Update(ctx, b))
	})

	t.Run("pods", func(t *testing.T) {
		patch := func(p *corev1.Pod, body map[string]any) error {
			b, _ := json.Marshal(body)
			return a.Patch(ctx, p.DeepCopy(), client.RawPatch(types.MergePatchType, b))
		}
		labels := func(l map[string]any) map[string]any { return map[string]any{"metadata": map[string]any{"labels": l}} }
		activate := labels(map[string]any{gateway.ActiveLabel: "true"})
		denied := func(what string, err error) {
			t.Helper()
			if err == nil || !strings.Contains(err.Error(), "a gateway may") {
				t.Errorf("gateway gw-a %s: %v, want the chart's policy to refuse it", what, err)
			}
		}
		// The policy is in force once the API server has loaded it and its parameters.
		apitest.Eventually(t, "the policy refuses gw-a labelling gw-b's pod active", 30*time.Second, func() bool {
			err := patch(podB, activate)
			return err != nil && strings.Contains(err.Error(), "a gateway may patch only its own gateway's pods")
		})
		denied("labels a pod of no gateway active", patch(other, activate))
		allowed(t, "labels its pod active", patch(podA, activate))
		allowed(t, "removes its pod's active label", patch(podA, labels(map[string]any{gateway.ActiveLabel: nil})))
		denied("sets its pod's active label to another value", patch(podA, labels(map[string]any{gateway.ActiveLabel: "yes"})))
		denied("adds another label to its pod", patch(podA, labels(map[string]any{"app": "web"})))
		denied("moves its pod to gw-b", patch(podA, labels(map[string]any{controller.GatewayPodLabel: "gw-b", gateway.ActiveLabel: "true"})))
		denied("annotates its pod", patch(podA, map[string]any{"metadata": map[string]any{"annotations": map[string]any{"a": "b"}}}))
		denied("changes its pod's spec", patch(podA, map[string]any{"spec": map[string]any{"activeDeadlineSeconds": 5}}))
		denied("adds a finalizer to its pod", patch(podA, map[string]any{"metadata": map[string]any{"finalizers": []string{"example.com/hold"}}}))
		// Others are not held by it: an administrator labels gw-b's pod.
		b, _ := json.Marshal(activate)
		allowed(t, "(as an administrator) labels gw-b's pod active", c.Patch(ctx, podB.DeepCopy(), client.RawPatch(types.MergePatchType, b)))
	})

	// With no more than that, the gateway's API side works: it watches its objects and its key
	// Secret (by name), is configured, wins its Lease and labels its pod active.
	t.Run("gateway", func(t *testing.T) {
		peer, err := config.GenerateKey()
		apitest.Must(t, err)
		remote := map[string]string{netv1alpha1.RemoteClusterIDLabel: "peer-of-gw-a"}
		apitest.Must(t, c.Create(ctx, &netv1alpha1.PublicKey{ObjectMeta: metav1.ObjectMeta{Name: "peer-of-gw-a", Namespace: ns,
			Labels: map[string]string{netv1alpha1.RemoteClusterIDLabel: "peer-of-gw-a", netv1alpha1.GatewayResourceLabel: "true"}},
			Spec: netv1alpha1.PublicKeySpec{PublicKey: peer.Public().String()}}))
		conf := &netv1alpha1.Configuration{ObjectMeta: metav1.ObjectMeta{Name: "peer-of-gw-a", Namespace: ns, Labels: remote},
			Spec: netv1alpha1.ConfigurationSpec{Remote: netv1alpha1.ClusterConfig{CIDR: netv1alpha1.ClusterConfigCIDR{Pod: "10.244.0.0/16", External: "10.70.0.0/16"}}}}
		apitest.Must(t, c.Create(ctx, conf))
		conf.Status.Remote = &netv1alpha1.ClusterConfig{CIDR: netv1alpha1.ClusterConfigCIDR{Pod: "10.71.0.0/16", External: "10.70.0.0/16"}}
		apitest.Must(t, c.Status().Update(ctx, conf))
		key := &corev1.Secret{}
		apitest.Must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: config.KeySecretName("gw-a")}, key))

		var log safebuffer.Buffer
		got := make(chan *config.Gateway, 1)
		w, err := gateway.New(asA, gateway.Options{Namespace: ns, Name: "gw-a", Log: slog.New(slog.NewTextHandler(&log, nil)),
			Local: gateway.Local{PodIP: netip.MustParseAddr("127.0.0.3"), HTTPListen: "off"}}, func(g *config.Gateway) error {
			select {
			case got <- g:
			default:
			}
			return nil
		})
		apitest.Must(t, err)
		wctx, stop := context.WithCancel(ctx)
		done := make(chan error, 2)
		defer func() {
			stop()
			for range 2 {
				if err := <-done; err != nil {
					t.Errorf("gateway: %v", err)
				}
			}
		}()
		go func() { done <- w.Run(wctx) }()
		select {
		case g := <-got:
			if g.PrivateKey.String() != string(key.Data[config.SecretPrivateKey]) {
				t.Errorf("the gateway is configured with another key than its Secret's")
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("the gateway, as its ServiceAccount, was not configured within 60 s; its log:\n%s", log.String())
		}
		// Its Connection, made bare above (as any account that may create Connections here could
		// have made it first), is put back as the gateway's: its spec, peer and owner.
		gc := &netv1alpha1.GatewayClient{}
		apitest.Must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "gw-a"}, gc))
		apitest.Eventually(t, "the gateway's Connection is its own", 30*time.Second, func() bool {
			conn := &netv1alpha1.Connection{}
			return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "gw-a"}, conn) == nil && len(conn.OwnerReferences) == 1 &&
				conn.OwnerReferences[0].UID == gc.UID && conn.Labels[netv1alpha1.RemoteClusterIDLabel] == "peer-of-gw-a" &&
				conn.Spec.GatewayRef.Name == "gw-a"
		}, log.String)
		active := make(chan struct{}, 1)
		e := gateway.Election{PodName: podA.Name, RetryPeriod: 100 * time.Millisecond}
		go func() {
			done <- gateway.RunElection(wctx, asA, ns, "gw-a", e, func() { active <- struct{}{} }, func() {})
		}()
		select {
		case <-active:
		case <-time.After(30 * time.Second):
			t.Fatalf("the gateway did not win its Lease within 30 s")
		}
		allowed(t, "publishes its pod as the active one", w.PublishActive(ctx, e, true, "10.244.1.20", "02:00:00:00:00:01"))
		p := &corev1.Pod{}
		apitest.Must(t, c.Get(ctx, client.ObjectKeyFromObject(podA), p))
		if p.Labels[gateway.ActiveLabel] != "true" {
			t.Errorf("the gateway's pod is not labelled active: %v", p.Labels)
		}
		if strings.Contains(strings.ToLower(log.String()), "forbidden") {
			t.Errorf("the gateway was refused something:\n%s", log.String())
		}
	})
}

// TestIdentityPermissions is `kubectl auth can-i --list` for the gateway's and the agent's
// accounts, compared with testdata/permissions.txt: what each may do in its namespace, in
// another, and cluster-wide, beyond what every authenticated account may. An extra permission
// fails it as a missing one does.
func TestIdentityPermissions(t *testing.T) {
	helmBinary(t)
	env := apiServer(t)
	c := env.Client
	install := env.Namespace(t, "gwid-install")
	objs := installChartRBAC(t, env, install, "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount",
		"WgGatewayClientTemplate")
	startControllerAs(t, env, install, objs)
	ns := env.Namespace(t, "gwid-tenant")
	gatewayClient(t, c, ns, install, "gw-a")
	elsewhere := env.Namespace(t, "gwid-other")

	var got []string
	for _, id := range []struct{ name, ns, sa string }{
		{"gateway", ns, "gw-a"},
		{"agent", install, fullname + "-agent"},
		// skeinctl's probe pods run as the default account of the namespace skeinctl makes
		// for a run (and mount no token: TestProbePodsBounded, cmd/skeinctl): nothing.
		{"probe", env.Namespace(t, "skein-probe"), "default"},
	} {
		for _, where := range []struct{ name, ns string }{{"own", id.ns}, {"other", elsewhere}} {
			for _, line := range permissions(t, env, id.ns, id.sa, where.ns) {
				line = strings.ReplaceAll(line, "gw-a", "<gateway>")
				got = append(got, id.name+" "+where.name+" "+line)
			}
		}
	}
	path := filepath.Join("testdata", "permissions.txt")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			want = append(want, strings.Join(strings.Fields(l), " "))
		}
	}
	sort.Strings(want)
	for _, l := range got {
		if !slices.Contains(want, l) {
			t.Errorf("a permission %s does not list: %s", path, l)
		}
	}
	for _, l := range want {
		if !slices.Contains(got, l) {
			t.Errorf("a permission %s lists is not granted: %s", path, l)
		}
	}
	if t.Failed() {
		t.Logf("granted:\n%s", strings.Join(got, "\n"))
	}
}

// permissions lists what ServiceAccount sa of saNS may do in namespace ns (with cluster-wide
// grants), as a SelfSubjectRulesReview by that account tells it, less what an account of
// saNS with no binding of its own may: one line "<group> <resource> <name or *> <verbs>" per
// resource and name, sorted.
func permissions(t *testing.T, env *apitest.Env, saNS, sa, ns string) []string {
	t.Helper()
	atoms := func(user string) map[string]bool {
		cfg := rest.CopyConfig(env.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: saGroups(saNS)}
		c, err := client.New(cfg, client.Options{Scheme: kube.Scheme()})
		apitest.Must(t, err)
		r := &authorizationv1.SelfSubjectRulesReview{Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: ns}}
		apitest.Must(t, c.Create(context.Background(), r))
		if r.Status.Incomplete {
			t.Fatalf("rules review of %s in %s incomplete: %s", user, ns, r.Status.EvaluationError)
		}
		out := map[string]bool{}
		for _, rule := range r.Status.ResourceRules {
			names := rule.ResourceNames
			if len(names) == 0 {
				names = []string{"*"}
			}
			for _, g := range rule.APIGroups {
				if g == "" {
					g = "core"
				}
				for _, res := range rule.Resources {
					for _, n := range names {
						for _, v := range rule.Verbs {
							out[g+" "+res+" "+n+" "+v] = true
						}
					}
				}
			}
		}
		for _, rule := range r.Status.NonResourceRules {
			for _, u := range rule.NonResourceURLs {
				for _, v := range rule.Verbs {
					out["url "+u+" - "+v] = true
				}
			}
		}
		return out
	}
	base := atoms(saUser(saNS, "nobody-at-all"))
	verbs := map[string][]string{}
	for a := range atoms(saUser(saNS, sa)) {
		if base[a] {
			continue
		}
		i := strings.LastIndex(a, " ")
		verbs[a[:i]] = append(verbs[a[:i]], a[i+1:])
	}
	var lines []string
	for k, v := range verbs {
		sort.Strings(v)
		lines = append(lines, k+" "+strings.Join(v, ","))
	}
	sort.Strings(lines)
	return lines
}

// TestGatewayOwnPodsOnlyValue: the chart's gateway.ownPodsOnly installs the gateways' pod
// policy and its binding by default, and leaves both out when false.
func TestGatewayOwnPodsOnlyValue(t *testing.T) {
	helmBinary(t)
	name := fullname + "-gateway-own-pods"
	for _, on := range []bool{true, false} {
		values := map[string]any{}
		if !on {
			values["gateway"] = map[string]any{"ownPodsOnly": false}
		}
		objs := renderChart(t, "liqo", values)
		for _, kind := range []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
			if got := find(objs, kind, name) != nil; got != on {
				t.Errorf("gateway.ownPodsOnly=%t: %s %s rendered: %t", on, kind, name, got)
			}
		}
	}
}
