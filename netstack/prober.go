package netstack

import (
	"context"
	"net/netip"
	"sync"
	"time"
)

// State is the connection state the prober reports; the values are the Connection API's.
type State string

const (
	Connecting State = "Connecting" // no probe answered yet
	Connected  State = "Connected"  // the last probe was answered (or fewer than FailAfter lost since)
	Error      State = "Error"      // FailAfter probes in a row were lost
)

// ProbeConfig configures the prober.
type ProbeConfig struct {
	// Local is the stack's address probes leave from (the gateway's tunnel address); Peer is
	// the peer gateway's tunnel address.
	Local, Peer netip.Addr
	// Interval between probes (default 2 s); a probe not answered within it is lost.
	Interval time.Duration
	// FailAfter consecutive losses make the state Error (default 5).
	FailAfter int
	// OnLoss, if set, is called after every unanswered probe with the number of consecutive
	// losses (the gateway starts a new WireGuard handshake: the peer may be a new replica).
	OnLoss func(lost int)
}

// ProbeStatus is what the prober knows.
type ProbeStatus struct {
	State State
	// RTT of the last answered probe, and when it was answered.
	RTT       time.Duration
	LastReply time.Time
	// Lost counts consecutive unanswered probes.
	Lost int
}

// RTTBuckets are the upper bounds, in seconds, of the round-trip histogram: from a LAN's
// half millisecond to a lost-looking 2.5 s (a probe waits at most its interval).
var RTTBuckets = [...]float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}

// ProbeHistory counts every probe since the prober started: answered ones by round-trip time
// (Buckets[i] counts RTTs <= RTTBuckets[i], not cumulative; the last slot holds the rest), and
// lost ones.
type ProbeHistory struct {
	Buckets  [len(RTTBuckets) + 1]uint64
	Sum      float64 // seconds, over answered probes
	Answered uint64
	Lost     uint64
}

func (h *ProbeHistory) observe(rtt time.Duration) {
	s := rtt.Seconds()
	i := 0
	for i < len(RTTBuckets) && s > RTTBuckets[i] {
		i++
	}
	h.Buckets[i]++
	h.Sum += s
	h.Answered++
}

// Prober probes the peer gateway through the tunnel.
type Prober struct {
	st  *Stack
	cfg ProbeConfig

	mu      sync.Mutex
	status  ProbeStatus
	history ProbeHistory
	paused  bool
}

// Pause stops probing (a standby replica, whose tunnel is down) and resets the state to
// Connecting; Resume starts again.
func (p *Prober) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused = true
	p.status = ProbeStatus{State: Connecting}
}

// Resume restarts probing after Pause.
func (p *Prober) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused = false
}

// NewProber returns a prober in state Connecting; Run starts it.
func (st *Stack) NewProber(cfg ProbeConfig) *Prober {
	if cfg.Interval <= 0 {
		cfg.Interval = 2 * time.Second
	}
	if cfg.FailAfter <= 0 {
		cfg.FailAfter = 5
	}
	return &Prober{st: st, cfg: cfg, status: ProbeStatus{State: Connecting}}
}

// Status returns the current status.
func (p *Prober) Status() ProbeStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status
}

// History returns the probe counts so far.
func (p *Prober) History() ProbeHistory {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.history
}

// Run probes every Interval until ctx ends, calling onChange (if not nil) after every probe
// whose outcome changed the state or the RTT.
func (p *Prober) Run(ctx context.Context, onChange func(ProbeStatus)) {
	var seq uint16
	for {
		p.mu.Lock()
		paused := p.paused
		p.mu.Unlock()
		if paused {
			select {
			case <-time.After(p.cfg.Interval):
				continue
			case <-ctx.Done():
				return
			}
		}
		seq++
		start := time.Now()
		rtt, err := p.st.Ping(ctx, p.cfg.Local, p.cfg.Peer, seq, p.cfg.Interval)
		if ctx.Err() != nil {
			return
		}
		p.mu.Lock()
		if p.paused {
			p.mu.Unlock()
			continue
		}
		old := p.status
		if err == nil {
			p.status = ProbeStatus{State: Connected, RTT: rtt, LastReply: time.Now()}
			p.history.observe(rtt)
		} else {
			p.history.Lost++
			p.status.Lost++
			if p.status.Lost >= p.cfg.FailAfter {
				p.status.State = Error
			}
		}
		now := p.status
		p.mu.Unlock()
		if err != nil && p.cfg.OnLoss != nil {
			p.cfg.OnLoss(now.Lost)
		}
		if onChange != nil && (now.State != old.State || now.RTT != old.RTT) {
			onChange(now)
		}
		// Keep the cadence: a lost probe already waited its interval.
		if wait := p.cfg.Interval - time.Since(start); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return
			}
		}
	}
}
