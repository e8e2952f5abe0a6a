package dataplane_test

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/skein-net/skein/dataplane"
	"github.com/skein-net/skein/dataplane/nat"
	"github.com/skein-net/skein/dataplane/packet"
)

// The Kubernetes scalability limits, and what a gateway run with --watch-pods holds there: a
// node hop per node and a /32 route per pod.
const (
	limitNodes  = 5_000
	limitPods   = 150_000
	podsPerNode = limitPods / limitNodes
)

// limitPod is pod k of the limitNodes nodes added by atLimits: a CNI that gives nodes no pod
// CIDR (the reason to watch pods) but hands each a /26 block, node n's being the n-th /26 of
// 10.64.0.0/12.
func limitPod(n, k int) netip.Addr {
	a := 10<<24 | 64<<16 + n*64 + 1 + k
	return netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)})
}

// limitPod6 is limitPod for IPv6: pod k of node n is fd00:64::<n*64+1+k>.
func limitPod6(n, k int) netip.Addr {
	a := n*64 + 1 + k
	return netip.AddrFrom16([16]byte{0xfd, 0, 0, 0x64, 12: byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)})
}

// atLimits6 is atLimits with the pods' IPv6 addresses too (a /128 route each, as the
// watcher makes for a dual-stack CNI that gives nodes no pod CIDRs).
func atLimits6(cfg dataplane.Config) dataplane.Config {
	cfg = atLimits(cfg)
	pods := make([]netip.Addr, 0, limitPods)
	for n := range limitNodes {
		start := len(pods)
		for k := range podsPerNode {
			pods = append(pods, limitPod6(n, k))
		}
		node := &cfg.Nodes[len(cfg.Nodes)-limitNodes+n]
		node.Pods = append(node.Pods[:len(node.Pods):len(node.Pods)], pods[start:len(pods):len(pods)]...)
	}
	return cfg
}

// atLimits adds limitNodes nodes of podsPerNode pods each to cfg (whose own nodes stay):
// VTEPs in 172.20.0.0/16, MACs 02:5f:00:00:xx:xx, pods as limitPod numbers them.
func atLimits(cfg dataplane.Config) dataplane.Config {
	nodes := append([]dataplane.Node(nil), cfg.Nodes...)
	pods := make([]netip.Addr, 0, limitPods) // one backing array, as the watcher's translation makes many
	for n := range limitNodes {
		start := len(pods)
		for k := range podsPerNode {
			pods = append(pods, limitPod(n, k))
		}
		nodes = append(nodes, dataplane.Node{
			Name: fmt.Sprintf("node-%04d", n),
			VTEP: netip.AddrFrom4([4]byte{172, 20, byte((n + 1) >> 8), byte(n + 1)}),
			MAC:  packet.MAC{0x02, 0x5f, 0, 0, byte(n >> 8), byte(n)},
			Pods: pods[start:len(pods):len(pods)],
		})
	}
	cfg.Nodes = nodes
	return cfg
}

// limitLocalNAT is benchLocalNAT at the limits: the pods' /12 is presented as 10.112.0.0/12.
func limitLocalNAT() dataplane.Config {
	cfg := atLimits(benchLocalNAT())
	cfg.LocalNAT = append(cfg.LocalNAT, nat.Pair{From: pfx("10.64.0.0/12"), To: pfx("10.112.0.0/12")})
	return cfg
}

// limitCases run the path benchmarks with a configuration at the limits; dst, out of the
// tunnel, is a pod of a node in the middle, routed by its /32.
var limitCases = []struct {
	name string
	cfg  func() dataplane.Config
	dst  string
}{
	{"remap/5000-nodes-150k-pods", func() dataplane.Config { return atLimits(benchConfig()) }, limitPod(2500, 7).String()},
	{"remap+local/5000-nodes-150k-pods", limitLocalNAT, "10.114.113.8"}, // limitPod(2500, 7) = 10.66.113.8
	{"remap-ipv6/5000-nodes-300k-pod-addresses", func() dataplane.Config { return atLimits6(benchDualStack()) }, limitPod6(2500, 7).String()},
}

func TestLimitConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 150,000-route configuration")
	}
	if got := limitPod(2500, 7).String(); got != "10.66.113.8" {
		t.Fatalf("limitPod(2500, 7) = %s", got)
	}
	for _, lc := range limitCases {
		if err := dataplane.Validate(lc.cfg()); err != nil {
			t.Fatalf("%s: %v", lc.name, err)
		}
	}
}

// heapAlloc is the live heap after a full collection.
func heapAlloc() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkNewAtLimits is a full build of the dataplane at the scale limits (5,000 nodes,
// 150,000 pod /32 routes): validation, the route table, the VTEP table. It reports the time
// per build and the heap the Dataplane keeps beyond the Config it was given (its tables).
func BenchmarkNewAtLimits(b *testing.B) {
	cfg := atLimits(benchConfig())
	var retained float64
	for b.Loop() {
		b.StopTimer()
		before := heapAlloc()
		b.StartTimer()
		dp, err := dataplane.New(cfg, &replayConn{batch: benchBatch})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		retained = float64(heapAlloc()) - float64(before)
		runtime.KeepAlive(dp)
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/build")
	b.ReportMetric(retained/(1<<20), "MiB-retained")
}

// BenchmarkReconfigAtLimits is live reconfiguration at the scale limits: a running dataplane
// (packets flowing through it between the swaps) gets its configuration with one pod added,
// then without it again, and so on. Each swap is a full rebuild.
func BenchmarkReconfigAtLimits(b *testing.B) {
	cfg := atLimits(benchConfig())
	plus := cfg
	plus.Nodes = append([]dataplane.Node(nil), cfg.Nodes...)
	last := &plus.Nodes[len(plus.Nodes)-1]
	last.Pods = append(append([]netip.Addr(nil), last.Pods...), limitPod(limitNodes-1, podsPerNode))
	dp, bufs, sizes := toTunnelSetup(b, cfg, "10.244.1.5")
	var worst time.Duration
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		next := cfg
		if i%2 == 0 {
			next = plus
		}
		b.StopTimer()
		if k, err := dp.Read(bufs, sizes, offset); err != nil || k != benchBatch {
			b.Fatalf("Read = %d, %v", k, err)
		}
		b.StartTimer()
		t0 := time.Now()
		if err := dp.Reconfig(next); err != nil {
			b.Fatal(err)
		}
		worst = max(worst, time.Since(t0))
	}
	if got := len(dp.Config().Nodes[len(cfg.Nodes)-1].Pods); got != podsPerNode && got != podsPerNode+1 {
		b.Fatalf("the last node has %d pods", got)
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/reconfig")
	b.ReportMetric(float64(worst.Milliseconds()), "ms-worst")
}
