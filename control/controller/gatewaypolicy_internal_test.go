package controller

import (
	"encoding/json"
	"flag"
	"os"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/controller/render"
)

// renderDefault renders deploy/templates/file for gateway tenant/gw after edit changed its
// spec.template (nil: as it is).
func renderDefault(t *testing.T, file string, gs *netv1alpha1.GatewayServer, edit func(tmpl map[string]any)) *render.Rendered {
	t.Helper()
	b, err := os.ReadFile("../../deploy/templates/" + file)
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := yaml.Unmarshal(b, &obj); err != nil {
		t.Fatal(err)
	}
	tmpl, _, _ := unstructured.NestedMap(obj, "spec", "template")
	if edit != nil {
		edit(tmpl)
	}
	raw, _ := json.Marshal(tmpl)
	var spec any = netv1alpha1.GatewayClientSpec{MTU: 1340, Endpoint: netv1alpha1.Endpoint{Addresses: []netv1alpha1.Address{"192.0.2.1"}, Port: 51820}}
	if gs != nil {
		spec = gs.Spec
	}
	d, err := render.NewData("gw", "tenant", "cluster-b", "gw-wg-key", "0000", spec)
	if err != nil {
		t.Fatal(err)
	}
	rd, err := render.Render(runtime.RawExtension{Raw: raw}, d)
	if err != nil {
		t.Fatal(err)
	}
	return rd
}

func policyServer() *netv1alpha1.GatewayServer {
	return &netv1alpha1.GatewayServer{Spec: netv1alpha1.GatewayServerSpec{MTU: 1340,
		Endpoint: netv1alpha1.ServerEndpoint{Port: 51820, ServiceType: netv1alpha1.ServiceTypeNodePort, NodePort: ptr.To[int32](31820)}}}
}

// gatewayContainerOf is the gateway container of a template's spec.template.
func gatewayContainerOf(tmpl map[string]any) map[string]any {
	return podOf(tmpl)["containers"].([]any)[0].(map[string]any)
}

