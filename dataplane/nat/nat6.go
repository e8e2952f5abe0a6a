package nat

import (
	"encoding/binary"

	"github.com/skein-net/skein/dataplane/packet"
)

// pair6 is an IPv6 Pair as masks and prefixes in two 64-bit halves.
type pair6 struct {
	maskHi, maskLo uint64
	fromHi, fromLo uint64
	toHi, toLo     uint64
	// delta is what every rewrite by this pair adds to a checksum over the address, folded:
	// the host bits are kept, so ~old + new over them cancels and only the prefixes' words
	// remain. 0 means the pair is checksum-neutral.
	delta    uint32
	identity bool
}

func newPair6(p Pair) pair6 {
	bits := p.From.Bits()
	var maskHi, maskLo uint64
	switch {
	case bits >= 128:
		maskHi, maskLo = ^uint64(0), ^uint64(0)
	case bits > 64:
		maskHi, maskLo = ^uint64(0), ^(^uint64(0) >> (bits - 64))
	case bits == 64:
		maskHi = ^uint64(0)
	case bits > 0:
		maskHi = ^(^uint64(0) >> bits)
	}
	from, to := p.From.Addr().As16(), p.To.Addr().As16()
	return pair6{
		maskHi: maskHi, maskLo: maskLo,
		fromHi: binary.BigEndian.Uint64(from[:8]), fromLo: binary.BigEndian.Uint64(from[8:]),
		toHi: binary.BigEndian.Uint64(to[:8]), toLo: binary.BigEndian.Uint64(to[8:]),
		delta:    foldDelta(packet.Delta16(from, to)),
		identity: p.From == p.To,
	}
}

// foldDelta folds a Delta16 term to 16 bits, writing a sum of 0 (0 or 0xffff) as 0.
func foldDelta(d uint32) uint32 {
	d = (d & 0xffff) + (d >> 16)
	d = (d & 0xffff) + (d >> 16)
	if d == 0xffff {
		return 0
	}
	return d
}

func (p pair6) inverse() pair6 {
	q := p
	q.fromHi, q.fromLo, q.toHi, q.toLo = p.toHi, p.toLo, p.fromHi, p.fromLo
	q.delta = 0
	if p.delta != 0 {
		q.delta = 0xffff - p.delta // the one's complement negation
	}
	return q
}

// ChecksumNeutral reports whether rewrites by the IPv6 pair p change no checksum: the one's
// complement sums of its two prefixes are equal. IPAM can choose remapped prefixes this way.
// It is false for IPv4 pairs (the IPv4 header checksum always changes).
func ChecksumNeutral(p Pair) bool {
	if !p.From.Addr().Is6() || !p.To.Addr().Is6() {
		return false
	}
	return foldDelta(packet.Delta16(p.From.Masked().Addr().As16(), p.To.Masked().Addr().As16())) == 0
}

func (m *PrefixMap) match6(a [16]byte) ([16]byte, *pair6) {
	hi, lo := binary.BigEndian.Uint64(a[:8]), binary.BigEndian.Uint64(a[8:])
	p := m.find6(hi, lo)
	if p == nil {
		return a, nil
	}
	var out [16]byte
	binary.BigEndian.PutUint64(out[:8], p.toHi|hi&^p.maskHi)
	binary.BigEndian.PutUint64(out[8:], p.toLo|lo&^p.maskLo)
	return out, p
}

// find6 is the pair whose From holds the address hi:lo, or nil.
func (m *PrefixMap) find6(hi, lo uint64) *pair6 {
	if m == nil {
		return nil
	}
	for i := range m.v6 {
		p := &m.v6[i]
		if hi&p.maskHi == p.fromHi && lo&p.maskLo == p.fromLo {
			return p
		}
	}
	return nil
}

// set6 writes the address hi:lo mapped by p at the start of b.
func (p *pair6) set6(b []byte, hi, lo uint64) {
	binary.BigEndian.PutUint64(b, p.toHi|hi&^p.maskHi)
	binary.BigEndian.PutUint64(b[8:], p.toLo|lo&^p.maskLo)
}

