package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	svcv1alpha1 "github.com/skein-net/skein/control/api/services/v1alpha1"
	"github.com/skein-net/skein/control/controller/mcs"
	"github.com/skein-net/skein/control/identity"
)

// What this cluster publishes for its peers (issue #40). A peer's services reader reads one
// namespace here, the published namespace, and nothing else: for each ServiceExport whose
// Service exists, a PublishedService (the Service's fields the import uses and the export's
// creation time) and copies of the Service's EndpointSlices, trimmed to what the import uses
// (one address per endpoint, hostname, conditions, ports: no node names, no pod references).
// The copies carry no kubernetes.io/service-name label (kube-proxy and the EndpointSlice
// controller map slices to Services by it) and carry service.kubernetes.io/service-proxy-name,
// which kube-proxy's informers exclude by their label selector: no proxy programs them. They are
// written by the import reconciler from what it reads of this cluster's own exports, and
// removed when the export or its Service goes.

// DefaultPublishedNamespace is the namespace this cluster publishes its exports in.
const DefaultPublishedNamespace = identity.DefaultPublishedNamespace

// PublishedProxyName is the service.kubernetes.io/service-proxy-name of the published slices:
// kube-proxy (and the proxies that follow it) ignore slices that carry one.
const PublishedProxyName = "skein-published"

// ServiceProxyNameLabel names the proxy that serves a Service or slice (kube-proxy ignores those
// that carry it, by its informers' label selector).
const ServiceProxyNameLabel = "service.kubernetes.io/service-proxy-name"

// publishedName is the name of the PublishedService of namespace/name: a namespace and a
// Service name are DNS labels (no dot), so the pair is unique.
func publishedName(key types.NamespacedName) string { return key.Namespace + "." + key.Name }

// publishedSliceName is the name of the copy of slice name of namespace ns.
func publishedSliceName(ns, name string) string {
	if n := ns + "." + name; len(n) <= 253 {
		return n
	}
	sum := sha256.Sum256([]byte(name))
	return ns + ".h-" + hex.EncodeToString(sum[:])[:32]
}

func publishedLabels(key types.NamespacedName) map[string]string {
	return map[string]string{svcv1alpha1.SourceNamespaceLabel: key.Namespace, svcv1alpha1.SourceServiceLabel: key.Name,
		ManagedByLabel: FieldOwner, "app.kubernetes.io/part-of": "skein"}
}

// publishedService is the PublishedService of an export of svc.
func publishedService(ns string, key types.NamespacedName, export *mcsv1a1.ServiceExport, svc *corev1.Service) *svcv1alpha1.PublishedService {
	exp := export.CreationTimestamp
	p := &svcv1alpha1.PublishedService{TypeMeta: metav1.TypeMeta{APIVersion: svcv1alpha1.SchemeGroupVersion.String(), Kind: "PublishedService"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: publishedName(key), Labels: publishedLabels(key)},
		Spec: svcv1alpha1.PublishedServiceSpec{Namespace: key.Namespace, Name: key.Name, ExportCreated: exp, Type: svc.Spec.Type,
			Headless: svc.Spec.ClusterIP == corev1.ClusterIPNone, SessionAffinity: svc.Spec.SessionAffinity,
			SessionAffinityConfig: svc.Spec.SessionAffinityConfig.DeepCopy(),
			InternalTrafficPolicy: svc.Spec.InternalTrafficPolicy, TrafficDistribution: svc.Spec.TrafficDistribution,
			ExportedLabels: export.Spec.ExportedLabels, ExportedAnnotations: export.Spec.ExportedAnnotations}}
	for _, sp := range svc.Spec.Ports {
		p.Spec.Ports = append(p.Spec.Ports, svcv1alpha1.PublishedPort{Name: sp.Name, Protocol: sp.Protocol, Port: sp.Port, AppProtocol: sp.AppProtocol})
	}
	return p
}

// serviceOfPublished is the Service a PublishedService says, as trimService keeps one.
func serviceOfPublished(p *svcv1alpha1.PublishedService) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: p.Spec.Namespace, Name: p.Spec.Name, ResourceVersion: p.ResourceVersion},
		Spec: corev1.ServiceSpec{Type: p.Spec.Type, SessionAffinity: p.Spec.SessionAffinity, SessionAffinityConfig: p.Spec.SessionAffinityConfig,
			InternalTrafficPolicy: p.Spec.InternalTrafficPolicy, TrafficDistribution: p.Spec.TrafficDistribution}}
	if p.Spec.Headless {
		s.Spec.ClusterIP = corev1.ClusterIPNone
	}
	for _, pp := range p.Spec.Ports {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: pp.Name, Protocol: pp.Protocol, Port: pp.Port, AppProtocol: pp.AppProtocol})
	}
	return s
}

