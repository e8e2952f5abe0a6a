package packet

import (
	"encoding/binary"
	"net/netip"
)

// IPv6HeaderLen is the fixed IPv6 header length.
const IPv6HeaderLen = 40

// IPv6 field offsets.
const (
	IPv6SrcOffset = 8
	IPv6DstOffset = 24
)

// IPv6 extension headers and other next-header values the dataplane walks or recognises
// (RFC 8200 section 4, RFC 7045).
const (
	ProtoHopByHop = 0
	ProtoRouting  = 43
	ProtoFragment = 44
	ProtoESP      = 50
	ProtoAH       = 51
	ProtoNoNext   = 59
	ProtoDestOpts = 60
	ProtoMobility = 135
	ProtoHIP      = 139
	ProtoShim6    = 140
)

// MaxIPv6ExtHeaders bounds the extension headers IPv6.Upper walks. RFC 8200 expects at most a
// handful (each kind once, destination options twice); a packet with more is refused rather than
// walked, so that a chain of tiny headers cannot make a lookup cost what its length allows.
const MaxIPv6ExtHeaders = 8

// IPv6 is a view of an IPv6 packet: the fixed header, then the extension headers and the
// upper-layer header that Upper finds.
type IPv6 []byte

// ParseIPv6 validates b as an IPv6 packet: version 6 and a payload length within b. It returns
// the view trimmed to header plus payload length. A payload length of 0 with a Hop-by-Hop
// header (a jumbogram, RFC 2675) is not supported: it is reported as ErrUnsupported.
func ParseIPv6(b []byte) (IPv6, error) {
	if len(b) < IPv6HeaderLen {
		return nil, ErrTruncated
	}
	if b[0]>>4 != 6 {
		return nil, ErrVersion
	}
	pl := int(binary.BigEndian.Uint16(b[4:]))
	if pl == 0 && b[6] == ProtoHopByHop {
		return nil, ErrUnsupported
	}
	n := IPv6HeaderLen + pl
	if n > len(b) {
		return nil, ErrTruncated
	}
	return IPv6(b[:n]), nil
}

// ParseIPv6Header validates only the fixed header of b (version 6, 40 bytes) and returns b as
// it is: for a packet quoted in an ICMPv6 error, which is cut short of the length it declares.
func ParseIPv6Header(b []byte) (IPv6, error) {
	if len(b) < IPv6HeaderLen {
		return nil, ErrTruncated
	}
	if b[0]>>4 != 6 {
		return nil, ErrVersion
	}
	return IPv6(b), nil
}

// PayloadLen is the payload length field: everything after the fixed header.
func (p IPv6) PayloadLen() int { return int(binary.BigEndian.Uint16(p[4:])) }

// NextHeader is the next-header field.
func (p IPv6) NextHeader() uint8 { return p[6] }

// HopLimit is the hop limit.
func (p IPv6) HopLimit() uint8 { return p[7] }

// SetHopLimit writes the hop limit (IPv6 has no header checksum to update).
func (p IPv6) SetHopLimit(h uint8) { p[7] = h }

// Src is the source address.
func (p IPv6) Src() [16]byte { return [16]byte(p[IPv6SrcOffset : IPv6SrcOffset+16]) }

// Dst is the destination address.
func (p IPv6) Dst() [16]byte { return [16]byte(p[IPv6DstOffset : IPv6DstOffset+16]) }

// SrcAddr is the source address as a netip.Addr.
func (p IPv6) SrcAddr() netip.Addr { return netip.AddrFrom16(p.Src()) }

// DstAddr is the destination address as a netip.Addr.
func (p IPv6) DstAddr() netip.Addr { return netip.AddrFrom16(p.Dst()) }

// Payload is everything after the fixed header.
func (p IPv6) Payload() []byte { return p[IPv6HeaderLen:] }

// IPv6Upper says where an IPv6 packet's upper-layer header is, past its extension headers.
type IPv6Upper struct {
	// Proto is the upper-layer protocol (ProtoTCP, ProtoUDP, ProtoICMPv6, ...): the first
	// next-header value that is not an extension header walked here. ESP and No Next Header
	// end the walk too: nothing after them can be read.
	Proto uint8
	// Offset is where that header starts, from the start of the packet. It may be len(p) (an
	// empty upper layer) but never more.
	Offset int
	// Fragmented is set when a Fragment header is present, and FragmentOffset is its offset in
	// bytes: a fragment other than the first carries no upper-layer header at Offset, only a
	// piece of one.
	Fragmented     bool
	FragmentOffset int
	// SegmentsLeft is the Routing header's segments left (0 without one): when it is not 0 the
	// destination address is not the final one, which the upper layer's checksum covers.
	SegmentsLeft uint8
}

// Upper walks p's extension headers (Hop-by-Hop, Routing, Fragment, Destination Options,
// Authentication, Mobility, HIP, Shim6) to the upper-layer header. It fails with ErrTruncated
// when a header runs past the end of p (which for a quoted packet may be shorter than it
// declares), and with ErrUnsupported past MaxIPv6ExtHeaders headers. It does not interpret
// options.
func (p IPv6) Upper() (IPv6Upper, error) {
	u := IPv6Upper{Proto: p.NextHeader(), Offset: IPv6HeaderLen}
	for range MaxIPv6ExtHeaders + 1 {
		var n int
		switch u.Proto {
		case ProtoHopByHop, ProtoRouting, ProtoDestOpts, ProtoMobility, ProtoHIP, ProtoShim6:
			if len(p) < u.Offset+8 {
				return u, ErrTruncated
			}
			n = (int(p[u.Offset+1]) + 1) * 8
			if u.Proto == ProtoRouting {
				u.SegmentsLeft = p[u.Offset+3]
			}
		case ProtoFragment:
			if len(p) < u.Offset+8 {
				return u, ErrTruncated
			}
			n = 8
			u.Fragmented = true
			u.FragmentOffset = int(binary.BigEndian.Uint16(p[u.Offset+2:]) &^ 7)
		case ProtoAH:
			if len(p) < u.Offset+8 {
				return u, ErrTruncated
			}
			n = (int(p[u.Offset+1]) + 2) * 4
		default:
			return u, nil
		}
		if len(p) < u.Offset+n {
			return u, ErrTruncated
		}
		next := p[u.Offset]
		u.Offset += n
		u.Proto = next
		if u.Fragmented && u.FragmentOffset != 0 {
			// A later fragment: what follows is the middle of the fragmentable part.
			return u, nil
		}
	}
	return u, ErrUnsupported
}

// PseudoSum6 is the running sum of the IPv6 pseudo-header (RFC 8200 section 8.1) for an upper
// layer of the given protocol and length.
func PseudoSum6(src, dst [16]byte, proto uint8, length int) uint64 {
	return Sum(dst[:], Sum(src[:], 0)) + uint64(proto) + uint64(length)
}

// Delta16 is Delta4 for 16 bytes (an IPv6 address): the ~m + m' term of RFC 1624 equation 3,
// kept unfolded, for ApplyDelta. It is 0 modulo 0xffff when old and new have the same one's
// complement sum: then no checksum over them changes.
func Delta16(old, new [16]byte) uint32 {
	var d uint32
	for i := 0; i < 16; i += 2 {
		d += uint32(^binary.BigEndian.Uint16(old[i:])) + uint32(binary.BigEndian.Uint16(new[i:]))
	}
	return d
}

// UpdateChecksum16 returns checksum field hc updated for 16 bytes (an IPv6 address) changing
// from old to new.
func UpdateChecksum16(hc uint16, old, new [16]byte) uint16 {
	return ApplyDelta(hc, Delta16(old, new))
}
