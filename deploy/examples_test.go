package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/controller"
	"github.com/skein-net/skein/control/controller/render"
)

// exampleSet finds the chart values an example's comments say to set for it:
// `--set 'gateway.allowedServiceAnnotations={...}'`.
var exampleSet = regexp.MustCompile(`(?m)^#.*--set '([^'=]+)=([^']*)'`)

// refusedWithout is the field skein-controller names in refusing a template that needs a chart
// value the install did not set.
var refusedWithout = map[string]string{
	"gateway.allowedServiceAnnotations": "metadata.annotations ",
}

// TestExamplesPassTheChartsPolicy: every gateway template of examples/networking, rendered, is
// accepted by skein-controller run with the --gateway-* flags the chart gives it with its
// default values (its gateway gets the chart's image, its Service the GatewayServer's port
// alone). An example whose comments give a `--set` (Service annotations, which no default
// allows) is accepted with exactly that --set and refused without it, naming the field.
func TestExamplesPassTheChartsPolicy(t *testing.T) {
	helmBinary(t)
	files, err := filepath.Glob(filepath.Join("..", "examples", "networking", "*.yaml"))
	if err != nil || len(files) < 4 {
		t.Fatalf("examples: %v %v", files, err)
	}
	values, err := readValues(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := decodeValues(values)
	if err != nil {
		t.Fatal(err)
	}
	defaults := chartGatewayPolicy(t)
	if defaults.Image == "" {
		t.Fatal("the chart gives skein-controller no --gateway-image")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			policy, sets := defaults, exampleSet.FindAllSubmatch(b, -1)
			var setArgs []string
			for _, s := range sets {
				if _, ok := refusedWithout[string(s[1])]; !ok {
					t.Fatalf("the comments set %s: which field does skein-controller refuse without it? (refusedWithout)", s[1])
				}
				setArgs = append(setArgs, string(s[1])+"="+string(s[2]))
			}
			if len(setArgs) > 0 {
				policy = chartGatewayPolicy(t, setArgs...)
			}
			rd, gs := renderExample(t, b, v)
			if refused := policy.Constrain(rd, "gw", "tenant", gs); len(refused) > 0 {
				with := "its default values"
				if len(setArgs) > 0 {
					with = fmt.Sprintf("--set %q (the example's comments)", setArgs)
				}
				t.Fatalf("skein-controller, installed by the chart with %s, refuses the example: %q", with, refused)
			}
			if img := rd.Deployment.Template.Spec.Containers[0].Image; img != defaults.Image {
				t.Errorf("the gateway's image is %q, want the chart's gateway.image %s", img, defaults.Image)
			}
			if gs != nil && len(rd.Service.Ports) != 1 {
				t.Errorf("the Service has ports %+v, want the GatewayServer's alone", rd.Service.Ports)
			}
			if len(setArgs) == 0 {
				return
			}
			// Without the values the comments give, the chart's defaults refuse it, saying why.
			rd, gs = renderExample(t, b, v)
			refused := defaults.Constrain(rd, "gw", "tenant", gs)
			if len(refused) == 0 {
				t.Fatalf("the chart's defaults accept the example: its comments need not ask for --set %q", setArgs)
			}
			for _, s := range sets {
				if field := refusedWithout[string(s[1])]; !strings.Contains(strings.Join(refused, "\n"), field) {
					t.Errorf("without %s the refusal %q does not name %s", s[1], refused, field)
				}
			}
		})
	}
}

// chartGatewayPolicy is skein-controller's gateway policy as the chart installs it with the
// default values and sets (helm's --set).
func chartGatewayPolicy(t *testing.T, sets ...string) controller.GatewayPolicy {
	t.Helper()
	args := []string{"template", releaseName, chartDir, "--namespace", "liqo", "--show-only", "templates/controller.yaml"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	out, err := helm(t, "", args...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := parseManifests(out)
	if err != nil {
		t.Fatalf("helm template output: %v", err)
	}
	p, err := controllerGatewayPolicy(objs)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// renderExample renders the gateway template b (a WgGatewayServerTemplate or
// WgGatewayClientTemplate) for gateway tenant/gw as renderGateway does with the chart's values
// v; gs is the GatewayServer it was rendered for (nil for a client template).
func renderExample(t *testing.T, b []byte, v chartValues) (*render.Rendered, *netv1alpha1.GatewayServer) {
	t.Helper()
	m := map[string]any{}
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: m}
	server := u.GetKind() == "WgGatewayServerTemplate"
	if !server && u.GetKind() != "WgGatewayClientTemplate" {
		t.Fatalf("kind %q, want a gateway template", u.GetKind())
	}
	rd, err := renderGateway(u, v, server)
	if err != nil {
		t.Fatal(err)
	}
	if !server {
		return rd, nil
	}
	g := v.Peering.Networking.Gateway
	return rd, &netv1alpha1.GatewayServer{Spec: netv1alpha1.GatewayServerSpec{MTU: g.MTU,
		Endpoint: netv1alpha1.ServerEndpoint{Port: g.Server.Service.Port, ServiceType: netv1alpha1.ServiceType(g.Server.Service.Type)}}}
}
