package deploy

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestChartRefusesForeignCRDs: where a networking.liqo.io CRD exists that is not skein's (no
// app.kubernetes.io/part-of=skein, as Liqo's own), the chart refuses to install, naming it,
// before creating anything; over skein's own CRDs it installs.
func TestChartRefusesForeignCRDs(t *testing.T) {
	helmBinary(t)
	env := apiServer(t)
	ctx := context.Background()
	kubeconfig := env.KubeconfigFile(t)
	chart, err := filepath.Abs(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	ns := env.Namespace(t, "crdcheck")
	dryRun := func() (string, error) {
		return helm(t, kubeconfig, "install", "crdcheck", chart, "--namespace", ns, "--dry-run=server")
	}
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