// Map6 returns where m maps the IPv6 address a, and whether any pair matched; a nil map matches
// nothing.
func (m *PrefixMap) Map6(a [16]byte) ([16]byte, bool) {
	out, p := m.match6(a)
	return out, p != nil
}

// RewriteDst6 translates the destination of the IPv6 packet ip (and, in ICMPv6 errors, the
// quoted packet's source): the direction into the tunnel.
func (m *PrefixMap) RewriteDst6(ip packet.IPv6) Result {
	return m.rewrite6(ip, packet.IPv6DstOffset, packet.IPv6SrcOffset)
}

// RewriteSrc6 translates the source of the IPv6 packet ip (and, in ICMPv6 errors, the quoted
// packet's destination): the direction out of the tunnel.
func (m *PrefixMap) RewriteSrc6(ip packet.IPv6) Result {
	return m.rewrite6(ip, packet.IPv6SrcOffset, packet.IPv6DstOffset)
}

// rewrite6 maps the outer address at offset outer and, in ICMPv6 errors, the quoted packet's
// address at offset quoted. Like rewrite, it checks everything before it changes a byte.
func (m *PrefixMap) rewrite6(ip packet.IPv6, outer, quoted int) Result {
	hi, lo := binary.BigEndian.Uint64(ip[outer:]), binary.BigEndian.Uint64(ip[outer+8:])
	p := m.find6(hi, lo)
	outerMatched, outerChanges := p != nil, p != nil && !p.identity

	var up packet.IPv6Upper
	switch nh := ip.NextHeader(); nh {
	case packet.ProtoTCP, packet.ProtoUDP, packet.ProtoICMPv6:
		up = packet.IPv6Upper{Proto: nh, Offset: packet.IPv6HeaderLen} // no extension headers
	default:
		var err error
		if up, err = ip.Upper(); err != nil {
			switch {
			case !outerMatched:
				return NoMatch
			case err == packet.ErrUnsupported:
				return Unsupported
			}
			return Truncated
		}
	}
	if outerChanges && outer == packet.IPv6DstOffset && up.SegmentsLeft != 0 {
		// The upper layer's checksum covers the final destination, in the Routing header,
		// which this NAT does not translate.
		return Unsupported
	}
	if !outerMatched && up.Proto != packet.ProtoICMPv6 {
		return NoMatch
	}
	if up.Fragmented && up.FragmentOffset != 0 {
		// A later fragment: the upper-layer header (and its checksum) is in the first.
		if !outerMatched {
			return NoMatch
		}
		if outerChanges {
			p.set6(ip[outer:], hi, lo)
		}
		return changed(outerChanges)
	}

	l4 := ip[up.Offset:]
	switch up.Proto {
	case packet.ProtoTCP:
		if len(l4) < packet.TCPChecksumOffset+2 {
			return Truncated
		}
		if outerChanges {
			addDelta(l4[packet.TCPChecksumOffset:], p.delta)
			p.set6(ip[outer:], hi, lo)
		}
		return changed(outerChanges)
	case packet.ProtoUDP:
		if len(l4) < packet.UDPHeaderLen {
			return Truncated
		}
		if outerChanges {
			addDeltaUDP(l4[packet.UDPChecksumOffset:], p.delta)
			p.set6(ip[outer:], hi, lo)
		}
		return changed(outerChanges)
	case packet.ProtoICMPv6:
		return m.rewriteICMPv6(ip, l4, outer, quoted, p, hi, lo)
	default:
		if outerChanges {
			p.set6(ip[outer:], hi, lo)
		}
		return changed(outerChanges)
	}
}

