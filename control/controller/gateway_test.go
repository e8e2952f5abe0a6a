package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crconfig "sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/controller"
	"github.com/skein-net/skein/control/controller/ipam"
	"github.com/skein-net/skein/control/gateway/config"
	"github.com/skein-net/skein/internal/apitest"
)

func startGateways(t *testing.T, env *apitest.Env) func() {
	t.Helper()
	return startGatewaysWith(t, env, nil)
}

// startGatewaysWith runs both gateway reconcilers with the given pod routes (nil: as the
// templates say).
func startGatewaysWith(t *testing.T, env *apitest.Env, routes *controller.PodRoutes) func() {
	t.Helper()
	return startGatewaysClient(t, env, routes, nil)
}

// startGatewaysClient is startGatewaysWith with the reconcilers' client wrapped by wrap (nil:
// the manager's own).
func startGatewaysClient(t *testing.T, env *apitest.Env, routes *controller.PodRoutes, wrap func(client.Client) client.Client) func() {
	t.Helper()
	_, stop := startGatewayReconcilers(t, env, routes, wrap)
	return stop
}

// startGatewayReconcilers is startGatewaysClient returning the two reconcilers too.
func startGatewayReconcilers(t *testing.T, env *apitest.Env, routes *controller.PodRoutes, wrap func(client.Client) client.Client) ([]*controller.GatewayReconciler, func()) {
	t.Helper()
	skip := true
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: controller.CacheOptions(), Controller: crconfig.Controller{SkipNameValidation: &skip}})
	if err != nil {
		t.Fatal(err)
	}
	hosts, _ := ipam.NewHosts(netip.MustParsePrefix("10.80.0.0/16"), 0)
	ov := &controller.OverlayAddresses{Hosts: hosts, Reader: mgr.GetAPIReader()}
	c := mgr.GetClient()
	var reader client.Reader = mgr.GetAPIReader()
	if wrap != nil {
		c = wrap(c)
		// A wrapper that counts reads around the cache wraps the API reader too.
		if rw, ok := c.(readerWrapper); ok {
			reader = rw.wrapReader(reader)
		}
	}
	var recs []*controller.GatewayReconciler
	for _, server := range []bool{true, false} {
		r := &controller.GatewayReconciler{Client: c, Reader: reader, Overlay: ov, Server: server, PodRoutes: routes}
		if err := r.SetupWithManager(mgr); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return recs, func() { cancel(); <-done }
}

// installTemplates applies the default templates from deploy/templates into ns.
func installTemplates(t *testing.T, c client.Client, ns string) {
	for _, f := range []string{"wireguard-server.yaml", "wireguard-client.yaml"} {
		b, err := os.ReadFile("../../deploy/templates/" + f)
		if err != nil {
			t.Fatal(err)
		}
		var obj client.Object = &netv1alpha1.WgGatewayServerTemplate{}
		if strings.Contains(f, "client") {
			obj = &netv1alpha1.WgGatewayClientTemplate{}
		}
		if err := yaml.Unmarshal(b, obj); err != nil {
			t.Fatal(err)
		}
		obj.SetNamespace(ns)
		if err := c.Create(context.Background(), obj); err != nil {
			t.Fatalf("the API server refused %s: %v", f, err)
		}
	}
}

