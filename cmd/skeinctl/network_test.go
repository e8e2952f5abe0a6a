package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/controller"
	"github.com/skein-net/skein/control/identity"
	"github.com/skein-net/skein/control/kube"
	"github.com/skein-net/skein/internal/apitest"
	"github.com/skein-net/skein/internal/golden"
)

// cluster starts an API server with skein "installed": the identity ConfigMaps and the
// controller running in-process.
func cluster(t *testing.T, id string) (*apitest.Env, string) {
	env := apitest.Start(t)
	ctx := context.Background()
	apitest.Must(t, env.EnsureNamespace(ctx, "liqo"))
	apitest.Must(t, env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: identity.ClusterIDConfigMap, Namespace: "liqo"},
		Data: map[string]string{identity.ClusterIDKey: id}}))
	for _, f := range []string{"wireguard-server.yaml", "wireguard-client.yaml"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "templates", f))
		apitest.Must(t, err)
		u := &unstructured.Unstructured{}
		apitest.Must(t, yaml.Unmarshal(b, &u.Object))
		apitest.Must(t, env.Client.Create(ctx, u))
	}
	p := netip.MustParsePrefix
	opts := controller.Options{PodCIDRs: []netip.Prefix{p("10.244.0.0/16")}, ServiceCIDRs: []netip.Prefix{p("10.96.0.0/12")},
		ExternalCIDR: p("10.70.0.0/16"), InternalCIDR: p("10.80.0.0/16"), ClusterID: id, ServicesFrom: env.Config}
	apitest.Must(t, identity.PublishNetwork(ctx, env.Client, "liqo", identity.Network{PodCIDRs: opts.PodCIDRs, ServiceCIDRs: opts.ServiceCIDRs,
		ExternalCIDR: opts.ExternalCIDR, InternalCIDR: opts.InternalCIDR}))
	skip := true
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: &skip}})
	apitest.Must(t, err)
	apitest.Must(t, controller.Setup(mgr, opts))
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return env, env.KubeconfigFile(t)
}

