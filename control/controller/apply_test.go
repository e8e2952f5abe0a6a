package controller_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/internal/apitest"
	"github.com/skein-net/skein/internal/k8sbin"
)

// startDeploymentController runs the real kube-controller-manager from skein's cache against
// the test's API server with only the Deployment and ReplicaSet controllers: the controllers
// that write to a gateway's Deployment on every real cluster.
func startDeploymentController(t *testing.T, env *apitest.Env) {
	t.Helper()
	bin, ok := k8sbin.Ready()
	if !ok {
		t.Fatalf("the Kubernetes binaries are not built in %s: run 'make k8s-binaries'", bin)
	}
	kubeconfig := env.KubeconfigFile(t)
	args := []string{"--pdeathsig", "KILL", "--", filepath.Join(bin, "kube-controller-manager"),
		"--kubeconfig", kubeconfig, "--authentication-kubeconfig", kubeconfig, "--authorization-kubeconfig", kubeconfig,
		"--controllers", "deployment,replicaset", "--leader-elect=false", "--secure-port", "0", "--profiling=false"}
	cmd := exec.Command("setpriv", args...)
	logFile, err := os.Create(filepath.Join(t.TempDir(), "kube-controller-manager.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("start kube-controller-manager: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			t.Logf("kube-controller-manager's log:\n%s", b)
		}
		logFile.Close()
	})
}

// TestNoFightWithKubeControllerManager: a GatewayServer's Deployment and Service next to the
// real Deployment controller; then an edit of the gateway's template reaches the Deployment. The Deployment controller annotates the Deployment with its
// revision, a load-balancer controller (played by the test) annotates the Service; skein
// applies only the fields it renders, so over 30 s neither the Deployment's generation nor
// anyone's annotations move (an update-based controller took the revision away again and again:
// 108 re-adds in 5 s, generation 1 -> 109).
func TestNoFightWithKubeControllerManager(t *testing.T) {
	env := apitest.Start(t)
	c := env.Client
	ns := env.Namespace(t, "nofight")
	ctx := context.Background()
	installTemplates(t, c, ns)
	startDeploymentController(t, env)
	stop := startGateways(t, env)
	defer stop()

	gs := &netv1alpha1.GatewayServer{
		ObjectMeta: metav1.ObjectMeta{Name: "server", Namespace: ns, Labels: map[string]string{netv1alpha1.RemoteClusterIDLabel: "cluster-b"}},
		Spec: netv1alpha1.GatewayServerSpec{MTU: netv1alpha1.DefaultMTU, Endpoint: netv1alpha1.ServerEndpoint{Port: netv1alpha1.DefaultPort, ServiceType: netv1alpha1.ServiceTypeNodePort},
			ServerTemplateRef: netv1alpha1.TemplateRef{Kind: "WgGatewayServerTemplate", Name: "wireguard-server"}},
	}
	apitest.Must(t, c.Create(ctx, gs))
	key := client.ObjectKeyFromObject(gs)
	const revision, pool = "deployment.kubernetes.io/revision", "metallb.universe.tf/ip-allocated-from-pool"
	dep := &appsv1.Deployment{}
	apitest.Eventually(t, "the Deployment controller's revision annotation on the gateway's Deployment", 30*time.Second, func() bool {
		return c.Get(ctx, key, dep) == nil && dep.Annotations[revision] != ""
	})
	svc := &corev1.Service{}
	apitest.Eventually(t, "the gateway's Service", 30*time.Second, func() bool { return c.Get(ctx, key, svc) == nil })
	patch := client.MergeFrom(svc.DeepCopy())
	metav1.SetMetaDataAnnotation(&svc.ObjectMeta, pool, "pool-a")
	apitest.Must(t, c.Patch(ctx, svc, patch))
	// A change of the gateway makes the controller apply again, with the annotations in place.
	touch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"touched":"yes"}}}`))
	apitest.Must(t, c.Patch(ctx, gs, touch))

	generation := dep.Generation
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		apitest.Must(t, c.Get(ctx, key, dep))
		apitest.Must(t, c.Get(ctx, key, svc))
		if dep.Generation != generation || dep.Annotations[revision] == "" || svc.Annotations[pool] != "pool-a" {
			t.Fatalf("a fight: Deployment generation %d -> %d, revision annotation %q, Service annotation %s=%q",
				generation, dep.Generation, dep.Annotations[revision], pool, svc.Annotations[pool])
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("30 s: Deployment generation stayed %d, revision %s, the Service kept %s", generation, dep.Annotations[revision], pool)

	// A template edit rolls out: the image follows and the Deployment controller makes a new
	// ReplicaSet for it.
	tmpl := &netv1alpha1.WgGatewayServerTemplate{}
	apitest.Must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "wireguard-server"}, tmpl))
	var tree map[string]any
	apitest.Must(t, json.Unmarshal(tmpl.Spec.Template.Raw, &tree))
	containers := dig(tree, "spec", "deployment", "template", "spec")["containers"].([]any)
	containers[0].(map[string]any)["image"] = "ghcr.io/skein-net/skein-gateway:next"
	raw, err := json.Marshal(tree)
	apitest.Must(t, err)
	tmpl.Spec.Template.Raw = raw
	apitest.Must(t, c.Update(ctx, tmpl))
	apitest.Eventually(t, "the template's new image in the gateway's Deployment and a second ReplicaSet", 30*time.Second, func() bool {
		var sets appsv1.ReplicaSetList
		return c.Get(ctx, key, dep) == nil && dep.Spec.Template.Spec.Containers[0].Image == "ghcr.io/skein-net/skein-gateway:next" &&
			c.List(ctx, &sets, client.InNamespace(ns)) == nil && len(sets.Items) == 2
	})
}

// dig walks down a JSON tree by keys.
func dig(tree map[string]any, keys ...string) map[string]any {
	for _, k := range keys {
		tree = tree[k].(map[string]any)
	}
	return tree
}