func TestGatewayServer(t *testing.T) {
	env := apitest.Start(t)
	c := env.Client
	ns := env.Namespace(t, "gws")
	ctx := context.Background()
	installTemplates(t, c, ns)
	stop := startGateways(t, env)
	defer func() { stop() }()

	nodePort := int32(31820)
	gs := &netv1alpha1.GatewayServer{
		ObjectMeta: metav1.ObjectMeta{Name: "server", Namespace: ns, Labels: map[string]string{netv1alpha1.RemoteClusterIDLabel: "cluster-b"}},
		Spec: netv1alpha1.GatewayServerSpec{MTU: 1340, Endpoint: netv1alpha1.ServerEndpoint{Port: 51820, ServiceType: netv1alpha1.ServiceTypeNodePort, NodePort: &nodePort},
			ServerTemplateRef: netv1alpha1.TemplateRef{Kind: "WgGatewayServerTemplate", Name: "wireguard-server"}},
	}
	if err := c.Create(ctx, gs); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(gs)
	apitest.Eventually(t, "status", 30*time.Second, func() bool {
		c.Get(ctx, key, gs)
		return gs.Status.SecretRef != nil && gs.Status.InternalEndpoint != nil && gs.Status.InternalEndpoint.IP != nil
	})
	dep := &appsv1.Deployment{}
	svc := &corev1.Service{}
	apitest.Must(t, c.Get(ctx, key, dep))
	apitest.Must(t, c.Get(ctx, key, svc))
	apitest.Must(t, c.Get(ctx, key, &corev1.ServiceAccount{}))
	apitest.Must(t, c.Get(ctx, key, &rbacv1.RoleBinding{}))
	apitest.Must(t, c.Get(ctx, client.ObjectKey{Name: controller.GatewayClusterBindingName(ns, "server")}, &rbacv1.ClusterRoleBinding{}))
	// What is the gateway's alone, by name, in a Role of its own (issue 40): its key Secret, its
	// Lease, its Connection.
	ownKey := client.ObjectKey{Namespace: ns, Name: controller.GatewayRoleName("server")}
	role, ownBinding := &rbacv1.Role{}, &rbacv1.RoleBinding{}
	apitest.Must(t, c.Get(ctx, ownKey, role))
	apitest.Must(t, c.Get(ctx, ownKey, ownBinding))
	if ownBinding.RoleRef.Kind != "Role" || ownBinding.RoleRef.Name != role.Name || len(ownBinding.Subjects) != 1 || ownBinding.Subjects[0].Name != "server" {
		t.Errorf("the gateway's own RoleBinding %+v %+v", ownBinding.RoleRef, ownBinding.Subjects)
	}
	named := map[string]string{}
	for _, r := range role.Rules {
		for _, res := range r.Resources {
			named[res] = strings.Join(r.ResourceNames, ",") + ":" + strings.Join(r.Verbs, ",")
		}
	}
	if want := map[string]string{"secrets": "server-wg-key:get,list,watch", "leases": "server:get,update", "connections": "server:get,update",
		"connections/status": "server:update", "gatewayservers/status": "server:patch", "gatewayclients/status": "server:patch"}; !maps.Equal(named, want) {
		t.Errorf("the gateway's own Role grants %v, want %v", named, want)
	}
	if args := strings.Join(dep.Spec.Template.Spec.Containers[0].Args, " "); !strings.Contains(args, "--gateway-name=server") || !strings.Contains(args, "--listen-port=51820") {
		t.Errorf("deployment args %q", args)
	}
	if svc.Spec.Type != corev1.ServiceTypeNodePort || svc.Spec.Ports[0].NodePort != 31820 || svc.Spec.Ports[0].Port != 51820 {
		t.Errorf("service %+v", svc.Spec)
	}
	// The active label selects the replica; readiness must not (kube-controller-manager marks
	// pods NotReady after an API outage until their kubelets report again).
	if svc.Spec.Selector["networking.liqo.io/active"] != "true" || !svc.Spec.PublishNotReadyAddresses {
		t.Errorf("service selector %v, publishNotReadyAddresses %v: want the active label and true", svc.Spec.Selector, svc.Spec.PublishNotReadyAddresses)
	}
	secret := &corev1.Secret{}
	apitest.Must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: gs.Status.SecretRef.Name}, secret))
	priv, err := config.ParseKey(string(secret.Data[config.SecretPrivateKey]))
	if err != nil || priv.Public().String() != string(secret.Data[config.SecretPublicKey]) {
		t.Errorf("key pair %v", err)
	}

	// The endpoint appears once the active pod runs on a node.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: ns + "-node"}}
	apitest.Must(t, c.Create(ctx, node))
	t.Cleanup(func() { c.Delete(context.Background(), node) })
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.77.5"}}
	apitest.Must(t, c.Status().Update(ctx, node))
	apitest.Must(t, c.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "server-abc", Namespace: ns,
		Labels: map[string]string{"networking.liqo.io/gateway": "server", "networking.liqo.io/active": "true"}},
		Spec: corev1.PodSpec{NodeName: node.Name, Containers: []corev1.Container{{Name: "gateway", Image: "skein-gateway"}}}}))
	apitest.Eventually(t, "endpoint", 30*time.Second, func() bool {
		c.Get(ctx, key, gs)
		return gs.Status.Endpoint != nil
	})
	if ep := gs.Status.Endpoint; string(ep.Addresses[0]) != "192.168.77.5" || ep.Port != 31820 || ep.Protocol != "UDP" {
		t.Errorf("endpoint %+v", ep)
	}
	// The spec's columns: IP and PORT.
	out, err := env.Kubectl(t, "get", "gatewayservers", "-n", ns)
	if err != nil || !strings.Contains(out, "192.168.77.5") || !strings.Contains(out, "31820") || !strings.Contains(out, "wireguard-server") {
		t.Errorf("kubectl get gatewayservers:\n%s %v", out, err)
	}

	// Keys survive a restart of the controller.
	stop()
	stop = startGateways(t, env)
	time.Sleep(time.Second)
	again := &corev1.Secret{}
	apitest.Must(t, c.Get(ctx, client.ObjectKeyFromObject(secret), again))
	if string(again.Data[config.SecretPrivateKey]) != string(secret.Data[config.SecretPrivateKey]) {
		t.Error("the key pair changed across a restart")
	}

	// Deleting the GatewayServer removes everything it created.
	apitest.Must(t, c.Delete(ctx, gs))
	apitest.Eventually(t, "cleanup", 30*time.Second, func() bool {
		gone := func(o client.Object, k client.ObjectKey) bool { return apierrors.IsNotFound(c.Get(ctx, k, o)) }
		return gone(&netv1alpha1.GatewayServer{}, key) && gone(&appsv1.Deployment{}, key) && gone(&corev1.Service{}, key) &&
			gone(&corev1.ServiceAccount{}, key) && gone(&rbacv1.RoleBinding{}, key) && gone(&corev1.Secret{}, client.ObjectKeyFromObject(secret)) &&
			gone(&rbacv1.ClusterRoleBinding{}, client.ObjectKey{Name: controller.GatewayClusterBindingName(ns, "server")}) &&
			gone(&rbacv1.Role{}, ownKey) && gone(&rbacv1.RoleBinding{}, ownKey)
	})
}

