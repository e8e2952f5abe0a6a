package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	svcv1alpha1 "github.com/skein-net/skein/control/api/services/v1alpha1"
	"github.com/skein-net/skein/control/controller/mcs"
)

// What an exporter's cache holds (a peer's, or this cluster's). A peer is read in its published
// namespace only (publish.go), with the services reader it granted this cluster, whose Role
// covers that namespace and nothing else: its PublishedServices (trimmed) and the metadata of the
// EndpointSlice copies there; this cluster is read whole, with its own identity. A peer decides how many
// Services and EndpointSlices it has and how large they are, so the informers hold metadata
// only: a ServiceExport's name, creation time and status; a Service's or an EndpointSlice's
// name and resourceVersion (a slice's service-name label too). Their events say what changed.
// The fields an import uses (a Service's type and ports, a slice's endpoints and ports) are read
// from the exporter's API server when an import it is admitted to needs them and the informer
// shows a new resourceVersion, and held, trimmed, for those names only: at most what is left of
// the peer's endpoint budget (exporter.held). A peer whose informers grow past
// PeerBudget.MaxObjects is not read any more (its imports go) until it shrinks.

var (
	serviceGVK       = corev1.SchemeGroupVersion.WithKind("Service")
	endpointSliceGVK = discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice")
)

// metadataOf is an object of kind gvk as a metadata-only informer holds it.
func metadataOf(gvk schema.GroupVersionKind) *metav1.PartialObjectMetadata {
	o := &metav1.PartialObjectMetadata{}
	o.SetGroupVersionKind(gvk)
	return o
}

// notImportedHere selects the EndpointSlices that skein did not write (a peer's imports are
// not exports).
func notImportedHere() labels.Selector {
	req, err := labels.NewRequirement(discoveryv1.LabelManagedBy, selection.NotEquals, []string{mcs.ManagedBy})
	if err != nil {
		panic(err) // constant values
	}
	return labels.NewSelector().Add(*req)
}

// exporterCacheOptions: exports trimmed to what the import reads, Services and EndpointSlices
// as metadata, trimmed to name, namespace, resourceVersion and the service-name label.
func exporterCacheOptions(o cache.Options) cache.Options {
	o.ByObject = map[client.Object]cache.ByObject{
		&mcsv1a1.ServiceExport{}:     {Transform: trimExport},
		metadataOf(serviceGVK):       {Transform: trimMetadata},
		metadataOf(endpointSliceGVK): {Label: notImportedHere(), Transform: trimMetadata},
	}
	return o
}

// publishedCacheOptions: a peer's published namespace only; PublishedServices trimmed to what
// the import reads, EndpointSlices as metadata trimmed to name, resourceVersion and the labels
// naming their Service.
func publishedCacheOptions(o cache.Options, ns string) cache.Options {
	o.DefaultNamespaces = map[string]cache.Config{ns: {}}
	o.ByObject = map[client.Object]cache.ByObject{
		&svcv1alpha1.PublishedService{}: {Transform: trimPublished},
		metadataOf(endpointSliceGVK):    {Transform: trimPublishedMetadata},
	}
	return o
}

// maxPublishedPorts bounds the ports of a PublishedService held (the CRD's own bound).
const maxPublishedPorts = 1000

func trimPublished(o any) (any, error) {
	p, ok := o.(*svcv1alpha1.PublishedService)
	if !ok {
		return o, nil
	}
	out := &svcv1alpha1.PublishedService{TypeMeta: p.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: p.UID, ResourceVersion: p.ResourceVersion},
		Spec:       p.Spec}
	out.Spec.Ports = p.Spec.Ports[:min(len(p.Spec.Ports), maxPublishedPorts)]
	// What the import would leave out is not held either (mcs.Build's bounds).
	size := 0
	for k, v := range p.Spec.ExportedAnnotations {
		size += len(k) + len(v)
	}
	if size > mcs.MaxExportedAnnotationBytes {
		out.Spec.ExportedAnnotations = nil
	}
	// The export's age decides conflicts (mcs.Build: the oldest export's type and ports win),
	// and spec.exportCreated is whatever the peer writes: no export is older than the
	// PublishedService that announces it, whose creation time the peer's API server sets. A
	// claim of an older export (a backdated copy of this cluster's own export, headless, would
	// push this cluster's endpoints out of its own import) counts from the object's creation.
	if out.Spec.ExportCreated.Before(&p.CreationTimestamp) {
		out.Spec.ExportCreated = p.CreationTimestamp
	}
	return out, nil
}

