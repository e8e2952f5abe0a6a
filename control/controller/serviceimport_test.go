package controller_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crconfig "sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	svcv1alpha1 "github.com/skein-net/skein/control/api/services/v1alpha1"
	"github.com/skein-net/skein/control/controller"
	"github.com/skein-net/skein/control/controller/mcs"
	"github.com/skein-net/skein/control/identity"
	"github.com/skein-net/skein/dataplane/nat"
	"github.com/skein-net/skein/internal/apitest"
)

func ptrTo[T any](v T) *T { return &v }

// endpointSlice is a slice of service name with one endpoint per address, ready unless listed
// in notReady.
func endpointSlice(ns, name, service string, addrs []string, notReady ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: service}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptrTo("http"), Protocol: ptrTo(corev1.ProtocolTCP), Port: ptrTo[int32](8080)}}}
	for _, a := range addrs {
		ready := !slices.Contains(notReady, a)
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, NodeName: ptrTo("b-node-1"),
			Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &ready, Terminating: ptrTo(false)}})
	}
	return s
}

// TestServiceImport: cluster B exports shop/orders; cluster A, peered with B and holding B's
// services reader credentials, imports it with B's endpoints as A reaches them (remapped when
// the pod CIDRs overlap, as they are when they do not), readiness carried over, slices split at
// 100; A's own export of the same name with a clashing port gets a Conflict; the reader can
// read nothing else in B; revoking the credentials removes B's endpoints from A.
func TestServiceImport(t *testing.T) {
	for _, tc := range []struct {
		name     string
		localPod string // A's pod CIDR; B's is 10.244.0.0/16
		remapped bool
	}{{"overlapping pod CIDRs", "10.244.0.0/16", true}, {"disjoint pod CIDRs", "10.243.0.0/16", false}} {
		t.Run(tc.name, func(t *testing.T) { testServiceImport(t, netip.MustParsePrefix(tc.localPod), tc.remapped) })
	}
}

// importPair is cluster A (skein-controller with multi-cluster services, pod CIDR localPod)
// peered with cluster B (pod CIDR 10.244.0.0/16): A's Configuration for B mapped, B's services
// reader for A made and its credentials in A (what skeinctl network connect does), namespace
// shop in both.
type importPair struct {
	a, b     *apitest.Env
	ca, cb   client.Client
	seen     netip.Prefix // B's pod CIDR as A sees it
	creds    *corev1.Secret
	token    identity.ServiceReaderToken
	idA, idB string
	// stop stops A's controller (again at the end of the test: a no-op).
	stop func()
}

func startImportPair(tb testing.TB, ctx context.Context, localPod netip.Prefix) *importPair {
	tb.Helper()
	return startImportPairWith(tb, ctx, localPod, "", 0)
}

// startImportPairWith is startImportPair with A reaching B's API server at server (default:
// B's own address) and retrying a failed exporter after retry (default: the controller's).
func startImportPairWith(tb testing.TB, ctx context.Context, localPod netip.Prefix, server string, retry time.Duration) *importPair {
	tb.Helper()
	return startImportPairOpts(tb, ctx, localPod, server, retry, nil)
}

