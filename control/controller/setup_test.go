package controller_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crconfig "sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/controller"
	"github.com/skein-net/skein/internal/apitest"
)

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
		apitest.CreateFromFile(t, c, filepath.Join("..", "..", "deploy", "templates", f), "liqo")
	}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: controller.CacheOptions(), Controller: crconfig.Controller{SkipNameValidation: &skipNameValidation}}) // the package's tests run every reconciler, some more than once, in one process
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
		where[f] = apitest.CreateFromFile(t, c, filepath.Join(dir, f), ns).GetNamespace()
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

// BenchmarkPeerings100 runs the skein-controller binary against the test API server, creates
// 100 peerings at once (a Configuration and a GatewayServer each, all on 10.244.0.0/16), and
// measures the time until every status is filled and the controller's peak RSS.
func BenchmarkPeerings100(b *testing.B) { benchmarkPeerings(b, 100, 16) }

// BenchmarkPeerings1000 is BenchmarkPeerings100 with 1,000 peerings (target: every status
// filled within 60 s). Their CIDRs are /20s: 2,000 remapped /16s would not fit in the pools.
func BenchmarkPeerings1000(b *testing.B) { benchmarkPeerings(b, 1000, 20) }

// benchmarkPeerings creates n peerings whose remote pod and external CIDRs (10.244.0.0 and
// 10.70.0.0) are /bits, all of them clashing, and reports the time until all 2n statuses are
// filled and the controller's peak RSS. The controller runs with its default API rate limit.
func benchmarkPeerings(b *testing.B, n, bits int) {
	env := apitest.Start(b)
	c := env.Client
	ctx := context.Background()
	if err := env.EnsureNamespace(ctx, "liqo"); err != nil {
		b.Fatal(err)
	}
	for _, f := range []string{"wireguard-server.yaml", "wireguard-client.yaml"} {
		apitest.CreateFromFile(b, c, filepath.Join("..", "..", "deploy", "templates", f), "liqo")
	}
	bin := filepath.Join(b.TempDir(), "skein-controller")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/skein-controller").CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	ns := env.Namespace(b, "bench")
	cmd := exec.Command(bin, "--kubeconfig", env.KubeconfigFile(b), "--namespace", "liqo", "--leader-elect=false", "--metrics-listen", "0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	time.Sleep(2 * time.Second)
	pod, external := netv1alpha1.CIDR(fmt.Sprintf("10.244.0.0/%d", bits)), netv1alpha1.CIDR(fmt.Sprintf("10.70.0.0/%d", bits))
	requestsBefore := apiRequests(b, env)
	began := time.Now()
	var wg sync.WaitGroup
	work := make(chan int)
	for range 100 { // the test client's own rate limit is envtest's (1000 QPS)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				id := fmt.Sprintf("cluster-%04d", i)
				labels := map[string]string{netv1alpha1.RemoteClusterIDLabel: id}
				if err := c.Create(ctx, &netv1alpha1.Configuration{ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: ns, Labels: labels},
					Spec: netv1alpha1.ConfigurationSpec{Remote: netv1alpha1.ClusterConfig{CIDR: netv1alpha1.ClusterConfigCIDR{Pod: pod, External: external}}}}); err != nil {
					b.Error(err)
				}
				if err := c.Create(ctx, &netv1alpha1.GatewayServer{ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: ns, Labels: labels},
					Spec: netv1alpha1.GatewayServerSpec{MTU: 1340, Endpoint: netv1alpha1.ServerEndpoint{Port: 51820, ServiceType: netv1alpha1.ServiceTypeClusterIP},
						ServerTemplateRef: netv1alpha1.TemplateRef{Kind: "WgGatewayServerTemplate", Name: "wireguard-server", Namespace: "liqo"}}}); err != nil {
					b.Error(err)
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	b.Logf("%d peerings created in %.1f s", n, time.Since(began).Seconds())
	timeout := 2 * time.Minute * time.Duration(max(1, n/100))
	for {
		var confs netv1alpha1.ConfigurationList
		var gws netv1alpha1.GatewayServerList
		c.List(ctx, &confs, client.InNamespace(ns))
		c.List(ctx, &gws, client.InNamespace(ns))
		done := 0
		for _, cf := range confs.Items {
			if cf.Status.Remote != nil {
				done++
			}
		}
		for _, g := range gws.Items {
			if g.Status.Endpoint != nil && g.Status.InternalEndpoint != nil && g.Status.InternalEndpoint.IP != nil && g.Status.SecretRef != nil {
				done++
			}
		}
		if done == 2*n {
			break
		}
		if time.Since(began) > timeout {
			b.Fatalf("only %d of %d statuses filled after %v", done, 2*n, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.ReportMetric(time.Since(began).Seconds(), fmt.Sprintf("s/%d-peerings", n))
	after := apiRequests(b, env)
	var writes, reads float64
	var rows []string
	for k, v := range after {
		d := v - requestsBefore[k]
		if d <= 0 {
			continue
		}
		verb, _, _ := strings.Cut(k, " ")
		switch verb {
		case "GET", "LIST", "WATCH":
			reads += d
		default:
			writes += d
		}
		rows = append(rows, fmt.Sprintf("%s %.0f", k, d))
	}
	sort.Strings(rows)
	b.Logf("API requests during the run (the test's own creates are 2 per peering):\n%s", strings.Join(rows, "\n"))
	b.ReportMetric(writes/float64(n), "writes/peering")
	b.ReportMetric(reads/float64(n), "reads/peering")
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	for _, l := range strings.Split(string(status), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.Atoi(f[1])
			b.ReportMetric(float64(kb)/1024, "controller-peak-RSS-MiB")
		}
	}
}

// skipNameValidation lets the package's tests register a reconciler again in the same process.
var skipNameValidation = true

// TestSetupRefusesPodCIDRs: local pod CIDRs that peers would refuse once published.
func TestSetupRefusesPodCIDRs(t *testing.T) {
	p := netip.MustParsePrefix
	for _, tc := range []struct {
		cidrs []netip.Prefix
		says  string
	}{
		{[]netip.Prefix{p("10.244.1.0/16")}, "host bits"},
		{[]netip.Prefix{p("10.244.0.0/16"), p("10.244.128.0/17")}, "overlap"},
		{nil, "want 1 to 16"},
	} {
		err := controller.Setup(nil, controller.Options{PodCIDRs: tc.cidrs, ExternalCIDR: p("10.70.0.0/16"), InternalCIDR: p("10.80.0.0/16")})
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("pod CIDRs %v: %v, want an error saying %q", tc.cidrs, err, tc.says)
		}
	}
}

// TestSetupRefusesExternalCIDRs: each family of the pod CIDRs needs an external CIDR of its
// own, of the right family, with room for nodes, that peers accept and that no other network
// of the cluster overlaps.
func TestSetupRefusesExternalCIDRs(t *testing.T) {
	p := netip.MustParsePrefix
	v4, v6, dual := []netip.Prefix{p("10.244.0.0/16")}, []netip.Prefix{p("fd00:244::/56")}, []netip.Prefix{p("10.244.0.0/16"), p("fd00:244::/56")}
	for _, tc := range []struct {
		pods      []netip.Prefix
		ext, ext6 netip.Prefix
		says      string
	}{
		{dual, p("10.70.0.0/16"), netip.Prefix{}, "the pod CIDRs include IPv6: an IPv6 external CIDR is required"},
		{v6, netip.Prefix{}, netip.Prefix{}, "the pod CIDRs include IPv6: an IPv6 external CIDR is required"},
		{v4, netip.Prefix{}, p("fd00:70::/112"), "the pod CIDRs include IPv4: an IPv4 external CIDR is required"},
		{v4, p("fd00:70::/112"), netip.Prefix{}, "IPv4 external CIDR fd00:70::/112: want an IPv4 CIDR"},
		{v4, p("10.70.0.0/31"), netip.Prefix{}, "/30 or larger"},
		{v6, netip.Prefix{}, p("10.70.0.0/16"), "IPv6 external CIDR 10.70.0.0/16: want an IPv6 CIDR"},
		{v6, netip.Prefix{}, p("::ffff:10.70.0.0/112"), "want an IPv6 CIDR"},
		{v6, netip.Prefix{}, p("fd00:70::1/112"), "without host bits"},
		// What a peer refuses in a Configuration (the whole peering with it) or what makes
		// the nodes' addresses someone else's.
		{v6, netip.Prefix{}, p("fe80::/112"), "overlaps fe80::/10 (link-local): peers refuse it"},
		{v6, netip.Prefix{}, p("ff02::/112"), "overlaps ff00::/8 (multicast)"},
		{v6, netip.Prefix{}, p("64:ff9b:1::/112"), "overlaps ::/8"}, // the gateways' own addresses
		{v6, netip.Prefix{}, p("::/0"), "overlaps ::/8"},
		{v6, netip.Prefix{}, p("fc00::/7"), "larger than a /32"},
		{v4, p("127.0.0.0/16"), netip.Prefix{}, "overlaps 127.0.0.0/8 (loopback)"},
		{v4, p("10.0.0.0/7"), netip.Prefix{}, "larger than a /8"},
		{v6, netip.Prefix{}, p("fd00:244::/112"), "overlaps the pod CIDR fd00:244::/56"},
		{dual, p("10.244.7.0/24"), p("fd00:70::/112"), "overlaps the pod CIDR 10.244.0.0/16"},
		{v4, p("10.80.0.0/24"), netip.Prefix{}, "overlaps the internal CIDR 10.80.0.0/16"},
		{v4, p("10.96.0.0/16"), netip.Prefix{}, "overlaps the service CIDR 10.96.0.0/12"},
	} {
		err := controller.Setup(nil, controller.Options{PodCIDRs: tc.pods, ServiceCIDRs: []netip.Prefix{p("10.96.0.0/12")}, ExternalCIDR: tc.ext, ExternalCIDR6: tc.ext6, InternalCIDR: p("10.80.0.0/16")})
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("pod CIDRs %v, external %v and %v: %v, want an error saying %q", tc.pods, tc.ext, tc.ext6, err, tc.says)
		}
	}
}

// apiRequests reads the API server's apiserver_request_total counters, summed by verb and
// resource (with subresource), as "VERB resource[/subresource]" -> count.
func apiRequests(tb testing.TB, env *apitest.Env) map[string]float64 {
	tb.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		tb.Fatal(err)
	}
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		tb.Fatalf("API server metrics: %v", err)
	}
	counts := map[string]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		labels, ok := strings.CutPrefix(line, "apiserver_request_total{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(labels, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		get := func(name string) string {
			_, rest, ok := strings.Cut(","+labels, ","+name+`="`)
			if !ok {
				return ""
			}
			val, _, _ := strings.Cut(rest, `"`)
			return val
		}
		key := get("verb") + " " + get("resource")
		if sub := get("subresource"); sub != "" {
			key += "/" + sub
		}
		counts[key] += v
	}
	return counts
}
