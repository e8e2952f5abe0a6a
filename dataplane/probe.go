package dataplane

import (
	"errors"
	"sync/atomic"
	"time"
)

// Why probes pass through here: the gateways discover the WAN's path MTU by sending padded
// echo requests between their tunnel addresses whose WireGuard datagram alone leaves with DF
// (packetization-layer path MTU discovery, RFC 8899; ICMP from the path is not needed, so it
// works through black holes). The datagram is encrypted by the time the socket sees it, so
// the socket cannot tell the probe from a data packet of the same length, and under load
// full-size data packets of every probe's length are about. So Read hands a probe to
// wireguard-go only once nothing else is inside it (Read handed nothing and the PathBind sent
// nothing for probeStill: everything read before has been sent), alone in its batch, and arms the PathBind then: wireguard-go sends
// one peer's packets in the order it read them, so the next data datagram the PathBind sends
// is the probe. The PathBind sends it with DF if its length is the one expected, and says so;
// a probe that could not be sent that way is void and the prober tries again, so that a probe
// sent without DF (which would pass whatever the path) never counts as passed.

// Probe is one path MTU probe on its way: an IP packet from the gateway's own address (an
// echo request the netstack sent) and the length of the WireGuard datagram it becomes.
type Probe struct {
	wireLen int
	pkt     []byte
	queued  time.Time
	// Read's view while it waits: the PathBind's count of sends, and since when it is still.
	sends      uint64
	stillSince time.Time
	// sentDF: the PathBind sent the probe's datagram with DF.
	sentDF atomic.Bool
}

// SentDF reports whether the probe's datagram left with DF (only then does its answer say
// that the path carries wireLen).
func (p *Probe) SentDF() bool { return p.sentDF.Load() }

// probeQuiet is how long Read waits for wireguard-go to empty before it gives a probe up:
// 512 packets leave in 5 ms at 1 Gbit/s.
const probeQuiet = 100 * time.Millisecond

// probeStill: wireguard-go counts as empty once the PathBind sent nothing for this long while
// Read handed it nothing. (The out window's count cannot say it: it keeps packets
// wireguard-go dropped until a wait forgets them, and forgets packets still inside.)
const probeStill = 5 * time.Millisecond

var errProbePending = errors.New("a path MTU probe is already on its way")

// SendProbe queues pkt (an IP packet for the peer, at most the configured tunnel MTU) as a path
// MTU probe whose WireGuard datagram will be wireLen bytes long. Read hands it to
// wireguard-go when nothing else is inside; without a PathBind (SetPathBind) or windows it is
// sent as an ordinary packet, without DF. Check Probe.SentDF after its answer.
func (d *Dataplane) SendProbe(pkt []byte, wireLen int) (*Probe, error) {
	t := d.t.Load()
	if len(pkt) == 0 || len(pkt) > t.cfg.TunnelMTU {
		return nil, errors.New("probe: bad size")
	}
	p := &Probe{wireLen: wireLen, pkt: append([]byte(nil), pkt...), queued: time.Now()}
	// One at a time; one Read never took (wireguard-go was down) is stale after a second.
	if old := d.probe.Load(); old != nil && time.Since(old.queued) < time.Second || !d.probe.CompareAndSwap(old, p) {
		return nil, errProbePending
	}
	d.conn.Wake()
	return p, nil
}

// SetPathBind gives Read the PathBind that sends probes with DF. Call it before wireguard-go
// starts.
func (d *Dataplane) SetPathBind(p *PathBind) { d.path = p }

// takeProbe hands a pending probe to wireguard-go in bufs[0] once nothing is inside it, arming
// the PathBind; it returns 1 then. It returns 0 while it waits (the caller reads nothing from
// the overlay meanwhile) and -1 when there is no probe.
func (d *Dataplane) takeProbe(bufs [][]byte, sizes []int, offset int) int {
	p := d.probe.Load()
	if p == nil {
		return -1
	}
	if d.path == nil {
		d.probe.Store(nil)
		return -1 // void: nothing could send it with DF
	}
	now := time.Now()
	if sends := d.path.sends.Load(); sends != p.sends || p.stillSince.IsZero() {
		p.sends, p.stillSince = sends, now
	}
	quiet := now.Sub(p.stillSince) >= probeStill
	if !quiet && now.Sub(p.queued) < probeQuiet {
		time.Sleep(100 * time.Microsecond)
		return 0
	}
	d.probe.Store(nil)
	if !quiet {
		return -1 // given up: void (never sent, never SentDF)
	}
	sizes[0] = copy(bufs[0][offset:], p.pkt)
	d.path.arm(p)
	return 1
}
