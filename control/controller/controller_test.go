package controller_test

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/apitest"
	"github.com/skein-net/skein/control/controller"
)

// apply creates the manifest at path, in ns unless it names its own namespace, and returns
// the namespace it went to.
func apply(t *testing.T, c client.Client, path, ns string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(b, &u.Object); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if u.GetNamespace() == "" {
		u.SetNamespace(ns)
	}
	if err := c.Create(context.Background(), u); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	t.Cleanup(func() { c.Delete(context.Background(), u) })
	return u.GetNamespace()
}

// TestSpec003 applies every manifest of spec/003 in the spec's order, with the default
// templates installed in namespace liqo, and waits for the status fields the spec's script
// waits on: the Configuration's status.remote.cidr.pod, the GatewayServer's
// status.endpoint.addresses[0] and .port, and both gateways' status.internalEndpoint.ip.
func TestSpec003(t *testing.T) {
	env := apitest.Start(t)
	c := env.Client
	ctx := context.Background()
	ns := env.Namespace(t, "spec003")
	if err := env.EnsureNamespace(ctx, "liqo"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"wireguard-server.yaml", "wireguard-client.yaml"} {
		apply(t, c, filepath.Join("..", "..", "deploy", "templates", f), "liqo")
	}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	p := netip.MustParsePrefix
	if err := controller.Setup(mgr, controller.Options{PodCIDRs: []netip.Prefix{p("10.243.0.0/16")}, ServiceCIDRs: []netip.Prefix{p("10.96.0.0/12")},
		ExternalCIDR: p("10.70.0.0/16"), InternalCIDR: p("10.80.0.0/16")}); err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	defer func() { cancel(); <-done }()

	// What the lab's nodes and the gateway pod provide in a real cluster: a node with an
	// address, and the active server pod on it (NodePort endpoints use that node's address).
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: ns + "-node"}}
	if err := c.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Delete(context.Background(), node) })
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.42.3.54"}}
	if err := c.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "server-0", Namespace: ns,
		Labels: map[string]string{"networking.liqo.io/gateway": "server", "networking.liqo.io/active": "true"}},
		Spec: corev1.PodSpec{NodeName: node.Name, Containers: []corev1.Container{{Name: "gateway", Image: "skein-gateway"}}}}); err != nil {
		t.Fatal(err)
	}

	dir := filepath.Join("..", "api", "networking", "v1alpha1", "testdata", "spec003")
	where := map[string]string{}
	for _, f := range []string{"configuration.yaml", "gatewayserver.yaml", "gatewayclient.yaml", "publickey-server.yaml", "publickey-client.yaml"} {
		where[f] = apply(t, c, filepath.Join(dir, f), ns)
	}
	waitFor := func(what string, obj client.Object, file, name string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			if err := c.Get(ctx, client.ObjectKey{Namespace: where[file], Name: name}, obj); err == nil && ok() {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 30s: %+v", what, obj)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	conf := &netv1alpha1.Configuration{}
	waitFor("configuration status.remote.cidr.pod", conf, "configuration.yaml", "dry-paper", func() bool { return conf.Status.Remote != nil && conf.Status.Remote.CIDR.Pod != "" })
	if conf.Status.Remote.CIDR.Pod == "10.243.0.0/16" {
		t.Errorf("the remote pod CIDR clashes with the local one and was not remapped")
	}
	gs := &netv1alpha1.GatewayServer{}
	waitFor("gatewayserver status.endpoint", gs, "gatewayserver.yaml", "server", func() bool {
		return gs.Status.Endpoint != nil && len(gs.Status.Endpoint.Addresses) > 0 && gs.Status.InternalEndpoint != nil && gs.Status.InternalEndpoint.IP != nil
	})
	if gs.Status.Endpoint.Addresses[0] != "10.42.3.54" || gs.Status.Endpoint.Port < 30000 {
		t.Errorf("endpoint %+v", gs.Status.Endpoint)
	}
	gc := &netv1alpha1.GatewayClient{}
	waitFor("gatewayclient status.internalEndpoint.ip", gc, "gatewayclient.yaml", "client", func() bool {
		return gc.Status.InternalEndpoint != nil && gc.Status.InternalEndpoint.IP != nil
	})
	if *gc.Status.InternalEndpoint.IP == *gs.Status.InternalEndpoint.IP {
		t.Errorf("both gateways got overlay address %s", *gc.Status.InternalEndpoint.IP)
	}
	// A failure is a Kubernetes Event too: a second Configuration for the same cluster.
	dup := conf.DeepCopy()
	dup.ObjectMeta = metav1.ObjectMeta{Name: "dup", Namespace: conf.Namespace, Labels: conf.Labels}
	dup.Status = netv1alpha1.ConfigurationStatus{}
	if err := c.Create(ctx, dup); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var evs eventsv1.EventList
		found := false
		if err := c.List(ctx, &evs, client.InNamespace(conf.Namespace)); err == nil {
			for _, e := range evs.Items {
				found = found || (e.Reason == "DuplicateClusterID" && e.Regarding.Name == "dup" && e.Type == corev1.EventTypeWarning)
			}
		}
		if found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no DuplicateClusterID event")
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.Delete(ctx, dup)

	for _, f := range []string{"publickey-server.yaml", "publickey-client.yaml"} {
		var keys netv1alpha1.PublicKeyList
		if err := c.List(ctx, &keys, client.InNamespace(where[f])); err != nil || len(keys.Items) == 0 {
			t.Fatalf("public keys from %s: %d %v", f, len(keys.Items), err)
		}
	}
}