func TestGatewayClientAndTemplateErrors(t *testing.T) {
	env := apitest.Start(t)
	c := env.Client
	ns := env.Namespace(t, "gwc")
	ctx := context.Background()
	installTemplates(t, c, ns)
	// A template of the user's own, without the label skein's PodMonitor selects pods by.
	tmpl := &netv1alpha1.WgGatewayClientTemplate{}
	apitest.Must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "wireguard-client"}, tmpl))
	var raw map[string]any
	apitest.Must(t, json.Unmarshal(tmpl.Spec.Template.Raw, &raw))
	podLabels, _, _ := unstructured.NestedStringMap(raw, "spec", "deployment", "template", "metadata", "labels")
	delete(podLabels, controller.PartOfLabel)
	apitest.Must(t, unstructured.SetNestedStringMap(raw, podLabels, "spec", "deployment", "template", "metadata", "labels"))
	tmpl.Spec.Template.Raw, _ = json.Marshal(raw)
	apitest.Must(t, c.Update(ctx, tmpl))
	stop := startGateways(t, env)
	defer stop()
	gc := &netv1alpha1.GatewayClient{
		ObjectMeta: metav1.ObjectMeta{Name: "client", Namespace: ns, Labels: map[string]string{netv1alpha1.RemoteClusterIDLabel: "cluster-a"}},
		Spec: netv1alpha1.GatewayClientSpec{MTU: 1340, Endpoint: netv1alpha1.Endpoint{Addresses: []netv1alpha1.Address{"10.42.3.54"}, Port: 32133},
			ClientTemplateRef: netv1alpha1.TemplateRef{Kind: "WgGatewayClientTemplate", Name: "wireguard-client"}},
	}
	apitest.Must(t, c.Create(ctx, gc))
	apitest.Eventually(t, "client deployment", 30*time.Second, func() bool {
		return c.Get(ctx, client.ObjectKeyFromObject(gc), &appsv1.Deployment{}) == nil
	})
	if err := c.Get(ctx, client.ObjectKeyFromObject(gc), &corev1.Service{}); !apierrors.IsNotFound(err) {
		t.Errorf("a client got a Service: %v", err)
	}
	dep := &appsv1.Deployment{}
	apitest.Must(t, c.Get(ctx, client.ObjectKeyFromObject(gc), dep))
	if dep.Spec.Template.Labels[controller.PartOfLabel] != controller.PartOf {
		t.Errorf("a gateway pod rendered from a template without it is not labelled %s: %v", controller.PartOfLabel, dep.Spec.Template.Labels)
	}

	for _, tc := range []struct {
		name string
		ref  netv1alpha1.TemplateRef
		want string
	}{
		{"missing", netv1alpha1.TemplateRef{Kind: "WgGatewayClientTemplate", Name: "nope"}, `"nope" not found`},
		{"wrong-kind", netv1alpha1.TemplateRef{Kind: "IPsecTemplate", Name: "x"}, `template kind "IPsecTemplate"`},
	} {
		bad := gc.DeepCopy()
		bad.ObjectMeta = metav1.ObjectMeta{Name: tc.name, Namespace: ns}
		bad.Spec.ClientTemplateRef = tc.ref
		apitest.Must(t, c.Create(ctx, bad))
		apitest.Eventually(t, tc.name+" condition", 30*time.Second, func() bool {
			c.Get(ctx, client.ObjectKeyFromObject(bad), bad)
			cond := meta.FindStatusCondition(bad.Status.Conditions, "Ready")
			return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == "TemplateError" && strings.Contains(cond.Message, tc.want)
		})
	}
	// A malformed template.
	malformed := &netv1alpha1.WgGatewayClientTemplate{ObjectMeta: metav1.ObjectMeta{Name: "malformed", Namespace: ns}}
	malformed.Spec.Template.Raw = []byte(`{"spec":{"deployment":{"replicas":"{{ .Spec.Nope }}"}}}`)
	apitest.Must(t, c.Create(ctx, malformed))
	bad := gc.DeepCopy()
	bad.ObjectMeta = metav1.ObjectMeta{Name: "uses-malformed", Namespace: ns}
	bad.Spec.ClientTemplateRef = netv1alpha1.TemplateRef{Kind: "WgGatewayClientTemplate", Name: "malformed"}
	apitest.Must(t, c.Create(ctx, bad))
	apitest.Eventually(t, "malformed condition", 30*time.Second, func() bool {
		c.Get(ctx, client.ObjectKeyFromObject(bad), bad)
		cond := meta.FindStatusCondition(bad.Status.Conditions, "Ready")
		return cond != nil && strings.Contains(cond.Message, "spec.template.spec.deployment.replicas")
	})
}

