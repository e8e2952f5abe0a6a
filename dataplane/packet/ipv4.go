package packet

import (
	"encoding/binary"
	"net/netip"
)

// IP protocol numbers the dataplane handles.
const (
	ProtoICMP   = 1
	ProtoTCP    = 6
	ProtoUDP    = 17
	ProtoICMPv6 = 58
)

// IPv4 field offsets and sizes.
const (
	IPv4MinHeaderLen = 20
	IPv4MaxHeaderLen = 60

	ipv4TotalLen = 2
	ipv4ID       = 4
	ipv4Frag     = 6
	ipv4TTL      = 8
	ipv4Proto    = 9
	ipv4Checksum = 10
	ipv4Src      = 12
	ipv4Dst      = 16

	ipv4FlagDF       = 0x4000
	ipv4FlagMF       = 0x2000
	ipv4OffsetMask   = 0x1fff
	ipv4OffsetFactor = 8
)

// IPv4 is a view of an IPv4 packet (header and payload). Obtain one from ParseIPv4; after
// that, the fixed header and options are in range and Payload is the transport part.
type IPv4 []byte

// ParseIPv4 validates b as an IPv4 packet: version 4, a header length of 20-60 bytes within the
// packet, a total length covering the header and within b, and a header checksum that verifies.
// It returns the view trimmed to the total length (dropping link-layer padding).
func ParseIPv4(b []byte) (IPv4, error) {
	if len(b) < IPv4MinHeaderLen {
		return nil, ErrTruncated
	}
	if b[0]>>4 != 4 {
		return nil, ErrVersion
	}
	hl := int(b[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(b[ipv4TotalLen:]))
	if hl < IPv4MinHeaderLen || hl > total {
		return nil, ErrHeaderLength
	}
	if total > len(b) {
		return nil, ErrTruncated
	}
	if Fold(Sum(b[:hl], 0)) != 0xffff {
		return nil, ErrChecksum
	}
	return IPv4(b[:total]), nil
}

// HeaderLen is the header length in bytes, options included.
func (p IPv4) HeaderLen() int { return int(p[0]&0x0f) * 4 }

// TotalLen is the total length field.
func (p IPv4) TotalLen() int { return int(binary.BigEndian.Uint16(p[ipv4TotalLen:])) }

// Header is the IP header with its options.
func (p IPv4) Header() []byte { return p[:p.HeaderLen()] }

// Payload is the transport part: after the header, up to the total length.
func (p IPv4) Payload() []byte { return p[p.HeaderLen():] }

// TOS is the type-of-service byte (DSCP and ECN).
func (p IPv4) TOS() uint8 { return p[1] }

// ID is the identification field.
func (p IPv4) ID() uint16 { return binary.BigEndian.Uint16(p[ipv4ID:]) }

// DontFragment reports the DF flag.
func (p IPv4) DontFragment() bool { return binary.BigEndian.Uint16(p[ipv4Frag:])&ipv4FlagDF != 0 }

// MoreFragments reports the MF flag.
func (p IPv4) MoreFragments() bool { return binary.BigEndian.Uint16(p[ipv4Frag:])&ipv4FlagMF != 0 }

// FragmentOffset is the fragment offset in bytes.
func (p IPv4) FragmentOffset() int {
	return int(binary.BigEndian.Uint16(p[ipv4Frag:])&ipv4OffsetMask) * ipv4OffsetFactor
}

// IsFragment reports whether the packet is any fragment of a larger datagram.
func (p IPv4) IsFragment() bool {
	return binary.BigEndian.Uint16(p[ipv4Frag:])&(ipv4FlagMF|ipv4OffsetMask) != 0
}

// TTL is the time-to-live.
func (p IPv4) TTL() uint8 { return p[ipv4TTL] }

// Protocol is the transport protocol number.
func (p IPv4) Protocol() uint8 { return p[ipv4Proto] }

// Checksum is the header checksum field.
func (p IPv4) Checksum() uint16 { return binary.BigEndian.Uint16(p[ipv4Checksum:]) }

// SetChecksum writes the header checksum field.
func (p IPv4) SetChecksum(c uint16) { binary.BigEndian.PutUint16(p[ipv4Checksum:], c) }

// Src is the source address.
func (p IPv4) Src() [4]byte { return [4]byte(p[ipv4Src : ipv4Src+4]) }

// Dst is the destination address.
func (p IPv4) Dst() [4]byte { return [4]byte(p[ipv4Dst : ipv4Dst+4]) }

// SrcAddr is the source address as a netip.Addr.
func (p IPv4) SrcAddr() netip.Addr { return netip.AddrFrom4(p.Src()) }

// DstAddr is the destination address as a netip.Addr.
func (p IPv4) DstAddr() netip.Addr { return netip.AddrFrom4(p.Dst()) }

// SetSrc rewrites the source address and updates the header checksum incrementally. Transport
// checksums covering the pseudo-header are the caller's business.
func (p IPv4) SetSrc(a [4]byte) {
	p.SetChecksum(UpdateChecksum4(p.Checksum(), p.Src(), a))
	copy(p[ipv4Src:], a[:])
}

// SetDst rewrites the destination address and updates the header checksum incrementally.
func (p IPv4) SetDst(a [4]byte) {
	p.SetChecksum(UpdateChecksum4(p.Checksum(), p.Dst(), a))
	copy(p[ipv4Dst:], a[:])
}

// DecTTL decrements the TTL by one and updates the header checksum incrementally. The caller
// checks for TTL <= 1 first (time exceeded).
func (p IPv4) DecTTL() {
	old := binary.BigEndian.Uint16(p[ipv4TTL:])
	p[ipv4TTL]--
	p.SetChecksum(UpdateChecksum2(p.Checksum(), old, binary.BigEndian.Uint16(p[ipv4TTL:])))
}

// ComputeChecksum recomputes the header checksum from scratch (for packets the dataplane builds).
func (p IPv4) ComputeChecksum() {
	p.SetChecksum(0)
	p.SetChecksum(Checksum(p.Header()))
}

// IPv4Fields describe a header for PutIPv4.
type IPv4Fields struct {
	TOS      uint8
	ID       uint16
	DF       bool
	TTL      uint8
	Protocol uint8
	Src, Dst [4]byte
}

// PutIPv4 writes a 20-byte IPv4 header with total length total into b[:20] and computes its
// checksum. b must hold at least 20 bytes.
func PutIPv4(b []byte, f IPv4Fields, total int) IPv4 {
	_ = b[IPv4MinHeaderLen-1]
	b[0] = 0x45
	b[1] = f.TOS
	binary.BigEndian.PutUint16(b[ipv4TotalLen:], uint16(total))
	binary.BigEndian.PutUint16(b[ipv4ID:], f.ID)
	var frag uint16
	if f.DF {
		frag = ipv4FlagDF
	}
	binary.BigEndian.PutUint16(b[ipv4Frag:], frag)
	b[ipv4TTL] = f.TTL
	b[ipv4Proto] = f.Protocol
	copy(b[ipv4Src:], f.Src[:])
	copy(b[ipv4Dst:], f.Dst[:])
	p := IPv4(b[:IPv4MinHeaderLen])
	p.ComputeChecksum()
	return p
}

// ParseIPv4Header validates b as the start of an IPv4 packet whose body may be cut short, as the
// copy embedded in an ICMP error is: version 4 and a header length of 20-60 bytes within b. The
// total length field is not checked against b. The header checksum is not checked either
// (routers that truncate may also have changed TTL).
func ParseIPv4Header(b []byte) (IPv4, error) {
	if len(b) < IPv4MinHeaderLen {
		return nil, ErrTruncated
	}
	if b[0]>>4 != 4 {
		return nil, ErrVersion
	}
	hl := int(b[0]&0x0f) * 4
	if hl < IPv4MinHeaderLen {
		return nil, ErrHeaderLength
	}
	if hl > len(b) {
		return nil, ErrTruncated
	}
	return IPv4(b), nil
}