func podOf(tmpl map[string]any) map[string]any {
	return tmpl["spec"].(map[string]any)["deployment"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
}

// TestGatewayPolicyDefaults: the default templates pass the default policy and render as they
// did: the image, arguments, Service and selector they ask for.
func TestGatewayPolicyDefaults(t *testing.T) {
	gs := policyServer()
	rd := renderDefault(t, "wireguard-server.yaml", gs, nil)
	if bad := (GatewayPolicy{}).constrainGateway(rd, "gw", "tenant", true, gs); len(bad) > 0 {
		t.Fatalf("the default server template refused: %q", bad)
	}
	c := rd.Deployment.Template.Spec.Containers[0]
	if c.Image != "ghcr.io/skein-net/skein-gateway:v0.2.0-dev" {
		t.Errorf("image %s", c.Image)
	}
	if got := strings.Join(c.Args, " "); got != "--mode=server --gateway-name=gw --gateway-namespace=tenant --listen-port=51820" {
		t.Errorf("args %q", got)
	}
	svc := rd.Service
	if svc.Type != corev1.ServiceTypeNodePort || len(svc.Ports) != 1 || svc.Ports[0].Port != 51820 || svc.Ports[0].NodePort != 31820 ||
		svc.Ports[0].TargetPort.IntValue() != 51820 || svc.Ports[0].Name != "wireguard" || svc.Ports[0].Protocol != corev1.ProtocolUDP ||
		svc.Selector[GatewayPodLabel] != "gw" || svc.Selector[activePodLabel] != "true" || !svc.PublishNotReadyAddresses {
		t.Errorf("service %+v", svc)
	}
	cl := renderDefault(t, "wireguard-client.yaml", nil, nil)
	if bad := (GatewayPolicy{}).constrainGateway(cl, "gw", "tenant", false, nil); len(bad) > 0 {
		t.Fatalf("the default client template refused: %q", bad)
	}
	// The chart's settings: its image, priority class, tolerations and annotations.
	p := GatewayPolicy{Image: "registry.example/mirror/skein-gateway:v1", PriorityClasses: []string{"gateways"},
		Tolerations:        []corev1.Toleration{{Key: "edge", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		ServiceAnnotations: []string{"service.beta.kubernetes.io/"}}
	rd = renderDefault(t, "wireguard-server.yaml", gs, func(tmpl map[string]any) {
		delete(gatewayContainerOf(tmpl), "image")
		podOf(tmpl)["priorityClassName"] = "gateways"
		podOf(tmpl)["tolerations"] = []any{map[string]any{"key": "edge", "operator": "Exists", "effect": "NoSchedule"}}
		tmpl["metadata"].(map[string]any)["annotations"] = map[string]any{"service.beta.kubernetes.io/aws-load-balancer-type": "nlb"}
		tmpl["spec"].(map[string]any)["deployment"].(map[string]any)["template"].(map[string]any)["metadata"].(map[string]any)["annotations"] = map[string]any{
			"prometheus.io/scrape": "true", "prometheus.io/port": "9471"}
	})
	if bad := p.constrainGateway(rd, "gw", "tenant", true, gs); len(bad) > 0 {
		t.Fatalf("what the chart's settings allow refused: %q", bad)
	}
	if c := rd.Deployment.Template.Spec.Containers[0]; c.Image != p.Image {
		t.Errorf("a template without an image got %q, want --gateway-image %s", c.Image, p.Image)
	}
	// A selector narrower than the gateway's own (its label and more) selects its pods only.
	rd = renderDefault(t, "wireguard-client.yaml", nil, func(tmpl map[string]any) {
		dep := tmpl["spec"].(map[string]any)["deployment"].(map[string]any)
		dep["selector"].(map[string]any)["matchLabels"].(map[string]any)["networking.liqo.io/component"] = "gateway"
	})
	if bad := (GatewayPolicy{}).constrainGateway(rd, "gw", "tenant", false, nil); len(bad) > 0 {
		t.Errorf("a narrower Deployment selector refused: %q", bad)
	}
}

// TestGatewayPolicyRefuses: each way a template could borrow skein-controller's authority is
// named in what constrainGateway returns.
func TestGatewayPolicyRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(tmpl map[string]any)
		want string
	}{
		{"image", func(m map[string]any) { gatewayContainerOf(m)["image"] = "evil.example/miner:latest" }, "containers[0].image evil.example/miner:latest"},
		{"command", func(m map[string]any) { gatewayContainerOf(m)["command"] = []any{"/bin/sh", "-c", "id"} }, "containers[0].command"},
		{"unknown flag", func(m map[string]any) {
			c := gatewayContainerOf(m)
			c["args"] = append(c["args"].([]any), "--kubeconfig=/etc/evil/kubeconfig")
		}, `args[4] "--kubeconfig=/etc/evil/kubeconfig"`},
		{"standalone", func(m map[string]any) {
			c := gatewayContainerOf(m)
			c["args"] = append(c["args"].([]any), "--config", "/etc/x")
		}, `args[4] "--config"`},
		{"positional", func(m map[string]any) {
			c := gatewayContainerOf(m)
			c["args"] = append(c["args"].([]any), "sh")
		}, `args[4] "sh" (not a flag)`},
		{"other gateway", func(m map[string]any) { gatewayContainerOf(m)["args"].([]any)[1] = "--gateway-name=victim" }, "must be --gateway-name=gw"},
		{"env", func(m map[string]any) {
			c := gatewayContainerOf(m)
			c["env"] = append(c["env"].([]any), map[string]any{"name": "KUBERNETES_SERVICE_HOST", "value": "203.0.113.9"})
		}, "env[4] KUBERNETES_SERVICE_HOST"},
		{"envFrom", func(m map[string]any) {
			gatewayContainerOf(m)["envFrom"] = []any{map[string]any{"configMapRef": map[string]any{"name": "x"}}}
		}, "containers[0].envFrom"},
		{"sidecar", func(m map[string]any) {
			p := podOf(m)
			p["containers"] = append(p["containers"].([]any), map[string]any{"name": "miner", "image": "evil.example/miner"})
		}, "containers[1] (a container other than gateway)"},
		{"init container", func(m map[string]any) {
			podOf(m)["initContainers"] = []any{map[string]any{"name": "i", "image": "evil.example/i"}}
		}, "initContainers"},
		{"replicas", func(m map[string]any) { m["spec"].(map[string]any)["deployment"].(map[string]any)["replicas"] = 200 }, "replicas 200 (at most 3"},
		{"deployment selector", func(m map[string]any) {
			m["spec"].(map[string]any)["deployment"].(map[string]any)["selector"] = map[string]any{"matchLabels": map[string]any{"app": "web"}}
		}, "spec.deployment.selector"},
		{"priority class", func(m map[string]any) { podOf(m)["priorityClassName"] = "system-node-critical" }, "priorityClassName system-node-critical"},
		{"tolerations", func(m map[string]any) { podOf(m)["tolerations"] = []any{map[string]any{"operator": "Exists"}} }, "tolerations[0]"},
		{"cpu", func(m map[string]any) {
			gatewayContainerOf(m)["resources"] = map[string]any{"requests": map[string]any{"cpu": "32"}}
		}, "resources.requests.cpu 32"},
		{"memory", func(m map[string]any) {
			gatewayContainerOf(m)["resources"] = map[string]any{"limits": map[string]any{"memory": "64Gi"}}
		}, "resources.limits.memory 64Gi"},
		{"gpu", func(m map[string]any) {
			gatewayContainerOf(m)["resources"] = map[string]any{"limits": map[string]any{"nvidia.com/gpu": "8"}}
		}, "resources.limits.nvidia.com/gpu"},
		{"runtime class", func(m map[string]any) { podOf(m)["runtimeClassName"] = "unconfined" }, "runtimeClassName"},
		{"service type", func(m map[string]any) {
			m["spec"].(map[string]any)["service"].(map[string]any)["type"] = "LoadBalancer"
		}, "spec.service.type LoadBalancer"},
		{"externalIPs", func(m map[string]any) {
			m["spec"].(map[string]any)["service"].(map[string]any)["externalIPs"] = []any{"8.8.8.8", "10.96.0.1"}
		}, "spec.service.externalIPs"},
		{"service selector", func(m map[string]any) {
			m["spec"].(map[string]any)["service"].(map[string]any)["selector"] = map[string]any{"app": "database"}
		}, "spec.service.selector"},
		{"service ports", func(m map[string]any) {
			s := m["spec"].(map[string]any)["service"].(map[string]any)
			s["ports"] = append(s["ports"].([]any), map[string]any{"name": "ssh", "port": 22, "protocol": "TCP"})
		}, "spec.service.ports[1:]"},
		{"service port", func(m map[string]any) {
			m["spec"].(map[string]any)["service"].(map[string]any)["ports"].([]any)[0].(map[string]any)["port"] = 53
		}, "spec.service.ports[0].port 53"},
		{"cluster IP", func(m map[string]any) {
			m["spec"].(map[string]any)["service"].(map[string]any)["clusterIP"] = "10.96.0.10"
		}, "spec.service.clusterIP"},
		{"pod annotations", func(m map[string]any) {
			m["spec"].(map[string]any)["deployment"].(map[string]any)["template"].(map[string]any)["metadata"].(map[string]any)["annotations"] = map[string]any{
				"k8s.v1.cni.cncf.io/networks": "kube-system/host-macvlan", "container.apparmor.security.beta.kubernetes.io/gateway": "unconfined", "prometheus.io/scrape": "true"}
		}, "spec.deployment.template.metadata.annotations container.apparmor.security.beta.kubernetes.io/gateway"},
		{"annotations", func(m map[string]any) {
			m["metadata"].(map[string]any)["annotations"] = map[string]any{"external-dns.alpha.kubernetes.io/hostname": "bank.example"}
		}, "metadata.annotations external-dns.alpha.kubernetes.io/hostname"},
		// What would run the author's code, or make the kubelet or the resolver work for them.
		{"mount over the entrypoint", func(m map[string]any) {
			p := podOf(m)
			p["volumes"] = []any{map[string]any{"name": "mine", "configMap": map[string]any{"name": "authors-binary", "defaultMode": 0o755}}}
			gatewayContainerOf(m)["volumeMounts"] = []any{map[string]any{"name": "mine", "mountPath": "/usr/local/bin/skein-gateway", "subPath": "skein-gateway"}}
		}, "volumeMounts[0].mountPath /usr/local/bin/skein-gateway"},
		{"mount over the token", func(m map[string]any) {
			gatewayContainerOf(m)["volumeMounts"] = []any{map[string]any{"name": "mine", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}}
		}, "volumeMounts[0].mountPath /var/run/secrets/kubernetes.io/serviceaccount"},
		{"mount escaping scratch", func(m map[string]any) {
			gatewayContainerOf(m)["volumeMounts"] = []any{map[string]any{"name": "mine", "mountPath": "/tmp/../usr/local/bin"}}
		}, "volumeMounts[0].mountPath /tmp/../usr/local/bin"},
		{"postStart exec", func(m map[string]any) {
			gatewayContainerOf(m)["lifecycle"] = map[string]any{"postStart": map[string]any{"exec": map[string]any{
				"command": []any{"/usr/local/bin/skein-gateway", "--kubeconfig=/etc/mine/kubeconfig"}}}}
		}, "lifecycle.postStart.exec"},
		{"preStop host", func(m map[string]any) {
			gatewayContainerOf(m)["lifecycle"] = map[string]any{"preStop": map[string]any{"httpGet": map[string]any{"host": "10.0.0.1", "port": 80}}}
		}, "lifecycle.preStop.httpGet.host 10.0.0.1"},
		{"probe host", func(m map[string]any) {
			gatewayContainerOf(m)["livenessProbe"] = map[string]any{"httpGet": map[string]any{"host": "169.254.169.254", "port": 80, "path": "/latest/meta-data/"}}
		}, "livenessProbe.httpGet.host 169.254.169.254"},
		{"probe tcp host", func(m map[string]any) {
			gatewayContainerOf(m)["startupProbe"] = map[string]any{"tcpSocket": map[string]any{"host": "10.96.0.1", "port": 443}}
		}, "startupProbe.tcpSocket.host 10.96.0.1"},
		{"probe exec", func(m map[string]any) {
			gatewayContainerOf(m)["readinessProbe"] = map[string]any{"exec": map[string]any{"command": []any{"sh", "-c", "id"}}}
		}, "readinessProbe.exec"},
		{"working dir", func(m map[string]any) { gatewayContainerOf(m)["workingDir"] = "/tmp" }, "containers[0].workingDir (not a field"},
		{"dns policy", func(m map[string]any) { podOf(m)["dnsPolicy"] = "None" }, "dnsPolicy None"},
		{"dns config", func(m map[string]any) {
			podOf(m)["dnsConfig"] = map[string]any{"nameservers": []any{"203.0.113.53"}}
		}, "template.spec.dnsConfig (not a field"},
		{"host aliases", func(m map[string]any) {
			podOf(m)["hostAliases"] = []any{map[string]any{"ip": "203.0.113.9", "hostnames": []any{"peer.example.com"}}}
		}, "template.spec.hostAliases (not a field"},
		{"scheduler", func(m map[string]any) { podOf(m)["schedulerName"] = "mine" }, "template.spec.schedulerName"},
		// Pod labels another Service of the namespace selects (attack review).
		{"pod labels", func(m map[string]any) {
			m["spec"].(map[string]any)["deployment"].(map[string]any)["template"].(map[string]any)["metadata"].(map[string]any)["labels"].(map[string]any)["app"] = "database"
		}, "spec.deployment.template.metadata.labels app (a Service"},
		// A pod that never ends, Terminating beside its replacements (attack review).
		{"grace period", func(m map[string]any) { podOf(m)["terminationGracePeriodSeconds"] = 3153600000 }, "terminationGracePeriodSeconds 3153600000 (at most 300)"},
		{"preStop sleep", func(m map[string]any) {
			gatewayContainerOf(m)["lifecycle"] = map[string]any{"preStop": map[string]any{"sleep": map[string]any{"seconds": 3153600000}}}
		}, "lifecycle.preStop.sleep.seconds 3153600000 (at most 300)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gs := policyServer()
			rd := renderDefault(t, "wireguard-server.yaml", gs, tc.edit)
			bad := (GatewayPolicy{}).constrainGateway(rd, "gw", "tenant", true, gs)
			if !slices.ContainsFunc(bad, func(b string) bool { return strings.Contains(b, tc.want) }) {
				t.Errorf("constrainGateway = %q, want it to name %q", bad, tc.want)
			}
		})
	}
}

