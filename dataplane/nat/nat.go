// Package nat is the gateway's stateless prefix NAT, like nftables' NETMAP in both directions:
// a PrefixMap pairs equal-length prefixes (a peer's real pod CIDR and the CIDR this cluster sees
// it as, the same for external CIDRs, for several peers) and rewrites addresses by replacing the
// network bits and keeping the host bits. No connection state is kept, so a packet's rewrite
// depends on the packet alone and the reverse map undoes it exactly.
//
// On the way into the tunnel the gateway rewrites destinations (RewriteDst); on the way out of
// it, sources (RewriteSrc). Checksums are updated incrementally (RFC 1624): the IPv4 header
// always; TCP and UDP (pseudo-header) on unfragmented packets and first fragments; a UDP
// checksum of 0 (none) stays 0 and a computed 0 is written 0xffff. ICMP echo needs only the IP
// header. ICMP errors (destination unreachable, fragmentation needed, time exceeded, parameter
// problem) also get the packet they quote translated (the quoted source when the outer
// destination is rewritten, the quoted destination when the outer source is), with the quoted
// header's and transport checksums and the outer ICMP checksum fixed, so path-MTU discovery and
// traceroute work across the NAT. Non-first fragments get only their IP header rewritten. IP
// options are skipped over, not interpreted.
//
// IPv6 is translated the same way (RewriteDst6, RewriteSrc6), past the extension headers, with
// the upper layer's checksums (TCP, UDP and ICMPv6, whose checksum covers the pseudo-header)
// updated by the pair's precomputed delta. A pair whose two prefixes have the same one's
// complement sum is checksum-neutral (the idea of RFC 6296 NPTv6, got by choosing the prefix
// rather than by changing a word of the address): its rewrites change no checksum at all.
//
// A PrefixMap is immutable after NewPrefixMap and safe for concurrent use; rewrites allocate
// nothing.
package nat

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/skein-net/skein/dataplane/packet"
)

// Pair maps the prefix From onto the prefix To, which must have the same length.
type Pair struct {
	From, To netip.Prefix
}

func (p Pair) String() string { return p.From.String() + "->" + p.To.String() }

type pair4 struct {
	mask, from, to uint32
	identity       bool
}

// PrefixMap is a set of Pairs whose From prefixes are disjoint, and whose To prefixes are
// disjoint, so that the map and its inverse are both functions. It holds IPv4 and IPv6 pairs;
// each pair is of one family.
type PrefixMap struct {
	pairs []Pair
	v4    []pair4
	v6    []pair6
}

// NewPrefixMap validates pairs and builds a map. Each pair's prefixes must be of one family
// (IPv4 or IPv6, not IPv4-mapped IPv6), canonical (no host bits set) and of equal length, and
// neither From nor To prefixes may overlap each other.
func NewPrefixMap(pairs ...Pair) (*PrefixMap, error) {
	m := &PrefixMap{pairs: append([]Pair(nil), pairs...)}
	for i, p := range pairs {
		for _, side := range []netip.Prefix{p.From, p.To} {
			if !side.IsValid() {
				return nil, fmt.Errorf("nat pair %d (%s): invalid prefix", i, p)
			}
			if side.Addr().Is4In6() || side.Addr().Zone() != "" {
				return nil, fmt.Errorf("nat pair %s: %s is an IPv4-mapped or zoned IPv6 prefix; write IPv4 prefixes as IPv4", p, side)
			}
			if side.Masked() != side {
				return nil, fmt.Errorf("nat pair %s: %s has host bits set; did you mean %s?", p, side, side.Masked())
			}
		}
		if p.From.Addr().Is4() != p.To.Addr().Is4() {
			return nil, fmt.Errorf("nat pair %s: an IPv4 prefix cannot be mapped onto an IPv6 one", p)
		}
		if p.From.Bits() != p.To.Bits() {
			return nil, fmt.Errorf("nat pair %s: prefixes must have the same length (/%d and /%d)", p, p.From.Bits(), p.To.Bits())
		}
		for _, q := range pairs[:i] {
			if p.From.Overlaps(q.From) {
				return nil, fmt.Errorf("nat pairs %s and %s: source prefixes overlap", q, p)
			}
			if p.To.Overlaps(q.To) {
				return nil, fmt.Errorf("nat pairs %s and %s: target prefixes overlap", q, p)
			}
		}
		if p.From.Addr().Is6() {
			m.v6 = append(m.v6, newPair6(p))
			continue
		}
		mask := ^uint32(0)
		if p.From.Bits() < 32 {
			mask = ^(^uint32(0) >> p.From.Bits())
		}
		from, to := p.From.Addr().As4(), p.To.Addr().As4()
		m.v4 = append(m.v4, pair4{
			mask:     mask,
			from:     binary.BigEndian.Uint32(from[:]),
			to:       binary.BigEndian.Uint32(to[:]),
			identity: p.From == p.To,
		})
	}
	return m, nil
}

