package apiclient_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/skein-net/skein/control/agent/apiclient"
	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/kube/restapi"
	"github.com/skein-net/skein/internal/apitest"
)

// TestWatchAndPatch runs against a real API server: the informers list what exists, see
// what is created later, and the patches reach the objects (and report NotFound as such).
func TestWatchAndPatch(t *testing.T) {
	env := apitest.Start(t)
	c := env.Client
	ns := env.Namespace(t, "apiclient")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	conf := &netv1alpha1.Configuration{ObjectMeta: metav1.ObjectMeta{Name: "peer", Namespace: ns, Labels: map[string]string{netv1alpha1.RemoteClusterIDLabel: "x"}},
		Spec: netv1alpha1.ConfigurationSpec{Remote: netv1alpha1.ClusterConfig{CIDR: netv1alpha1.ClusterConfigCIDR{Pod: "10.244.0.0/16", External: "10.70.0.0/16"}}}}
	if err := c.Create(ctx, conf); err != nil {
		t.Fatal(err)
	}
	w, err := apiclient.New(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	var changes atomic.Int32
	changed := func() { changes.Add(1) }
	confs, err := w.Watch("configurations", &netv1alpha1.Configuration{}, changed)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := w.Watch("internalnodes", &netv1alpha1.InternalNode{}, changed)
	if err != nil {
		t.Fatal(err)
	}
	if err := restapi.Start(ctx, confs, nodes); err != nil {
		t.Fatal(err)
	}
	got := restapi.Get[netv1alpha1.Configuration](confs, ns+"/peer")
	if got == nil || got.Spec.Remote.CIDR.Pod != "10.244.0.0/16" || changes.Load() == 0 {
		t.Fatalf("listed configuration %+v after %d changes", got, changes.Load())
	}

	node := ns + "-n1"
	in := &netv1alpha1.InternalNode{ObjectMeta: metav1.ObjectMeta{Name: node}}
	if err := c.Create(ctx, in); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), in) })
	for restapi.Get[netv1alpha1.InternalNode](nodes, node) == nil {
		if ctx.Err() != nil {
			t.Fatal("the InternalNode created after the start never reached the cache")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := w.PatchStatus(ctx, "internalnodes", node, []byte(`{"status":{"vtep":{"ip":"192.168.77.1","mac":"02:5b:00:00:00:01"}}}`)); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(in), in); err != nil || in.Status.VTEP == nil || in.Status.VTEP.MAC != "02:5b:00:00:00:01" {
		t.Fatalf("VTEP after the patch: %+v (%v)", in.Status.VTEP, err)
	}
	for len(restapi.List[netv1alpha1.InternalNode](nodes)) == 0 || restapi.Get[netv1alpha1.InternalNode](nodes, node).Status.VTEP == nil {
		if ctx.Err() != nil {
			t.Fatal("the patched status never reached the cache")
		}
		time.Sleep(20 * time.Millisecond)
	}

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := w.PatchPod(ctx, ns, "agent", []byte(`{"metadata":{"annotations":{"net.liqo.io/vxlan.mac":"02:5b:00:00:00:01"}}}`)); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil || pod.Annotations["net.liqo.io/vxlan.mac"] != "02:5b:00:00:00:01" {
		t.Fatalf("pod annotations %v (%v)", pod.Annotations, err)
	}
	if err := w.PatchPod(ctx, ns, "missing", []byte(`{}`)); !apierrors.IsNotFound(err) {
		t.Fatalf("patching a missing pod: %v, want NotFound", err)
	}
}

// TestOwnerGone: an agent pod's DaemonSet present -> not gone; being deleted or deleted ->
// gone; a pod without a DaemonSet -> not gone; credentials refused -> gone.
func TestOwnerGone(t *testing.T) {
	env := apitest.Start(t)
	ns := env.Namespace(t, "owner")
	ctx := context.Background()
	c := env.Client
	labels := map[string]string{"app": "agent"}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "skein-agent", Namespace: ns},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "skein-agent"}}}}}}
	apitest.Must(t, c.Create(ctx, ds))
	pod := func(name string, owned bool) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "skein-agent"}}}}
		if owned {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID}}
		}
		apitest.Must(t, c.Create(ctx, p))
	}
	pod("owned", true)
	pod("by-hand", false)
	api, err := apiclient.New(env.Config)
	apitest.Must(t, err)
	check := func(name string, want bool) {
		t.Helper()
		gone, why, err := api.OwnerGone(ctx, ns, name)
		if err != nil || gone != want {
			t.Errorf("pod %s: gone %v (%s), %v; want %v", name, gone, why, err, want)
		}
	}
	check("owned", false)
	check("by-hand", false)
	// Without RBAC (the release's Role already deleted): gone.
	noRBAC := rest.CopyConfig(env.Config)
	noRBAC.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":skein-agent"}
	api2, err := apiclient.New(noRBAC)
	apitest.Must(t, err)
	if gone, why, err := api2.OwnerGone(ctx, ns, "owned"); err != nil || !gone {
		t.Errorf("credentials refused: gone %v (%s), %v", gone, why, err)
	}
	// The DaemonSet deleted (helm uninstall): gone. (No garbage collector here: the pod stays.)
	apitest.Must(t, c.Delete(ctx, ds))
	check("owned", true)
}