func trimPublishedMetadata(o any) (any, error) {
	m, ok := o.(*metav1.PartialObjectMetadata)
	if !ok {
		return o, nil
	}
	out := &metav1.PartialObjectMetadata{TypeMeta: m.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: m.Name, ResourceVersion: m.ResourceVersion}}
	ns, svc := m.Labels[svcv1alpha1.SourceNamespaceLabel], m.Labels[svcv1alpha1.SourceServiceLabel]
	if ns != "" && svc != "" && m.Labels[discoveryv1.LabelManagedBy] == mcs.ManagedBy {
		out.Labels = map[string]string{svcv1alpha1.SourceNamespaceLabel: ns, svcv1alpha1.SourceServiceLabel: svc, discoveryv1.LabelManagedBy: mcs.ManagedBy}
	}
	return out, nil
}

// watchedKind is an informer of an exporter's cache and the namespace/name its objects are of.
type watchedKind struct {
	o   client.Object
	key func(client.Object) types.NamespacedName
}

// watched are the informers of x's cache.
func (x *exporter) watched() []watchedKind {
	if x.published != "" {
		return []watchedKind{
			{&svcv1alpha1.PublishedService{}, func(o client.Object) types.NamespacedName {
				if p, ok := o.(*svcv1alpha1.PublishedService); ok {
					return types.NamespacedName{Namespace: p.Spec.Namespace, Name: p.Spec.Name}
				}
				return types.NamespacedName{}
			}},
			{metadataOf(endpointSliceGVK), func(o client.Object) types.NamespacedName {
				return types.NamespacedName{Namespace: o.GetLabels()[svcv1alpha1.SourceNamespaceLabel], Name: o.GetLabels()[svcv1alpha1.SourceServiceLabel]}
			}},
		}
	}
	own := func(o client.Object) types.NamespacedName { return client.ObjectKeyFromObject(o) }
	return []watchedKind{{&mcsv1a1.ServiceExport{}, own}, {metadataOf(serviceGVK), own},
		{metadataOf(endpointSliceGVK), func(o client.Object) types.NamespacedName {
			return types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetLabels()[discoveryv1.LabelServiceName]}
		}}}
}

// exportOfPublished is the ServiceExport a PublishedService stands for (what the import reads
// of one: its namespace, name and creation time).
func exportOfPublished(p *svcv1alpha1.PublishedService) mcsv1a1.ServiceExport {
	return mcsv1a1.ServiceExport{TypeMeta: metav1.TypeMeta{APIVersion: mcsv1a1.GroupVersion.String(), Kind: "ServiceExport"},
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Spec.Namespace, Name: p.Spec.Name, UID: p.UID, ResourceVersion: p.ResourceVersion,
			CreationTimestamp: p.Spec.ExportCreated},
		Spec: mcsv1a1.ServiceExportSpec{ExportedLabels: p.Spec.ExportedLabels, ExportedAnnotations: p.Spec.ExportedAnnotations}}
}

// validPublished: a PublishedService's name is the one the publisher gives its Service's
// (another name could stand for a second export of the same Service).
func validPublished(p *svcv1alpha1.PublishedService) bool {
	return p.Spec.Namespace != "" && p.Spec.Name != "" && p.Name == publishedName(types.NamespacedName{Namespace: p.Spec.Namespace, Name: p.Spec.Name})
}

// exports lists x's exports (in namespace ns, or all with ""), as read from its cache: shared
// with the cache, never to be changed.
func (x *exporter) exports(ctx context.Context, ns string) ([]mcsv1a1.ServiceExport, error) {
	if x.published != "" {
		// The cache holds them trimmed of their labels: selected by spec.
		var l svcv1alpha1.PublishedServiceList
		if err := x.cache.List(ctx, &l, client.UnsafeDisableDeepCopy); err != nil {
			return nil, err
		}
		out := make([]mcsv1a1.ServiceExport, 0, len(l.Items))
		for i := range l.Items {
			if p := &l.Items[i]; validPublished(p) && (ns == "" || p.Spec.Namespace == ns) {
				out = append(out, exportOfPublished(p))
			}
		}
		return out, nil
	}
	var l mcsv1a1.ServiceExportList
	opts := []client.ListOption{client.UnsafeDisableDeepCopy}
	if ns != "" {
		opts = append(opts, client.InNamespace(ns))
	}
	if err := x.cache.List(ctx, &l, opts...); err != nil {
		return nil, err
	}
	return l.Items, nil
}

// export is x's export of namespace/name (a NotFound error when there is none).
func (x *exporter) export(ctx context.Context, key types.NamespacedName) (*mcsv1a1.ServiceExport, error) {
	if x.published != "" {
		p, err := x.publishedOf(ctx, key)
		if err != nil {
			return nil, err
		}
		e := exportOfPublished(p)
		return &e, nil
	}
	var e mcsv1a1.ServiceExport
	if err := x.cache.Get(ctx, key, &e); err != nil {
		return nil, err
	}
	return &e, nil
}