func TestNetworkInitReset(t *testing.T) {
	const idA, idB = "ef7a1f41-c753-4a0e-83e5-bed013e7fe4f", "506f88d4-9918-4848-ab74-2a75ae32647f"
	a, kcA := cluster(t, idA)
	b, kcB := cluster(t, idB)
	ctx := context.Background()
	// B's pods come from two ranges: both are published, and A maps both.
	nb, err := identity.ReadNetwork(ctx, b.Client, "liqo")
	apitest.Must(t, err)
	nb.PodCIDRs = append(nb.PodCIDRs, netip.MustParsePrefix("10.245.0.0/16"))
	apitest.Must(t, identity.PublishNetwork(ctx, b.Client, "liqo", *nb))
	out, err := run(t, "--kubeconfig", kcA, "--timeout", "30s", "network", "init", "--remote-kubeconfig", kcB, "--wait")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	golden.Check(t, "network-init", out)
	for _, s := range []struct {
		env        *apitest.Env
		peer       string
		additional int
	}{{a, idB, 1}, {b, idA, 0}} {
		var confs netv1alpha1.ConfigurationList
		apitest.Must(t, s.env.Client.List(ctx, &confs, client.InNamespace(tenantNamespace(s.peer))))
		if len(confs.Items) != 1 || confs.Items[0].Status.Remote == nil || confs.Items[0].Status.Remote.CIDR.Pod == "10.244.0.0/16" {
			t.Fatalf("configurations of %s: %+v", s.peer, confs.Items)
		}
		if cidr := confs.Items[0].Status.Remote.CIDR; len(cidr.AdditionalPods) != s.additional || len(confs.Items[0].Spec.Remote.CIDR.AdditionalPods) != s.additional {
			t.Errorf("configuration of %s: spec %+v status %+v, want %d additional pod CIDRs", s.peer, confs.Items[0].Spec.Remote.CIDR, cidr, s.additional)
		}
	}
	// Again: nothing changes, and it says so.
	out, err = run(t, "--kubeconfig", kcA, "network", "init", "--remote-kubeconfig", kcB)
	if err != nil || strings.Count(out, "Configuration already applied") != 2 {
		t.Errorf("second init: %v\n%s", err, out)
	}
	// connect: the server in B, the client in A pointing at it, keys exchanged.
	// (Multi-cluster services: TestServicesCredentials.)
	out, err = run(t, "--kubeconfig", kcA, "network", "connect", "--remote-kubeconfig", kcB, "--server-service-type", "ClusterIP", "--skip-services")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	golden.Check(t, "network-connect", out)
	gs := &netv1alpha1.GatewayServer{}
	apitest.Must(t, b.Client.Get(ctx, client.ObjectKey{Namespace: tenantNamespace(idA), Name: "gw-" + identity.ClusterName(idA)}, gs))
	gc := &netv1alpha1.GatewayClient{}
	apitest.Must(t, a.Client.Get(ctx, client.ObjectKey{Namespace: tenantNamespace(idB), Name: "gw-" + identity.ClusterName(idB)}, gc))
	if gc.Spec.Endpoint.Addresses[0] != gs.Status.Endpoint.Addresses[0] || gc.Spec.Endpoint.Port != 51820 {
		t.Errorf("client endpoint %+v, server status %+v", gc.Spec.Endpoint, gs.Status.Endpoint)
	}
	for _, s := range []struct {
		env  *apitest.Env
		peer string
	}{{a, idB}, {b, idA}} {
		var keys netv1alpha1.PublicKeyList
		apitest.Must(t, s.env.Client.List(ctx, &keys, client.InNamespace(tenantNamespace(s.peer))))
		if len(keys.Items) != 1 || keys.Items[0].Labels[netv1alpha1.RemoteClusterIDLabel] != s.peer {
			t.Errorf("public keys for %s: %+v", s.peer, keys.Items)
		}
	}
	// network status lists the peering; status shows the cluster.
	if out, err := run(t, "--kubeconfig", kcA, "network", "status"); err != nil || !strings.Contains(out, idB) || !strings.Contains(out, "client") || !strings.Contains(out, "10.244.0.0/16,10.245.0.0/16") {
		t.Errorf("network status: %v\n%s", err, out)
	}
	if out, err := run(t, "--kubeconfig", kcA, "status"); err != nil || !strings.Contains(out, idA) || !strings.Contains(out, "10.70.0.0/16") || !strings.Contains(out, "not installed") {
		t.Errorf("status: %v\n%s", err, out)
	}
	if out, err := run(t, "--kubeconfig", kcA, "status", "-o", "json"); err != nil || !strings.Contains(out, `"clusterID": "`+idA) {
		t.Errorf("status -o json: %v\n%s", err, out)
	}
	// -o json and yaml of the peerings: a list, decodable, with the peer in it.
	for _, format := range []string{"json", "yaml"} {
		out, err := run(t, "--kubeconfig", kcA, "network", "status", "-o", format)
		var rows []map[string]any
		if err == nil {
			err = yaml.Unmarshal([]byte(out), &rows)
		}
		if err != nil || len(rows) != 1 || rows[0]["remoteClusterID"] != idB || rows[0]["gatewayRole"] != "client" {
			t.Errorf("network status -o %s: %v\n%s", format, err, out)
		}
	}
	// A controller installed under any release name is found by the chart's labels.
	replicas := int32(1)
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "fabric-controller", Namespace: "liqo",
		Labels: map[string]string{"app.kubernetes.io/name": "skein", "app.kubernetes.io/component": "controller"}},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "skein-controller"}}}}}}
	apitest.Must(t, a.Client.Create(ctx, dep))
	t.Cleanup(func() { a.Client.Delete(context.Background(), dep) })
	if out, err := run(t, "--kubeconfig", kcA, "status"); err != nil || !strings.Contains(out, "0/1 ready") {
		t.Errorf("status with a controller released as fabric: %v\n%s", err, out)
	}

	// Again: fine, and says so; a different MTU is refused.
	if out, err := run(t, "--kubeconfig", kcA, "network", "connect", "--remote-kubeconfig", kcB, "--server-service-type", "ClusterIP"); err != nil || !strings.Contains(out, "already set up") {
		t.Errorf("second connect: %v\n%s", err, out)
	}
	if _, err := run(t, "--kubeconfig", kcA, "network", "connect", "--remote-kubeconfig", kcB, "--server-service-type", "ClusterIP", "--mtu", "1400"); err == nil || !strings.Contains(err.Error(), "MTU must be the same") {
		t.Errorf("mismatched MTU: %v", err)
	}
	out, err = run(t, "--kubeconfig", kcA, "network", "disconnect", "--remote-kubeconfig", kcB, "--yes", "--wait")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	golden.Check(t, "network-disconnect", out)
	if err := a.Client.Get(ctx, client.ObjectKeyFromObject(gc), &netv1alpha1.GatewayClient{}); err == nil {
		t.Error("the GatewayClient survived disconnect")
	}
	var confsLeft netv1alpha1.ConfigurationList
	apitest.Must(t, a.Client.List(ctx, &confsLeft, client.InNamespace(tenantNamespace(idB))))
	if len(confsLeft.Items) != 1 {
		t.Error("disconnect removed the Configuration")
	}

	// reset needs --yes without a terminal.
	if _, err := run(t, "--kubeconfig", kcA, "network", "reset", "--remote-kubeconfig", kcB); err == nil || !strings.Contains(err.Error(), "--yes") {
		t.Errorf("reset without --yes: %v", err)
	}
	out, err = run(t, "--kubeconfig", kcA, "network", "reset", "--remote-kubeconfig", kcB, "--yes", "--wait")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	golden.Check(t, "network-reset", out)
	for _, s := range []struct {
		env  *apitest.Env
		peer string
	}{{a, idB}, {b, idA}} {
		var confs netv1alpha1.ConfigurationList
		apitest.Must(t, s.env.Client.List(ctx, &confs, client.InNamespace(tenantNamespace(s.peer))))
		if len(confs.Items) != 0 {
			t.Errorf("configurations left after reset: %d", len(confs.Items))
		}
	}
	// A cluster cannot peer with itself.
	if _, err := run(t, "--kubeconfig", kcA, "network", "init", "--remote-kubeconfig", kcA); err == nil || !strings.Contains(err.Error(), "itself") {
		t.Errorf("self-peering: %v", err)
	}
	if _, err := run(t, "--kubeconfig", kcA, "network", "init"); err == nil || !strings.Contains(err.Error(), "--remote-kubeconfig is required") {
		t.Errorf("no remote: %v", err)
	}
}

