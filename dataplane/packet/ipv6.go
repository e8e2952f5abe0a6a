package packet

import (
	"encoding/binary"
	"net/netip"
)

// IPv6HeaderLen is the fixed IPv6 header length.
const IPv6HeaderLen = 40

// IPv6 is a view of an IPv6 packet. The dataplane forwards IPv4 today; this view keeps the
// packet and address types ready for IPv6 (addresses are 16 bytes throughout).
type IPv6 []byte

// ParseIPv6 validates b as an IPv6 packet: version 6 and a payload length within b. It returns
// the view trimmed to header plus payload length.
func ParseIPv6(b []byte) (IPv6, error) {
	if len(b) < IPv6HeaderLen {
		return nil, ErrTruncated
	}
	if b[0]>>4 != 6 {
		return nil, ErrVersion
	}
	n := IPv6HeaderLen + int(binary.BigEndian.Uint16(b[4:]))
	if n > len(b) {
		return nil, ErrTruncated
	}
	return IPv6(b[:n]), nil
}

// NextHeader is the next-header field.
func (p IPv6) NextHeader() uint8 { return p[6] }

// HopLimit is the hop limit.
func (p IPv6) HopLimit() uint8 { return p[7] }

// Src is the source address.
func (p IPv6) Src() [16]byte { return [16]byte(p[8:24]) }

// Dst is the destination address.
func (p IPv6) Dst() [16]byte { return [16]byte(p[24:40]) }

// SrcAddr is the source address as a netip.Addr.
func (p IPv6) SrcAddr() netip.Addr { return netip.AddrFrom16(p.Src()) }

// DstAddr is the destination address as a netip.Addr.
func (p IPv6) DstAddr() netip.Addr { return netip.AddrFrom16(p.Dst()) }

// Payload is everything after the fixed header.
func (p IPv6) Payload() []byte { return p[IPv6HeaderLen:] }