// startImportPairOpts is startImportPairWith with A's controller options changed by opts.
func startImportPairOpts(tb testing.TB, ctx context.Context, localPod netip.Prefix, server string, retry time.Duration, opts func(*controller.Options)) *importPair {
	tb.Helper()
	a, b := apitest.Start(tb), apitest.Start(tb)
	x := &importPair{a: a, b: b, ca: a.Client, cb: b.Client, idA: "cluster-a", idB: "cluster-b"}
	for _, e := range []*apitest.Env{a, b} {
		for _, ns := range []string{"shop", "liqo", "liqo-tenant", controller.DefaultPublishedNamespace} {
			if err := e.EnsureNamespace(ctx, ns); err != nil {
				tb.Fatal(err)
			}
		}
	}
	mgr, err := ctrl.NewManager(a.Config, ctrl.Options{Scheme: a.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: controller.CacheOptions(), Controller: crconfig.Controller{SkipNameValidation: &skipNameValidation}})
	if err != nil {
		tb.Fatal(err)
	}
	p := netip.MustParsePrefix
	o := controller.Options{PodCIDRs: []netip.Prefix{localPod}, ServiceCIDRs: []netip.Prefix{p("10.96.0.0/12")},
		ExternalCIDR: p("10.70.0.0/16"), InternalCIDR: p("10.80.0.0/16"), ClusterID: x.idA, ServicesFrom: a.Config, ImportRetry: retry}
	if opts != nil {
		opts(&o)
	}
	if err := controller.Setup(mgr, o); err != nil {
		tb.Fatal(err)
	}
	// B's skein-controller: it publishes B's exports for A's reader (and imports nothing: it
	// holds no credentials of A's).
	mgrB, err := ctrl.NewManager(b.Config, ctrl.Options{Scheme: b.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: controller.CacheOptions(), Controller: crconfig.Controller{SkipNameValidation: &skipNameValidation}})
	if err != nil {
		tb.Fatal(err)
	}
	if err := controller.Setup(mgrB, controller.Options{PodCIDRs: []netip.Prefix{p("10.244.0.0/16")}, ServiceCIDRs: []netip.Prefix{p("10.96.0.0/12")},
		ExternalCIDR: p("10.70.0.0/16"), InternalCIDR: p("10.80.0.0/16"), ClusterID: x.idB, ServicesFrom: b.Config, ImportRetry: retry}); err != nil {
		tb.Fatal(err)
	}
	mctx, mcancel := context.WithCancel(ctx)
	done := make(chan error, 2)
	go func() { done <- mgr.Start(mctx) }()
	go func() { done <- mgrB.Start(mctx) }()
	var once sync.Once
	x.stop = func() { once.Do(func() { mcancel(); <-done; <-done }) }
	tb.Cleanup(x.stop)
	cf := &netv1alpha1.Configuration{ObjectMeta: metav1.ObjectMeta{Namespace: "liqo-tenant", Name: "b", Labels: map[string]string{netv1alpha1.RemoteClusterIDLabel: x.idB}},
		Spec: netv1alpha1.ConfigurationSpec{Remote: netv1alpha1.ClusterConfig{CIDR: netv1alpha1.ClusterConfigCIDR{Pod: "10.244.0.0/16", External: "10.70.0.0/16"}}}}
	if err := x.ca.Create(ctx, cf); err != nil {
		tb.Fatal(err)
	}
	waitUntil(tb, ctx, "A's Configuration for B mapped", func() bool {
		if x.ca.Get(ctx, client.ObjectKeyFromObject(cf), cf) != nil || cf.Status.Remote == nil || !meta.IsStatusConditionTrue(cf.Status.Conditions, netv1alpha1.ConditionReady) {
			return false
		}
		x.seen = p(string(cf.Status.Remote.CIDR.Pod))
		return true
	})
	// A gateway towards B (its rendering is not the point here: no template exists).
	if err := x.ca.Create(ctx, &netv1alpha1.GatewayClient{ObjectMeta: metav1.ObjectMeta{Namespace: "liqo-tenant", Name: "gw-b", Labels: map[string]string{netv1alpha1.RemoteClusterIDLabel: x.idB}},
		Spec: netv1alpha1.GatewayClientSpec{MTU: 1340, Endpoint: netv1alpha1.Endpoint{Addresses: []netv1alpha1.Address{"192.0.2.1"}, Port: 51820, Protocol: "UDP"},
			ClientTemplateRef: netv1alpha1.TemplateRef{APIVersion: "networking.liqo.io/v1alpha1", Kind: "WgGatewayClientTemplate", Name: "wireguard-client", Namespace: "liqo"}}}); err != nil {
		tb.Fatal(err)
	}
	if x.token, err = identity.GrantServiceReader(ctx, x.cb, "liqo-tenant", x.idA, controller.DefaultPublishedNamespace, time.Hour, false); err != nil {
		tb.Fatal(err)
	}
	x.creds = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "liqo-tenant", Name: "b-services",
		Labels: map[string]string{controller.PeerCredentialsLabel: controller.PeerCredentialsServices, netv1alpha1.RemoteClusterIDLabel: x.idB, controller.ManagedByLabel: "skeinctl"}},
		Data: map[string][]byte{controller.PeerServerKey: []byte(cmp.Or(server, b.Config.Host)), controller.PeerCAKey: b.Config.CAData, controller.PeerTokenKey: []byte(x.token.Token)}}
	if err := x.ca.Create(ctx, x.creds); err != nil {
		tb.Fatal(err)
	}
	return x
}