// TestConcurrentConnects: five `network connect`s of the same pair at once (two terminals, a
// retrying script) all succeed and make one server, one client and one PublicKey each side,
// instead of failing with "already exists".
func TestConcurrentConnects(t *testing.T) {
	const idA, idB = "0f6a6b58-52b3-4d4c-9d3e-7f1f3a3c1e01", "7c2d0e9a-1b2c-4d5e-8f90-a1b2c3d4e5f6"
	a, kcA := cluster(t, idA)
	b, kcB := cluster(t, idB)
	if out, err := run(t, "--kubeconfig", kcA, "--timeout", "30s", "network", "init", "--remote-kubeconfig", kcB); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	errs := make(chan error, 5)
	for range 5 {
		go func() {
			out, err := run(t, "--kubeconfig", kcA, "--timeout", "60s", "network", "connect", "--remote-kubeconfig", kcB, "--server-service-type", "ClusterIP")
			if err != nil {
				err = fmt.Errorf("%w\n%s", err, out)
			}
			errs <- err
		}()
	}
	for range 5 {
		if err := <-errs; err != nil {
			t.Errorf("a concurrent connect failed: %v", err)
		}
	}
	ctx := context.Background()
	var servers netv1alpha1.GatewayServerList
	apitest.Must(t, b.Client.List(ctx, &servers, client.InNamespace(tenantNamespace(idA))))
	var clients netv1alpha1.GatewayClientList
	apitest.Must(t, a.Client.List(ctx, &clients, client.InNamespace(tenantNamespace(idB))))
	if len(servers.Items) != 1 || len(clients.Items) != 1 {
		t.Errorf("%d servers and %d clients, want one each", len(servers.Items), len(clients.Items))
	}
}

