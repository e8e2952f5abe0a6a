package controller_test

import (
	"context"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crconfig "sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/controller"
	"github.com/skein-net/skein/control/controller/ipam"
	"github.com/skein-net/skein/control/identity"
	"github.com/skein-net/skein/dataplane/nat"
	"github.com/skein-net/skein/internal/apitest"
)

var local = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.96.0.0/12"),
	netip.MustParsePrefix("10.70.0.0/16"), netip.MustParsePrefix("10.80.0.0/16")}

// start runs the Configuration reconciler in a manager until the returned stop is called.
func startConfigurations(t *testing.T, env *apitest.Env, opts ...func(*controller.ConfigurationReconciler)) (stop func()) {
	return startConfigurationsTB(t, env, opts...)
}

func startConfigurationsTB(t testing.TB, env *apitest.Env, opts ...func(*controller.ConfigurationReconciler)) (stop func()) {
	t.Helper()
	skip := true // a restarted controller registers its name again in this process
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: crconfig.Controller{SkipNameValidation: &skip}})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := ipam.New(ipam.DefaultPools, local)
	r := &controller.ConfigurationReconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), IPAM: a}
	for _, o := range opts {
		o(r)
	}
	if err := r.Restore(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// apiServerSlice creates an EndpointSlice of the API server's address in ns (a managed control
// plane's, off the node network), for ConfigurationReconciler.APIServerEndpoints.
func apiServerSlice(t *testing.T, c client.Client, ns, addr string) *discoveryv1.EndpointSlice {
	t.Helper()
	es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "apiserver", Namespace: ns}, AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{addr}}}}
	apitest.Must(t, c.Create(context.Background(), es))
	return es
}

func conf(ns, name, id, pod, ext string) *netv1alpha1.Configuration {
	return &netv1alpha1.Configuration{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{netv1alpha1.RemoteClusterIDLabel: id}},
		Spec:       netv1alpha1.ConfigurationSpec{Remote: netv1alpha1.ClusterConfig{CIDR: netv1alpha1.ClusterConfigCIDR{Pod: netv1alpha1.CIDR(pod), External: netv1alpha1.CIDR(ext)}}},
	}
}

