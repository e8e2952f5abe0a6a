// Package kube holds what skein's Kubernetes clients share: the scheme of the kinds they
// read and write, and starting a watch cache.
package kube

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	svcv1alpha1 "github.com/skein-net/skein/control/api/services/v1alpha1"
)

// Scheme returns a scheme with the core Kubernetes kinds, networking.liqo.io/v1alpha1 and the
// Multi-Cluster Services API (multicluster.x-k8s.io/v1alpha1), and skein's services.skein.io/v1alpha1.
func Scheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := netv1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := mcsv1a1.Install(s); err != nil {
		panic(err)
	}
	if err := svcv1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// Oldest returns the item of items created first, ties broken by namespace/name, or nil when
// items is empty. Where several objects claim one thing, the oldest keeps it.
func Oldest[T any, P interface {
	*T
	metav1.Object
}](items []T) P {
	var best P
	for i := range items {
		p := P(&items[i])
		if best == nil || older(p, best) {
			best = p
		}
	}
	return best
}

func older(a, b metav1.Object) bool {
	ta, tb := a.GetCreationTimestamp(), b.GetCreationTimestamp()
	if !ta.Equal(&tb) {
		return ta.Before(&tb)
	}
	return a.GetNamespace()+"/"+a.GetName() < b.GetNamespace()+"/"+b.GetName()
}

// StartCache registers changed as the event handler of an informer for each of kinds, starts
// c and waits for it to sync. The returned channel reports the cache's end.
func StartCache(ctx context.Context, c cache.Cache, kinds []client.Object, changed func()) (<-chan error, error) {
	h := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { changed() },
		UpdateFunc: func(any, any) { changed() },
		DeleteFunc: func(any) { changed() },
	}
	for _, obj := range kinds {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			return nil, fmt.Errorf("informer for %T: %w", obj, err)
		}
		if _, err := inf.AddEventHandler(h); err != nil {
			return nil, fmt.Errorf("informer for %T: %w", obj, err)
		}
	}
	errc := make(chan error, 1)
	go func() { errc <- c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("caches did not sync: %w", ctx.Err())
	}
	return errc, nil
}