// TestGatewayPolicyAllowsHarmless: what a template may still tune about its pod is not
// refused: scratch volumes, probes and hooks of the pod's own address, the resolvers a
// host-network gateway needs, scheduling.
func TestGatewayPolicyAllowsHarmless(t *testing.T) {
	gs := policyServer()
	rd := renderDefault(t, "wireguard-server.yaml", gs, func(m map[string]any) {
		p := podOf(m)
		p["volumes"] = []any{map[string]any{"name": "scratch", "emptyDir": map[string]any{}}}
		p["dnsPolicy"] = "ClusterFirstWithHostNet"
		p["terminationGracePeriodSeconds"] = 5
		p["nodeSelector"] = map[string]any{"edge": "true"}
		p["topologySpreadConstraints"] = []any{map[string]any{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}}
		c := gatewayContainerOf(m)
		c["volumeMounts"] = []any{map[string]any{"name": "scratch", "mountPath": "/tmp"}, map[string]any{"name": "scratch", "mountPath": "/run/skein/x", "subPath": "x"}}
		c["livenessProbe"] = map[string]any{"httpGet": map[string]any{"path": "/healthz", "port": 9471}, "periodSeconds": 10}
		c["startupProbe"] = map[string]any{"tcpSocket": map[string]any{"port": 9471}}
		c["lifecycle"] = map[string]any{"preStop": map[string]any{"sleep": map[string]any{"seconds": 2}}}
		c["imagePullPolicy"] = "IfNotPresent"
	})
	if bad := (GatewayPolicy{}).constrainGateway(rd, "gw", "tenant", true, gs); len(bad) > 0 {
		t.Errorf("constrainGateway refused a harmless template: %q", bad)
	}
}