// waitStatus waits until every named Configuration has a Ready condition and returns them.
func waitStatus(t *testing.T, c client.Client, ns string, names ...string) map[string]*netv1alpha1.Configuration {
	t.Helper()
	out := map[string]*netv1alpha1.Configuration{}
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range names {
		for {
			cf := &netv1alpha1.Configuration{}
			if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: n}, cf); err == nil && meta.FindStatusCondition(cf.Status.Conditions, "Ready") != nil {
				out[n] = cf
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("configuration %s got no Ready condition", n)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return out
}

func TestIPAM(t *testing.T) {
	env := apitest.Start(t)
	c := env.Client
	ns := env.Namespace(t, "ipam")
	ctx := context.Background()

	id, err := identity.EnsureClusterID(ctx, c, ns)
	if err != nil || len(id) != 36 {
		t.Fatalf("cluster id %q %v", id, err)
	}
	if again, _ := identity.EnsureClusterID(ctx, c, ns); again != id {
		t.Errorf("cluster id changed: %s -> %s", id, again)
	}

	stop := startConfigurations(t, env)
	for i, name := range []string{"b", "c", "d"} {
		if err := c.Create(ctx, conf(ns, name, "cluster-"+name, "10.244.0.0/16", fmt.Sprintf("10.%d.0.0/16", 60+i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Create(ctx, conf(ns, "far", "cluster-far", "172.30.0.0/16", "172.31.0.0/16")); err != nil {
		t.Fatal(err)
	}
	got := waitStatus(t, c, ns, "b", "c", "d", "far")
	pods := map[netv1alpha1.CIDR]string{}
	for _, n := range []string{"b", "c", "d"} {
		cf := got[n]
		cond := meta.FindStatusCondition(cf.Status.Conditions, "Ready")
		if cf.Status.Remote == nil || cond.Status != metav1.ConditionTrue || cond.Reason != "Remapped" {
			t.Fatalf("%s: status %+v", n, cf.Status)
		}
		p := cf.Status.Remote.CIDR.Pod
		if other, dup := pods[p]; dup || p == "10.244.0.0/16" {
			t.Errorf("%s got pod CIDR %s (also %q)", n, p, other)
		}
		pods[p] = n
	}
	if far := got["far"]; far.Status.Remote.CIDR.Pod != "172.30.0.0/16" || meta.FindStatusCondition(far.Status.Conditions, "Ready").Reason != "NoRemapNeeded" {
		t.Errorf("disjoint peer: %+v", far.Status)
	}

	// Restart: nothing moves.
	stop()
	stop = startConfigurations(t, env)
	if err := c.Create(ctx, conf(ns, "e", "cluster-e", "10.244.0.0/16", "10.63.0.0/16")); err != nil {
		t.Fatal(err)
	}
	after := waitStatus(t, c, ns, "b", "c", "d", "e")
	for _, n := range []string{"b", "c", "d"} {
		if !reflect.DeepEqual(after[n].Status.Remote.CIDR, got[n].Status.Remote.CIDR) {
			t.Errorf("%s moved across a restart: %+v -> %+v", n, got[n].Status.Remote.CIDR, after[n].Status.Remote.CIDR)
		}
	}
	if _, dup := pods[after["e"].Status.Remote.CIDR.Pod]; dup {
		t.Errorf("e got a prefix already given out: %s", after["e"].Status.Remote.CIDR.Pod)
	}

	// Errors are conditions.
	bad := conf(ns, "dup", "cluster-b", "10.245.0.0/16", "10.64.0.0/16")
	if err := c.Create(ctx, bad); err != nil {
		t.Fatal(err)
	}
	d := waitStatus(t, c, ns, "dup")["dup"]
	if cond := meta.FindStatusCondition(d.Status.Conditions, "Ready"); cond.Status != metav1.ConditionFalse || cond.Reason != "DuplicateClusterID" {
		t.Errorf("duplicate: %+v", cond)
	}

	// Deleting frees the prefix.
	freed := after["e"].Status.Remote.CIDR.Pod
	if err := c.Delete(ctx, after["e"]); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "e"}, &netv1alpha1.Configuration{})
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("configuration e not deleted (finalizer)")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := c.Create(ctx, conf(ns, "f", "cluster-f", "10.244.0.0/16", "10.65.0.0/16")); err != nil {
		t.Fatal(err)
	}
	if f := waitStatus(t, c, ns, "f")["f"]; f.Status.Remote.CIDR.Pod != freed {
		t.Errorf("freed %s not reused: f got %s", freed, f.Status.Remote.CIDR.Pod)
	}
	stop()
}

// TestConcurrent creates 50 Configurations at once, all on 10.244.0.0/16: all prefixes differ.
func TestConcurrent(t *testing.T) {
	env := apitest.Start(t)
	c := env.Client
	ns := env.Namespace(t, "conc")
	stop := startConfigurations(t, env)
	defer stop()
	var wg sync.WaitGroup
	var names []string
	began := time.Now()
	for i := range 50 {
		name := fmt.Sprintf("p%02d", i)
		names = append(names, name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Create(context.Background(), conf(ns, name, "cluster-"+name, "10.244.0.0/16", "10.70.0.0/16")); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	got := waitStatus(t, c, ns, names...)
	t.Logf("50 Configurations mapped in %v", time.Since(began).Round(time.Millisecond))
	seen := map[netv1alpha1.CIDR]string{}
	for n, cf := range got {
		for _, p := range []netv1alpha1.CIDR{cf.Status.Remote.CIDR.Pod, cf.Status.Remote.CIDR.External} {
			if other, dup := seen[p]; dup {
				t.Errorf("%s and %s both got %s", n, other, p)
			}
			seen[p] = n
		}
	}
}

// BenchmarkConfigurations100 creates 100 Configurations at once, all on 10.244.0.0/16, and
// measures the time until every one has its status.
func BenchmarkConfigurations100(b *testing.B) {
	env := apitest.Start(b)
	stop := startConfigurationsTB(b, env)
	defer stop()
	for i := range b.N {
		ns := env.Namespace(b, fmt.Sprintf("bench%d", i))
		began := time.Now()
		var wg sync.WaitGroup
		var names []string
		for j := range 100 {
			name := fmt.Sprintf("p%03d", j)
			names = append(names, name)
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := env.Client.Create(context.Background(), conf(ns, name, fmt.Sprintf("c%d-%s", i, name), "10.244.0.0/24", "10.70.0.0/24")); err != nil {
					b.Error(err)
				}
			}()
		}
		wg.Wait()
		for _, n := range names {
			for {
				cf := &netv1alpha1.Configuration{}
				if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: n}, cf); err == nil && cf.Status.Remote != nil {
					break
				}
				if time.Since(began) > time.Minute {
					b.Fatalf("%s not mapped within a minute", n)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		b.ReportMetric(time.Since(began).Seconds(), "s/100-configurations")
	}
}

// TestDangerousPeers: a peer's CIDR never takes this cluster's own traffic. Calico's default
// 192.168.0.0/16 beside nodes on 192.168.77.0/24 is remapped, not kept as-is (which would route
// the nodes' own addresses, the overlay's underlay, to the gateway); a NAT-less peer is moved
// when a node joins inside it; a /4 is refused and not routed at all.
func TestDangerousPeers(t *testing.T) {
	env := apitest.Start(t)
	c := env.Client
	ns := env.Namespace(t, "dangerous")
	ctx := context.Background()
	node := func(name, ip string) {
		t.Helper()
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name}}
		apitest.Must(t, c.Create(ctx, n))
		t.Cleanup(func() { _ = c.Delete(context.Background(), n) })
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
		apitest.Must(t, c.Status().Update(ctx, n))
	}
	node("a", "192.168.77.2")
	// The API server's endpoint, off the node network (a managed control plane).
	apiES := apiServerSlice(t, c, ns, "172.31.3.4")
	stop := startConfigurations(t, env, func(r *controller.ConfigurationReconciler) {
		r.APIServerEndpoints = client.ObjectKeyFromObject(apiES)
		r.IPAM.SetAsIs(ipam.PrivateRanges) // as skein-controller does unless told to keep public CIDRs
	})
	defer stop()

	// A peer publishing public ranges (attack review): remapped, never routed as they are.
	apitest.Must(t, c.Create(ctx, conf(ns, "public", "cluster-public", "8.8.8.0/24", "1.1.1.0/24")))
	pub := waitStatus(t, c, ns, "public")["public"]
	if cond := meta.FindStatusCondition(pub.Status.Conditions, "Ready"); pub.Status.Remote == nil || pub.Status.Remote.CIDR.Pod == "8.8.8.0/24" ||
		pub.Status.Remote.CIDR.External == "1.1.1.0/24" || cond.Reason != "Remapped" || !strings.Contains(cond.Message, "no private range") {
		t.Errorf("a peer's public pod and external CIDRs: seen as %+v, condition %+v", pub.Status.Remote, cond)
	}

	apitest.Must(t, c.Create(ctx, conf(ns, "calico", "cluster-calico", "192.168.0.0/16", "10.201.0.0/16")))
	apitest.Must(t, c.Create(ctx, conf(ns, "huge", "cluster-huge", "16.0.0.0/4", "10.202.0.0/16")))
	apitest.Must(t, c.Create(ctx, conf(ns, "later", "cluster-later", "172.29.0.0/16", "10.203.0.0/16")))
	apitest.Must(t, c.Create(ctx, conf(ns, "vpc", "cluster-vpc", "172.31.0.0/16", "10.204.0.0/16")))
	got := waitStatus(t, c, ns, "calico", "huge", "later", "vpc")
	if vpc := got["vpc"]; vpc.Status.Remote == nil || netip.MustParsePrefix(string(vpc.Status.Remote.CIDR.Pod)).Contains(netip.MustParseAddr("172.31.3.4")) {
		t.Errorf("172.31.0.0/16 covering the API server at 172.31.3.4 is seen as %+v", vpc.Status.Remote)
	}

	calico := got["calico"]
	if calico.Status.Remote == nil || calico.Status.Remote.CIDR.Pod == "192.168.0.0/16" ||
		netip.MustParsePrefix(string(calico.Status.Remote.CIDR.Pod)).Contains(netip.MustParseAddr("192.168.77.2")) {
		t.Errorf("192.168.0.0/16 beside a node at 192.168.77.2 is seen as %+v", calico.Status.Remote)
	}
	if cond := meta.FindStatusCondition(calico.Status.Conditions, "Ready"); cond.Reason != "Remapped" || !strings.Contains(cond.Message, "clashes with the node address 192.168.77.2") {
		t.Errorf("calico: condition %+v does not say why it was remapped", cond)
	}
	huge := got["huge"]
	if cond := meta.FindStatusCondition(huge.Status.Conditions, "Ready"); huge.Status.Remote != nil || cond.Status != metav1.ConditionFalse ||
		cond.Reason != "ForbiddenCIDR" || !strings.Contains(cond.Message, "larger than a /8") {
		t.Errorf("a /4 peer: status.remote %+v, condition %+v", huge.Status.Remote, cond)
	}
	if later := got["later"]; later.Status.Remote == nil || later.Status.Remote.CIDR.Pod != "172.29.0.0/16" {
		t.Fatalf("172.29.0.0/16 clashes with nothing: %+v", later.Status)
	}

	node("b", "172.29.5.5")
	apitest.Eventually(t, "the NAT-less peer moved off the new node's address", 30*time.Second, func() bool {
		cf := &netv1alpha1.Configuration{}
		if c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "later"}, cf) != nil || cf.Status.Remote == nil {
			return false
		}
		p, err := netip.ParsePrefix(string(cf.Status.Remote.CIDR.Pod))
		return err == nil && !p.Contains(netip.MustParseAddr("172.29.5.5")) && p.Bits() == 16
	})
}

// Three peers that each grew a second pod CIDR, all on the same ranges as this cluster (whose
// pods are in 10.244.0.0/16): every one of the six pod CIDRs gets a prefix of its own, the
// allocations survive a restart, a peer whose own CIDRs overlap is refused with a reason, and
// an additional CIDR dropped from a spec gives its prefix back.
func TestAdditionalCIDRs(t *testing.T) {
	env := apitest.Start(t)
	c := env.Client
	ns := env.Namespace(t, "additional")
	ctx := context.Background()
	stop := startConfigurations(t, env)

	peers := []string{"p1", "p2", "p3"}
	for i, n := range peers {
		cf := conf(ns, n, "cluster-"+n, "10.244.0.0/16", fmt.Sprintf("10.%d.0.0/16", 110+i))
		cf.Spec.Remote.CIDR.AdditionalPods = []netv1alpha1.CIDR{"10.245.0.0/16"}
		cf.Spec.Remote.CIDR.AdditionalExternals = []netv1alpha1.CIDR{netv1alpha1.CIDR(fmt.Sprintf("10.%d.0.0/24", 120+i))}
		apitest.Must(t, c.Create(ctx, cf))
	}
	got := waitStatus(t, c, ns, peers...)
	seen := map[netip.Prefix]string{}
	for _, l := range local {
		seen[l] = "local"
	}
	for _, n := range peers {
		cf := got[n]
		cond := meta.FindStatusCondition(cf.Status.Conditions, "Ready")
		if cf.Status.Remote == nil || cond.Status != metav1.ConditionTrue {
			t.Fatalf("%s: not mapped: %+v", n, cf.Status)
		}
		st := cf.Status.Remote.CIDR
		if len(st.AdditionalPods) != 1 || len(st.AdditionalExternals) != 1 {
			t.Fatalf("%s: status %+v does not map every CIDR of the spec", n, st)
		}
		if !strings.Contains(cond.Message, "additionalPods[0] ") {
			t.Errorf("%s: condition %q does not name the additional CIDR", n, cond.Message)
		}
		for i, s := range st.All() {
			p := netip.MustParsePrefix(string(s.CIDR))
			want := netip.MustParsePrefix(string(cf.Spec.Remote.CIDR.All()[i].CIDR))
			if p.Bits() != want.Bits() {
				t.Errorf("%s %s: %v has not the length of %v", n, s.Field, p, want)
			}
			for q, who := range seen {
				if q.Overlaps(p) {
					t.Errorf("%s %s seen as %v, which overlaps %v (%s)", n, s.Field, p, q, who)
				}
			}
			seen[p] = n + " " + s.Field
		}
	}

	// Restart: nothing moves.
	stop()
	stop = startConfigurations(t, env)
	defer stop()
	bad := conf(ns, "overlapping", "cluster-overlapping", "10.60.0.0/16", "10.61.0.0/16")
	bad.Spec.Remote.CIDR.AdditionalPods = []netv1alpha1.CIDR{"10.60.128.0/17"}
	apitest.Must(t, c.Create(ctx, bad))
	after := waitStatus(t, c, ns, append(peers, "overlapping")...)
	for _, n := range peers {
		if !reflect.DeepEqual(after[n].Status.Remote, got[n].Status.Remote) {
			t.Errorf("%s moved across a restart: %+v -> %+v", n, got[n].Status.Remote, after[n].Status.Remote)
		}
	}
	if cond := meta.FindStatusCondition(after["overlapping"].Status.Conditions, "Ready"); after["overlapping"].Status.Remote != nil ||
		cond.Reason != "InvalidCIDR" || !strings.Contains(cond.Message, "spec.remote.cidr.additionalPods[0] 10.60.128.0/17 overlaps spec.remote.cidr.pod 10.60.0.0/16") {
		t.Errorf("a peer whose CIDRs overlap each other: status %+v", after["overlapping"].Status)
	}

	// p1 drops its second pod CIDR: status follows, and the prefix it had is free again (a
	// new peer asking for exactly that prefix gets it as it is).
	freed := after["p1"].Status.Remote.CIDR.AdditionalPods[0]
	p1 := after["p1"].DeepCopy()
	p1.Spec.Remote.CIDR.AdditionalPods = nil
	apitest.Must(t, c.Update(ctx, p1))
	apitest.Eventually(t, "p1's status drops the additional pod CIDR", 30*time.Second, func() bool {
		cf := &netv1alpha1.Configuration{}
		if c.Get(ctx, client.ObjectKeyFromObject(p1), cf) != nil || cf.Status.Remote == nil {
			return false
		}
		cond := meta.FindStatusCondition(cf.Status.Conditions, "Ready")
		return cond != nil && cond.ObservedGeneration == cf.Generation && len(cf.Status.Remote.CIDR.AdditionalPods) == 0
	})
	apitest.Must(t, c.Create(ctx, conf(ns, "reuse", "cluster-reuse", string(freed), "10.62.0.0/16")))
	if r := waitStatus(t, c, ns, "reuse")["reuse"]; r.Status.Remote == nil || r.Status.Remote.CIDR.Pod != freed {
		t.Errorf("the prefix p1 gave back (%s) was not free: %+v", freed, r.Status)
	}
}

// TestConfigurationEdits: edits of a mapped Configuration never leave two peers on one prefix
// or one range on another's prefix. Reordering additional CIDRs keeps each on its own prefix;
// a spec the pools cannot serve any more loses its status (the prefixes it freed may go to
// others); a Configuration relabelled to a cluster id another one describes loses its status.
func TestConfigurationEdits(t *testing.T) {
	env := apitest.Start(t)
	c := env.Client
	ns := env.Namespace(t, "edits")
	ctx := context.Background()
	stop := startConfigurations(t, env)
	defer stop()
	current := func(name string) *netv1alpha1.Configuration {
		t.Helper()
		var cf *netv1alpha1.Configuration
		apitest.Eventually(t, name+" reconciled for its generation", 30*time.Second, func() bool {
			cf = &netv1alpha1.Configuration{}
			if c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cf) != nil {
				return false
			}
			cond := meta.FindStatusCondition(cf.Status.Conditions, "Ready")
			return cond != nil && cond.ObservedGeneration == cf.Generation
		})
		return cf
	}

	order := conf(ns, "order", "cluster-order", "10.150.0.0/16", "10.149.0.0/16")
	order.Spec.Remote.CIDR.AdditionalPods = []netv1alpha1.CIDR{"10.151.0.0/16", "10.152.0.0/16"}
	apitest.Must(t, c.Create(ctx, order))
	got := current("order")
	if !reflect.DeepEqual(got.Status.Remote.CIDR.AdditionalPods, got.Spec.Remote.CIDR.AdditionalPods) {
		t.Fatalf("disjoint additional CIDRs remapped: %v", got.Status.Remote.CIDR.AdditionalPods)
	}
	got.Spec.Remote.CIDR.AdditionalPods = []netv1alpha1.CIDR{"10.152.0.0/16", "10.151.0.0/16"}
	apitest.Must(t, c.Update(ctx, got))
	got = current("order")
	if got.Status.Remote == nil || !reflect.DeepEqual(got.Status.Remote.CIDR.AdditionalPods, []netv1alpha1.CIDR{"10.152.0.0/16", "10.151.0.0/16"}) {
		t.Errorf("after reordering: %+v, want each range on its own prefix", got.Status.Remote)
	}

	// A /8 that clashes with this cluster's 10.244.0.0/16 has no free /8 in the pools.
	got.Spec.Remote.CIDR = netv1alpha1.ClusterConfigCIDR{Pod: "10.0.0.0/8", External: "172.31.149.0/24"}
	apitest.Must(t, c.Update(ctx, got))
	got = current("order")
	if cond := meta.FindStatusCondition(got.Status.Conditions, "Ready"); got.Status.Remote != nil || cond.Reason != "PoolExhausted" {
		t.Errorf("exhausted pools: status %+v, condition %+v; want no status.remote", got.Status.Remote, cond)
	}
	apitest.Must(t, c.Create(ctx, conf(ns, "reuse", "cluster-reuse", "10.151.0.0/16", "10.148.0.0/16")))
	if r := current("reuse"); r.Status.Remote == nil || r.Status.Remote.CIDR.Pod != "10.151.0.0/16" {
		t.Errorf("a peer asking for a prefix the exhausted one freed: %+v", r.Status.Remote)
	}

	// reuse relabelled to the cluster id order (older) describes: a duplicate, unmapped.
	reuse := current("reuse")
	reuse.Labels[netv1alpha1.RemoteClusterIDLabel] = "cluster-order"
	apitest.Must(t, c.Update(ctx, reuse))
	apitest.Eventually(t, "the relabelled duplicate unmapped", 30*time.Second, func() bool {
		cf := &netv1alpha1.Configuration{}
		if c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "reuse"}, cf) != nil {
			return false
		}
		cond := meta.FindStatusCondition(cf.Status.Conditions, "Ready")
		return cf.Status.Remote == nil && cond != nil && cond.Reason == "DuplicateClusterID"
	})
}