func TestLoadBalancerEndpoint(t *testing.T) {
	env := apitest.Start(t)
	c := env.Client
	ns := env.Namespace(t, "gwlb")
	ctx := context.Background()
	installTemplates(t, c, ns)
	stop := startGateways(t, env)
	defer stop()
	lbIP := "203.0.113.7"
	gs := &netv1alpha1.GatewayServer{
		ObjectMeta: metav1.ObjectMeta{Name: "lb", Namespace: ns, Labels: map[string]string{netv1alpha1.RemoteClusterIDLabel: "cluster-b"}},
		Spec: netv1alpha1.GatewayServerSpec{MTU: 1340, Endpoint: netv1alpha1.ServerEndpoint{Port: 51820, ServiceType: netv1alpha1.ServiceTypeLoadBalancer, LoadBalancerIP: &lbIP},
			ServerTemplateRef: netv1alpha1.TemplateRef{Kind: "WgGatewayServerTemplate", Name: "wireguard-server"}},
	}
	apitest.Must(t, c.Create(ctx, gs))
	svc := &corev1.Service{}
	apitest.Eventually(t, "service", 30*time.Second, func() bool { return c.Get(ctx, client.ObjectKeyFromObject(gs), svc) == nil })
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.Spec.LoadBalancerIP != lbIP {
		t.Errorf("service %+v", svc.Spec)
	}
	// What a load balancer controller would report.
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: lbIP}}
	apitest.Must(t, c.Status().Update(ctx, svc))
	apitest.Eventually(t, "endpoint", 30*time.Second, func() bool {
		c.Get(ctx, client.ObjectKeyFromObject(gs), gs)
		return gs.Status.Endpoint != nil
	})
	if ep := gs.Status.Endpoint; string(ep.Addresses[0]) != lbIP || ep.Port != 51820 {
		t.Errorf("endpoint %+v", ep)
	}
}