// MustPrefixMap is NewPrefixMap for tests and constants; it panics on error.
func MustPrefixMap(pairs ...Pair) *PrefixMap {
	m, err := NewPrefixMap(pairs...)
	if err != nil {
		panic(err)
	}
	return m
}

// Pairs returns a copy of the map's pairs.
func (m *PrefixMap) Pairs() []Pair { return append([]Pair(nil), m.pairs...) }

// Inverse returns the map that undoes m.
func (m *PrefixMap) Inverse() *PrefixMap {
	inv := &PrefixMap{pairs: make([]Pair, len(m.pairs)), v4: make([]pair4, len(m.v4))}
	for i, p := range m.pairs {
		inv.pairs[i] = Pair{From: p.To, To: p.From}
	}
	for i, p := range m.v4 {
		inv.v4[i] = pair4{mask: p.mask, from: p.to, to: p.from, identity: p.identity}
	}
	inv.v6 = make([]pair6, len(m.v6))
	for i, p := range m.v6 {
		inv.v6[i] = p.inverse()
	}
	return inv
}

// map4 returns the mapped address, whether a pair matched, and whether that pair changes it.
func (m *PrefixMap) map4(a [4]byte) (out [4]byte, matched, changes bool) {
	if m == nil {
		return a, false, false
	}
	v := binary.BigEndian.Uint32(a[:])
	for i := range m.v4 {
		p := &m.v4[i]
		if v&p.mask == p.from {
			binary.BigEndian.PutUint32(out[:], p.to|v&^p.mask)
			return out, true, !p.identity
		}
	}
	return a, false, false
}

// Map4 returns where m maps the IPv4 address a, and whether any pair matched; a nil map
// matches nothing.
func (m *PrefixMap) Map4(a [4]byte) ([4]byte, bool) {
	out, ok, _ := m.map4(a)
	return out, ok
}

// Map returns where m maps a, and whether any pair matched.
func (m *PrefixMap) Map(a netip.Addr) (netip.Addr, bool) {
	if a.Is6() && !a.Is4In6() {
		out, ok := m.Map6(a.As16())
		return netip.AddrFrom16(out), ok
	}
	if !a.Is4() {
		return a, false
	}
	out, ok, _ := m.map4(a.As4())
	return netip.AddrFrom4(out), ok
}

// Result is the outcome of a rewrite.
type Result uint8

const (
	// NoMatch: no pair matched any address the rewrite looks at; the packet is unchanged.
	NoMatch Result = iota
	// Rewritten: at least one address matched and at least one changed; the packet is
	// translated.
	Rewritten
	// Truncated: an address matched but the transport header whose checksum must follow is cut
	// short (a malformed packet or a tiny first fragment); the packet is unchanged and should be
	// dropped.
	Truncated
	// BadQuote: the packet is an ICMP error whose quoted packet is malformed; the packet is
	// unchanged and should be dropped.
	BadQuote
	// Matched: an address matched only pairs that map a prefix onto itself (a peer network
	// that needs no remap); the packet is unchanged and passes.
	Matched
	// Unsupported: an address matched but the packet is of a form the NAT does not translate
	// (an IPv6 packet whose destination is rewritten while a Routing header has segments left,
	// or whose extension headers are more than packet.MaxIPv6ExtHeaders); the packet is
	// unchanged and should be dropped.
	Unsupported

	// NumResults sizes counter arrays indexed by Result.
	NumResults
)

