package controller_test

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	svcv1alpha1 "github.com/skein-net/skein/control/api/services/v1alpha1"
	"github.com/skein-net/skein/control/controller"
	"github.com/skein-net/skein/control/controller/mcs"
	"github.com/skein-net/skein/control/identity"
)

// publishedOf lists what cluster c publishes of shop/name: its PublishedService (nil if none)
// and slice copies.
func publishedOf(ctx context.Context, c client.Client, name string) (*svcv1alpha1.PublishedService, []discoveryv1.EndpointSlice, error) {
	var p svcv1alpha1.PublishedService
	err := c.Get(ctx, client.ObjectKey{Namespace: controller.DefaultPublishedNamespace, Name: "shop." + name}, &p)
	if client.IgnoreNotFound(err) != nil {
		return nil, nil, err
	}
	var sls discoveryv1.EndpointSliceList
	if err := c.List(ctx, &sls, client.InNamespace(controller.DefaultPublishedNamespace),
		client.MatchingLabels{svcv1alpha1.SourceNamespaceLabel: "shop", svcv1alpha1.SourceServiceLabel: name}); err != nil {
		return nil, nil, err
	}
	if apierrors.IsNotFound(err) {
		return nil, sls.Items, nil
	}
	return &p, sls.Items, nil
}

// TestPublishedExports (issue #40): what a cluster publishes for its peers' readers is its
// exported Services only, with the fields the import uses: a PublishedService and slice copies
// trimmed of node names and pod references, which no proxy serves (no service-name label, a
// service-proxy-name of skein's), removed when the Service or the export goes; an unexported
// Service publishes nothing. The peer imports from them.
func TestPublishedExports(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	x := startImportPairWith(t, ctx, netip.MustParsePrefix("10.244.0.0/16"), "", time.Second)
	sl := endpointSlice("shop", "private-1", "private", []string{"10.244.3.3"})
	sl.Endpoints[0].TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: "private-0"}
	for _, o := range []client.Object{
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "private"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}},
		sl,
	} {
		if err := x.cb.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	x.exportOrders(t, ctx, "10.244.1.5", "10.244.1.6")
	var exp mcsv1a1.ServiceExport
	if err := x.cb.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "orders"}, &exp); err != nil {
		t.Fatal(err)
	}
	var p *svcv1alpha1.PublishedService
	var copies []discoveryv1.EndpointSlice
	waitUntil(t, ctx, "B publishes shop/orders", func() bool {
		var err error
		p, copies, err = publishedOf(ctx, x.cb, "orders")
		return err == nil && p != nil && len(copies) == 1 && len(copies[0].Endpoints) == 2
	})
	wantSpec := svcv1alpha1.PublishedServiceSpec{Namespace: "shop", Name: "orders", ExportCreated: exp.CreationTimestamp, Type: corev1.ServiceTypeClusterIP,
		SessionAffinity: corev1.ServiceAffinityNone, Ports: []svcv1alpha1.PublishedPort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}
	if !p.Spec.ExportCreated.Equal(&wantSpec.ExportCreated) {
		t.Errorf("published export time %v, want %v", p.Spec.ExportCreated, wantSpec.ExportCreated)
	}
	p.Spec.ExportCreated = wantSpec.ExportCreated
	if got, want := p.Spec, wantSpec; got.Namespace != want.Namespace || got.Name != want.Name || got.Type != want.Type || got.Headless ||
		got.SessionAffinity != want.SessionAffinity || !slices.Equal(got.Ports, want.Ports) {
		t.Errorf("published %+v, want %+v", got, want)
	}
	c := copies[0]
	if c.Name != "shop.orders-1" || c.Labels[discoveryv1.LabelServiceName] != "" || c.Labels[controller.ServiceProxyNameLabel] != controller.PublishedProxyName {
		t.Errorf("slice copy %s labels %v: want shop.orders-1, no %s, %s=%s", c.Name, c.Labels, discoveryv1.LabelServiceName, controller.ServiceProxyNameLabel, controller.PublishedProxyName)
	}
	for _, e := range c.Endpoints {
		if e.NodeName != nil || e.TargetRef != nil || e.Zone != nil {
			t.Errorf("slice copy endpoint %+v: want no node, pod or zone", e)
		}
	}
	if p, copies, err := publishedOf(ctx, x.cb, "private"); err != nil || p != nil || len(copies) != 0 {
		t.Errorf("an unexported Service published: %v, %d slices (%v)", p, len(copies), err)
	}
	waitUntil(t, ctx, "A imports B's two endpoints", func() bool {
		var sls discoveryv1.EndpointSliceList
		return x.ca.List(ctx, &sls, client.InNamespace("shop"), client.MatchingLabels{mcs.ImportLabel: "orders"}) == nil &&
			len(sls.Items) == 1 && len(sls.Items[0].Endpoints) == 2
	})

	// The Service goes: nothing published; back, published again; unexported: nothing.
	if err := x.cb.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"}}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, ctx, "nothing published once the Service is gone", func() bool {
		p, copies, err := publishedOf(ctx, x.cb, "orders")
		return err == nil && p == nil && len(copies) == 0
	})
	if err := x.cb.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, ctx, "published again, headless", func() bool {
		p, copies, err := publishedOf(ctx, x.cb, "orders")
		return err == nil && p != nil && p.Spec.Headless && len(copies) == 1
	})
	if err := x.cb.Delete(ctx, &exp); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, ctx, "nothing published once unexported", func() bool {
		p, copies, err := publishedOf(ctx, x.cb, "orders")
		return err == nil && p == nil && len(copies) == 0
	})
	waitUntil(t, ctx, "A's import gone", func() bool { return len(importNames(ctx, x.ca, "shop")) == 0 })
}

