package appliance

import (
	"context"
	"crypto/ecdh"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/skein-net/skein/control/gateway/config"
	"github.com/skein-net/skein/dataplane/packet"
)

// Failover of the peer's active replica, seen from this gateway.
//
// The peer's replicas share the WireGuard key but not the sessions: after a takeover, what
// this gateway encrypts for the old replica's session is dropped by the new one, and only a
// new handshake helps. wireguard-go starts one by itself only after 15 s without an answer
// and then at most one per 5 s. A client (the side that knows where to reach the peer)
// therefore reconnects at once: it removes and re-adds the peer, which forgets the sessions
// and the rate limit, and pings the peer's tunnel address, which starts a handshake; it
// starts over until a ping is answered. It does so
//   - when the peer says goodbye: an active replica that stops gracefully sends an ICMP echo
//     request with a goodbye payload from its tunnel address, through the tunnel, before it
//     gives up its Lease;
//   - when a probe is lost and nothing at all came from the peer since the probe before
//     (a probe lost under load, with the session carrying data, is no reason to start over).
// A server cannot start a handshake (it learns the client's address from the client); a
// client's new replica starts one itself, as it has no session.

// goodbyeSends is how many goodbyes go out, a millisecond apart: one lost is no loss.
const goodbyeSends = 3

// reconnectFor bounds the reconnect attempts; then wireguard-go's own timers carry on.
const reconnectFor = 15 * time.Second

// Every reconnect attempt resets the peer, which also resets wireguard-go's limit of one
// handshake per 5 s. Attempts are drawn from a bucket of resetBurst that refills one per
// resetEvery, wireguard-go's own pace: a failover gets its handful of quick attempts, a long
// outage settles to wireguard-go's rate instead of a handshake every few hundred ms.
const (
	resetBurst = 5
	resetEvery = 5 * time.Second
)

// resetBucket rations peer resets.
type resetBucket struct {
	mu     sync.Mutex
	tokens float64
	last   time.Time
}

// take waits for a token until ctx ends; false if it ended first.
func (b *resetBucket) take(ctx context.Context) bool {
	for {
		b.mu.Lock()
		now := time.Now()
		if b.last.IsZero() {
			b.tokens = resetBurst
		} else {
			b.tokens = min(resetBurst, b.tokens+now.Sub(b.last).Seconds()/resetEvery.Seconds())
		}
		b.last = now
		if b.tokens >= 1 {
			b.tokens--
			b.mu.Unlock()
			return true
		}
		wait := time.Duration((1 - b.tokens) * float64(resetEvery))
		b.mu.Unlock()
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
	}
}

// sayGoodbye tells the peer gateway that this replica stops: a handful of echo requests with
// the goodbye payload, injected into the tunnel from the tunnel address, then a few
// milliseconds for wireguard-go to send them. Only an active gateway with a session says it.
func (g *Gateway) sayGoodbye() {
	if g.wg == nil || !g.active.Load() || g.lastHandshake().IsZero() {
		return
	}
	g.applyMu.Lock()
	src, dst := g.plan.TunnelIP, g.plan.PeerTunnelIP
	g.applyMu.Unlock()
	key := g.goodbyeKey.Load()
	if key == nil {
		return
	}
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	pkt := make([]byte, packet.GoodbyeLen)
	packet.PutGoodbye(pkt, src.As4(), dst.As4(), key, time.Now().UnixNano(), nonce)
	for i := range goodbyeSends {
		if i > 0 {
			time.Sleep(time.Millisecond)
		}
		if err := g.dp.Inject(pkt); err != nil {
			g.log.Debug("goodbye to the peer", "err", err)
			return
		}
	}
	// Give wireguard-go a moment to encrypt and send them before the caller stops it (the
	// peer holds off goodbyeHold before it reconnects).
	time.Sleep(5 * time.Millisecond)
	g.log.Info("said goodbye to the peer gateway")
}

// goodbyeWindow is how far a goodbye's time may be from this gateway's clock.
const goodbyeWindow = time.Minute

// isGoodbye reports whether pkt, addressed to this gateway, is the peer's goodbye: from the
// peer's tunnel address, its MAC made with the key only the two gateways share, sent within
// goodbyeWindow of now and after the last goodbye accepted (a replay is refused).
func (g *Gateway) isGoodbye(pkt []byte) bool {
	g.applyMu.Lock()
	peer := g.plan.PeerTunnelIP
	g.applyMu.Unlock()
	key := g.goodbyeKey.Load()
	if key == nil {
		return false
	}
	at, ok := packet.ParseGoodbye(pkt, peer.As4(), key)
	if !ok {
		return false
	}
	now := time.Now().UnixNano()
	if d := now - at; d > int64(goodbyeWindow) || d < -int64(goodbyeWindow) {
		g.log.Warn("a goodbye from the peer gateway outside the time window; ignored (are the clocks apart?)", "sent", time.Unix(0, at))
		return false
	}
	for {
		last := g.lastGoodbye.Load()
		if at <= last {
			return false // a replay, or one of the few copies of one goodbye
		}
		if g.lastGoodbye.CompareAndSwap(last, at) {
			return true
		}
	}
}

// GoodbyeKey is the goodbye's MAC key of a pair of gateways: their static X25519 keys'
// shared secret (the same on both sides), hashed with a label.
func GoodbyeKey(private, peerPublic config.Key) (*packet.GoodbyeKey, error) {
	priv, err := ecdh.X25519().NewPrivateKey(private[:])
	if err != nil {
		return nil, err
	}
	pub, err := ecdh.X25519().NewPublicKey(peerPublic[:])
	if err != nil {
		return nil, err
	}
	shared, err := priv.ECDH(pub)
	if err != nil {
		return nil, fmt.Errorf("the peer's public key: %w", err)
	}
	m := hmac.New(sha256.New, shared)
	m.Write([]byte("skein goodbye v1"))
	var k packet.GoodbyeKey
	copy(k[:], m.Sum(nil))
	return &k, nil
}