// TestPodPolicy: a template cannot make the controller render a pod that reaches into the
// node, nor run the gateway under another ServiceAccount.
func TestPodPolicy(t *testing.T) {
	env := apitest.Start(t)
	c := env.Client
	ns := env.Namespace(t, "podpolicy")
	ctx := context.Background()
	installTemplates(t, c, ns)
	base := &netv1alpha1.WgGatewayClientTemplate{}
	apitest.Must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "wireguard-client"}, base))
	variant := func(name string, edit func(pod map[string]any)) {
		var raw map[string]any
		apitest.Must(t, json.Unmarshal(base.Spec.Template.Raw, &raw))
		pod, _, _ := unstructured.NestedMap(raw, "spec", "deployment", "template", "spec")
		edit(pod)
		apitest.Must(t, unstructured.SetNestedMap(raw, pod, "spec", "deployment", "template", "spec"))
		tmpl := &netv1alpha1.WgGatewayClientTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		tmpl.Spec.Template.Raw, _ = json.Marshal(raw)
		apitest.Must(t, c.Create(ctx, tmpl))
	}
	variant("escape", func(pod map[string]any) {
		pod["hostNetwork"] = true
		pod["volumes"] = []any{map[string]any{"name": "root", "hostPath": map[string]any{"path": "/"}}}
		ctr := pod["containers"].([]any)[0].(map[string]any)
		ctr["securityContext"] = map[string]any{"privileged": true, "capabilities": map[string]any{"add": []any{"SYS_ADMIN"}}}
	})
	variant("other-sa", func(pod map[string]any) { pod["serviceAccountName"] = "cluster-admin-sa" })
	variant("invalid", func(pod map[string]any) { pod["nodeSelector"] = map[string]any{"zone": "Not_A_DNS_Label!"} })
	variant("watcher", func(pod map[string]any) {
		ctr := pod["containers"].([]any)[0].(map[string]any)
		ctr["args"] = append(ctr["args"].([]any), "--watch-pods")
	})
	stop := startGateways(t, env)
	defer stop()

	gw := func(name, tmpl string) *netv1alpha1.GatewayClient {
		gc := &netv1alpha1.GatewayClient{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{netv1alpha1.RemoteClusterIDLabel: "cluster-" + name}},
			Spec: netv1alpha1.GatewayClientSpec{MTU: 1340, Endpoint: netv1alpha1.Endpoint{Addresses: []netv1alpha1.Address{"10.42.3.54"}, Port: 32133},
				ClientTemplateRef: netv1alpha1.TemplateRef{Kind: "WgGatewayClientTemplate", Name: tmpl}},
		}
		apitest.Must(t, c.Create(ctx, gc))
		return gc
	}
	escape := gw("escape", "escape")
	apitest.Eventually(t, "the escaping template refused", 30*time.Second, func() bool {
		c.Get(ctx, client.ObjectKeyFromObject(escape), escape)
		cond := meta.FindStatusCondition(escape.Status.Conditions, "Ready")
		return cond != nil && cond.Reason == "ForbiddenPodSpec" && strings.Contains(cond.Message,
			"containers[0].securityContext.capabilities.add, containers[0].securityContext.privileged, hostNetwork, volumes[0].hostPath")
	})
	if err := c.Get(ctx, client.ObjectKeyFromObject(escape), &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
		t.Errorf("a Deployment was rendered from the escaping template: %v", err)
	}
	// What the API server refuses (the policy does not look at names) is reported too.
	invalid := gw("invalid", "invalid")
	apitest.Eventually(t, "the refused Deployment reported", 30*time.Second, func() bool {
		c.Get(ctx, client.ObjectKeyFromObject(invalid), invalid)
		cond := meta.FindStatusCondition(invalid.Status.Conditions, "Ready")
		return cond != nil && cond.Reason == "RenderedObjectRefused" && strings.Contains(cond.Message, "Not_A_DNS_Label")
	})
	other := gw("other", "other-sa")
	dep := &appsv1.Deployment{}
	apitest.Eventually(t, "the other-sa gateway deployed", 30*time.Second, func() bool {
		return c.Get(ctx, client.ObjectKeyFromObject(other), dep) == nil
	})
	if sa := dep.Spec.Template.Spec.ServiceAccountName; sa != "other" {
		t.Errorf("the gateway pod runs as ServiceAccount %q, want its own (other)", sa)
	}
	// Every Pod of the cluster only for a gateway that watches them.
	podsBinding := func(gw string) error {
		return c.Get(ctx, client.ObjectKey{Name: controller.GatewayClusterBindingName(ns, gw) + "-pods"}, &rbacv1.ClusterRoleBinding{})
	}
	if err := podsBinding("other"); !apierrors.IsNotFound(err) {
		t.Errorf("a gateway without --watch-pods may read every Pod: %v", err)
	}
	// A template's own --watch-pods neither reaches the gateway nor binds the Pods role: the
	// controller's setting decides (here none: no gateway watches Pods).
	watcher := gw("watcher", "watcher")
	apitest.Eventually(t, "the --watch-pods template's gateway deployed", 30*time.Second, func() bool {
		return c.Get(ctx, client.ObjectKeyFromObject(watcher), dep) == nil
	})
	if args := dep.Spec.Template.Spec.Containers[0].Args; slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, "watch-pods") }) {
		t.Errorf("the template's --watch-pods reached the gateway: %q", args)
	}
	time.Sleep(time.Second)
	if err := podsBinding("watcher"); !apierrors.IsNotFound(err) {
		t.Errorf("a template's --watch-pods made the controller bind %s: %v", controller.GatewayPodsClusterRole, err)
	}
}

