package render_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/controller/render"
)

func loadTemplate(t *testing.T, file string) runtime.RawExtension {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "deploy", "templates", file))
	if err != nil {
		t.Fatal(err)
	}
	var tmpl netv1alpha1.WgGatewayServerTemplate
	if err := yaml.UnmarshalStrict(b, &tmpl); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return tmpl.Spec.Template
}

func serverData(t *testing.T) render.Data {
	nodePort := int32(31820)
	d, err := render.NewData("server", "liqo-tenant-b", "35d83766-f466-46ef-b5b3-d253b6d465f1", "server-key", "0a1b2c",
		netv1alpha1.GatewayServerSpec{MTU: 1340, Endpoint: netv1alpha1.ServerEndpoint{Port: 51820, ServiceType: netv1alpha1.ServiceTypeNodePort, NodePort: &nodePort}})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestDefaultServerTemplate(t *testing.T) {
	r, err := render.Render(loadTemplate(t, "wireguard-server.yaml"), serverData(t))
	if err != nil {
		t.Fatal(err)
	}
	if r.Labels["networking.liqo.io/gateway"] != "server" || r.Labels["liqo.io/remote-cluster-id"] != "35d83766-f466-46ef-b5b3-d253b6d465f1" {
		t.Errorf("labels %v", r.Labels)
	}
	c := r.Deployment.Template.Spec.Containers[0]
	args := strings.Join(c.Args, " ")
	if args != "--mode=server --gateway-name=server --gateway-namespace=liqo-tenant-b --listen-port=51820" {
		t.Errorf("args %q", args)
	}
	if c.Ports[0].ContainerPort != 51820 || c.Ports[0].Protocol != corev1.ProtocolUDP {
		t.Errorf("ports %+v", c.Ports)
	}
	if r.Deployment.Template.Spec.ServiceAccountName != "server" || *r.Deployment.Replicas != 1 {
		t.Errorf("deployment %+v", r.Deployment)
	}
	if r.Service == nil || r.Service.Type != corev1.ServiceTypeNodePort || r.Service.Ports[0].Port != 51820 || r.Service.Ports[0].TargetPort.IntValue() != 51820 ||
		r.Service.Selector["networking.liqo.io/active"] != "true" {
		t.Errorf("service %+v", r.Service)
	}
}

func TestDefaultClientTemplate(t *testing.T) {
	d, err := render.NewData("client", "liqo-tenant-a", "ef7a1f41-c753-4a0e-83e5-bed013e7fe4f", "client-key", "9z",
		netv1alpha1.GatewayClientSpec{MTU: 1340, Endpoint: netv1alpha1.Endpoint{Addresses: []netv1alpha1.Address{"10.42.3.54"}, Port: 32133}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := render.Render(loadTemplate(t, "wireguard-client.yaml"), d)
	if err != nil {
		t.Fatal(err)
	}
	if r.Service != nil {
		t.Error("a client template rendered a Service")
	}
	if args := strings.Join(r.Deployment.Template.Spec.Containers[0].Args, " "); args != "--mode=client --gateway-name=client --gateway-namespace=liqo-tenant-a" {
		t.Errorf("args %q", args)
	}
}

// TestEveryPlaceholder renders each placeholder the spec names, alone and inside text.
func TestEveryPlaceholder(t *testing.T) {
	tmpl := `{"metadata":{"labels":{"a":"{{ .Name }}","b":"{{ .Namespace }}","c":"{{ .ClusterID }}","d":"{{ .SecretName }}","e":"{{ .GatewayUID }}","f":"mtu-{{ .Spec.Mtu }}"}},
	"spec":{"deployment":{"replicas":"{{ .Spec.Mtu }}","selector":{},"template":{"spec":{"containers":[]}}}}}`
	r, err := render.Render(runtime.RawExtension{Raw: []byte(tmpl)}, serverData(t))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": "server", "b": "liqo-tenant-b", "c": "35d83766-f466-46ef-b5b3-d253b6d465f1", "d": "server-key", "e": "0a1b2c", "f": "mtu-1340"}
	for k, v := range want {
		if r.Labels[k] != v {
			t.Errorf("%s = %q, want %q", k, r.Labels[k], v)
		}
	}
	if *r.Deployment.Replicas != 1340 {
		t.Errorf("a lone numeric action did not stay a number: %d", *r.Deployment.Replicas)
	}
}

// paused is a template whose deployment's paused field is the template string v.
func paused(v string) string {
	b, _ := json.Marshal(map[string]any{"spec": map[string]any{"deployment": map[string]any{"paused": v}}})
	return string(b)
}

func TestBadTemplates(t *testing.T) {
	cases := []struct{ tmpl, want string }{
		{``, "empty"},
		{`{"spec":{"deployment":{"replicas":"{{ .Name "}}}`, "spec.template.spec.deployment.replicas"},
		{`{"spec":{"deployment":{"replicas":"{{ .Spec.Nope }}"}}}`, `spec.template.spec.deployment.replicas`},
		{`{"spec":{"deploymnt":{}}}`, "unknown field"},
		{`{"metadata":{}}`, "deployment is missing"},
		{`{"spec":{"deployment":{"replicas":"{{ .Name }}"}}}`, "spec.template after rendering"},
		// What could make the controller loop or fill its memory (attack review).
		{paused(`{{range 1000000}}{{range 1000000}}x{{end}}{{end}}`), "range is not allowed"},
		{paused(`{{if true}}{{range 1000000}}{{end}}{{end}}`), "range is not allowed"},
		{paused(`{{define "a"}}{{template "a"}}{{end}}{{template "a"}}`), "not allowed in gateway templates"},
		{paused(`{{block "b" .}}x{{end}}`), "not allowed in gateway templates"},
		{paused(`{{printf "%01000000d" 0}}`), "a width or precision above 999"},
		{paused(`{{printf "%.5000s" .Name}}`), "a width or precision above 999"},
		{paused(`{{printf "%*d" 1000000 0}}`), "widths from arguments"},
		{paused(strings.Repeat(`{{printf "%0999d" 0}}`, 70)), "renders to more than 65536 bytes"},
	}
	for _, tc := range cases {
		_, err := render.Render(runtime.RawExtension{Raw: []byte(tc.tmpl)}, serverData(t))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error containing %q", tc.tmpl, err, tc.want)
		}
	}
}

// TestExamples renders every template variant of examples/networking.
func TestExamples(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "examples", "networking", "*.yaml"))
	if err != nil || len(files) < 4 {
		t.Fatalf("examples: %v %v", files, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var tmpl netv1alpha1.WgGatewayServerTemplate
			if err := yaml.UnmarshalStrict(b, &tmpl); err != nil {
				t.Fatal(err)
			}
			r, err := render.Render(tmpl.Spec.Template, serverData(t))
			if err != nil {
				t.Fatal(err)
			}
			if r.Deployment == nil || r.Service == nil || len(r.Deployment.Template.Spec.Containers) != 1 {
				t.Fatalf("rendered %+v", r)
			}
			switch filepath.Base(f) {
			case "wireguard-server-ha.yaml":
				if *r.Deployment.Replicas != 2 || r.Deployment.Template.Spec.Affinity == nil {
					t.Errorf("replicas %d affinity %v", *r.Deployment.Replicas, r.Deployment.Template.Spec.Affinity)
				}
			case "wireguard-server-port-mtu.yaml":
				if r.Service.Ports[0].Port != 51820 || r.Service.Ports[0].TargetPort.IntValue() != 51900 {
					t.Errorf("ports %+v", r.Service.Ports)
				}
			case "wireguard-server-metrics.yaml":
				if a := r.Deployment.Template.Annotations; len(r.Service.Ports) != 1 || a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != "9471" {
					t.Errorf("service ports %+v, pod annotations %v", r.Service.Ports, r.Deployment.Template.Annotations)
				}
			case "wireguard-server-service-annotations.yaml":
				if r.Annotations["networking.liqo.io/owner"] != "liqo-tenant-b/server" {
					t.Errorf("annotations %v", r.Annotations)
				}
			}
		})
	}
}