// setGoodbyeKey derives the key for plan's pair of keys; a key that cannot make one (a
// low-order peer key) leaves goodbyes off, logged.
func (g *Gateway) setGoodbyeKey(plan *config.Gateway) {
	k, err := GoodbyeKey(plan.PrivateKey, plan.PeerPublicKey)
	if err != nil {
		g.log.Warn("goodbyes to and from the peer gateway are off", "err", err)
	}
	g.goodbyeKey.Store(k)
}

// localTap sits between the dataplane and the netstack: it spots the peer's goodbye, then
// hands every packet on.
type localTap struct{ g *Gateway }

func (t localTap) DeliverLocal(pkt []byte) bool {
	if t.g.isGoodbye(pkt) {
		t.g.log.Info("the peer gateway said goodbye (its active replica stops)")
		t.g.reconnect(whyGoodbye)
	}
	return t.g.ns.DeliverLocal(pkt)
}

// afterLostProbe runs after every unanswered probe: a client whose peer has sent nothing
// since the probe before reconnects; otherwise a plain handshake attempt (rate limited by
// wireguard-go) is all.
func (g *Gateway) afterLostProbe(lost int) {
	rx := g.ipcInts("rx_bytes")["rx_bytes"]
	silent := rx == g.lastRx.Swap(rx)
	if silent && g.isClient() {
		g.reconnect("probe lost, nothing received from the peer")
		return
	}
	g.rehandshake(lost)
}

func (g *Gateway) isClient() bool {
	g.applyMu.Lock()
	defer g.applyMu.Unlock()
	return g.plan.PeerEndpoint.IsValid()
}

// reconnect (a client only) resets the peer and pings the peer gateway's tunnel address,
// which starts a handshake; it starts over after every unanswered ping until one is answered,
// for at most reconnectFor. Success is a ping answered, not a handshake: the replica that is
// leaving may still complete one before it falls silent. After a goodbye the first attempt
// waits goodbyeHold, so that the leaving replica is silent by then. One runs at a time. The
// ping's timeout is three round trips to the peer (the last probe's), at least 250 ms and at
// most 2 s: short, since the successor becomes reachable at a moment nobody announces, and
// long enough for a handshake and a ping.
func (g *Gateway) reconnect(why string) {
	if !g.isClient() || !g.active.Load() || !g.reconnecting.CompareAndSwap(false, true) {
		return
	}
	g.reconnects.Add(1)
	g.wgDone.Add(1)
	go func() {
		defer g.wgDone.Done()
		defer g.reconnecting.Store(false)
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), reconnectFor)
		defer cancel()
		go func() {
			select {
			case <-g.stopped:
				cancel()
			case <-ctx.Done():
			}
		}()
		if why == whyGoodbye {
			select {
			case <-ctx.Done():
				return
			case <-time.After(goodbyeHold):
			}
		}
		timeout := min(max(3*g.prober.Status().RTT, 250*time.Millisecond), 2*time.Second)
		var src, dst netip.Addr
		for attempt := 1; ctx.Err() == nil; attempt++ {
			if !g.resets.take(ctx) {
				break
			}
			g.applyMu.Lock()
			err := g.wg.IpcSet(g.plan.PeerResetUAPI())
			src, dst = g.plan.TunnelIP, g.plan.PeerTunnelIP
			g.applyMu.Unlock()
			if err != nil {
				g.log.Error("reconnect: reset the peer", "err", err)
				return
			}
			sent := time.Now()
			if _, err := g.ns.Ping(ctx, src, dst, reconnectSeq+uint16(attempt), timeout); err == nil {
				g.log.Info("reconnected to the peer gateway", "why", why, "attempts", attempt, "took", time.Since(start).Round(time.Millisecond))
				return
			}
			// Unreachable at once (port closed): wait out the rest of the timeout anyway.
			select {
			case <-ctx.Done():
			case <-time.After(timeout - time.Since(sent)):
			}
		}
		if ctx.Err() != nil && time.Since(start) >= reconnectFor {
			if hs := g.lastHandshake(); hs.After(start) && dst.IsValid() {
				// WireGuard works, the probes do not: most likely a peer that is not skein
				// without the tunnel address.
				g.log.Warn("reconnect: the peer completes WireGuard handshakes but does not answer probes to its tunnel address; a peer that is not skein must hold that address on its WireGuard interface and allow this gateway's in its allowed-ips (skein-gateway --print-peer-config prints how)",
					"peerTunnelIP", dst, "tunnelIP", src, "lastHandshake", hs.Format(time.RFC3339), "why", why)
			} else {
				g.log.Warn("reconnect: the peer gateway does not answer yet; wireguard-go's timers carry on", "why", why, "for", reconnectFor)
			}
		}
	}()
}

// whyGoodbye is the reason reconnect gets after a goodbye.
const whyGoodbye = "goodbye"

// goodbyeHold is how long a client waits after a goodbye before its first attempt.
const goodbyeHold = 100 * time.Millisecond

// reconnectSeq starts the sequence numbers of the reconnect pings (the prober counts from 1).
const reconnectSeq = 0xc000

// Reconnects counts the reconnects this gateway started.
func (g *Gateway) Reconnects() uint64 { return g.reconnects.Load() }