func (r Result) String() string {
	switch r {
	case NoMatch:
		return "no-match"
	case Rewritten:
		return "rewritten"
	case Truncated:
		return "truncated"
	case BadQuote:
		return "bad-icmp-quote"
	case Matched:
		return "matched"
	case Unsupported:
		return "unsupported"
	}
	return fmt.Sprintf("Result(%d)", uint8(r))
}

// Header offsets of the IPv4 source and destination addresses.
const (
	offSrc = 12
	offDst = 16
)

// RewriteDst translates the destination of ip (and, in ICMP errors, the quoted packet's source).
// This is the direction into the tunnel: dst 10.71.2.7 -> 10.244.2.7.
func (m *PrefixMap) RewriteDst(ip packet.IPv4) Result { return m.rewrite(ip, offDst, offSrc) }

// RewriteSrc translates the source of ip (and, in ICMP errors, the quoted packet's destination).
// This is the direction out of the tunnel: src 10.244.1.5 -> 10.72.1.5.
func (m *PrefixMap) RewriteSrc(ip packet.IPv4) Result { return m.rewrite(ip, offSrc, offDst) }

// rewrite maps the outer address at offset outer and, in ICMP errors, the quoted packet's
// address at offset quoted. It checks everything it needs before changing any byte, so a
// packet it refuses is left as it was.
func (m *PrefixMap) rewrite(ip packet.IPv4, outer, quoted int) Result {
	oldOuter := [4]byte(ip[outer : outer+4])
	newOuter, outerMatched, outerChanges := m.map4(oldOuter)

	if ip.FragmentOffset() != 0 {
		// A later fragment: no transport header here, only the IP header to rewrite.
		if !outerMatched {
			return NoMatch
		}
		if outerChanges {
			setAddr(ip, outer, newOuter)
		}
		return changed(outerChanges)
	}

	l4 := ip.Payload()
	switch ip.Protocol() {
	case packet.ProtoTCP:
		if !outerMatched {
			return NoMatch
		}
		if len(l4) < packet.TCPChecksumOffset+2 {
			return Truncated
		}
		if outerChanges {
			d := packet.Delta4(oldOuter, newOuter)
			c := binary.BigEndian.Uint16(l4[packet.TCPChecksumOffset:])
			binary.BigEndian.PutUint16(l4[packet.TCPChecksumOffset:], packet.ApplyDelta(c, d))
			setAddrDelta(ip, outer, newOuter, d)
		}
		return changed(outerChanges)
	case packet.ProtoUDP:
		if !outerMatched {
			return NoMatch
		}
		if len(l4) < packet.UDPHeaderLen {
			return Truncated
		}
		if outerChanges {
			d := packet.Delta4(oldOuter, newOuter)
			if c := binary.BigEndian.Uint16(l4[packet.UDPChecksumOffset:]); c != 0 {
				if c = packet.ApplyDelta(c, d); c == 0 {
					c = 0xffff
				}
				binary.BigEndian.PutUint16(l4[packet.UDPChecksumOffset:], c)
			}
			setAddrDelta(ip, outer, newOuter, d)
		}
		return changed(outerChanges)
	case packet.ProtoICMP:
		return m.rewriteICMP(ip, l4, outer, quoted, oldOuter, newOuter, outerMatched, outerChanges)
	default:
		// Other protocols (SCTP, GRE, ESP, ...) carry no checksum over IP addresses.
		if !outerMatched {
			return NoMatch
		}
		if outerChanges {
			setAddr(ip, outer, newOuter)
		}
		return changed(outerChanges)
	}
}

// changed is the result of a rewrite in which a pair matched: Rewritten when an address
// changed, Matched when only identity pairs matched.
func changed(c bool) Result {
	if c {
		return Rewritten
	}
	return Matched
}