// TestPodRoutesAuto: gateways route pods by their nodes' pod CIDRs until a gateway pod turns
// up outside its node's (the CNI has its own IPAM); from then on every gateway, this one and
// the next, runs with --watch-pods and may read every Pod.
func TestPodRoutesAuto(t *testing.T) {
	env := apitest.Start(t)
	c := env.Client
	ns := env.Namespace(t, "podroutes")
	ctx := context.Background()
	installTemplates(t, c, ns)
	routes, err := controller.ParsePodRoutes("auto")
	apitest.Must(t, err)
	stop := startGatewaysWith(t, env, routes)
	defer stop()

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: ns + "-n1"}, Spec: corev1.NodeSpec{PodCIDR: "10.244.1.0/24", PodCIDRs: []string{"10.244.1.0/24"}}}
	apitest.Must(t, c.Create(ctx, node))
	t.Cleanup(func() { c.Delete(context.Background(), node) })
	gw := func(name string) *netv1alpha1.GatewayClient {
		gc := &netv1alpha1.GatewayClient{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{netv1alpha1.RemoteClusterIDLabel: "cluster-" + name}},
			Spec: netv1alpha1.GatewayClientSpec{MTU: 1340, Endpoint: netv1alpha1.Endpoint{Addresses: []netv1alpha1.Address{"10.42.3.54"}, Port: 32133},
				ClientTemplateRef: netv1alpha1.TemplateRef{Kind: "WgGatewayClientTemplate", Name: "wireguard-client"}},
		}
		apitest.Must(t, c.Create(ctx, gc))
		return gc
	}
	// pod makes a running replica of gateway gw's Deployment (owned by its ReplicaSet), or
	// with forged, a pod that only carries the gateway's label.
	pod := func(name, gw, ip string, forged bool) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{controller.GatewayPodLabel: gw}},
			Spec: corev1.PodSpec{NodeName: node.Name, Containers: []corev1.Container{{Name: "gateway", Image: "skein-gateway"}}}}
		if !forged {
			p.Labels["pod-template-hash"] = "5d4f8c"
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: gw + "-5d4f8c",
				UID: "0c1e4a52-6f0b-4a47-9d1e-2b3f4c5d6e7f", Controller: ptr.To(true)}}
		}
		apitest.Must(t, c.Create(ctx, p))
		p.Status.Phase, p.Status.PodIP, p.Status.PodIPs = corev1.PodRunning, ip, []corev1.PodIP{{IP: ip}}
		apitest.Must(t, c.Status().Update(ctx, p))
	}
	watches := func(name string) bool {
		d := &appsv1.Deployment{}
		if c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, d) != nil {
			return false
		}
		for _, ctr := range d.Spec.Template.Spec.Containers {
			if ctr.Name == "gateway" && slices.Contains(ctr.Args, "--watch-pods") {
				return true
			}
		}
		return false
	}
	podsBinding := func(gw string) error {
		return c.Get(ctx, client.ObjectKey{Name: controller.GatewayClusterBindingName(ns, gw) + "-pods"}, &rbacv1.ClusterRoleBinding{})
	}

	gw("a")
	apitest.Eventually(t, "gateway a deployed", 30*time.Second, func() bool {
		return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "a"}, &appsv1.Deployment{}) == nil
	})
	gw("b")
	apitest.Eventually(t, "gateway b deployed", 30*time.Second, func() bool {
		return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "b"}, &appsv1.Deployment{}) == nil
	})
	pod("a-inside", "a", "10.244.1.7", false) // where kube-controller-manager's IPAM puts it
	pod("other-gw", "elsewhere", "10.245.0.3", false)
	pod("a-forged", "a", "10.245.0.4", true) // the label alone, outside: not a gateway replica
	time.Sleep(2 * time.Second)              // the reconciles these pods trigger
	if watches("a") || podsBinding("a") == nil || routes.Evidence() != "" {
		t.Fatalf("pods inside their node's pod CIDR, or not a gateway's, turned pod routes on: %q", routes.Evidence())
	}

	pod("a-outside", "a", "10.245.0.9", false) // a CNI with IPAM blocks of its own
	apitest.Eventually(t, "gateway a watches pods", 30*time.Second, func() bool { return watches("a") && podsBinding("a") == nil })
	if ev := routes.Evidence(); !strings.Contains(ev, ns+"/a-outside has address 10.245.0.9, outside the pod CIDRs of its node "+node.Name) {
		t.Errorf("evidence %q does not name the pod, its address and its node", ev)
	}
	apitest.Eventually(t, "gateway b, deployed before, watches pods too", 30*time.Second, func() bool { return watches("b") && podsBinding("b") == nil })
	gw("c")
	apitest.Eventually(t, "gateway c watches pods from the start", 30*time.Second, func() bool { return watches("c") && podsBinding("c") == nil })
}

