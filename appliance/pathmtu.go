package appliance

import (
	"context"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/skein-net/skein/dataplane"
	"github.com/skein-net/skein/netstack"
)

// Path MTU discovery by the gateways (packetization-layer, in the style of RFC 8899): each
// gateway finds how large a WireGuard datagram the WAN carries towards its peer by sending
// echo requests of chosen sizes from its tunnel address to the peer's, each one's datagram
// alone with DF (dataplane/probe.go), and lowers the tunnel MTU it forwards with (MSS clamp,
// fragmentation needed / Packet Too Big to the pods) to the largest that passed, live. No ICMP
// from the path is needed, so a black hole is found as surely as a path that reports itself.
// Until then, and if the path narrows later, nothing stalls: the socket sends without DF and
// resends refused batches (dataplane/pathbind.go), at the cost of fragments.
//
// Sizes are multiples of 16 between the smallest an IPv4 or IPv6 WAN must carry (1280 on the
// wire, less the outer headers) and the configured tunnel MTU, which is tried first:
// WireGuard pads every packet to a multiple of 16 (up to the configured MTU), so a tunnel MTU
// between two multiples costs the same on the wire as the next one up. A search starts once
// the connection is up and again every pathMTURaise (the path may have widened, or narrowed:
// a full search finds both).

const (
	// pathMTUAttempts: a size is judged too large after this many probes of it are lost
	// (RFC 8899's MAX_PROBES).
	pathMTUAttempts = 3
	// pathMTUVoidLimit bounds the probes that could not be sent with DF (wireguard-go never
	// emptied, no socket) before a search gives up.
	pathMTUVoidLimit = 10
	// pathMTURaise is how often the search runs again once done (RFC 8899's
	// PMTU_RAISE_TIMER); pathMTURetry after a search that found nothing.
	pathMTURaise = 10 * time.Minute
	pathMTURetry = 30 * time.Second
	// pathMTUConfirm is how often the tunnel MTU in force is probed between searches: a path
	// that narrowed is searched again at once (its packets are fragmented meanwhile, not lost).
	pathMTUConfirm = 10 * time.Second
	// The outer headers of a WireGuard datagram: IPv4 (20) or IPv6 (40), UDP (8), and
	// WireGuard's own (16 of header, 16 of authentication tag) around the padded packet.
	wgOverhead    = 16 + 16
	outerOverhead = 20 + 8 + wgOverhead
	// minWirePathMTU is the least MTU an IPv6 link has, and any WAN worth tunnelling over.
	minWirePathMTU = 1280
)

// pathMTUCandidates lists the tunnel MTUs a search tries, smallest first: multiples of 16 from
// the largest that fits minWirePathMTU with overhead bytes of outer headers, to configured.
func pathMTUCandidates(configured, overhead int) []int {
	var out []int
	for s := (minWirePathMTU - overhead) &^ 15; s < configured; s += 16 {
		out = append(out, s)
	}
	return append(out, configured)
}