// TestTimeoutHonoured: an API server that accepts connections and never answers makes
// skeinctl give up after --timeout, not after a fixed 30 s.
func TestTimeoutHonoured(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c) // connected, never answered
		}
	}()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	apitest.Must(t, os.WriteFile(kc, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://%s", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, ln.Addr())), 0o600))
	start := time.Now()
	_, err = run(t, "--kubeconfig", kc, "--timeout", "1s", "status")
	if err == nil || !strings.Contains(err.Error(), "not reachable") {
		t.Fatalf("status against a silent API server: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("gave up after %v with --timeout 1s", d.Round(time.Millisecond))
	}
}

// TestCollidingPeerNames: a cluster peering with two clusters whose friendly names collide
// (both vivid-resonance) keeps both peerings: two tenant namespaces, two Configurations, two
// gateways, two PublicKeys, each labelled for its peer; disconnecting one leaves the other.
func TestCollidingPeerNames(t *testing.T) {
	const idA = "3d0c9a55-7f41-4a4e-9d7a-0b8e4e6b7c11"
	const idB, idC = "4be03db0-dc25-44bd-b940-67edfe175330", "f9341c68-966b-4ea1-88be-ab134da98f1d"
	if identity.ClusterName(idB) != identity.ClusterName(idC) {
		t.Fatalf("the ids no longer collide: %s, %s", identity.ClusterName(idB), identity.ClusterName(idC))
	}
	a, kcA := cluster(t, idA)
	_, kcB := cluster(t, idB)
	_, kcC := cluster(t, idC)
	for _, kc := range []string{kcB, kcC} {
		out, err := run(t, "--kubeconfig", kcA, "--timeout", "60s", "network", "connect", "--remote-kubeconfig", kc, "--server-service-type", "ClusterIP")
		if err != nil {
			t.Fatalf("connect: %v\n%s", err, out)
		}
		if strings.Contains(out, "already") {
			t.Errorf("connect to a new peer found something already set up:\n%s", out)
		}
	}
	ctx := context.Background()
	check := func(peers ...string) {
		t.Helper()
		for _, list := range []client.ObjectList{&netv1alpha1.ConfigurationList{}, &netv1alpha1.GatewayClientList{}, &netv1alpha1.PublicKeyList{}} {
			apitest.Must(t, a.Client.List(ctx, list))
			items, _ := meta.ExtractList(list)
			byPeer := map[string]string{}
			for _, it := range items {
				o := it.(client.Object)
				byPeer[o.GetLabels()[netv1alpha1.RemoteClusterIDLabel]] = o.GetNamespace()
			}
			if len(items) != len(peers) {
				t.Errorf("%T: %d objects, want %d (one per peer): %v", list, len(items), len(peers), byPeer)
			}
			for _, p := range peers {
				if byPeer[p] != tenantNamespace(p) {
					t.Errorf("%T: peer %s's object in %q, want %s", list, p, byPeer[p], tenantNamespace(p))
				}
			}
		}
	}
	check(idB, idC)
	if tenantNamespace(idB) == tenantNamespace(idC) {
		t.Fatalf("one tenant namespace for both peers: %s", tenantNamespace(idB))
	}
	out, err := run(t, "--kubeconfig", kcA, "network", "reset", "--remote-kubeconfig", kcB, "--yes", "--wait")
	if err != nil {
		t.Fatalf("reset: %v\n%s", err, out)
	}
	check(idC)
}

// TestManualFlowSeen: after the spec's manual flow (objects in namespace default), network
// init and connect use those objects instead of making a second peering in a tenant
// namespace; reset deletes them, names what it leaves alone, and does not claim a deletion
// when there is nothing to delete. An object of the peering's name that belongs to another
// peer is refused, not overwritten.
func TestManualFlowSeen(t *testing.T) {
	const idA, idB = "5a8e2c1d-0b4f-4e6a-9c3d-2f1e0a9b8c71", "9e7d6c5b-4a39-4281-9f0e-1d2c3b4a5f62"
	a, kcA := cluster(t, idA)
	b, kcB := cluster(t, idB)
	ctx := context.Background()
	// The manual flow's Configurations, applied in default on both sides.
	for _, s := range []struct {
		env  *apitest.Env
		kc   string
		peer string
	}{{a, kcB, idB}, {b, kcA, idA}} {
		out, err := run(t, "--kubeconfig", s.kc, "generate", "configuration")
		if err != nil {
			t.Fatalf("generate configuration: %v\n%s", err, out)
		}
		conf := &netv1alpha1.Configuration{}
		apitest.Must(t, yaml.Unmarshal([]byte(out), conf))
		if conf.Name != identity.PeerName(s.peer) {
			t.Errorf("generated configuration named %s, want %s", conf.Name, identity.PeerName(s.peer))
		}
		conf.Namespace = "default"
		apitest.Must(t, s.env.Client.Create(ctx, conf))
	}
	// Something unlabelled in default, which nothing may touch.
	stranger := &netv1alpha1.PublicKey{ObjectMeta: metav1.ObjectMeta{Name: "stranger", Namespace: "default"},
		Spec: netv1alpha1.PublicKeySpec{PublicKey: "GExyYe7RJ3Lo5nQVa6K2Tp9zobXCvWmJawsLxu7hn10="}}
	apitest.Must(t, a.Client.Create(ctx, stranger))

	out, err := run(t, "--kubeconfig", kcA, "--timeout", "60s", "network", "connect", "--remote-kubeconfig", kcB, "--server-service-type", "ClusterIP")
	if err != nil {
		t.Fatalf("connect after the manual configurations: %v\n%s", err, out)
	}
	if !strings.Contains(out, "Using the existing Configuration default/") || strings.Contains(out, "Configuration applied successfully") {
		t.Errorf("connect did not use the manual flow's Configurations:\n%s", out)
	}
	// Run again with another port: the existing server's Service changes, and the client
	// follows (a connect that failed on a LoadBalancer without an address is redone the same
	// way with NodePort).
	out, err = run(t, "--kubeconfig", kcA, "--timeout", "60s", "network", "connect", "--remote-kubeconfig", kcB, "--server-service-type", "ClusterIP", "--server-port", "51999")
	if err != nil || !strings.Contains(out, "Gateway server updated: service ClusterIP port 51999 (was ClusterIP port 51820)") {
		t.Errorf("connect with another --server-port: %v\n%s", err, out)
	}
	var servers netv1alpha1.GatewayServerList
	apitest.Must(t, b.Client.List(ctx, &servers))
	if len(servers.Items) != 1 || servers.Items[0].Spec.Endpoint.Port != 51999 {
		t.Errorf("gateway servers in B after the second connect: %+v", servers.Items)
	}
	var confs netv1alpha1.ConfigurationList
	apitest.Must(t, a.Client.List(ctx, &confs))
	if len(confs.Items) != 1 || confs.Items[0].Namespace != "default" {
		t.Errorf("configurations in A after connect: %d (want the manual one only)", len(confs.Items))
	}
	var clients netv1alpha1.GatewayClientList
	apitest.Must(t, a.Client.List(ctx, &clients))
	if len(clients.Items) != 1 || clients.Items[0].Namespace != "default" || clients.Items[0].Name != "gw-"+identity.PeerName(idB) {
		t.Errorf("gateway clients in A: %+v, want gw-%s in default", clients.Items, identity.PeerName(idB))
	}

	out, err = run(t, "--kubeconfig", kcA, "network", "reset", "--remote-kubeconfig", kcB, "--yes", "--wait")
	if err != nil {
		t.Fatalf("reset: %v\n%s", err, out)
	}
	if !strings.Contains(out, "Left alone: PublicKey default/stranger") {
		t.Errorf("reset does not say it left the unlabelled PublicKey alone:\n%s", out)
	}
	for _, env := range []*apitest.Env{a, b} {
		for _, list := range []client.ObjectList{&netv1alpha1.ConfigurationList{}, &netv1alpha1.GatewayClientList{}, &netv1alpha1.GatewayServerList{}} {
			apitest.Must(t, env.Client.List(ctx, list))
			if n := meta.LenList(list); n != 0 {
				t.Errorf("%T: %d left after reset", list, n)
			}
		}
	}
	apitest.Must(t, a.Client.Get(ctx, client.ObjectKeyFromObject(stranger), &netv1alpha1.PublicKey{}))
	out, err = run(t, "--kubeconfig", kcA, "network", "reset", "--remote-kubeconfig", kcB, "--yes")
	if err != nil || strings.Contains(out, "correctly deleted") || !strings.Contains(out, "No network configuration of cluster") {
		t.Errorf("a second reset: %v\n%s", err, out)
	}

	// A Configuration of the peering's name, in its tenant namespace, labelled for another peer.
	apitest.Must(t, a.EnsureNamespace(ctx, tenantNamespace(idB)))
	other := &netv1alpha1.Configuration{ObjectMeta: metav1.ObjectMeta{Name: identity.ClusterName(idB), Namespace: tenantNamespace(idB),
		Labels: map[string]string{netv1alpha1.RemoteClusterIDLabel: "00000000-0000-4000-8000-000000000001"}},
		Spec: netv1alpha1.ConfigurationSpec{Remote: netv1alpha1.ClusterConfig{CIDR: netv1alpha1.ClusterConfigCIDR{Pod: "10.250.0.0/16", External: "10.251.0.0/16"}}}}
	apitest.Must(t, a.Client.Create(ctx, other))
	_, err = run(t, "--kubeconfig", kcA, "network", "init", "--remote-kubeconfig", kcB)
	if err == nil || !strings.Contains(err.Error(), "belongs to the peering with cluster 00000000-0000-4000-8000-000000000001") {
		t.Errorf("init over another peer's Configuration: %v", err)
	}
	got := &netv1alpha1.Configuration{}
	apitest.Must(t, a.Client.Get(ctx, client.ObjectKeyFromObject(other), got))
	if !reflect.DeepEqual(got.Spec, other.Spec) || got.Labels[netv1alpha1.RemoteClusterIDLabel] != other.Labels[netv1alpha1.RemoteClusterIDLabel] {
		t.Errorf("another peer's Configuration was changed: %+v", got)
	}
}

// TestContexts: liqoctl's way of naming two clusters in one kubeconfig (--context and
// --remote-context) and of skipping the question (--skip-confirm) work; a context that does
// not exist is named in the error.
func TestContexts(t *testing.T) {
	const idA, idB = "6b1f0c2e-3d4a-4b5c-8d6e-7f8091a2b3c4", "c4b3a291-80f7-4e6d-9c5b-4a3d2e1f0b6a"
	_, kcA := cluster(t, idA)
	_, kcB := cluster(t, idB)
	merged := clientcmdapi.NewConfig()
	for name, kc := range map[string]string{"a": kcA, "b": kcB} {
		cfg, err := clientcmd.LoadFromFile(kc)
		apitest.Must(t, err)
		ctx := cfg.Contexts[cfg.CurrentContext]
		merged.Clusters[name] = cfg.Clusters[ctx.Cluster]
		merged.AuthInfos[name] = cfg.AuthInfos[ctx.AuthInfo]
		merged.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	}
	merged.CurrentContext = "b" // the wrong one for the local side: --context must win
	path := filepath.Join(t.TempDir(), "kubeconfig")
	apitest.Must(t, clientcmd.WriteToFile(*merged, path))

	out, err := run(t, "--kubeconfig", path, "--context", "a", "--timeout", "30s", "network", "init", "--remote-context", "b", "--wait")
	if err != nil {
		t.Fatalf("init with contexts: %v\n%s", err, out)
	}
	if out, err := run(t, "--kubeconfig", path, "--context", "a", "status"); err != nil || !strings.Contains(out, idA) {
		t.Errorf("status --context a: %v\n%s", err, out)
	}
	// The client dials what --client-address and --client-port say (a NAT in front of the
	// server), in order; bad values are refused before anything is created.
	for _, bad := range [][]string{{"--client-address", "not a name!"}, {"--client-address", "10.0.0.256"}, {"--client-port", "70000"}, {"--node-port", "8080"}} {
		args := append([]string{"--kubeconfig", path, "--context", "a", "network", "connect", "--remote-context", "b", "--server-service-type", "ClusterIP"}, bad...)
		if _, err := run(t, args...); err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("connect %v: %v, want an error naming %s", bad, err, bad[0])
		}
	}
	out, err = run(t, "--kubeconfig", path, "--context", "a", "--timeout", "60s", "network", "connect", "--remote-context", "b",
		"--server-service-type", "ClusterIP", "--client-address", "203.0.113.9,gw.peer.example", "--client-port", "31820")
	if err != nil {
		t.Fatalf("connect with overrides: %v\n%s", err, out)
	}
	a, _ := clientcmd.BuildConfigFromFlags("", kcA)
	ca, err := client.New(a, client.Options{Scheme: kube.Scheme()})
	apitest.Must(t, err)
	var gcs netv1alpha1.GatewayClientList
	apitest.Must(t, ca.List(context.Background(), &gcs))
	if len(gcs.Items) != 1 || fmt.Sprint(gcs.Items[0].Spec.Endpoint.Addresses) != "[203.0.113.9 gw.peer.example]" || gcs.Items[0].Spec.Endpoint.Port != 31820 {
		t.Errorf("gateway clients after connect with overrides: %+v", gcs.Items)
	}
	// Again without the flags: the overrides stay, and it says so.
	out, err = run(t, "--kubeconfig", path, "--context", "a", "--timeout", "60s", "network", "connect", "--remote-context", "b", "--server-service-type", "ClusterIP")
	if err != nil || !strings.Contains(out, "keeps dialing [203.0.113.9 gw.peer.example] port 31820") {
		t.Errorf("connect again without the overrides: %v\n%s", err, out)
	}
	apitest.Must(t, ca.List(context.Background(), &gcs))
	if len(gcs.Items) != 1 || fmt.Sprint(gcs.Items[0].Spec.Endpoint.Addresses) != "[203.0.113.9 gw.peer.example]" || gcs.Items[0].Spec.Endpoint.Port != 31820 {
		t.Errorf("gateway clients after connect again without the overrides: %+v", gcs.Items[0].Spec.Endpoint)
	}
	out, err = run(t, "--kubeconfig", path, "--context", "a", "network", "reset", "--remote-context", "b", "--skip-confirm", "--wait")
	if err != nil || !strings.Contains(out, "Network configuration correctly deleted") {
		t.Errorf("reset --skip-confirm: %v\n%s", err, out)
	}
	if _, err := run(t, "--kubeconfig", path, "--context", "nope", "status"); err == nil || !strings.Contains(err.Error(), `context "nope"`) {
		t.Errorf("an unknown context: %v", err)
	}
}

// TestClusterGatewayDefaults: without --mtu, --server-service-type and --server-port, connect
// uses the clusters' published gateway defaults (the chart's peering.networking.gateway.*): the
// server's Service as the remote cluster says, the MTU both agree on; when they disagree it
// asks for --mtu.
func TestClusterGatewayDefaults(t *testing.T) {
	const idA, idB = "1e2d3c4b-5a69-4788-97a6-b5c4d3e2f101", "2f3e4d5c-6b7a-4899-a8b7-c6d5e4f30212"
	a, kcA := cluster(t, idA)
	b, kcB := cluster(t, idB)
	ctx := context.Background()
	publish := func(env *apitest.Env, g identity.GatewayDefaults) {
		n, err := identity.ReadNetwork(ctx, env.Client, "liqo")
		apitest.Must(t, err)
		n.Gateway = g
		apitest.Must(t, identity.PublishNetwork(ctx, env.Client, "liqo", *n))
	}
	publish(a, identity.GatewayDefaults{MTU: 1300, ServerServiceType: "LoadBalancer", ServerPort: 51820})
	publish(b, identity.GatewayDefaults{MTU: 1400, ServerServiceType: "ClusterIP", ServerPort: 31999})
	_, err := run(t, "--kubeconfig", kcA, "--timeout", "60s", "network", "connect", "--remote-kubeconfig", kcB)
	if err == nil || !strings.Contains(err.Error(), "1300 here, 1400 in the remote cluster): pass --mtu") {
		t.Fatalf("connect with disagreeing default MTUs: %v", err)
	}
	publish(a, identity.GatewayDefaults{MTU: 1400, ServerServiceType: "LoadBalancer", ServerPort: 51820})
	if out, err := run(t, "--kubeconfig", kcA, "--timeout", "60s", "network", "connect", "--remote-kubeconfig", kcB); err != nil {
		t.Fatalf("connect with the clusters' defaults: %v\n%s", err, out)
	}
	var servers netv1alpha1.GatewayServerList
	apitest.Must(t, b.Client.List(ctx, &servers))
	var clients netv1alpha1.GatewayClientList
	apitest.Must(t, a.Client.List(ctx, &clients))
	if len(servers.Items) != 1 || len(clients.Items) != 1 {
		t.Fatalf("%d servers, %d clients", len(servers.Items), len(clients.Items))
	}
	gs, gc := servers.Items[0], clients.Items[0]
	if gs.Spec.MTU != 1400 || gs.Spec.Endpoint.ServiceType != "ClusterIP" || gs.Spec.Endpoint.Port != 31999 || gc.Spec.MTU != 1400 {
		t.Errorf("server %+v MTU %d, client MTU %d: want the remote's ClusterIP:31999 and MTU 1400", gs.Spec.Endpoint, gs.Spec.MTU, gc.Spec.MTU)
	}
}
