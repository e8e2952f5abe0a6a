package deploy

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/skein-net/skein/internal/apitest"
)

// serverDryRun gives a test the API server, a fresh namespace and a function installing the
// chart there with --dry-run=server (the chart's lookups run; nothing is created), extra helm
// arguments appended.
func serverDryRun(t *testing.T, name string) (*apitest.Env, string, func(args ...string) (string, error)) {
	t.Helper()
	helmBinary(t)
	env := apiServer(t)
	kubeconfig := env.KubeconfigFile(t)
	chart, err := filepath.Abs(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	ns := env.Namespace(t, name)
	return env, ns, func(args ...string) (string, error) {
		return helm(t, kubeconfig, append([]string{"install", name, chart, "--namespace", ns, "--dry-run=server"}, args...)...)
	}
}

// TestChartRefusesForeignCRDs: where a networking.liqo.io CRD exists that is not skein's (no
// app.kubernetes.io/part-of=skein, as Liqo's own), the chart refuses to install, naming it,
// before creating anything; over skein's own CRDs it installs.
func TestChartRefusesForeignCRDs(t *testing.T) {
	env, _, dryRunArgs := serverDryRun(t, "crdcheck")
	ctx := context.Background()
	dryRun := func() (string, error) { return dryRunArgs() }
	if out, err := dryRun(); err != nil {
		t.Fatalf("over skein's own CRDs: %v\n%s", err, out)
	}

	// Make one CRD look like another product's, and put it back at the end.
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	key := client.ObjectKey{Name: "gatewayservers.networking.liqo.io"}
	if err := env.Client.Get(ctx, key, crd); err != nil {
		t.Fatal(err)
	}
	relabel := func(value string) {
		t.Helper()
		if err := env.Client.Get(ctx, key, crd); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(crd.DeepCopy())
		labels := crd.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		if value == "" {
			delete(labels, "app.kubernetes.io/part-of")
		} else {
			labels["app.kubernetes.io/part-of"] = value
		}
		crd.SetLabels(labels)
		if err := env.Client.Patch(ctx, crd, patch); err != nil {
			t.Fatal(err)
		}
	}
	relabel("")
	defer relabel("skein")
	out, err := dryRun()
	if err == nil || !strings.Contains(err.Error()+out, "gatewayservers.networking.liqo.io exists and is not skein's") {
		t.Errorf("over a foreign CRD: %v\n%s", err, out)
	}
}

// TestChartRefusesRestrictedNamespace: the agent needs Pod Security "privileged"; in a
// namespace that enforces restricted or baseline the chart refuses, naming the fix, unless
// podSecurityCheck=false; privileged and unlabelled namespaces install.
func TestChartRefusesRestrictedNamespace(t *testing.T) {
	env, ns, dryRun := serverDryRun(t, "psacheck")
	ctx := context.Background()
	label := func(level string) {
		t.Helper()
		n := &corev1.Namespace{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: ns}, n); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(n.DeepCopy())
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels["pod-security.kubernetes.io/enforce"] = level
		if err := env.Client.Patch(ctx, n, patch); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := dryRun(); err != nil {
		t.Fatalf("unlabelled namespace: %v\n%s", err, out)
	}
	for _, level := range []string{"restricted", "baseline"} { // (the API server refuses other values)
		label(level)
		out, err := dryRun()
		if err == nil || !strings.Contains(err.Error()+out, "kubectl label namespace "+ns+" pod-security.kubernetes.io/enforce=privileged") {
			t.Errorf("namespace enforcing %s: %v\n%s", level, err, out)
		}
	}
	if out, err := dryRun("--set", "podSecurityCheck=false"); err != nil {
		t.Errorf("podSecurityCheck=false: %v\n%s", err, out)
	}
	label("privileged")
	if out, err := dryRun(); err != nil {
		t.Errorf("privileged namespace: %v\n%s", err, out)
	}
}
