package dns_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	skeindns "github.com/skein-net/skein/control/dns"
	"github.com/skein-net/skein/internal/apitest"
)

// BenchmarkAnswer: answer latency over UDP on loopback (p50, p99, the client's own work
// included) with 1,000 imports in the cache, half ClusterSetIP and half headless with 3 ready
// endpoints each, querying A records of a random import and SRV records of its port in turn;
// heap-MiB is the heap the server's cache holds for them (after a GC, over the heap before it
// started).
//
//	go test -run '^$' -bench BenchmarkAnswer -benchtime 20000x ./control/dns/
func BenchmarkAnswer(b *testing.B) {
	requireAPI(b)
	ctx := context.Background()
	ns := env.Namespace(b, "dnsbench")
	const imports = 1000
	port := mcsv1a1.ServicePort{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}
	for i := range imports {
		name := fmt.Sprintf("svc-%04d", i)
		if i%2 == 0 {
			apitest.Must(b, env.Client.Create(ctx, clusterSetIP(ns, name, []string{fmt.Sprintf("10.97.%d.%d", i/250, i%250+1)}, port)))
			continue
		}
		apitest.Must(b, env.Client.Create(ctx, headless(ns, name, port)))
		apitest.Must(b, env.Client.Create(ctx, slice(ns, name, name+"-c1", "c1", discoveryv1.AddressTypeIPv4,
			ep(fmt.Sprintf("10.244.%d.%d", i/250, i%250+1), "", true), ep(fmt.Sprintf("10.245.%d.%d", i/250, i%250+1), "web-1", true),
			ep(fmt.Sprintf("10.246.%d.%d", i/250, i%250+1), "web-2", true))))
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, addr := serve(b, skeindns.Limits{})
	last := fmt.Sprintf("svc-%04d.%s.svc.%s", imports-1, ns, skeindns.Zone)
	apitest.Eventually(b, "every import in the cache", 30*time.Second, func() bool {
		_, a := query(b, addr, "udp", last, dns.TypeA, 0)
		return len(a.rrs) == 3
	})
	runtime.GC()
	runtime.ReadMemStats(&after)
	c := &dns.Client{Net: "udp", Timeout: 3 * time.Second}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		k := (i * 7919) % imports
		m := new(dns.Msg)
		if i%2 == 0 {
			m.SetQuestion(fmt.Sprintf("svc-%04d.%s.svc.%s", k, ns, skeindns.Zone), dns.TypeA)
		} else {
			m.SetQuestion(fmt.Sprintf("_http._tcp.svc-%04d.%s.svc.%s", k, ns, skeindns.Zone), dns.TypeSRV)
		}
		start := time.Now()
		r, _, err := c.Exchange(m, addr)
		lat = append(lat, time.Since(start))
		if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
			b.Fatalf("%s: %v %v", m.Question[0].Name, r, err)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-us")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-us")
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/(1<<20), "heap-MiB")
}