// publishedOf is the PublishedService of namespace/name in x's cache.
func (x *exporter) publishedOf(ctx context.Context, key types.NamespacedName) (*svcv1alpha1.PublishedService, error) {
	var p svcv1alpha1.PublishedService
	if err := x.cache.Get(ctx, types.NamespacedName{Namespace: x.published, Name: publishedName(key)}, &p); err != nil {
		return nil, err
	}
	if !validPublished(&p) || p.Spec.Namespace != key.Namespace || p.Spec.Name != key.Name {
		return nil, apierrors.NewNotFound(svcv1alpha1.SchemeGroupVersion.WithResource("publishedservices").GroupResource(), p.Name)
	}
	return &p, nil
}

// slicesOf: where x's EndpointSlices of namespace/name are, and the labels that select them.
func (x *exporter) slicesOf(key types.NamespacedName) (string, labels.Selector, error) {
	if x.published != "" {
		return x.published, labels.SelectorFromSet(labels.Set{svcv1alpha1.SourceNamespaceLabel: key.Namespace, svcv1alpha1.SourceServiceLabel: key.Name,
			discoveryv1.LabelManagedBy: mcs.ManagedBy}), nil
	}
	sel := notImportedHere()
	req, err := labels.NewRequirement(discoveryv1.LabelServiceName, selection.Equals, []string{key.Name})
	if err != nil {
		return "", nil, err
	}
	return key.Namespace, sel.Add(*req), nil
}

func trimExport(o any) (any, error) {
	e, ok := o.(*mcsv1a1.ServiceExport)
	if !ok {
		return o, nil
	}
	return &mcsv1a1.ServiceExport{TypeMeta: e.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Namespace: e.Namespace, Name: e.Name, UID: e.UID, ResourceVersion: e.ResourceVersion,
			Generation: e.Generation, CreationTimestamp: e.CreationTimestamp, DeletionTimestamp: e.DeletionTimestamp},
		Spec: e.Spec, Status: mcsv1a1.ServiceExportStatus{Conditions: e.Status.Conditions}}, nil
}

func trimMetadata(o any) (any, error) {
	m, ok := o.(*metav1.PartialObjectMetadata)
	if !ok {
		return o, nil
	}
	out := &metav1.PartialObjectMetadata{TypeMeta: m.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: m.Name, ResourceVersion: m.ResourceVersion}}
	if n, ok := m.Labels[discoveryv1.LabelServiceName]; ok {
		out.Labels = map[string]string{discoveryv1.LabelServiceName: n}
	}
	return out, nil
}

// trimService keeps what mcs.Build reads of a Service.
func trimService(s *corev1.Service) *corev1.Service {
	out := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name, ResourceVersion: s.ResourceVersion},
		Spec: corev1.ServiceSpec{Type: s.Spec.Type, ClusterIP: s.Spec.ClusterIP, SessionAffinity: s.Spec.SessionAffinity,
			SessionAffinityConfig: s.Spec.SessionAffinityConfig, InternalTrafficPolicy: s.Spec.InternalTrafficPolicy,
			TrafficDistribution: s.Spec.TrafficDistribution}}
	for _, p := range s.Spec.Ports {
		out.Spec.Ports = append(out.Spec.Ports, corev1.ServicePort{Name: p.Name, Protocol: p.Protocol, Port: p.Port, AppProtocol: p.AppProtocol})
	}
	return out
}

// trimSlice keeps what mcs.Build reads of an EndpointSlice, and at most n endpoints.
func trimSlice(s *discoveryv1.EndpointSlice, n int) discoveryv1.EndpointSlice {
	out := discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name, ResourceVersion: s.ResourceVersion},
		AddressType: s.AddressType, Ports: s.Ports}
	eps := s.Endpoints[:min(n, len(s.Endpoints))]
	out.Endpoints = make([]discoveryv1.Endpoint, len(eps))
	for i, e := range eps {
		out.Endpoints[i] = discoveryv1.Endpoint{Addresses: e.Addresses[:min(1, len(e.Addresses))], Hostname: e.Hostname,
			Conditions: discoveryv1.EndpointConditions{Ready: e.Conditions.Ready, Serving: e.Conditions.Serving, Terminating: e.Conditions.Terminating}}
	}
	return out
}

// heldExport is what an exporter holds of one exported name: its Service and slices as read
// from its API server, for the informers' view fingerprint and an allowance of endpoints.
type heldExport struct {
	fingerprint string
	allowance   int
	svcRV       string // the informers' resourceVersion of the Service when it was read
	svc         *corev1.Service
	slices      []discoveryv1.EndpointSlice
	// endpoints were kept (at most allowance); overBudget more were read and left out.
	endpoints, overBudget int
}