// TestServiceReaderTokenRenewal (issue #40): the reader's token is short-lived; A's controller
// renews it (a TokenRequest for the reader itself, the only one it may make) once the renewal
// fraction of its lifetime has passed, stores it in the credentials Secret, and keeps
// importing with it.
func TestServiceReaderTokenRenewal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// An hour's token renewed after 0.2% of it: 7 s.
	x := startImportPairOpts(t, ctx, netip.MustParsePrefix("10.244.0.0/16"), "", time.Second, func(o *controller.Options) { o.TokenRenewFraction = 0.002 })
	x.exportOrders(t, ctx, "10.244.1.5")
	waitUntil(t, ctx, "orders imported", func() bool { return slices.Equal(importNames(ctx, x.ca, "shop"), []string{"orders"}) })
	var s corev1.Secret
	waitUntil(t, ctx, "the token in A's Secret renewed", func() bool {
		return x.ca.Get(ctx, client.ObjectKeyFromObject(x.creds), &s) == nil && string(s.Data[controller.PeerTokenKey]) != x.token.Token
	})
	tr := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: string(s.Data[controller.PeerTokenKey])}}
	if err := x.cb.Create(ctx, tr); err != nil {
		t.Fatal(err)
	}
	if want := "system:serviceaccount:liqo-tenant:" + identity.ServiceReaderName(x.idA); !tr.Status.Authenticated || tr.Status.User.Username != want {
		t.Errorf("the renewed token authenticates as %q (%v, %s), want %s", tr.Status.User.Username, tr.Status.Authenticated, tr.Status.Error, want)
	}
	// Still imported with it, and B's changes still reach A.
	if err := x.cb.Create(ctx, endpointSlice("shop", "orders-2", "orders", []string{"10.244.1.7"})); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, ctx, "B's second slice imported with a renewed token", func() bool {
		var sls discoveryv1.EndpointSliceList
		n := 0
		if x.ca.List(ctx, &sls, client.InNamespace("shop"), client.MatchingLabels{mcs.ImportLabel: "orders"}) != nil {
			return false
		}
		for _, sl := range sls.Items {
			n += len(sl.Endpoints)
		}
		return n == 2
	})
}