func (m *PrefixMap) rewriteICMP(ip packet.IPv4, l4 []byte, outer, quoted int, oldOuter, newOuter [4]byte, outerMatched, outerChanges bool) Result {
	if len(l4) < packet.ICMPHeaderLen {
		if outerMatched {
			return Truncated
		}
		return NoMatch
	}
	msg := packet.ICMPv4(l4)
	if !msg.IsError() {
		// Echo and the rest: the ICMP checksum covers no IP address.
		if !outerMatched {
			return NoMatch
		}
		if outerChanges {
			setAddr(ip, outer, newOuter)
		}
		return changed(outerChanges)
	}

	// An error quoting the packet it is about. That packet travelled the other way, so the
	// address to translate in it is the opposite one: quoted source for an outer destination.
	q, err := packet.ParseIPv4Header(msg.Payload())
	if err != nil {
		return BadQuote
	}
	oldQuoted := [4]byte(q[quoted : quoted+4])
	newQuoted, quotedMatched, quotedChanges := m.map4(oldQuoted)
	if !outerMatched && !quotedMatched {
		return NoMatch
	}
	if outerMatched && !quotedMatched {
		// An error from the mapped side about a packet that never went there: a host of the
		// peer forging "port unreachable" or "fragmentation needed" about another flow of a
		// local pod (its DNS to the cluster's resolver, its traffic to the internet).
		return BadQuote
	}

	if quotedChanges {
		// Everything in the quote lies inside the ICMP message at even offsets (the quote starts
		// at offset 8 and its fields are 16-bit aligned), so each change adjusts the ICMP
		// checksum word for word.
		icmpSum := msg.Checksum()
		oldQSum := q.Checksum()
		newQSum := packet.UpdateChecksum4(oldQSum, oldQuoted, newQuoted)
		icmpSum = packet.UpdateChecksum4(icmpSum, oldQuoted, newQuoted)
		icmpSum = packet.UpdateChecksum2(icmpSum, oldQSum, newQSum)

		if q.FragmentOffset() == 0 {
			qhl := q.HeaderLen()
			switch q.Protocol() {
			case packet.ProtoTCP:
				if len(q) >= qhl+packet.TCPChecksumOffset+2 {
					icmpSum = fixQuotedL4(q[qhl:], packet.TCPChecksumOffset, false, oldQuoted, newQuoted, icmpSum)
				}
			case packet.ProtoUDP:
				if len(q) >= qhl+packet.UDPHeaderLen {
					icmpSum = fixQuotedL4(q[qhl:], packet.UDPChecksumOffset, true, oldQuoted, newQuoted, icmpSum)
				}
			}
		}
		copy(q[quoted:], newQuoted[:])
		q.SetChecksum(newQSum)
		msg.SetChecksum(icmpSum)
	}
	if outerChanges {
		setAddr(ip, outer, newOuter)
	}
	return changed(outerChanges || quotedChanges)
}

// setAddr writes a at offset off of the IPv4 header and updates the header checksum.
func setAddr(ip packet.IPv4, off int, a [4]byte) {
	setAddrDelta(ip, off, a, packet.Delta4([4]byte(ip[off:off+4]), a))
}

// setAddrDelta is setAddr with the checksum delta of the change already computed.
func setAddrDelta(ip packet.IPv4, off int, a [4]byte, d uint32) {
	ip.SetChecksum(packet.ApplyDelta(ip.Checksum(), d))
	copy(ip[off:off+4], a[:])
}

// fixL4 updates a TCP or UDP checksum at offset csumOff of l4 for an address in the
// pseudo-header changing from old to new. For UDP a zero checksum (none) stays zero and a
// computed zero is sent as 0xffff.
func fixL4(l4 []byte, csumOff int, udp bool, old, new [4]byte) {
	c := binary.BigEndian.Uint16(l4[csumOff:])
	if udp && c == 0 {
		return
	}
	c = packet.UpdateChecksum4(c, old, new)
	if udp && c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(l4[csumOff:], c)
}

// fixQuotedL4 is fixL4 for the transport header inside an ICMP error's quote; it returns the
// ICMP checksum updated for the quoted checksum's change.
func fixQuotedL4(l4 []byte, csumOff int, udp bool, old, new [4]byte, icmpSum uint16) uint16 {
	before := binary.BigEndian.Uint16(l4[csumOff:])
	fixL4(l4, csumOff, udp, old, new)
	after := binary.BigEndian.Uint16(l4[csumOff:])
	return packet.UpdateChecksum2(icmpSum, before, after)
}