// rewriteICMPv6 is rewrite6 for an ICMPv6 message; p is the pair that matched the outer
// address hi:lo (nil: none).
func (m *PrefixMap) rewriteICMPv6(ip packet.IPv6, l4 []byte, outer, quoted int, p *pair6, hi, lo uint64) Result {
	outerMatched, outerChanges := p != nil, p != nil && !p.identity
	msg, err := packet.ParseICMPv6(l4)
	if err != nil {
		if outerMatched {
			return Truncated
		}
		return NoMatch
	}
	if !msg.IsError() {
		// Echo and the rest: the checksum covers the pseudo-header, so the outer change.
		if !outerMatched {
			return NoMatch
		}
		if outerChanges {
			addDelta(msg[packet.ICMPv6ChecksumOffset:], p.delta)
			p.set6(ip[outer:], hi, lo)
		}
		return changed(outerChanges)
	}

	// An error quoting the packet it is about, which travelled the other way: the address to
	// translate in it is the opposite one.
	q, err := packet.ParseIPv6Header(msg.Payload())
	if err != nil {
		return BadQuote
	}
	newQuoted, qp := m.match6([16]byte(q[quoted : quoted+16]))
	quotedMatched, quotedChanges := qp != nil, qp != nil && !qp.identity
	if !outerMatched && !quotedMatched {
		return NoMatch
	}
	if outerMatched && !quotedMatched {
		// An error from the mapped side about a packet that never went there (nat.go).
		return BadQuote
	}
	sum := msg.Checksum()
	if quotedChanges {
		// The quoted address is in the message body, and so is the quoted packet's own
		// upper-layer checksum, at even offsets: each change adds to the ICMPv6 checksum.
		sum = packet.ApplyDelta(sum, qp.delta)
		qu, err := q.Upper()
		fixable := err == nil && !(qu.Fragmented && qu.FragmentOffset != 0) &&
			(quoted != packet.IPv6DstOffset || qu.SegmentsLeft == 0)
		if fixable {
			ql4 := q[qu.Offset:]
			at := -1
			switch qu.Proto {
			case packet.ProtoTCP:
				if len(ql4) >= packet.TCPChecksumOffset+2 {
					at = packet.TCPChecksumOffset
				}
			case packet.ProtoUDP:
				if len(ql4) >= packet.UDPHeaderLen && ql4[packet.UDPChecksumOffset]|ql4[packet.UDPChecksumOffset+1] != 0 {
					at = packet.UDPChecksumOffset
				}
			case packet.ProtoICMPv6:
				if len(ql4) >= packet.ICMPv6ChecksumOffset+2 {
					at = packet.ICMPv6ChecksumOffset
				}
			}
			if at >= 0 {
				before := binary.BigEndian.Uint16(ql4[at:])
				if qu.Proto == packet.ProtoUDP {
					addDeltaUDP(ql4[at:], qp.delta)
				} else {
					addDelta(ql4[at:], qp.delta)
				}
				sum = packet.UpdateChecksum2(sum, before, binary.BigEndian.Uint16(ql4[at:]))
			}
		}
		copy(q[quoted:], newQuoted[:])
	}
	if outerChanges {
		sum = packet.ApplyDelta(sum, p.delta)
		p.set6(ip[outer:], hi, lo)
	}
	msg.SetChecksum(sum)
	return changed(outerChanges || quotedChanges)
}

// addDelta adds a folded pair delta to the checksum field at the start of b; a neutral pair (0)
// leaves it as it is.
func addDelta(b []byte, d uint32) {
	if d != 0 {
		binary.BigEndian.PutUint16(b, packet.ApplyDelta(binary.BigEndian.Uint16(b), d))
	}
}

// addDeltaUDP is addDelta for a UDP checksum: 0 (none, which IPv6 does not allow but a packet
// may carry) stays 0, and a computed 0 is written 0xffff.
func addDeltaUDP(b []byte, d uint32) {
	c := binary.BigEndian.Uint16(b)
	if d == 0 || c == 0 {
		return
	}
	if c = packet.ApplyDelta(c, d); c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(b, c)
}