func TestParsePodRoutes(t *testing.T) {
	for _, m := range []string{"auto", "true", "false"} {
		if _, err := controller.ParsePodRoutes(m); err != nil {
			t.Errorf("%s: %v", m, err)
		}
	}
	if _, err := controller.ParsePodRoutes("yes"); err == nil || !strings.Contains(err.Error(), "want auto, true or false") {
		t.Errorf("yes: %v", err)
	}
}

// countingClient counts server-side applies.
// settle waits until n has not moved for a second (the reconcilers have settled) and returns
// it.
func settle(n *atomic.Int64) int64 {
	for last := int64(-1); ; time.Sleep(time.Second) {
		v := n.Load()
		if v == last {
			return v
		}
		last = v
	}
}

// readerWrapper is a client wrapper that wraps the API reader too.
type readerWrapper interface {
	wrapReader(client.Reader) client.Reader
}

type countingClient struct {
	client.Client
	applies atomic.Int64
	reads   atomic.Int64 // reads around the cache, from the API server
}

func (c *countingClient) wrapReader(r client.Reader) client.Reader {
	return &countingReader{Reader: r, reads: &c.reads}
}

type countingReader struct {
	client.Reader
	reads *atomic.Int64
}

func (r *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.reads.Add(1)
	return r.Reader.Get(ctx, key, obj, opts...)
}

func (r *countingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	r.reads.Add(1)
	return r.Reader.List(ctx, list, opts...)
}

func (c *countingClient) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	c.applies.Add(1)
	return c.Client.Apply(ctx, obj, opts...)
}

