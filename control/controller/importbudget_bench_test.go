package controller_test

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
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

// BenchmarkPeerAtBudget: cluster B exports 200 Services of 100 endpoints (the default budget:
// 200 imports, 20,000 endpoints) and has 1,000 more Services of 100 endpoints it does not
// export. Reported: the heap in use of the test process (both clusters' skein-controllers, B's
// publishing its exports since issue #40, and the benchmark's clients) with the peering idle,
// with B's exports imported, and with B's unexported Services besides; the bytes each
// unexported endpoint adds (in B's controller, which reads its own cluster: A does not read
// them); and A's share, what leaves the heap when A stops reading B. Both clusters are real API
// servers.
func BenchmarkPeerAtBudget(b *testing.B) {
	ctrllog.SetLogger(logr.Discard())
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	x := startImportPair(b, ctx, netip.MustParsePrefix("10.244.0.0/16"))
	const exported, unexported, perService = 200, 1000, 100
	heap := func() float64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return float64(m.HeapInuse) / (1 << 20)
	}
	addrs := func(block int) []string {
		var out []string
		for i := range perService {
			out = append(out, fmt.Sprintf("10.244.%d.%d", block/2, 1+(block%2)*120+i))
		}
		return out
	}
	for b.Loop() {
		time.Sleep(3 * time.Second)
		idle := heap()
		for i := range exported {
			exportService(b, ctx, x.cb, "shop", fmt.Sprintf("svc-%d", i), nil, addrs(i)...)
		}
		waitUntil(b, ctx, "20,000 endpoints imported", func() bool {
			var sls discoveryv1.EndpointSliceList
			if x.ca.List(ctx, &sls, client.InNamespace("shop"), client.MatchingLabels{mcs.SourceClusterLabel: x.idB}) != nil {
				return false
			}
			n := 0
			for _, s := range sls.Items {
				n += len(s.Endpoints)
			}
			return n == exported*perService
		})
		time.Sleep(3 * time.Second)
		atBudget := heap()
		for i := range unexported {
			name := fmt.Sprintf("other-%d", i)
			if err := x.cb.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}); err != nil {
				b.Fatal(err)
			}
			if err := x.cb.Create(ctx, endpointSlice("shop", name+"-1", name, addrs(exported+i%200))); err != nil {
				b.Fatal(err)
			}
		}
		time.Sleep(10 * time.Second) // the watch events of 2,000 objects reach A's controller
		withOthers := heap()
		var imps mcsv1a1.ServiceImportList
		if err := x.ca.List(ctx, &imps, client.InNamespace("shop")); err != nil || len(imps.Items) != exported {
			b.Fatalf("%d imports (%v), want %d", len(imps.Items), err, exported)
		}
		// A stops reading B (its credentials go): what A held of B and imported from it goes,
		// and what is left is B's controller (publishing its exports, importing its own).
		if err := x.ca.Delete(ctx, x.creds); err != nil {
			b.Fatal(err)
		}
		waitUntil(b, ctx, "A's imports of B gone", func() bool {
			var imps mcsv1a1.ServiceImportList
			return x.ca.List(ctx, &imps, client.InNamespace("shop")) == nil && len(imps.Items) == 0
		})
		time.Sleep(3 * time.Second)
		bOnly := heap()
		b.ReportMetric(withOthers-bOnly, "A-share-MiB")
		b.ReportMetric(idle, "idle-heap-MiB")
		b.ReportMetric(atBudget, "budget-heap-MiB")
		b.ReportMetric(withOthers, "with-unexported-heap-MiB")
		b.ReportMetric((withOthers-atBudget)*(1<<20)/(unexported*perService), "B/unexported-endpoint")
		b.ReportMetric((atBudget-idle)*(1<<20)/(exported*perService), "B/imported-endpoint")
	}
	b.ReportMetric(0, "ns/op")
}
