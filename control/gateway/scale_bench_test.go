package gateway_test

import (
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/gateway"
	"github.com/skein-net/skein/dataplane"
	"github.com/skein-net/skein/dataplane/overlaytest"
)

// The Kubernetes scalability limits.
const (
	limitNodes = 5_000
	limitPods  = 150_000
)

// limitObjects is objects() at the limits, as the watcher holds them with WatchPods (Nodes
// slimmed, see slim.go; Pods as PodAddrs, see pods.go): limitNodes Nodes without pod CIDRs, each with its InternalNode's
// VTEP, and limitPods running pods spread evenly over them, node n's in the n-th /26 of
// 10.64.0.0/12.
func limitObjects() gateway.Objects {
	o := objects()
	o.InternalNodes, o.Nodes, o.Pods = nil, nil, make([]gateway.PodAddr, 0, limitPods)
	for n := range limitNodes {
		name := fmt.Sprintf("node-%04d", n)
		vtep := fmt.Sprintf("172.20.%d.%d", (n+1)>>8, (n+1)&255)
		o.Nodes = append(o.Nodes, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name), ResourceVersion: "1"},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: vtep}}}})
		// Every node has an external address of each family, as the controller gives them in a
		// dual-stack cluster (10.79.0.0/16: outside the peer's CIDRs as seen here).
		ext := netv1alpha1.IP(fmt.Sprintf("10.79.%d.%d", (n+1)>>8, (n+1)&255))
		ext6 := netv1alpha1.IP(fmt.Sprintf("fd00:70::%x", n+1))
		o.InternalNodes = append(o.InternalNodes, netv1alpha1.InternalNode{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:   netv1alpha1.InternalNodeSpec{ExternalIP: &ext, ExternalIP6: &ext6},
			Status: netv1alpha1.InternalNodeStatus{VTEP: &netv1alpha1.VTEP{IP: netv1alpha1.IP(vtep), MAC: netv1alpha1.MAC(fmt.Sprintf("02:5f:00:00:%02x:%02x", n>>8, n&255))}}})
	}
	for i := range limitPods {
		n, k := i%limitNodes, i/limitNodes
		a := 10<<24 | 64<<16 + n*64 + 1 + k
		ip := netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)})
		o.Pods = append(o.Pods, gateway.PodAddr{Node: o.Nodes[n].Name, IP: ip})
	}
	return o
}

// listed copies the objects as the watcher gathers them: each cached Node and InternalNode
// copied, shallow, into a list's items (it lists with UnsafeDisableDeepCopy) and the pod
// watch's PodAddrs appended to a slice.
func listed(o gateway.Objects) gateway.Objects {
	c := o
	c.Nodes = slices.Clone(o.Nodes)
	c.InternalNodes = slices.Clone(o.InternalNodes)
	c.Pods = slices.Clone(o.Pods)
	return c
}

// BenchmarkFromObjectsAtLimits is the gateway's translation at the scale limits (5,000 Nodes
// and InternalNodes, 150,000 Pods, all /32 routes): "translate" is FromObjects alone (with
// config.Build, which validates the dataplane config by compiling it), reporting the heap the
// resulting config keeps; "reconcile" is what the watcher does on each change or resync of a
// running gateway: the objects listed from the cache and the pod watch, FromObjects, and
// Dataplane.Reconfig with one pod more or less than before. Only the API server is left out.
func BenchmarkFromObjectsAtLimits(b *testing.B) {
	o := limitObjects()
	b.Run("translate", func(b *testing.B) {
		b.ReportAllocs()
		var retained float64
		for b.Loop() {
			b.StopTimer()
			before := heapAlloc()
			b.StartTimer()
			g, err := gateway.FromObjects(o, local)
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			retained = float64(heapAlloc()) - float64(before)
			if got := len(g.Dataplane.Nodes); got != limitNodes {
				b.Fatalf("%d nodes", got)
			}
			runtime.KeepAlive(g)
			b.StartTimer()
		}
		b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/translate")
		b.ReportMetric(retained/(1<<20), "MiB-config")
	})
	b.Run("reconcile", func(b *testing.B) {
		g, err := gateway.FromObjects(o, local)
		if err != nil {
			b.Fatal(err)
		}
		dp, err := dataplane.New(g.Dataplane, overlaytest.New(0))
		if err != nil {
			b.Fatal(err)
		}
		defer dp.Close()
		plus := o
		plus.Pods = append(o.Pods[:len(o.Pods):len(o.Pods)], gateway.PodAddr{Node: o.Nodes[0].Name, IP: netip.MustParseAddr("10.64.0.63")})
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			cur := o
			if i%2 == 0 {
				cur = plus
			}
			g, err := gateway.FromObjects(listed(cur), local)
			if err != nil {
				b.Fatal(err)
			}
			if err := dp.Reconfig(g.Dataplane); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/reconcile")
	})
}

// heapAlloc is the live heap after a full collection.
func heapAlloc() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