// TestGatewayPolicyWatchPods: a template's --watch-pods is dropped, whatever its spelling; the
// controller's own setting adds it back.
func TestGatewayPolicyWatchPods(t *testing.T) {
	for _, spelling := range []string{"--watch-pods", "-watch-pods", "--watch-pods=true", "-watch-pods=1"} {
		rd := renderDefault(t, "wireguard-client.yaml", nil, func(m map[string]any) {
			c := gatewayContainerOf(m)
			c["args"] = append(c["args"].([]any), spelling)
		})
		if bad := (GatewayPolicy{}).constrainGateway(rd, "gw", "tenant", false, nil); len(bad) > 0 {
			t.Fatalf("%s: %q", spelling, bad)
		}
		spec := &rd.Deployment.Template.Spec
		if watchesPods(spec) || slices.ContainsFunc(spec.Containers[0].Args, func(a string) bool { return strings.Contains(a, "watch-pods") }) {
			t.Errorf("%s kept: %q", spelling, spec.Containers[0].Args)
		}
		(&PodRoutes{Mode: PodRoutesNever}).Apply(spec)
		(*PodRoutes)(nil).Apply(spec)
		if watchesPods(spec) {
			t.Errorf("the controller set to never watch pods: %q", spec.Containers[0].Args)
		}
		(&PodRoutes{Mode: PodRoutesAlways}).Apply(spec)
		if !watchesPods(spec) {
			t.Errorf("the controller set to always watch pods: %q", spec.Containers[0].Args)
		}
	}
}

