package controller_test

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	svcv1alpha1 "github.com/skein-net/skein/control/api/services/v1alpha1"
	"github.com/skein-net/skein/control/controller"
	"github.com/skein-net/skein/control/controller/mcs"
)

// publishAsPeer writes into B's published namespace what someone in B who may write there
// (not B's skein-controller) chooses: a PublishedService of ns/name claiming an export made at
// created, and one slice copy with addrs.
func publishAsPeer(t *testing.T, ctx context.Context, c client.Client, ns, name string, created time.Time, headless bool, addrs ...string) {
	t.Helper()
	src := map[string]string{svcv1alpha1.SourceNamespaceLabel: ns, svcv1alpha1.SourceServiceLabel: name}
	p := &svcv1alpha1.PublishedService{ObjectMeta: metav1.ObjectMeta{Namespace: controller.DefaultPublishedNamespace, Name: ns + "." + name, Labels: src},
		Spec: svcv1alpha1.PublishedServiceSpec{Namespace: ns, Name: name, ExportCreated: metav1.NewTime(created), Headless: headless,
			Ports: []svcv1alpha1.PublishedPort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}}
	sl := endpointSlice(controller.DefaultPublishedNamespace, ns+"."+name+"-1", name, addrs)
	sl.Labels = map[string]string{svcv1alpha1.SourceNamespaceLabel: ns, svcv1alpha1.SourceServiceLabel: name,
		discoveryv1.LabelManagedBy: mcs.ManagedBy, controller.ServiceProxyNameLabel: controller.PublishedProxyName}
	for i := range sl.Endpoints {
		sl.Endpoints[i].NodeName = nil
	}
	for _, o := range []client.Object{p, sl} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
}

// importedByCluster: the addresses of A's import of ns/name, by the cluster they come from.
func importedByCluster(ctx context.Context, c client.Client, ns, name string) map[string][]string {
	var sls discoveryv1.EndpointSliceList
	if c.List(ctx, &sls, client.InNamespace(ns), client.MatchingLabels{mcs.ImportLabel: name, discoveryv1.LabelManagedBy: mcs.ManagedBy}) != nil {
		return nil
	}
	out := map[string][]string{}
	for _, s := range sls.Items {
		for _, e := range s.Endpoints {
			out[s.Labels[mcs.SourceClusterLabel]] = append(out[s.Labels[mcs.SourceClusterLabel]], e.Addresses...)
		}
	}
	return out
}

