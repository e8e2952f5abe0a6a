package main

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/gateway/config"
	"github.com/skein-net/skein/control/identity"
	"github.com/skein-net/skein/internal/apitest"
	"github.com/skein-net/skein/internal/golden"
)

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	root := newRoot(&out, &errb)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// TestCreateGolden: `create ... -o yaml` prints what spec/003 shows (plus the namespace).
func TestCreateGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"create-gatewayserver", []string{"create", "gatewayserver", "server", "--remote-cluster-id", "35d83766-f466-46ef-b5b3-d253b6d465f1", "--service-type", "NodePort", "-o", "yaml"}},
		{"create-gatewayclient", []string{"create", "gatewayclient", "client", "--remote-cluster-id", "ef7a1f41-c753-4a0e-83e5-bed013e7fe4f", "--addresses", "10.42.3.54", "--port", "32133", "-o", "yaml"}},
		{"create-gatewayserver-json", []string{"create", "gatewayserver", "server", "--remote-cluster-id", "x", "--node-port", "31820", "--service-type", "NodePort", "-o", "json"}},
	} {
		out, err := run(t, tc.args...)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		golden.Check(t, tc.name, out)
	}
}

func TestCreateErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"create", "gatewayserver", "s", "-o", "yaml"}, "--remote-cluster-id is required"},
		{[]string{"create", "gatewayserver", "s", "--remote-cluster-id", "x", "--mtu", "100", "-o", "yaml"}, "--mtu 100"},
		{[]string{"create", "gatewayserver", "s", "--remote-cluster-id", "x", "--service-type", "Ingress", "-o", "yaml"}, `--service-type "Ingress"`},
		{[]string{"create", "gatewayclient", "c", "--remote-cluster-id", "x", "-o", "yaml"}, "--addresses is required"},
		// -o yaml prints only what admission would accept.
		{[]string{"create", "gatewayserver", "s", "--remote-cluster-id", "x", "--port", "0", "-o", "yaml"}, "--port 0: want 1-65535"},
		{[]string{"create", "gatewayserver", "s", "--remote-cluster-id", "x", "--service-type", "NodePort", "--node-port", "8080", "-o", "yaml"}, "--node-port 8080"},
		{[]string{"create", "gatewayserver", "s", "--remote-cluster-id", "x", "--service-type", "ClusterIP", "--node-port", "30001", "-o", "yaml"}, "--node-port needs"},
		{[]string{"create", "gatewayserver", "s", "--remote-cluster-id", "x", "--service-type", "NodePort", "--load-balancer-ip", "192.0.2.1", "-o", "yaml"}, "--load-balancer-ip needs"},
		{[]string{"create", "gatewayserver", "S_1", "--remote-cluster-id", "x", "-o", "yaml"}, `name "S_1"`},
		{[]string{"create", "gatewayserver", "s", "--remote-cluster-id", "no spaces", "-o", "yaml"}, `--remote-cluster-id "no spaces"`},
		{[]string{"create", "gatewayclient", "c", "--remote-cluster-id", "x", "--addresses", "10.42.3.300", "-o", "yaml"}, `--addresses "10.42.3.300"`},
		{[]string{"create", "gatewayclient", "c", "--remote-cluster-id", "x", "--addresses", "10.42.3.54", "--port", "70000", "-o", "yaml"}, "--port 70000"},
		{[]string{"create", "gatewayserver", "s", "--remote-cluster-id", "x", "-o", "xml"}, `output format "xml"`},
		// -o is checked before the API is reached: the kubeconfig does not exist.
		{[]string{"--kubeconfig", "/nonexistent", "network", "status", "-o", "xml"}, `--output "xml": want yaml or json`},
		{[]string{"--kubeconfig", "/nonexistent", "status", "-o", "table"}, `--output "table": want yaml or json`},
		{[]string{"generate", "configuration", "--kubeconfig", "/nonexistent/kubeconfig"}, "reading kubeconfig"},
		{[]string{"generate", "publickey", "--gateway-type", "router"}, `--gateway-type "router"`},
	} {
		_, err := run(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

// TestFlags walks the command tree: the flags spec/003 names exist with its defaults, and
// every command has help with an example.
func TestFlags(t *testing.T) {
	root := newRoot(&bytes.Buffer{}, &bytes.Buffer{})
	want := map[string]map[string]string{
		"create gatewayserver": {"service-type": "LoadBalancer", "port": "51820", "node-port": "0", "load-balancer-ip": "", "mtu": "1340", "remote-cluster-id": ""},
		"create gatewayclient": {"addresses": "[]", "port": "51820", "mtu": "1340", "remote-cluster-id": ""},
		"generate publickey":   {"gateway-type": "", "gateway-name": ""},
		"network connect": {"server-service-type": "LoadBalancer", "server-port": "51820", "node-port": "0", "load-balancer-ip": "", "mtu": "1340",
			"kubeconfig": "", "remote-kubeconfig": "", "wait": "false", "timeout": "2m0s",
			"context": "", "remote-context": "", "liqo-namespace": "liqo", "remote-liqo-namespace": "liqo", "namespace": "",
			"server-template-name": "wireguard-server", "server-template-namespace": "", "client-template-name": "wireguard-client", "client-template-namespace": ""},
		"network init":       {"kubeconfig": "", "remote-kubeconfig": "", "wait": "false", "timeout": "2m0s", "context": "", "remote-context": ""},
		"network disconnect": {"remote-kubeconfig": "", "wait": "false", "yes": "false", "skip-confirm": "false"},
		"network reset":      {"remote-kubeconfig": "", "wait": "false", "yes": "false", "skip-confirm": "false"},
		"diagnose":           {"output": "", "node": "false", "node-name": "", "overlay-device": "liqo.vxlan", "netns": ""},
	}
	// network status reads the local cluster only: no remote flags in its --help.
	if st, _, err := root.Find([]string{"network", "status"}); err != nil || st.Flags().Lookup("remote-kubeconfig") != nil || st.InheritedFlags().Lookup("remote-kubeconfig") != nil {
		t.Errorf("network status has --remote-kubeconfig (%v)", err)
	}
	for path, flags := range want {
		cmd, _, err := root.Find(strings.Fields(path))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for name, def := range flags {
			f := cmd.Flags().Lookup(name)
			if f == nil {
				f = cmd.InheritedFlags().Lookup(name)
			}
			if f == nil {
				t.Errorf("%s: no --%s", path, name)
				continue
			}
			if f.DefValue != def {
				t.Errorf("%s --%s defaults to %q, want %q", path, name, f.DefValue, def)
			}
		}
	}
	// liqoctl's short flags keep liqoctl's meaning.
	for short, long := range map[string]string{"n": "namespace", "l": "liqo-namespace", "y": "yes"} {
		cmd, _, _ := root.Find([]string{"network", "reset"})
		f := cmd.Flags().ShorthandLookup(short)
		if f == nil {
			f = cmd.InheritedFlags().ShorthandLookup(short)
		}
		if f == nil || f.Name != long {
			t.Errorf("-%s: %v, want --%s", short, f, long)
		}
	}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Runnable() && c.Example == "" {
			t.Errorf("%q has no example in its help", c.CommandPath())
		}
		// No flag says it is required where the command does not need it.
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if strings.Contains(f.Usage, "(required)") && c.Name() == "status" {
				t.Errorf("%s --%s: %q, but status does not need it", c.CommandPath(), f.Name, f.Usage)
			}
		})
		c.InheritedFlags().VisitAll(func(f *pflag.Flag) {
			if strings.Contains(f.Usage, "(required)") {
				t.Errorf("%s: the inherited --%s says %q", c.CommandPath(), f.Name, f.Usage)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	if out, err := run(t, "completion", "bash"); err != nil || !strings.Contains(out, "skeinctl") {
		t.Errorf("completion bash: %v", err)
	}
	if out, _ := run(t, "version", "--client"); !strings.HasPrefix(out, "skeinctl ") || strings.Contains(out, "cluster:") {
		t.Errorf("version --client: %q", out)
	}
	if out, _ := run(t, "version", "--kubeconfig", "/nonexistent/kubeconfig"); !strings.HasPrefix(out, "skeinctl ") || !strings.Contains(out, "cluster: not reachable") {
		t.Errorf("version without a cluster: %q", out)
	}
}

// TestGenerateGolden runs generate against a real API server holding a cluster's identity and
// a gateway with its key Secret.
func TestGenerateGolden(t *testing.T) {
	env := apitest.Start(t)
	c := env.Client
	ctx := context.Background()
	apitest.Must(t, env.EnsureNamespace(ctx, "liqo"))
	apitest.Must(t, c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: identity.ClusterIDConfigMap, Namespace: "liqo"},
		Data: map[string]string{identity.ClusterIDKey: "ef7a1f41-c753-4a0e-83e5-bed013e7fe4f"}}))
	apitest.Must(t, identity.PublishNetwork(ctx, c, "liqo", identity.Network{PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.243.0.0/16")},
		ExternalCIDR: netip.MustParsePrefix("10.70.0.0/16"), InternalCIDR: netip.MustParsePrefix("10.80.0.0/16")}))
	gc := &netv1alpha1.GatewayClient{ObjectMeta: metav1.ObjectMeta{Name: "client", Namespace: "default"},
		Spec: netv1alpha1.GatewayClientSpec{Endpoint: netv1alpha1.Endpoint{Addresses: []netv1alpha1.Address{"10.42.3.54"}, Port: 32133},
			ClientTemplateRef: netv1alpha1.TemplateRef{Kind: "WgGatewayClientTemplate", Name: "wireguard-client"}}}
	apitest.Must(t, c.Create(ctx, gc))
	gc.Status.SecretRef = &netv1alpha1.ObjectRef{Name: "client-wg-key"}
	apitest.Must(t, c.Status().Update(ctx, gc))
	apitest.Must(t, c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "client-wg-key", Namespace: "default"},
		Data: map[string][]byte{config.SecretPublicKey: []byte("GExyYe7RJ3Lo5nQVa6K2Tp9zobXCvWmJawsLxu7hn10=")}}))
	kc := env.KubeconfigFile(t)
	out, err := run(t, "--kubeconfig", kc, "generate", "configuration")
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "generate-configuration", out)
	out, err = run(t, "--kubeconfig", kc, "generate", "publickey", "--gateway-type", "client", "--gateway-name", "client")
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "generate-publickey", out)
	if _, err := run(t, "--kubeconfig", kc, "-l", "not-installed", "generate", "configuration"); err == nil || !strings.Contains(err.Error(), "is skein installed") {
		t.Errorf("skein not installed: %v", err)
	}
}

// TestVersionCluster: skeinctl version lists the images skein runs in the cluster.
func TestVersionCluster(t *testing.T) {
	env := apitest.Start(t)
	ctx := context.Background()
	ns := env.Namespace(t, "version")
	for i, img := range []string{"ghcr.io/skein-net/skein-agent:v0.2.0", "ghcr.io/skein-net/skein-agent:v0.2.0", "ghcr.io/skein-net/skein-controller:v0.2.0"} {
		name := strings.Split(strings.TrimPrefix(img, "ghcr.io/skein-net/skein-"), ":")[0]
		apitest.Must(t, env.Client.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i), Namespace: ns,
			Labels: map[string]string{"app.kubernetes.io/part-of": "skein"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: name, Image: img}}}}))
	}
	out, err := run(t, "--kubeconfig", env.KubeconfigFile(t), "version")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"cluster: agent ghcr.io/skein-net/skein-agent:v0.2.0 (2 pods)", "cluster: controller ghcr.io/skein-net/skein-controller:v0.2.0 (1 pods)"} {
		if !strings.Contains(out, want) {
			t.Errorf("skeinctl version:\n%s\nwant a line %q", out, want)
		}
	}
}