// exportOrders makes B's Service shop/orders (port http 80) with one ready endpoint per
// address, and exports it.
func (x *importPair) exportOrders(t *testing.T, ctx context.Context, addrs ...string) {
	t.Helper()
	for _, o := range []client.Object{
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}},
		endpointSlice("shop", "orders-1", "orders", addrs),
		&mcsv1a1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"}},
	} {
		if err := x.cb.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
}

// translate is the address A reaches B's pod addr at.
func (x *importPair) translate(addr string) string {
	m, err := nat.NewPrefixMap(nat.Pair{From: netip.MustParsePrefix("10.244.0.0/16"), To: x.seen})
	if err != nil {
		panic(err)
	}
	got, _ := m.Map(netip.MustParseAddr(addr))
	return got.String()
}

func testServiceImport(t *testing.T, localPod netip.Prefix, remapped bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	x := startImportPair(t, ctx, localPod)
	b, ca, cb, idA, idB, creds, tok := x.b, x.ca, x.cb, x.idA, x.idB, x.creds, x.token
	if remapped == (x.seen == netip.MustParsePrefix("10.244.0.0/16")) {
		t.Fatalf("B's 10.244.0.0/16 seen as %s in A (pod CIDR %s)", x.seen, localPod)
	}
	translate := x.translate

	// Cluster B: shop/orders, three endpoints (one not ready, one a host-network address that
	// is no pod of B's), exported.
	if err := cb.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}); err != nil {
		t.Fatal(err)
	}
	bSlice := endpointSlice("shop", "orders-1", "orders", []string{"10.244.1.5", "10.244.2.6", "192.168.11.20"}, "10.244.2.6")
	if err := cb.Create(ctx, bSlice); err != nil {
		t.Fatal(err)
	}
	if err := cb.Create(ctx, &mcsv1a1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"}}); err != nil {
		t.Fatal(err)
	}
	// A imports it.
	key := client.ObjectKey{Namespace: "shop", Name: "orders"}
	importedAddrs := func() map[string]string {
		var sls discoveryv1.EndpointSliceList
		if ca.List(ctx, &sls, client.InNamespace("shop"), client.MatchingLabels{mcs.ImportLabel: "orders"}) != nil {
			return nil
		}
		out := map[string]string{}
		for _, s := range sls.Items {
			for _, e := range s.Endpoints {
				out[e.Addresses[0]] = fmt.Sprintf("%s ready=%v", s.Labels[mcs.SourceClusterLabel], *e.Conditions.Ready)
			}
		}
		return out
	}
	want := map[string]string{translate("10.244.1.5"): idB + " ready=true", translate("10.244.2.6"): idB + " ready=false"}
	waitUntil(t, ctx, fmt.Sprintf("A's slices hold %v", want), func() bool { return fmt.Sprint(importedAddrs()) == fmt.Sprint(want) })
	var si mcsv1a1.ServiceImport
	if err := ca.Get(ctx, key, &si); err != nil {
		t.Fatal(err)
	}
	var derived corev1.Service
	if err := ca.Get(ctx, client.ObjectKey{Namespace: "shop", Name: mcs.DerivedServiceName("orders")}, &derived); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, ctx, "ServiceImport lists B and the derived Service's ClusterIP", func() bool {
		return ca.Get(ctx, key, &si) == nil && len(si.Status.Clusters) == 1 && si.Status.Clusters[0].Cluster == idB &&
			slices.Equal(si.Spec.IPs, []string{derived.Spec.ClusterIP}) && si.Spec.Type == mcsv1a1.ClusterSetIP && len(si.Spec.Ports) == 1 && si.Spec.Ports[0].Port == 80
	})
	if !metav1.IsControlledBy(&derived, &si) || derived.Spec.Selector != nil || derived.Spec.Ports[0].Name != "http" {
		t.Errorf("derived Service %+v: want controlled by the ServiceImport, no selector, port http", derived)
	}

	// The reader reads exports, Services and slices in B, and nothing else.
	reader := rest.CopyConfig(b.Config)
	reader.CertData, reader.KeyData, reader.BearerToken = nil, nil, tok.Token
	rc, err := client.New(reader, client.Options{Scheme: b.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	pub := client.InNamespace(controller.DefaultPublishedNamespace)
	for _, l := range []client.ObjectList{&svcv1alpha1.PublishedServiceList{}, &discoveryv1.EndpointSliceList{}} {
		if err := rc.List(ctx, l, pub); err != nil {
			t.Errorf("the reader cannot list %T in the published namespace: %v", l, err)
		}
	}
	for what, err := range map[string]error{
		"list exports":              rc.List(ctx, &mcsv1a1.ServiceExportList{}),
		"list services":             rc.List(ctx, &corev1.ServiceList{}),
		"list slices":               rc.List(ctx, &discoveryv1.EndpointSliceList{}),
		"get the exported Service":  rc.Get(ctx, key, &corev1.Service{}),
		"get the exported slice":    rc.Get(ctx, client.ObjectKeyFromObject(bSlice), &discoveryv1.EndpointSlice{}),
		"list the slices of shop":   rc.List(ctx, &discoveryv1.EndpointSliceList{}, client.InNamespace("shop")),
		"get default/kubernetes":    rc.Get(ctx, client.ObjectKey{Namespace: "default", Name: "kubernetes"}, &corev1.Service{}),
		"write a published copy":    rc.Create(ctx, &svcv1alpha1.PublishedService{ObjectMeta: metav1.ObjectMeta{Namespace: controller.DefaultPublishedNamespace, Name: "shop.evil"}, Spec: svcv1alpha1.PublishedServiceSpec{Namespace: "shop", Name: "evil"}}),
		"list services (published)": rc.List(ctx, &corev1.ServiceList{}, pub),
		"list secrets":              rc.List(ctx, &corev1.SecretList{}),
		"list pods":                 rc.List(ctx, &corev1.PodList{}),
		"list configmaps":           rc.List(ctx, &corev1.ConfigMapList{}),
		"list configurations":       rc.List(ctx, &netv1alpha1.ConfigurationList{}),
		"create a service":          rc.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "evil"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 1}}}}),
		"delete an export":          rc.Delete(ctx, &mcsv1a1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"}}),
		"patch a slice":             rc.Patch(ctx, bSlice.DeepCopy(), client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"labels":{"x":"y"}}}`))),
		"create an export":          rc.Create(ctx, &mcsv1a1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "other"}}),
	} {
		if !apierrors.IsForbidden(err) {
			t.Errorf("the services reader may %s in B: %v", what, err)
		}
	}

	// 250 endpoints in B: slices of at most 100 in A.
	var many []string
	for i := range 250 {
		many = append(many, fmt.Sprintf("10.244.%d.%d", 10+i/200, 1+i%200))
	}
	bSlice2 := endpointSlice("shop", "orders-2", "orders", many[:150])
	if err := cb.Create(ctx, bSlice2); err != nil {
		t.Fatal(err)
	}
	if err := cb.Get(ctx, client.ObjectKeyFromObject(bSlice), bSlice); err != nil {
		t.Fatal(err)
	}
	bSlice.Endpoints = endpointSlice("", "", "", many[150:]).Endpoints
	if err := cb.Update(ctx, bSlice); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, ctx, "250 endpoints in A in slices of at most 100", func() bool {
		var sls discoveryv1.EndpointSliceList
		if ca.List(ctx, &sls, client.InNamespace("shop"), client.MatchingLabels{mcs.ImportLabel: "orders"}) != nil {
			return false
		}
		n := 0
		for _, s := range sls.Items {
			if len(s.Endpoints) > 100 {
				return false
			}
			n += len(s.Endpoints)
		}
		return n == 250 && len(sls.Items) == 3
	})

	// A exports shop/orders too, later and with http on UDP: its export gets a Conflict, and
	// its own endpoint joins the import (the port it disagrees on left out).
	if err := ca.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolUDP}}}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // creation timestamps have a resolution of a second
	expA := &mcsv1a1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"}}
	if err := ca.Create(ctx, expA); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, ctx, "A's export has Conflict=True (PortConflict) and Valid=True", func() bool {
		if ca.Get(ctx, client.ObjectKeyFromObject(expA), expA) != nil {
			return false
		}
		c := meta.FindStatusCondition(expA.Status.Conditions, string(mcsv1a1.ServiceExportConditionConflict))
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == string(mcsv1a1.ServiceExportReasonPortConflict) &&
			meta.IsStatusConditionTrue(expA.Status.Conditions, string(mcsv1a1.ServiceExportConditionValid))
	})
	waitUntil(t, ctx, "ServiceImport lists A and B", func() bool {
		return ca.Get(ctx, key, &si) == nil && fmt.Sprint(si.Status.Clusters) == fmt.Sprintf("[{%s} {%s}]", idA, idB)
	})

	// Revoking B's credentials removes every endpoint of B's from A at once; the import stays
	// for A's own export.
	if err := ca.Delete(ctx, creds); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, ctx, "no slice of B's left in A", func() bool {
		var sls discoveryv1.EndpointSliceList
		return ca.List(ctx, &sls, client.InNamespace("shop"), client.MatchingLabels{mcs.SourceClusterLabel: idB}) == nil && len(sls.Items) == 0
	})
	waitUntil(t, ctx, "ServiceImport lists A alone", func() bool {
		return ca.Get(ctx, key, &si) == nil && fmt.Sprint(si.Status.Clusters) == fmt.Sprintf("[{%s}]", idA)
	})
	// Unexporting in A removes the import, its Service and its slices.
	if err := ca.Delete(ctx, expA); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, ctx, "the ServiceImport and derived Service gone", func() bool {
		return apierrors.IsNotFound(ca.Get(ctx, key, &si)) && apierrors.IsNotFound(ca.Get(ctx, client.ObjectKeyFromObject(&derived), &derived))
	})
	// Renewing ends the old token; revoking ends the new one.
	tok2, err := identity.GrantServiceReader(ctx, cb, "liqo-tenant", idA, controller.DefaultPublishedNamespace, time.Hour, true)
	if err != nil {
		t.Fatal(err)
	}
	// The API server looks service accounts up through its own cache: allow it a moment.
	waitUntil(t, ctx, "the reader's first token refused after a renewal", func() bool {
		return apierrors.IsUnauthorized(rc.List(ctx, &svcv1alpha1.PublishedServiceList{}, pub))
	})
	reader.BearerToken = tok2.Token
	rc2, err := client.New(reader, client.Options{Scheme: b.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := rc2.List(ctx, &svcv1alpha1.PublishedServiceList{}, pub); err != nil {
		t.Errorf("the renewed token: %v", err)
	}
	if err := identity.RevokeServiceReader(ctx, cb, "liqo-tenant", idA, controller.DefaultPublishedNamespace); err != nil {
		t.Fatal(err)
	}
	if err := rc2.List(ctx, &svcv1alpha1.PublishedServiceList{}, pub); !apierrors.IsUnauthorized(err) && !apierrors.IsForbidden(err) {
		t.Errorf("the reader's token after RevokeServiceReader: %v, want Unauthorized or Forbidden", err)
	}
	waitUntil(t, ctx, "the reader's token refused after RevokeServiceReader", func() bool {
		return apierrors.IsUnauthorized(rc2.List(ctx, &svcv1alpha1.PublishedServiceList{}, pub))
	})
}

func waitUntil(t testing.TB, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if ctx.Err() != nil {
			t.Fatalf("%s: not in time", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestServiceImportPeerOutage: B's API server is unreachable when A starts reading it: A
// imports nothing and tries again, and imports as soon as B answers; once imported, B's API
// server going away keeps the endpoints A has (the tunnel does not need B's API, nor do they).
func TestServiceImportPeerOutage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A TCP relay to B's API server on a port of its own, down at first.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	relayAddr := ln.Addr().String()
	ln.Close()
	x := startImportPairWith(t, ctx, netip.MustParsePrefix("10.244.0.0/16"), "https://"+relayAddr, time.Second)
	x.exportOrders(t, ctx, "10.244.1.5")
	key := client.ObjectKey{Namespace: "shop", Name: "orders"}
	time.Sleep(3 * time.Second)
	if err := x.ca.Get(ctx, key, &mcsv1a1.ServiceImport{}); !apierrors.IsNotFound(err) {
		t.Fatalf("imported while B's API server is unreachable: %v", err)
	}
	bURL, err := url.Parse(x.b.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	target := bURL.Host
	relay, err := net.Listen("tcp", relayAddr)
	if err != nil {
		t.Skipf("the relay's port was taken meanwhile: %v", err) // not a kernel feature, but nothing to test without it
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := relay.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, u)
			mu.Unlock()
			go func() { _, _ = io.Copy(u, c); u.Close() }()
			go func() { _, _ = io.Copy(c, u); c.Close() }()
		}
	}()
	start := time.Now()
	waitUntil(t, ctx, "A imports once B's API server answers", func() bool {
		var sls discoveryv1.EndpointSliceList
		return x.ca.List(ctx, &sls, client.InNamespace("shop"), client.MatchingLabels{mcs.ImportLabel: "orders"}) == nil &&
			len(sls.Items) == 1 && len(sls.Items[0].Endpoints) == 1 && sls.Items[0].Endpoints[0].Addresses[0] == x.translate("10.244.1.5")
	})
	t.Logf("imported %.1fs after B's API server became reachable", time.Since(start).Seconds())
	// B's API server goes away: the import stays.
	relay.Close()
	mu.Lock()
	for _, c := range conns {
		c.Close()
	}
	mu.Unlock()
	time.Sleep(5 * time.Second)
	var sls discoveryv1.EndpointSliceList
	if err := x.ca.List(ctx, &sls, client.InNamespace("shop"), client.MatchingLabels{mcs.ImportLabel: "orders"}); err != nil || len(sls.Items) != 1 || len(sls.Items[0].Endpoints) != 1 {
		t.Errorf("5 s after B's API server went away, A's slices: %v, %d", err, len(sls.Items))
	}
	// Multi-cluster services turned off in A: the controller starts by removing every import.
	x.stop()
	n, err := controller.RemoveImports(ctx, x.ca)
	if err != nil || n != 3 {
		t.Errorf("RemoveImports: %d objects, %v; want the slice, the derived Service and the ServiceImport", n, err)
	}
	var left mcsv1a1.ServiceImportList
	if err := x.ca.List(ctx, &left); err != nil || len(left.Items) != 0 {
		t.Errorf("imports left: %v, %d", err, len(left.Items))
	}
}

// TestServiceImportUntrustedCredentials (attack review): credentials planted in a namespace
// that holds no peering are not used; credentials the peer refuses (revoked, expired) remove
// what was imported with them, as a disconnect does.
func TestServiceImportUntrustedCredentials(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	x := startImportPairWith(t, ctx, netip.MustParsePrefix("10.244.0.0/16"), "", time.Second)
	x.exportOrders(t, ctx, "10.244.1.5")
	key := client.ObjectKey{Namespace: "shop", Name: "orders"}
	var si mcsv1a1.ServiceImport
	waitUntil(t, ctx, "A imports B's export", func() bool { return x.ca.Get(ctx, key, &si) == nil && len(si.Status.Clusters) == 1 })

	// A Secret in shop (no peering there) naming another cluster, with working credentials.
	planted := x.creds.DeepCopy()
	planted.ObjectMeta = metav1.ObjectMeta{Namespace: "shop", Name: "planted", Labels: map[string]string{
		controller.PeerCredentialsLabel: controller.PeerCredentialsServices, netv1alpha1.RemoteClusterIDLabel: "cluster-evil", controller.ManagedByLabel: "skeinctl"}}
	if err := x.ca.Create(ctx, planted); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if err := x.ca.Get(ctx, key, &si); err != nil || len(si.Status.Clusters) != 1 || si.Status.Clusters[0].Cluster != x.idB {
		t.Errorf("after a planted Secret: %v, clusters %v, want B alone", err, si.Status.Clusters)
	}

	// B revokes A's reader: A's endpoints of B go.
	if err := identity.RevokeServiceReader(ctx, x.cb, "liqo-tenant", x.idA, controller.DefaultPublishedNamespace); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitUntil(t, ctx, "B's endpoints gone from A after B refused the credentials", func() bool {
		var sls discoveryv1.EndpointSliceList
		return x.ca.List(ctx, &sls, client.InNamespace("shop"), client.MatchingLabels{mcs.SourceClusterLabel: x.idB}) == nil && len(sls.Items) == 0
	})
	t.Logf("B's endpoints removed %.1fs after the revocation", time.Since(start).Seconds())
}

// TestImportBadHostname (attack review): a peer's API server is not trusted to serve valid
// slices. B's (a proxy rewrites every hostname it serves to "Bad_Host", which A's API server
// refuses in a slice) used to be copied as it was: its slice was refused, and A's own slice of
// the same import, written after it, never was. Now B's endpoint is dropped and counted, and
// A's slice is written.
func TestImportBadHostname(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var rewritten atomic.Int64
	var bHost string
	proxy := httptest.NewTLSServer(&httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			u, _ := url.Parse(bHost)
			r.SetURL(u)
			r.Out.Header.Del("Accept-Encoding")
			if strings.Contains(r.Out.Header.Get("Accept"), "protobuf") {
				r.Out.Header.Set("Accept", "application/json") // rewritten below
			}
		},
		ModifyResponse: func(resp *http.Response) error {
			if !strings.Contains(resp.Request.URL.Path, "/endpointslices") || resp.Request.URL.Query().Get("watch") == "true" {
				return nil
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				return err
			}
			n := bytes.Count(body, []byte(`"hostname":"good-host"`))
			rewritten.Add(int64(n))
			body = bytes.ReplaceAll(body, []byte(`"hostname":"good-host"`), []byte(`"hostname":"Bad_Host"`))
			resp.Body = io.NopCloser(bytes.NewReader(body))
			resp.ContentLength = int64(len(body))
			resp.Header.Set("Content-Length", fmt.Sprint(len(body)))
			return nil
		},
	})
	t.Cleanup(proxy.Close) // after A's controller stops (cleanups run last first), its watches with it
	reg := prometheus.NewRegistry()
	x := startImportPairOpts(t, ctx, netip.MustParsePrefix("10.244.0.0/16"), proxy.URL, time.Second, func(o *controller.Options) { o.Metrics = reg })
	bHost = x.b.Config.Host
	tr, err := rest.TransportFor(&rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: x.b.Config.CAData}})
	if err != nil {
		t.Fatal(err)
	}
	proxy.Config.Handler.(*httputil.ReverseProxy).Transport = tr
	// A reaches B through the proxy, whose certificate is its own.
	if err := x.ca.Get(ctx, client.ObjectKeyFromObject(x.creds), x.creds); err != nil {
		t.Fatal(err)
	}
	x.creds.Data[controller.PeerCAKey] = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: proxy.Certificate().Raw})
	if err := x.ca.Update(ctx, x.creds); err != nil {
		t.Fatal(err)
	}
	// B exports shop/orders first, its endpoint named good-host (rewritten on the way).
	bSlice := endpointSlice("shop", "orders-1", "orders", []string{"10.244.1.5"})
	bSlice.Endpoints[0].Hostname = ptrTo("good-host")
	for _, o := range []client.Object{
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}},
		bSlice, &mcsv1a1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"}},
	} {
		if err := x.cb.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(1100 * time.Millisecond) // A's export is the newer: its slice is written after B's
	exportService(t, ctx, x.ca, "shop", "orders", nil, "10.244.3.3")
	waitUntil(t, ctx, "A's own slice of shop/orders written, B's bad endpoint counted", func() bool {
		var sls discoveryv1.EndpointSliceList
		if x.ca.List(ctx, &sls, client.InNamespace("shop"), client.MatchingLabels{mcs.ImportLabel: "orders", discoveryv1.LabelManagedBy: mcs.ManagedBy}) != nil {
			return false
		}
		mine := slices.ContainsFunc(sls.Items, func(s discoveryv1.EndpointSlice) bool {
			return s.Labels[mcs.SourceClusterLabel] == x.idA && len(s.Endpoints) == 1 && s.Endpoints[0].Addresses[0] == "10.244.3.3"
		})
		return mine && gauge(reg, "skein_controller_import_invalid", "what", "hostname") == 1
	})
	var si mcsv1a1.ServiceImport
	if err := x.ca.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "orders"}, &si); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(si.Status.Conditions, controller.ConditionWithinLimits); c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "hostname is not a DNS-1123 label") {
		t.Errorf("WithinLimits %+v: want False, naming the hostname", c)
	}
	if rewritten.Load() == 0 {
		t.Error("the proxy rewrote no hostname: the test proved nothing")
	}
}