// TestGatewayClusterBindingName: names that the old scheme gave twice are distinct.
func TestGatewayClusterBindingName(t *testing.T) {
	if legacyClusterBindingName("a-b", "c") != legacyClusterBindingName("a", "b-c") {
		t.Fatal("the example no longer collides under the old scheme")
	}
	if a, b := GatewayClusterBindingName("a-b", "c"), GatewayClusterBindingName("a", "b-c"); a == b {
		t.Errorf("a-b/c and a/b-c both get %s", a)
	}
	long := strings.Repeat("n", 253)
	if n := GatewayClusterBindingName(strings.Repeat("s", 63), long) + "-pods"; len(n) > 253 {
		t.Errorf("%d characters", len(n))
	}
}

// TestGatewayRoleName: a gateway's own Role and binding are named so that no gateway's
// objects (named after a gateway, a DNS subdomain, or with a suffix) are another's namesake:
// "x" and "x-own" would take "x-own"'s RoleBinding name.
func TestGatewayRoleName(t *testing.T) {
	for _, gw := range []string{"a", "a-b", "a.b", strings.Repeat("n", 253)} {
		n := GatewayRoleName(gw)
		if len(validation.IsDNS1123Subdomain(n)) == 0 {
			t.Errorf("%s for gateway %s is a name a gateway may have", n, gw)
		}
		if errs := content.IsPathSegmentName(n); len(errs) > 0 {
			t.Errorf("%s for gateway %s: not a valid Role name: %v", n, gw, errs)
		}
	}
	if GatewayRoleName("a-b") == GatewayRoleName("a") || GatewayRoleName("x") == "x" {
		t.Error("gateway role names collide")
	}
}