// TestPeerClaimsHeld: what a peer publishes claims nothing of this cluster's own.
//
//   - backdated: B publishes A's own export shop/orders as headless and exported in 2000. The
//     oldest export decides an import's type, and a later export of another type contributes
//     no endpoints; a claim counts from its PublishedService's creation (which B's API server
//     sets), so A's older export keeps its type and its endpoint, and B's gets the conflict.
//   - namespaces: B's exports of names in A's published namespace and in the namespace holding
//     A's credentials for B are not imported (every peer's reader lists the first); a name in
//     shop, the control, is.
//   - derived name: A's own Service named as the import of shop/api's derived Service (a
//     public function of the name), not skein's, is neither taken over nor deleted with the
//     import, although the controller's cache (skein's labelled Services only) does not hold it.
func TestPeerClaimsHeld(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	x := startImportPairWith(t, ctx, netip.MustParsePrefix("10.243.0.0/16"), "", time.Second)
	squat := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: mcs.DerivedServiceName("api")},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "x", Port: 9}}}}
	if err := x.ca.Create(ctx, squat); err != nil {
		t.Fatal(err)
	}
	exportService(t, ctx, x.ca, "shop", "orders", nil, "10.243.3.3")
	waitUntil(t, ctx, "A's own endpoint imported", func() bool {
		return slices.Contains(importedByCluster(ctx, x.ca, "shop", "orders")[x.idA], "10.243.3.3")
	})
	time.Sleep(1100 * time.Millisecond) // B's claim is made a second later than A's export, at least
	publishAsPeer(t, ctx, x.cb, "shop", "orders", time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), true, "10.244.6.6")
	publishAsPeer(t, ctx, x.cb, controller.DefaultPublishedNamespace, "leak", time.Now(), false, "10.244.7.7")
	publishAsPeer(t, ctx, x.cb, x.creds.Namespace, "leak", time.Now(), false, "10.244.7.8")
	publishAsPeer(t, ctx, x.cb, "shop", "api", time.Now(), false, "10.244.1.2")
	publishAsPeer(t, ctx, x.cb, "shop", "control", time.Now(), false, "10.244.7.9")
	waitUntil(t, ctx, "the control import", func() bool { return len(importedByCluster(ctx, x.ca, "shop", "control")[x.idB]) == 1 })
	time.Sleep(3 * time.Second) // settled

	t.Run("backdated", func(t *testing.T) {
		got := importedByCluster(ctx, x.ca, "shop", "orders")
		var si mcsv1a1.ServiceImport
		if err := x.ca.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "orders"}, &si); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(got[x.idA], "10.243.3.3") || si.Spec.Type != mcsv1a1.ClusterSetIP {
			t.Errorf("a peer's backdated headless export of A's own shop/orders took the import: type %s, endpoints by cluster %v", si.Spec.Type, got)
		}
		if len(got[x.idB]) > 0 {
			t.Errorf("the later export of another type contributed endpoints: %v", got)
		}
	})
	t.Run("namespaces", func(t *testing.T) {
		for _, ns := range []string{controller.DefaultPublishedNamespace, x.creds.Namespace} {
			if got := importedByCluster(ctx, x.ca, ns, "leak"); len(got) > 0 {
				t.Errorf("B's export of %s/leak imported into A's namespace %s: %v", ns, ns, got)
			}
			if got := importNames(ctx, x.ca, ns); len(got) > 0 {
				t.Errorf("ServiceImports in %s: %v", ns, got)
			}
		}
	})
	t.Run("derived name", func(t *testing.T) {
		var sq corev1.Service
		if err := x.ca.Get(ctx, client.ObjectKeyFromObject(squat), &sq); err != nil {
			t.Fatal(err)
		}
		if len(sq.Labels) != 0 || len(sq.Spec.Ports) != 1 || len(sq.OwnerReferences) != 0 {
			t.Errorf("A's own Service %s taken over by the import of shop/api: labels %v, ports %v, owners %v", sq.Name, sq.Labels, sq.Spec.Ports, sq.OwnerReferences)
		}
		// The import is not written while the name is taken (it is tried again).
		if slices.Contains(importNames(ctx, x.ca, "shop"), "api") {
			t.Errorf("shop/api imported beside A's own Service of its derived name")
		}
		if err := x.cb.Delete(ctx, &svcv1alpha1.PublishedService{ObjectMeta: metav1.ObjectMeta{Namespace: controller.DefaultPublishedNamespace, Name: "shop.api"}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		if err := x.ca.Get(ctx, client.ObjectKeyFromObject(squat), &sq); err != nil {
			t.Errorf("A's own Service %s after B stopped exporting shop/api: %v", squat.Name, err)
		}
	})
}

// TestPeerTooLargeNotRead: a peer whose published namespace is answered with more than
// MaxPeerResponseBytes at once (forty PublishedServices at the CRD's bounds, about 10 MB) is
// not read: its Configuration says ResponseTooLarge, nothing of it is imported, and this
// controller's heap keeps none of it (the attack review: before, its informers listed it again
// and again and the heap grew by 114 MiB); once it publishes less it is read again.
func TestPeerTooLargeNotRead(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	x := startImportPairWith(t, ctx, netip.MustParsePrefix("10.243.0.0/16"), "", time.Second)
	publishAsPeer(t, ctx, x.cb, "shop", "control", time.Now(), false, "10.244.7.9")
	waitUntil(t, ctx, "the control import", func() bool { return len(importedByCluster(ctx, x.ca, "shop", "control")[x.idB]) == 1 })
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	// A stops reading B while B publishes (this process runs B's controller too, whose cache
	// holds what B publishes: that is B's cost, measured before A reads B again).
	creds := x.creds.DeepCopy()
	if err := x.ca.Delete(ctx, x.creds); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, ctx, "B's imports gone with the credentials", func() bool { return len(importedByCluster(ctx, x.ca, "shop", "control")) == 0 })
	app := strings.Repeat("a", 200)
	var big []client.Object
	for i := range 40 {
		p := &svcv1alpha1.PublishedService{ObjectMeta: metav1.ObjectMeta{Namespace: controller.DefaultPublishedNamespace, Name: fmt.Sprintf("shop.big-%d", i)},
			Spec: svcv1alpha1.PublishedServiceSpec{Namespace: "shop", Name: fmt.Sprintf("big-%d", i), ExportCreated: metav1.Now()}}
		for j := range 1000 {
			p.Spec.Ports = append(p.Spec.Ports, svcv1alpha1.PublishedPort{Name: fmt.Sprintf("p%d", j), Protocol: corev1.ProtocolTCP, Port: int32(j + 1), AppProtocol: &app})
		}
		if err := x.cb.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		big = append(big, p)
	}
	time.Sleep(3 * time.Second) // B's own caches settle
	base := heap()
	creds.ResourceVersion, creds.UID = "", ""
	if err := x.ca.Create(ctx, creds); err != nil {
		t.Fatal(err)
	}
	var conf netv1alpha1.Configuration
	waitUntil(t, ctx, "B's Configuration says ResponseTooLarge", func() bool {
		if x.ca.Get(ctx, client.ObjectKey{Namespace: "liqo-tenant", Name: "b"}, &conf) != nil {
			return false
		}
		c := meta.FindStatusCondition(conf.Status.Conditions, controller.ConditionServicesWithinBudget)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == controller.ReasonResponseTooLarge
	})
	waitUntil(t, ctx, "B's imports gone", func() bool { return len(importedByCluster(ctx, x.ca, "shop", "control")) == 0 })
	time.Sleep(5 * time.Second) // retries come and go
	if names := importNames(ctx, x.ca, "shop"); len(names) != 0 {
		t.Errorf("imports of a peer that is not read: %v", names)
	}
	grown := int64(heap()) - int64(base)
	t.Logf("heap after B published ~10 MB and A tried to read it: %+d KiB", grown>>10)
	if grown > 16<<20 {
		t.Errorf("the heap kept %d MiB of a peer that is not read", grown>>20)
	}
	for _, o := range big {
		if err := x.cb.Delete(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, ctx, "B read again: the control import back", func() bool { return len(importedByCluster(ctx, x.ca, "shop", "control")[x.idB]) == 1 })
}

// TestExportedLabelsImported: a ServiceExport's exportedLabels and exportedAnnotations reach
// the importing cluster's ServiceImport through the PublishedService (KEP-1645, the
// conformance suite's ExportedLabels specs), and follow when they change.
func TestExportedLabelsImported(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	x := startImportPairWith(t, ctx, netip.MustParsePrefix("10.243.0.0/16"), "", time.Second)
	x.exportOrders(t, ctx, "10.244.1.1")
	var exp mcsv1a1.ServiceExport
	if err := x.cb.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "orders"}, &exp); err != nil {
		t.Fatal(err)
	}
	exp.Spec.ExportedLabels = map[string]string{"tier": "gold"}
	exp.Spec.ExportedAnnotations = map[string]string{"owner": "shop-team"}
	if err := x.cb.Update(ctx, &exp); err != nil {
		t.Fatal(err)
	}
	var si mcsv1a1.ServiceImport
	waitUntil(t, ctx, "A's ServiceImport carries B's exported label and annotation", func() bool {
		return x.ca.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "orders"}, &si) == nil &&
			si.Labels["tier"] == "gold" && si.Annotations["owner"] == "shop-team" && si.Labels[controller.ManagedByLabel] == controller.FieldOwner
	})
	if err := x.cb.Get(ctx, client.ObjectKeyFromObject(&exp), &exp); err != nil {
		t.Fatal(err)
	}
	exp.Spec.ExportedLabels = map[string]string{"tier": "silver"}
	exp.Spec.ExportedAnnotations = nil
	if err := x.cb.Update(ctx, &exp); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, ctx, "the change followed", func() bool {
		return x.ca.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "orders"}, &si) == nil && si.Labels["tier"] == "silver" && si.Annotations["owner"] == ""
	})
}