// publish writes what this cluster publishes of namespace/name: src is its own export of it as
// the import read it (nil, or without a Service: nothing is published).
func (r *ServiceImportReconciler) publish(ctx context.Context, key types.NamespacedName, src *mcs.Source) error {
	ns := r.Published
	if ns == "" || key.Namespace == ns {
		return nil
	}
	var have discoveryv1.EndpointSliceList
	if err := r.Client.List(ctx, &have, client.InNamespace(ns), client.MatchingLabels{svcv1alpha1.SourceNamespaceLabel: key.Namespace,
		svcv1alpha1.SourceServiceLabel: key.Name, discoveryv1.LabelManagedBy: mcs.ManagedBy}); err != nil {
		return fmt.Errorf("published slices of %s: %w", key, err)
	}
	if src == nil || src.Export == nil || src.Service == nil {
		var errs []error
		for i := range have.Items {
			if err := r.Client.Delete(ctx, &have.Items[i]); client.IgnoreNotFound(err) != nil {
				errs = append(errs, err)
			}
		}
		var p svcv1alpha1.PublishedService
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: publishedName(key)}, &p); err == nil && p.Labels[ManagedByLabel] == FieldOwner {
			if err := r.Client.Delete(ctx, &p); client.IgnoreNotFound(err) != nil {
				errs = append(errs, err)
			}
		} else if client.IgnoreNotFound(err) != nil {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
	want := publishedService(ns, key, src.Export, src.Service)
	var p svcv1alpha1.PublishedService
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(want), &p)
	if client.IgnoreNotFound(err) != nil {
		return err
	}
	if apierrors.IsNotFound(err) || !labelsHold(p.Labels, want.Labels) || !equality.Semantic.DeepEqual(p.Spec, want.Spec) {
		if err := applyObject(ctx, r.Client, want); apierrors.IsNotFound(err) {
			return fmt.Errorf("publish %s: the published namespace %s does not exist (the chart makes it; skein-controller --published-namespace names it): %w", key, ns, err)
		} else if err != nil {
			return fmt.Errorf("publish %s: %w", key, err)
		}
	}
	wanted := map[string]bool{}
	var errs []error
	byName := map[string]*discoveryv1.EndpointSlice{}
	for i := range have.Items {
		byName[have.Items[i].Name] = &have.Items[i]
	}
	for _, sl := range src.Slices {
		c := &discoveryv1.EndpointSlice{TypeMeta: metav1.TypeMeta{APIVersion: discoveryv1.SchemeGroupVersion.String(), Kind: "EndpointSlice"},
			ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: publishedSliceName(key.Namespace, sl.Name), Labels: publishedLabels(key)},
			AddressType: sl.AddressType, Ports: sl.Ports, Endpoints: sl.Endpoints}
		c.Labels[discoveryv1.LabelManagedBy] = mcs.ManagedBy
		c.Labels[ServiceProxyNameLabel] = PublishedProxyName
		wanted[c.Name] = true
		if h := byName[c.Name]; h != nil && labelsHold(h.Labels, c.Labels) && h.AddressType == c.AddressType &&
			equality.Semantic.DeepEqual(h.Ports, c.Ports) && equality.Semantic.DeepEqual(h.Endpoints, c.Endpoints) {
			continue
		}
		if err := applyObject(ctx, r.Client, c); err != nil {
			errs = append(errs, fmt.Errorf("publish slice %s/%s: %w", key.Namespace, sl.Name, err))
		}
	}
	for name, h := range byName {
		if !wanted[name] {
			if err := r.Client.Delete(ctx, h); client.IgnoreNotFound(err) != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// RemovePublished deletes everything this cluster published in namespace ns (multi-cluster
// services turned off: what stays published would never be updated again).
func RemovePublished(ctx context.Context, c client.Client, ns string) (int, error) {
	n := 0
	var sls discoveryv1.EndpointSliceList
	if err := c.List(ctx, &sls, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelManagedBy: mcs.ManagedBy, ManagedByLabel: FieldOwner},
		client.HasLabels{svcv1alpha1.SourceNamespaceLabel}); err != nil {
		return n, err
	}
	for i := range sls.Items {
		if err := c.Delete(ctx, &sls.Items[i]); client.IgnoreNotFound(err) != nil {
			return n, err
		}
		n++
	}
	var ps svcv1alpha1.PublishedServiceList
	if err := c.List(ctx, &ps, client.InNamespace(ns), client.MatchingLabels{ManagedByLabel: FieldOwner}); err != nil {
		return n, err
	}
	for i := range ps.Items {
		if err := c.Delete(ctx, &ps.Items[i]); client.IgnoreNotFound(err) != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
