package appliance

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
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
// held 14.2 (BenchmarkIdleRSS; 14.5-14.9 since gVisor's IPv6 is linked too): their
// registrations at start-up stayed on the heap (2.5 MiB of anonymous memory) and the
// executable's pages the process keeps touching grew by as much (the kernel maps 64 KiB
// around each page fault). So the gateway links neither
// (control/gateway/api.go, control/promtext; layout_test.go keeps it so).
//
// So the gateway trims. Once connected (or after trimEvery, for a server nobody connects to
// yet or a standby) it returns the free heap to the kernel (debug.FreeOSMemory) and drops the
// executable's pages start-up faulted in (dropImagePages). From then on it checks every
// trimEvery, and while the dataplane handled (forwarded, delivered or dropped) fewer than
// idlePackets packets since the last check:
//   - when the heap grew by trimGrowth since the last trim, it collects and returns what that
//     freed (debug.FreeOSMemory: a few MiB of live heap to mark). Idle, a gateway allocates
//     some 10 KiB a second (probes, keepalives, rekeys, scrapes); the runtime alone collects
//     only every two minutes and keeps the freed pages (the scavenger's goal follows the heap
//     goal, which the untouched buffers put above 100 MiB). Without this an idle gateway held
//     18.9-19.0 MiB after 6 minutes (7.5-7.8 anonymous, 3 of it garbage); with it 15.5-16.0
//     (4.9-5.0 anonymous; BenchmarkIdleRSS with SKEIN_BENCH_IDLE=6m).
//   - every imageEvery it drops the executable's pages again: rekeys, scrapes and collections
//     fault in code that then stays, with the 64 KiB the kernel maps around each fault. Most
//     of it comes back within seconds (the idle working set is some 10 MiB of the
//     executable, shared by every gateway of a node), so this trims 0.3-0.5 MiB, for a few
//     hundred minor faults.
//
// Under traffic it leaves the collector and the pages alone. Returning memory holds the heap
// lock while it runs, so it never runs under a load.
const (
	trimEvery   = 10 * time.Second
	trimGrowth  = 512 << 10
	imageEvery  = 2 * time.Minute
	idlePackets = 1000
)

// lastImageDrop is when the executable's pages were last dropped (nanoseconds since
// processStart, on the monotonic clock: a wall clock stepped back would stop the drops): tests
// run several gateways in one process, and one drop serves them all.
var (
	processStart  = time.Now()
	lastImageDrop atomic.Int64
)

// dropImage drops the executable's pages unless some gateway of this process did within
// every.
func (g *Gateway) dropImage(every time.Duration) {
	now := int64(time.Since(processStart))
	last := lastImageDrop.Load()
	if now-last < int64(every) || !lastImageDrop.CompareAndSwap(last, now) {
		return
	}
	if _, err := dropImagePages(); err != nil {
		g.log.Debug("drop the executable's pages", "err", err)
	}
}

// trimMemory runs until ctx is done; connected is closed when the prober first says
// Connected.
func (g *Gateway) trimMemory(ctx context.Context, connected <-chan struct{}) {
	samples := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	heapObjects := func() uint64 {
		metrics.Read(samples)
		return samples[0].Value.Uint64()
	}
	// packets counts what the dataplane handled: forwarded, delivered to the netstack or
	// dropped (a flood of any of them is a load, not idleness; attack review).
	packets := func() uint64 {
		c := g.dp.Counters()
		var n uint64
		for _, dir := range []dataplane.Direction{dataplane.ToTunnel, dataplane.FromTunnel} {
			n += c.Get(dir, dataplane.Forwarded) + c.Get(dir, dataplane.Local) + c.Drops(dir)
		}
		return n
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
	g.dropImage(0)
	last, fwd := heapObjects(), packets()
	for {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
		f := packets()
		idle := f-fwd < idlePackets
		fwd = f
		if !idle {
			continue
		}
		// A collection of the runtime's own (forced every two minutes) lowers the heap: the
		// growth to trim at counts from there, or the pages it freed would stay until the heap
		// grew past the old mark (fresh-clone review).
		h := heapObjects()
		last = min(last, h)
		if h > last+trimGrowth {
			debug.FreeOSMemory()
			last = heapObjects()
		}
		g.dropImage(imageEvery)
	}
}