// writeCounter counts a client's writes: updates and patches of objects and of their status.
type writeCounter struct {
	client.Client
	writes atomic.Int64
}

func (w *writeCounter) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	w.writes.Add(1)
	return w.Client.Update(ctx, obj, opts...)
}

func (w *writeCounter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	w.writes.Add(1)
	return w.Client.Patch(ctx, obj, patch, opts...)
}

func (w *writeCounter) Status() client.SubResourceWriter {
	return &statusWriteCounter{SubResourceWriter: w.Client.Status(), writes: &w.writes}
}

type statusWriteCounter struct {
	client.SubResourceWriter
	writes *atomic.Int64
}

func (s *statusWriteCounter) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	s.writes.Add(1)
	return s.SubResourceWriter.Update(ctx, obj, opts...)
}

func (s *statusWriteCounter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	s.writes.Add(1)
	return s.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

// TestConfigurationWritesOnlyChanges: a Configuration costs one status write to map, none for
// reconciles that change nothing, and no finalizer (1,000 peerings made 1,000 finalizer updates
// and 800 empty status patches; BenchmarkPeerings1000). The API server's addresses are read once
// for many reconciles. A Configuration still carrying the finalizer of earlier versions is
// deleted all the same.
func TestConfigurationWritesOnlyChanges(t *testing.T) {
	env := apitest.Start(t)
	c := env.Client
	ns := env.Namespace(t, "confwrites")
	ctx := context.Background()
	apiES := apiServerSlice(t, c, ns, "172.31.3.4")
	counter := &writeCounter{}
	apiReads := &atomic.Int64{}
	stop := startConfigurations(t, env, func(r *controller.ConfigurationReconciler) {
		counter.Client = r.Client
		r.Client = counter
		r.Reader = &countingReader{Reader: r.Reader, reads: apiReads}
		r.APIServerEndpoints = client.ObjectKeyFromObject(apiES)
	})
	defer stop()

	apitest.Must(t, c.Create(ctx, conf(ns, "peer", "cluster-peer", "10.244.0.0/16", "10.70.0.0/16")))
	got := waitStatus(t, c, ns, "peer")["peer"]
	if got.Status.Remote == nil {
		t.Fatalf("not mapped: %+v", got.Status)
	}
	if len(got.Finalizers) != 0 {
		t.Errorf("finalizers %v, want none", got.Finalizers)
	}
	settled := func() int64 { return settle(&counter.writes) }
	if n := settled(); n != 1 {
		t.Errorf("%d writes to map one Configuration, want 1 (its status)", n)
	}
	readsBefore := apiReads.Load()
	key := client.ObjectKeyFromObject(got)
	for i := range 5 { // an annotation is an update event, and so a reconcile
		apitest.Must(t, c.Get(ctx, key, got))
		metav1.SetMetaDataAnnotation(&got.ObjectMeta, "test/poke", fmt.Sprint(i))
		apitest.Must(t, c.Update(ctx, got))
		time.Sleep(300 * time.Millisecond)
	}
	if n := settled(); n != 1 {
		t.Errorf("%d writes after 5 reconciles that changed nothing, want still 1", n)
	}
	// Each reconcile reads the Configurations of the same cluster and the nodes from the cache;
	// around it, only the API server's EndpointSlice, and that once in a while.
	if n := apiReads.Load() - readsBefore; n > 1 {
		t.Errorf("%d reads around the cache for 5 reconciles, want at most 1", n)
	}

	legacy := conf(ns, "legacy", "cluster-legacy", "10.245.0.0/16", "10.71.0.0/16")
	legacy.Finalizers = []string{"networking.liqo.io/ipam"}
	apitest.Must(t, c.Create(ctx, legacy))
	waitStatus(t, c, ns, "legacy")
	apitest.Must(t, c.Delete(ctx, legacy))
	apitest.Eventually(t, "the Configuration with the old finalizer deleted", 30*time.Second, func() bool {
		return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(legacy), &netv1alpha1.Configuration{}))
	})
}