// TestGatewayAppliesOnlyChanges: reconciling a gateway whose objects are as the controller last
// applied them writes nothing (1,000 peerings made some 30,000 writes that changed nothing and
// took 162 s to come up; BenchmarkPeerings1000), while an object someone else changed is
// applied again and repaired.
func TestGatewayAppliesOnlyChanges(t *testing.T) {
	env := apitest.Start(t)
	c := env.Client
	ns := env.Namespace(t, "gwapply")
	ctx := context.Background()
	installTemplates(t, c, ns)
	counting := &countingClient{}
	recs, stop := startGatewayReconcilers(t, env, nil, func(c client.Client) client.Client { counting.Client = c; return counting })
	defer stop()
	server := recs[0]

	gs := &netv1alpha1.GatewayServer{
		ObjectMeta: metav1.ObjectMeta{Name: "server", Namespace: ns, Labels: map[string]string{netv1alpha1.RemoteClusterIDLabel: "cluster-b"}},
		Spec: netv1alpha1.GatewayServerSpec{MTU: 1340, Endpoint: netv1alpha1.ServerEndpoint{Port: 51820, ServiceType: netv1alpha1.ServiceTypeClusterIP},
			ServerTemplateRef: netv1alpha1.TemplateRef{Kind: "WgGatewayServerTemplate", Name: "wireguard-server"}},
	}
	apitest.Must(t, c.Create(ctx, gs))
	key := client.ObjectKeyFromObject(gs)
	apitest.Eventually(t, "deployed", 30*time.Second, func() bool {
		c.Get(ctx, key, gs)
		return gs.Status.Endpoint != nil && meta.IsStatusConditionTrue(gs.Status.Conditions, netv1alpha1.ConditionReady)
	})
	settled := func() int64 { return settle(&counting.applies) }
	before := settled()
	if before == 0 {
		t.Fatal("no apply counted: the test does not see the reconciler's writes")
	}
	if counting.reads.Load() == 0 {
		t.Fatal("no read around the cache counted: the test does not see the reconciler's reads")
	}
	readsBefore := counting.reads.Load()
	// Five more reconciles with nothing to change (an annotation is an update event).
	for i := range 5 {
		apitest.Must(t, c.Get(ctx, key, gs))
		if gs.Annotations == nil {
			gs.Annotations = map[string]string{}
		}
		gs.Annotations["test/poke"] = fmt.Sprint(i)
		apitest.Must(t, c.Update(ctx, gs))
		time.Sleep(300 * time.Millisecond)
	}
	if after := settled(); after != before {
		t.Errorf("%d applies for 5 reconciles that changed nothing, want 0", after-before)
	}
	// Nor do they read around the cache: the objects it would read (the ones it applied, and the
	// PodDisruptionBudget and pods ClusterRoleBinding it does not render) are all labelled, so
	// the cache holds any of them that exists.
	if n := counting.reads.Load() - readsBefore; n != 0 {
		t.Errorf("%d reads from the API server for 5 reconciles that changed nothing, want 0", n)
	}

	// Someone else removes the label the controller set on the Deployment: it comes back.
	dep := &appsv1.Deployment{}
	apitest.Must(t, c.Get(ctx, key, dep))
	if dep.Labels[controller.ManagedByLabel] == "" {
		t.Fatalf("the Deployment has no %s label: %v", controller.ManagedByLabel, dep.Labels)
	}
	patch := []byte(`{"metadata":{"labels":{"` + controller.ManagedByLabel + `":null}}}`)
	apitest.Must(t, c.Patch(ctx, dep, client.RawPatch(types.MergePatchType, patch), client.FieldOwner("someone-else")))
	apitest.Eventually(t, "the Deployment's label restored", 20*time.Second, func() bool {
		return c.Get(ctx, key, dep) == nil && dep.Labels[controller.ManagedByLabel] != ""
	})

	// The records of what was applied go with the gateway.
	if n := controller.AppliedRecords(server); n == 0 {
		t.Fatal("no applied records kept for a running gateway")
	}
	apitest.Must(t, c.Delete(ctx, gs))
	apitest.Eventually(t, "the gateway gone", 30*time.Second, func() bool { return apierrors.IsNotFound(c.Get(ctx, key, gs)) })
	if n := controller.AppliedRecords(server); n != 0 {
		t.Errorf("%d applied records kept after the gateway was deleted, want 0", n)
	}
}