// searchPathMTU returns the largest candidate that passes: the last one if it does, else by
// bisection between the first (which must pass) and it. passes reports whether a size passes
// and whether that was decided (false: no answer could be had, such as a peer gone).
func searchPathMTU(ctx context.Context, candidates []int, passes func(size int) (ok, decided bool)) (int, bool) {
	if len(candidates) == 0 {
		return 0, false
	}
	top := len(candidates) - 1
	if ok, decided := passes(candidates[top]); !decided || ok {
		return candidates[top], decided
	}
	if top == 0 {
		return 0, false
	}
	if ok, decided := passes(candidates[0]); !decided || !ok {
		return 0, false // not even the smallest: the peer is not answering
	}
	lo, hi := 0, top // lo passes, hi does not
	for hi-lo > 1 {
		if ctx.Err() != nil {
			return 0, false
		}
		mid := (lo + hi) / 2
		ok, decided := passes(candidates[mid])
		if !decided {
			return 0, false
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return candidates[lo], true
}

// pathMTUProbe is the probe the netstack is about to send: its packet size, and where the
// dataplane's Probe for it goes.
type pathMTUProbe struct {
	size  int
	probe chan *dataplane.Probe
}

// pathMTUStats counts probes by outcome and times the last search.
type pathMTUStats struct {
	passed, lost, void atomic.Uint64
	lastSearch         atomic.Int64 // nanoseconds the last completed search took
	searches           atomic.Uint64
}

// fromStack takes the packets the netstack sends: the echo request of a pending path MTU
// probe goes to the dataplane as a probe, the rest as usual.
func (g *Gateway) fromStack(pkt []byte) error {
	if w := g.pmtuProbe.Load(); w != nil && len(pkt) == w.size && isEchoRequest(pkt) && g.pmtuProbe.CompareAndSwap(w, nil) {
		pr, err := g.dp.SendProbe(pkt, len(pkt)+wgOverhead)
		if err == nil {
			w.probe <- pr
		}
		return err
	}
	return g.dp.Inject(pkt)
}

// isEchoRequest reports whether pkt is an IPv4 ICMP echo request without options or an ICMPv6
// one right after the IPv6 header.
func isEchoRequest(pkt []byte) bool {
	switch {
	case len(pkt) > 20 && pkt[0] == 0x45:
		return pkt[9] == 1 && pkt[20] == 8
	case len(pkt) > 40 && pkt[0]>>4 == 6:
		return pkt[6] == 58 && pkt[40] == 128
	}
	return false
}

// probeOnce sends one probe of size bytes and says whether it passed, was lost, or was void
// (not sent with DF: it says nothing).
func (g *Gateway) probeOnce(ctx context.Context, size int, seq uint16) (passed, void bool) {
	w := &pathMTUProbe{size: size, probe: make(chan *dataplane.Probe, 1)}
	g.pmtuProbe.Store(w)
	timeout := min(max(4*g.prober.Status().RTT, 300*time.Millisecond), 2*time.Second)
	plan := g.currentPlan()
	_, err := g.ns.PingSize(ctx, plan.TunnelIP, plan.PeerTunnelIP, seq, size, timeout)
	g.pmtuProbe.CompareAndSwap(w, nil)
	var pr *dataplane.Probe
	select {
	case pr = <-w.probe:
	default:
	}
	switch {
	case pr == nil || !pr.SentDF():
		g.pmtu.void.Add(1)
		return false, true
	case err == nil:
		g.pmtu.passed.Add(1)
		return true, false
	default:
		g.pmtu.lost.Add(1)
		return false, false
	}
}

// pathMTUSearch is one search's (or confirmation's) state.
type pathMTUSearch struct {
	g     *Gateway
	ctx   context.Context
	seq   uint16
	voids int
}

// passes probes size until one passes or pathMTUAttempts are lost; it is undecided when the
// gateway stops or too many probes were void.
func (s *pathMTUSearch) passes(size int) (ok, decided bool) {
	for lost := 0; lost < pathMTUAttempts; {
		if s.ctx.Err() != nil || !s.g.active.Load() {
			return false, false
		}
		s.seq++
		passed, void := s.g.probeOnce(s.ctx, size, s.seq)
		switch {
		case passed:
			return true, true
		case void:
			if s.voids++; s.voids > pathMTUVoidLimit {
				return false, false
			}
		default:
			lost++
		}
	}
	return false, true
}

func (g *Gateway) newPathMTUSearch(ctx context.Context) *pathMTUSearch {
	return &pathMTUSearch{g: g, ctx: ctx, seq: uint16(0x8000 + g.pmtu.passed.Load() + g.pmtu.lost.Load())} // apart from the connection prober's
}

// confirmPathMTU probes the tunnel MTU in force; false means the path no longer carries it.
func (g *Gateway) confirmPathMTU(ctx context.Context) bool {
	ok, decided := g.newPathMTUSearch(ctx).passes(g.dp.EffectiveMTU())
	return ok || !decided
}

// discoverPathMTU runs one search and applies what it found; it reports whether it found
// anything.
func (g *Gateway) discoverPathMTU(ctx context.Context) bool {
	configured, _ := g.dp.MTU()
	overhead := outerOverhead
	if ep, err := netip.ParseAddrPort(g.peerState().endpoint); err == nil && !ep.Addr().Unmap().Is4() {
		overhead += 20
	}
	start := time.Now()
	s := g.newPathMTUSearch(ctx)
	found, ok := searchPathMTU(ctx, pathMTUCandidates(configured, overhead), s.passes)
	if !ok {
		g.log.Debug("path MTU search found nothing", "voidProbes", s.voids)
		return false
	}
	took := time.Since(start)
	g.pmtu.lastSearch.Store(int64(took))
	g.pmtu.searches.Add(1)
	old := g.dp.EffectiveMTU()
	if found >= configured {
		g.dp.SetPathMTU(0)
	} else {
		g.dp.SetPathMTU(found)
	}
	if now := g.dp.EffectiveMTU(); now != old || g.pmtu.searches.Load() == 1 {
		g.log.Info("path MTU", "tunnelMTU", now, "was", old, "configured", configured,
			"wireDatagramBytes", now+overhead, "took", took.Round(time.Millisecond))
	}
	return true
}

// runPathMTU searches whenever the gateway is active and Connected: at once, again every
// pathMTURaise, and at once when a confirmation finds the path narrower, until ctx ends.
func (g *Gateway) runPathMTU(ctx context.Context) {
	pathMTUSchedule{
		// Without kernel sockets (an in-memory Bind in tests) no probe can be sent with DF.
		up: func() bool {
			return g.active.Load() && g.prober.Status().State == netstack.Connected && g.path.Policy().Sockets > 0
		},
		search:  func() bool { return g.discoverPathMTU(ctx) },
		confirm: func() bool { return g.confirmPathMTU(ctx) },
		wait:    200 * time.Millisecond, retry: pathMTURetry, every: pathMTUConfirm, raise: pathMTURaise,
	}.run(ctx)
}

// pathMTUSchedule says when a gateway searches and confirms: search once up, confirm every
// every, search again when a confirmation fails, after raise, and retry after a search
// that found nothing; while not up, look again every wait.
type pathMTUSchedule struct {
	up, search, confirm       func() bool
	wait, retry, every, raise time.Duration
}

func (s pathMTUSchedule) run(ctx context.Context) {
	sleep := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	for ctx.Err() == nil {
		for !s.up() {
			if !sleep(s.wait) {
				return
			}
		}
		if !s.search() {
			if !sleep(s.retry) {
				return
			}
			continue
		}
		for raise := time.Now().Add(s.raise); time.Now().Before(raise); {
			if !sleep(s.every) {
				return
			}
			if !s.up() || !s.confirm() {
				break
			}
		}
	}
}
