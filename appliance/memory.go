package appliance

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/skein-net/skein/dataplane"
)

// Why trim: an idle gateway's memory is mostly what start-up left behind, not what it uses.
// Package initialisation and start-up fault in megabytes of the executable's code and
// read-only data, and leave garbage on the heap. The heap is not collected while idle: GOGC
// is high (DefaultGCPercent, for throughput under load) and wireguard-go's batch buffers
// (some 24 MiB, allocated at Up, mostly never touched) count as live heap, so the next
// collection is due at a heap of 100 MiB or more and garbage accumulates until the runtime's
// forced collection every two minutes, whose freed pages the scavenger then keeps.
//
// What is linked matters as much. With client-go's scheme of every built-in kind and the
// Prometheus client library, an idle gateway held 19.3 MiB after a scrape; without them it
// holds 14.2 (BenchmarkIdleRSS): their registrations at start-up stayed on the heap (2.5 MiB
// of anonymous memory) and the executable's pages the process keeps touching grew by as much
// (the kernel maps 64 KiB around each page fault). So the gateway links neither
// (control/gateway/api.go, control/promtext; layout_test.go keeps it so).
//
// So the gateway trims. Once connected (or after trimEvery, for a server nobody connects to
// yet or a standby) it returns the free heap to the kernel (debug.FreeOSMemory) and drops the
// executable's pages start-up faulted in (dropImagePages, once per process). From then on,
// every trimEvery, when the heap grew by trimGrowth since the last trim while fewer than
// idlePackets were forwarded, it collects (runtime.GC: a few MiB of live heap to mark), so
// idle garbage reuses the same pages; when more than releaseOver is then free (after a load)
// it returns that too. Under traffic it leaves the collector alone. Returning memory holds
// the heap lock while it runs, so it is kept for start-up and for the end of a load.
const (
	trimEvery   = 10 * time.Second
	trimGrowth  = 2 << 20
	releaseOver = 8 << 20
	idlePackets = 1000
)

// imageOnce drops the executable's start-up pages once per process (tests run several
// gateways in one).
var imageOnce sync.Once

// trimMemory runs until ctx is done; connected is closed when the prober first says
// Connected.
func (g *Gateway) trimMemory(ctx context.Context, connected <-chan struct{}) {
	samples := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/free:bytes"}}
	const heapObjects, heapFree = 0, 1
	read := func(i int) uint64 {
		metrics.Read(samples)
		return samples[i].Value.Uint64()
	}
	forwarded := func() uint64 {
		c := g.dp.Counters()
		return c.Get(dataplane.ToTunnel, dataplane.Forwarded) + c.Get(dataplane.FromTunnel, dataplane.Forwarded)
	}
	tick := time.NewTicker(trimEvery)
	defer tick.Stop()
	select {
	case <-connected:
	case <-tick.C:
	case <-ctx.Done():
		return
	}
	debug.FreeOSMemory()
	imageOnce.Do(func() {
		if _, err := dropImagePages(); err != nil {
			g.log.Debug("drop the executable's start-up pages", "err", err)
		}
	})
	last, fwd := read(heapObjects), forwarded()
	for {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
		f := forwarded()
		idle := f-fwd < idlePackets
		fwd = f
		if idle && read(heapObjects) > last+trimGrowth {
			runtime.GC()
			if read(heapFree) > releaseOver {
				debug.FreeOSMemory() // after a load: give the peak back
			}
			last = read(heapObjects)
		}
	}
}