// failingOnceReader fails its first Get of an EndpointSlice as an overloaded API server would.
type failingOnceReader struct {
	client.Reader
	failed atomic.Bool
}

func (r *failingOnceReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*discoveryv1.EndpointSlice); ok && r.failed.CompareAndSwap(false, true) {
		return apierrors.NewTooManyRequests("the API server is busy", 1)
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

// TestAPIServerAddressesAfterAFailedRead: one failed read of the API server's addresses (a
// throttled or busy API server) is not remembered as "no addresses" for the reuse period: a
// peer's CIDR covering the API server, mapped right after, is still remapped off it (nothing
// checks it again later).
func TestAPIServerAddressesAfterAFailedRead(t *testing.T) {
	env := apitest.Start(t)
	c := env.Client
	ns := env.Namespace(t, "apifail")
	ctx := context.Background()
	apiES := apiServerSlice(t, c, ns, "172.31.3.4")
	stop := startConfigurations(t, env, func(r *controller.ConfigurationReconciler) {
		r.Reader = &failingOnceReader{Reader: r.Reader}
		r.APIServerEndpoints = client.ObjectKeyFromObject(apiES)
	})
	defer stop()

	apitest.Must(t, c.Create(ctx, conf(ns, "first", "cluster-first", "10.245.0.0/16", "10.71.0.0/16")))
	waitStatus(t, c, ns, "first")
	apitest.Must(t, c.Create(ctx, conf(ns, "vpc", "cluster-vpc", "172.31.0.0/16", "10.204.0.0/16")))
	vpc := waitStatus(t, c, ns, "vpc")["vpc"]
	if vpc.Status.Remote == nil || netip.MustParsePrefix(string(vpc.Status.Remote.CIDR.Pod)).Contains(netip.MustParseAddr("172.31.3.4")) {
		t.Errorf("172.31.0.0/16 covering the API server at 172.31.3.4, mapped after one failed read of its addresses, is seen as %+v", vpc.Status.Remote)
	}
}

// TestIPv6CIDRs: with IPv6 on, a dual-stack peer on this cluster's own IPv4 and IPv6 pod
// CIDRs has both remapped, the IPv6 one into the IPv6 pool and checksum-neutral; an IPv6-only
// peer whose CIDRs clash with nothing keeps them; an IPv6 CIDR larger than
// --min-remote-prefix-length6 is refused. With IPv6 off (--ipv6=false), a peer with an IPv6
// CIDR is refused whole, saying why.
func TestIPv6CIDRs(t *testing.T) {
	env := apitest.Start(t)
	c := env.Client
	ns := env.Namespace(t, "ipv6")
	ctx := context.Background()
	localPods6 := netip.MustParsePrefix("fd00:10:244::/56")
	stop := startConfigurations(t, env, func(r *controller.ConfigurationReconciler) {
		a, err := ipam.New(slices.Concat(ipam.DefaultPools, ipam.DefaultPools6), append(slices.Clone(local), localPods6))
		apitest.Must(t, err)
		r.IPAM, r.IPv6 = a, true
	})
	dual := conf(ns, "dual", "cluster-dual", "10.244.0.0/16", "10.150.0.0/16")
	dual.Spec.Remote.CIDR.AdditionalPods = []netv1alpha1.CIDR{netv1alpha1.CIDR(localPods6.String())}
	only6 := conf(ns, "only6", "cluster-only6", "fd00:20:244::/56", "2001:db8:20::/64")
	huge := conf(ns, "huge", "cluster-huge", "10.151.0.0/16", "10.152.0.0/16")
	huge.Spec.Remote.CIDR.AdditionalPods = []netv1alpha1.CIDR{"fd00::/16"}
	for _, cf := range []*netv1alpha1.Configuration{dual, only6, huge} {
		apitest.Must(t, c.Create(ctx, cf))
	}
	got := waitStatus(t, c, ns, "dual", "only6", "huge")

	d := got["dual"]
	if cond := meta.FindStatusCondition(d.Status.Conditions, "Ready"); d.Status.Remote == nil || cond.Status != metav1.ConditionTrue || cond.Reason != "Remapped" {
		t.Fatalf("dual: %+v", d.Status)
	}
	pod4 := netip.MustParsePrefix(string(d.Status.Remote.CIDR.Pod))
	if pod4.Bits() != 16 || !pod4.Addr().Is4() || pod4.Overlaps(local[0]) {
		t.Errorf("dual: IPv4 pod CIDR seen as %v", pod4)
	}
	if len(d.Status.Remote.CIDR.AdditionalPods) != 1 {
		t.Fatalf("dual: status %+v", d.Status.Remote.CIDR)
	}
	pod6 := netip.MustParsePrefix(string(d.Status.Remote.CIDR.AdditionalPods[0]))
	if pod6.Bits() != 56 || !pod6.Addr().Is6() || pod6.Overlaps(localPods6) || !netip.MustParsePrefix("fd00::/8").Contains(pod6.Addr()) {
		t.Errorf("dual: IPv6 pod CIDR seen as %v, want another /56 of fd00::/8", pod6)
	}
	if !nat.ChecksumNeutral(nat.Pair{From: pod6, To: localPods6}) {
		t.Errorf("dual: %v is not checksum-neutral with %v", pod6, localPods6)
	}

	o := got["only6"]
	if cond := meta.FindStatusCondition(o.Status.Conditions, "Ready"); o.Status.Remote == nil || cond.Reason != "NoRemapNeeded" ||
		o.Status.Remote.CIDR.Pod != "fd00:20:244::/56" || o.Status.Remote.CIDR.External != "2001:db8:20::/64" {
		t.Errorf("only6: %+v", o.Status)
	}

	h := got["huge"]
	if cond := meta.FindStatusCondition(h.Status.Conditions, "Ready"); h.Status.Remote != nil || cond.Reason != "ForbiddenCIDR" ||
		!strings.Contains(cond.Message, "fd00::/16 is larger than a /32 (the controller's --min-remote-prefix-length6)") {
		t.Errorf("huge: %+v", h.Status)
	}

	// IPv6 off: a peer with an IPv6 CIDR is refused whole, saying why.
	stop()
	stop = startConfigurations(t, env)
	defer stop()
	later := conf(ns, "later", "cluster-later", "10.153.0.0/16", "10.154.0.0/16")
	later.Spec.Remote.CIDR.AdditionalPods = []netv1alpha1.CIDR{"fd00:30:244::/56"}
	apitest.Must(t, c.Create(ctx, later))
	l := waitStatus(t, c, ns, "later")["later"]
	if cond := meta.FindStatusCondition(l.Status.Conditions, "Ready"); l.Status.Remote != nil || cond.Reason != "InvalidCIDR" ||
		!strings.Contains(cond.Message, "spec.remote.cidr.additionalPods[0] fd00:30:244::/56 is IPv6, and this cluster's controller maps IPv4 only (skein-controller --ipv6=false") {
		t.Errorf("later, with IPv6 off: %+v", l.Status)
	}
}