// TestGatewayPolicyFlags: the --gateway-* flags as the chart passes them, and what is refused.
func TestGatewayPolicyFlags(t *testing.T) {
	parse := func(args ...string) (GatewayPolicy, error) {
		fs := flag.NewFlagSet("skein-controller", flag.ContinueOnError)
		policy := GatewayPolicyFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return policy()
	}
	p, err := parse("--gateway-image=registry.lab:5000/skein-gateway:dev", "--gateway-image-repositories=", "--gateway-priority-classes=gateways,",
		`--gateway-tolerations=[{"key":"edge","operator":"Exists","effect":"NoSchedule"}]`, "--gateway-service-annotations=service.beta.kubernetes.io/")
	if err != nil {
		t.Fatal(err)
	}
	if p.Image != "registry.lab:5000/skein-gateway:dev" || len(p.PriorityClasses) != 1 || len(p.Tolerations) != 1 || p.Tolerations[0].Key != "edge" ||
		p.MaxCPU.String() != "2" || p.MaxMemory.String() != "1Gi" || p.MaxReplicas != 3 || len(p.ServiceAnnotations) != 1 || p.ImageRepositories != nil {
		t.Errorf("policy %+v", p)
	}
	if got := p.withDefaults().allowedRepositories(); !slices.Equal(got, []string{DefaultGatewayImageRepository, "registry.lab:5000/skein-gateway"}) {
		t.Errorf("allowed repositories %q", got)
	}
	for arg, want := range map[string]string{
		"--gateway-max-replicas=0":                 "--gateway-max-replicas 0",
		"--gateway-max-cpu=lots":                   "--gateway-max-cpu",
		"--gateway-max-memory=-1Gi":                "--gateway-max-memory",
		`--gateway-tolerations=[{"operater":"x"}]`: "--gateway-tolerations",
		"--gateway-image=a b":                      "--gateway-image",
	} {
		if _, err := parse(arg); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", arg, err, want)
		}
	}
}

// TestImageRepository: tags and digests come off; a registry's port stays.
func TestImageRepository(t *testing.T) {
	for in, want := range map[string]string{
		"ghcr.io/skein-net/skein-gateway:v1":              "ghcr.io/skein-net/skein-gateway",
		"registry.lab:5000/skein-gateway":                 "registry.lab:5000/skein-gateway",
		"registry.lab:5000/skein-gateway:dev@sha256:0123": "registry.lab:5000/skein-gateway",
		"[2001:db8::1]:5000/skein/skein-gateway:v1":       "[2001:db8::1]:5000/skein/skein-gateway",
		"ghcr.io/skein-net/skein-gateway@sha256:abcdef":   "ghcr.io/skein-net/skein-gateway",
		"skein-gateway": "skein-gateway",
	} {
		if got := ImageRepository(in); got != want {
			t.Errorf("ImageRepository(%q) = %q, want %q", in, got, want)
		}
	}
}