// fingerprint is the informers' view of namespace/name: the Service's resourceVersion (also
// returned alone) and each slice's.
func (x *exporter) fingerprint(ctx context.Context, key types.NamespacedName) (string, string, error) {
	var b strings.Builder
	var svcRV string
	if x.published != "" {
		if p, err := x.publishedOf(ctx, key); err == nil {
			svcRV = p.ResourceVersion
		} else if !apierrors.IsNotFound(err) {
			return "", "", err
		}
	} else {
		svc := metadataOf(serviceGVK)
		if err := x.cache.Get(ctx, key, svc); err == nil {
			svcRV = svc.ResourceVersion
		} else if !apierrors.IsNotFound(err) {
			return "", "", err
		}
	}
	b.WriteString(svcRV)
	ns, sel, err := x.slicesOf(key)
	if err != nil {
		return "", "", err
	}
	sls := &metav1.PartialObjectMetadataList{}
	sls.SetGroupVersionKind(endpointSliceGVK.GroupVersion().WithKind("EndpointSliceList"))
	if err := x.cache.List(ctx, sls, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return "", "", err
	}
	rvs := make([]string, 0, len(sls.Items))
	for _, s := range sls.Items {
		rvs = append(rvs, s.Name+"="+s.ResourceVersion)
	}
	slices.Sort(rvs)
	for _, rv := range rvs {
		b.WriteString("|" + rv)
	}
	return b.String(), svcRV, nil
}

// heldFor returns namespace/name's Service and slices with at most allowance endpoints, read
// again from the exporter's API server when the informers saw a change or the allowance
// changed. ceiling bounds the endpoints read to count those over the allowance.
func (x *exporter) heldFor(ctx context.Context, key types.NamespacedName, allowance, ceiling int) (*heldExport, error) {
	fp, svcRV, err := x.fingerprint(ctx, key)
	if err != nil {
		return nil, err
	}
	x.mu.Lock()
	old := x.held[key]
	x.mu.Unlock()
	if old != nil && old.fingerprint == fp && old.allowance == allowance {
		return old, nil
	}
	h := &heldExport{fingerprint: fp, allowance: allowance, svcRV: svcRV}
	if old != nil && svcRV != "" && old.svcRV == svcRV {
		h.svc = old.svc // only slices changed (a pod became ready): one request, not two
	} else if x.published != "" {
		// The cache holds the PublishedService itself (trimmed): nothing more to read.
		if p, err := x.publishedOf(ctx, key); err == nil {
			h.svc = serviceOfPublished(p)
		} else if !apierrors.IsNotFound(err) {
			return nil, err
		}
	} else {
		var svc corev1.Service
		if err := x.direct.Get(ctx, key, &svc); err == nil {
			h.svc = trimService(&svc)
		} else if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("exporter %s: read Service %s: %w", x.id, key, err)
		}
	}
	sliceNS, sel, err := x.slicesOf(key)
	if err != nil {
		return nil, err
	}
	seen := 0
	for cont := ""; ; {
		var page discoveryv1.EndpointSliceList
		// Pages of 20 slices: what is held while reading is at most 20,000 endpoints.
		if err := x.direct.List(ctx, &page, client.InNamespace(sliceNS), client.MatchingLabelsSelector{Selector: sel},
			client.Limit(20), client.Continue(cont)); err != nil {
			return nil, fmt.Errorf("exporter %s: read the EndpointSlices of %s: %w", x.id, key, err)
		}
		for i := range page.Items {
			sl := &page.Items[i]
			n := len(sl.Endpoints)
			seen += n
			if keep := allowance - h.endpoints; keep > 0 {
				t := trimSlice(sl, keep)
				h.endpoints += len(t.Endpoints)
				h.slices = append(h.slices, t)
			}
		}
		cont = page.Continue
		if cont == "" || seen >= ceiling {
			break
		}
	}
	h.overBudget = min(seen, ceiling) - h.endpoints
	x.mu.Lock()
	x.held[key] = h
	x.mu.Unlock()
	return h, nil
}

// forget drops what is held of namespace/name (no longer exported, or no longer imported).
func (x *exporter) forget(key types.NamespacedName) {
	x.mu.Lock()
	delete(x.held, key)
	x.mu.Unlock()
}

// heldEndpoints is how many endpoints are held of namespace/name (0 when nothing is).
func (x *exporter) heldEndpoints(key types.NamespacedName) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	if h := x.held[key]; h != nil {
		return h.endpoints
	}
	return 0
}
