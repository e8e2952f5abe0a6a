package dataplane

import (
	"time"

	"github.com/skein-net/skein/dataplane/nat"
	"github.com/skein-net/skein/dataplane/packet"
)

// batch is what one Read or one Write works with, carried by pointer through the per-packet
// functions of its direction: the tables in force (loaded once, so a batch never mixes two
// configurations), the clock (read at most once, for the ICMP rate limit), the tallies (added
// to the shared counters once, at the end), scratch buffers for ICMP errors (one per slot of
// the batch), and, on the read side, the ARP replies and ICMP errors going back onto the
// overlay. Each direction owns one: Read's is used by its one goroutine, Write's under wmu.
type batch struct {
	t       *tables
	now     time.Time
	tl      tally
	scratch [][]byte
	replies []Message
}

func newBatch(slots, replies int) batch {
	b := batch{scratch: make([][]byte, slots), replies: make([]Message, 0, replies)}
	for i := range b.scratch {
		b.scratch[i] = make([]byte, icmpBufLen)
	}
	return b
}

// start begins a batch under tables t.
func (b *batch) start(t *tables) {
	b.t, b.now = t, time.Time{}
}

// icmpError is an ICMP error to send about a packet: type, code, and the header's rest of
// word (the next-hop MTU of fragmentation needed).
type icmpError struct {
	typ, code uint8
	rest      uint32
}

var errTTLExceeded = icmpError{typ: icmpTimeExceeded, code: icmpTTLInTransit}

var errHopLimitExceeded = icmpError{typ: packet.ICMPv6TimeExceeded, code: icmp6HopLimitInTransit}

func errPacketTooBig(mtu int) icmpError {
	return icmpError{typ: packet.ICMPv6PacketTooBig, rest: uint32(mtu)}
}

func errFragNeeded(mtu int) icmpError {
	return icmpError{typ: icmpDestUnreach, code: icmpFragNeeded, rest: uint32(mtu)}
}

// natVerdict counts what NAT did to a packet that leaves as n packets (the segments of a
// superpacket, or 1) and says whether (and as what) to drop it; a dropped packet counts once,
// as it came (like every other drop). peer is the result of the peer networks' map, own that
// of this site's (LocalNAT; nat.Matched when there is none).
func (b *batch) natVerdict(peer, own nat.Result, n uint64) (Counter, bool) {
	for _, r := range [2]nat.Result{peer, own} {
		switch r {
		case nat.Truncated:
			return DropNATTruncated, true
		case nat.BadQuote:
			return DropNATBadQuote, true
		case nat.Unsupported:
			return DropNATUnsupported, true
		}
	}
	if peer == nat.NoMatch || own == nat.NoMatch {
		// A local address outside every LocalNAT pair must not reach the peer as it is.
		if own == nat.NoMatch || b.t.cfg.DropUnmatched {
			b.tl[NATUnmatched]++
			return DropNATUnmatched, true
		}
		b.tl[NATUnmatched] += n
	}
	if peer == nat.Rewritten || own == nat.Rewritten {
		b.tl[NATTranslated] += n
	}
	return 0, false
}

// clamp lowers the MSS of a TCP SYN (unfragmented or first fragment) to the one that fits
// both MTUs.
func (b *batch) clamp(ip packet.IPv4) {
	if ip.Protocol() != packet.ProtoTCP || ip.FragmentOffset() != 0 {
		return
	}
	seg, err := packet.ParseTCP(ip.Payload())
	if err != nil {
		return
	}
	if seg.ClampMSS(b.t.mss) {
		b.tl[MSSClamped]++
	}
}

// clamp6 is clamp for IPv6: the TCP header past any extension headers, in an unfragmented
// packet or a first fragment.
func (b *batch) clamp6(ip packet.IPv6) {
	off := packet.IPv6HeaderLen
	switch ip.NextHeader() {
	case packet.ProtoTCP: // no extension headers, nearly every packet
	case packet.ProtoUDP, packet.ProtoICMPv6:
		return
	default:
		up, err := ip.Upper()
		if err != nil || up.Proto != packet.ProtoTCP || up.FragmentOffset != 0 {
			return
		}
		off = up.Offset
	}
	seg, err := packet.ParseTCP(ip[off:])
	if err != nil {
		return
	}
	if seg.ClampMSS(b.t.mss6) {
		b.tl[MSSClamped]++
	}
}

// deliverLocal hands a packet for the gateway's own addresses to the local handler.
func (d *Dataplane) deliverLocal(b *batch, ip []byte) {
	if h := d.local.Load(); h != nil && (*h).DeliverLocal(ip) {
		b.tl[Local]++
		return
	}
	b.tl[DropLocalUnavailable]++
}

// allowICMP applies the rate limit, reading the clock once per batch.
func (d *Dataplane) allowICMP(b *batch) bool {
	if b.now.IsZero() {
		b.now = time.Now()
	}
	if !d.icmp.allow(b.now, b.t.cfg.ICMPRate, b.t.cfg.ICMPBurst) {
		b.tl[ICMPRateLimited]++
		return false
	}
	b.tl[ICMPSent]++
	return true
}