// TestRenderBudget (found by an attack review): a template's variables hold what its functions
// make, and none of it needs to be written: each {{$a = print $a $a}} doubled a string until a
// 640-byte template made the renderer allocate 349 MiB (thirty more bytes of template, any
// controller's memory). Every value a function makes is bounded by MaxOutput, and all that a
// Render makes by MaxRendered, so the doubling is refused early and cheaply; many strings each
// under MaxOutput are refused once they pass MaxRendered together; ordinary uses render.
func TestRenderBudget(t *testing.T) {
	renderWith := func(annotations map[string]any) (*render.Rendered, error) {
		t.Helper()
		tmpl := map[string]any{
			"metadata": map[string]any{"annotations": annotations},
			"spec": map[string]any{"deployment": map[string]any{"template": map[string]any{"spec": map[string]any{
				"containers": []any{map[string]any{"name": "gateway"}}}}}},
		}
		raw, err := json.Marshal(tmpl)
		if err != nil {
			t.Fatal(err)
		}
		return render.Render(runtime.RawExtension{Raw: raw}, render.Data{Name: "gw", Namespace: "ns"})
	}
	for _, doublings := range []int{20, 40} {
		expr := `{{$a := "` + strings.Repeat("x", 64) + `"}}` + strings.Repeat(`{{$a = print $a $a}}`, doublings) + `{{len $a | printf "%.0s"}}`
		goruntime.GC()
		var before, after goruntime.MemStats
		goruntime.ReadMemStats(&before)
		_, err := renderWith(map[string]any{"x": expr})
		goruntime.ReadMemStats(&after)
		alloc := after.TotalAlloc - before.TotalAlloc
		if err == nil || !strings.Contains(err.Error(), "more than") {
			t.Errorf("%d doublings: %v, want a refusal", doublings, err)
		}
		if alloc > 8<<20 {
			t.Errorf("%d doublings: the renderer allocated %d MiB before refusing", doublings, alloc>>20)
		}
	}
	// One call with many arguments is judged before it formats them.
	if _, err := renderWith(map[string]any{"x": `{{$a := printf "%0999d" 1}}{{print ` + strings.Repeat("$a ", 100) + `| len}}`}); err == nil {
		t.Error("print of 100 strings of 999 bytes: no error")
	}
	// Twenty strings of 60 KiB each: each under MaxOutput, 1.2 MiB together.
	many := map[string]any{}
	for i := range 20 {
		many[fmt.Sprintf("k%d", i)] = `{{"` + strings.Repeat("y", 60<<10) + `"}}`
	}
	if _, err := renderWith(many); err == nil || !strings.Contains(err.Error(), "in all") {
		t.Errorf("20 strings of 60 KiB: %v, want the render's budget spent", err)
	}
	// Ordinary uses.
	rd, err := renderWith(map[string]any{"a": `{{print .Name "-" .Namespace}}`, "b": `{{printf "%s/%s" .Namespace .Name | urlquery}}`, "c": `{{html "<x>"}}{{js "'"}}`})
	if err != nil {
		t.Fatal(err)
	}
	if rd.Annotations["a"] != "gw-ns" || rd.Annotations["b"] != "ns%2Fgw" || rd.Annotations["c"] != `&lt;x&gt;\'` {
		t.Errorf("rendered %v", rd.Annotations)
	}
}
