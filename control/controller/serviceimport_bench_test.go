package controller_test

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	"github.com/skein-net/skein/control/controller/mcs"
)

// BenchmarkServiceImportPropagation: cluster B's 100-pod Deployment scales up, its pods
// becoming ready one after the other (each an update of B's EndpointSlice, as the endpoint
// slice controller writes them, at most 100 per slice); each endpoint's delay from B's write
// to A's slice holding it ready, translated, is the propagation. Reported: p50 and p99 over the
// 100 endpoints of each scaling event, and the heap in use of the test process (skein-controller
// and the benchmark's clients) once 1,000 more endpoints (ten Services of 100) are imported on
// top of the scaling events'. Both clusters are real API servers; the controller runs in this
// process.
func BenchmarkServiceImportPropagation(b *testing.B) {
	ctrllog.SetLogger(logr.Discard())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	x := startImportPair(b, ctx, netip.MustParsePrefix("10.244.0.0/16"))
	var delays []time.Duration
	for n := range b.N {
		name := fmt.Sprintf("scale-%d", n)
		delays = append(delays, scaleEvent(b, ctx, x, name, 100)...)
	}
	slices.Sort(delays)
	pct := func(p float64) float64 { return float64(delays[int(p*float64(len(delays)-1))].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.5), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(0, "ns/op")

	// 1,000 more imported endpoints: ten Services of 100.
	for i := range 10 {
		bulkService(b, ctx, x, fmt.Sprintf("bulk-%d", i), i, 100)
	}
	waitUntil(b, ctx, "1,000 endpoints imported", func() bool {
		var sls discoveryv1.EndpointSliceList
		if x.ca.List(ctx, &sls, client.InNamespace("shop"), client.MatchingLabels{mcs.SourceClusterLabel: x.idB}) != nil {
			return false
		}
		n := 0
		for _, s := range sls.Items {
			if slices.Contains([]string{"bulk-0", "bulk-1", "bulk-2", "bulk-3", "bulk-4", "bulk-5", "bulk-6", "bulk-7", "bulk-8", "bulk-9"}, s.Labels[mcs.ImportLabel]) {
				n += len(s.Endpoints)
			}
		}
		return n == 1000
	})
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapInuse)/(1<<20), "heap-MiB")
}

// scaleEvent exports Service name in B and makes its n pods ready one by one; it returns each
// endpoint's delay until A holds it ready.
func scaleEvent(b *testing.B, ctx context.Context, x *importPair, name string, n int) []time.Duration {
	if err := x.cb.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}); err != nil {
		b.Fatal(err)
	}
	sl := endpointSlice("shop", name+"-abcde", name, nil)
	if err := x.cb.Create(ctx, sl); err != nil {
		b.Fatal(err)
	}
	if err := x.cb.Create(ctx, &mcsv1a1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}}); err != nil {
		b.Fatal(err)
	}
	waitUntil(b, ctx, "the import of "+name, func() bool {
		return x.ca.Get(ctx, client.ObjectKey{Namespace: "shop", Name: name}, &mcsv1a1.ServiceImport{}) == nil
	})
	// A's view, polled every 2 ms on its own goroutine until it holds all n (or a minute).
	done := make(chan map[string]time.Time, 1)
	go func() {
		seen := map[string]time.Time{}
		deadline := time.Now().Add(time.Minute)
		for len(seen) < n && time.Now().Before(deadline) {
			time.Sleep(2 * time.Millisecond)
			var sls discoveryv1.EndpointSliceList
			if x.ca.List(ctx, &sls, client.InNamespace("shop"), client.MatchingLabels{mcs.ImportLabel: name}) != nil {
				continue
			}
			now := time.Now()
			for _, s := range sls.Items {
				for _, ep := range s.Endpoints {
					if _, ok := seen[ep.Addresses[0]]; !ok && ep.Conditions.Ready != nil && *ep.Conditions.Ready {
						seen[ep.Addresses[0]] = now
					}
				}
			}
		}
		done <- seen
	}()
	writtenAt := map[string]time.Time{}
	for i := range n {
		addr := fmt.Sprintf("10.244.%d.%d", 100+i/250, 1+i%250)
		ready := true
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{addr},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &ready, Terminating: new(bool)}})
		writtenAt[x.translate(addr)] = time.Now()
		if err := x.cb.Update(ctx, sl); err != nil {
			b.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // pods become ready over two seconds, not at once
	}
	seenAt := <-done
	var out []time.Duration
	for a, w := range writtenAt {
		s, ok := seenAt[a]
		if !ok {
			b.Fatalf("endpoint %s never imported", a)
		}
		out = append(out, max(0, s.Sub(w)))
	}
	return out
}

// bulkService exports Service name in B with n ready endpoints at once.
func bulkService(b *testing.B, ctx context.Context, x *importPair, name string, block, n int) {
	if err := x.cb.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}); err != nil {
		b.Fatal(err)
	}
	var addrs []string
	for i := range n {
		addrs = append(addrs, fmt.Sprintf("10.244.%d.%d", 200+block, 1+i))
	}
	if err := x.cb.Create(ctx, endpointSlice("shop", name+"-abcde", name, addrs)); err != nil {
		b.Fatal(err)
	}
	if err := x.cb.Create(ctx, &mcsv1a1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}}); err != nil {
		b.Fatal(err)
	}
}
