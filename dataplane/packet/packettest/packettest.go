// Package packettest builds packets for tests and checks their checksums with an
// implementation independent of package packet: a plain byte-at-a-time RFC 1071 sum.
//
// Builders return fresh slices with correct checksums; tests then mutate or feed them to the
// dataplane. Nothing here is meant for the per-packet path.
package packettest

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// sum is RFC 1071 written the obvious way, deliberately unlike packet.Sum.
func sum(parts ...[]byte) uint16 {
	var s uint32
	for _, b := range parts {
		for i := 0; i+1 < len(b); i += 2 {
			s += uint32(b[i])<<8 | uint32(b[i+1])
		}
		if len(b)%2 == 1 {
			s += uint32(b[len(b)-1]) << 8
		}
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

func pseudo(src, dst [4]byte, proto uint8, n int) []byte {
	p := make([]byte, 12)
	copy(p[0:], src[:])
	copy(p[4:], dst[:])
	p[9] = proto
	binary.BigEndian.PutUint16(p[10:], uint16(n))
	return p
}

// pseudo6 is the IPv6 pseudo-header (RFC 8200 section 8.1).
func pseudo6(src, dst [16]byte, proto uint8, n int) []byte {
	p := make([]byte, 40)
	copy(p[0:], src[:])
	copy(p[16:], dst[:])
	binary.BigEndian.PutUint32(p[32:], uint32(n))
	p[39] = proto
	return p
}

// pseudoFor is the pseudo-header for addresses written as strings: IPv6 when they are.
func pseudoFor(src, dst string, proto uint8, n int) []byte {
	s, d := netip.MustParseAddr(src), netip.MustParseAddr(dst)
	if s.Is6() != d.Is6() {
		panic(fmt.Sprintf("packettest: %s and %s are of different families", src, dst))
	}
	if s.Is6() {
		return pseudo6(s.As16(), d.As16(), proto, n)
	}
	return pseudo(s.As4(), d.As4(), proto, n)
}

// IPv6 describes an IPv6 packet to build.
type IPv6 struct {
	Src, Dst string // IPv6 addresses
	HopLimit uint8  // 64 if zero
	// Next is the payload's protocol when there are no extension headers.
	Next uint8
	// Ext are extension headers as ExtHeader, FragmentHeader and RoutingHeader make them:
	// complete, with their own kind in their first byte. Build chains them: the fixed header
	// names Ext[0]'s kind, each header the next one's, the last Proto.
	Ext [][]byte
	// Proto is the payload's protocol when there are extension headers.
	Proto        uint8
	TrafficClass uint8
	Payload      []byte
}

// Build returns the packet, its payload and extension headers copied as they are.
func (p IPv6) Build() []byte {
	next := p.Next
	var ext []byte
	for i, h := range p.Ext {
		if i == 0 {
			next = h[0]
		}
		h = append([]byte(nil), h...)
		if i+1 < len(p.Ext) {
			h[0] = p.Ext[i+1][0]
		} else {
			h[0] = p.Proto
		}
		ext = append(ext, h...)
	}
	b := make([]byte, 40+len(ext)+len(p.Payload))
	b[0] = 0x60 | p.TrafficClass>>4
	b[1] = p.TrafficClass << 4
	binary.BigEndian.PutUint16(b[4:], uint16(len(b)-40))
	b[6] = next
	b[7] = p.HopLimit
	if b[7] == 0 {
		b[7] = 64
	}
	src, dst := netip.MustParseAddr(p.Src).As16(), netip.MustParseAddr(p.Dst).As16()
	copy(b[8:], src[:])
	copy(b[24:], dst[:])
	copy(b[40:], ext)
	copy(b[40+len(ext):], p.Payload)
	return b
}

// ExtHeader is an IPv6 extension header of the given kind (Hop-by-Hop, Destination Options)
// with PadN over its n bytes (a multiple of 8, at least 8), for IPv6.Ext.
func ExtHeader(kind uint8, n int) []byte {
	h := make([]byte, n)
	h[0], h[1] = kind, byte(n/8-1)
	if n > 2 {
		h[2] = 1 // a PadN option over the rest
		h[3] = byte(n - 4)
	}
	return h
}

// FragmentHeader is an IPv6 Fragment header for the given byte offset (a multiple of 8), for
// IPv6.Ext.
func FragmentHeader(offset int, more bool, id uint32) []byte {
	h := make([]byte, 8)
	h[0] = 44
	v := uint16(offset)
	if more {
		v |= 1
	}
	binary.BigEndian.PutUint16(h[2:], v)
	binary.BigEndian.PutUint32(h[4:], id)
	return h
}

// RoutingHeader is a type-4 (segment routing) Routing header listing segs, with segmentsLeft,
// for IPv6.Ext.
func RoutingHeader(segmentsLeft uint8, segs ...string) []byte {
	h := make([]byte, 8+16*len(segs))
	h[0], h[1] = 43, byte(2*len(segs))
	h[2] = 4
	h[3] = segmentsLeft
	for i, s := range segs {
		a := netip.MustParseAddr(s).As16()
		copy(h[8+16*i:], a[:])
	}
	return h
}

// ICMPv6 builds an ICMPv6 message for src and dst: type, code, the 4 "rest of header" bytes,
// and a body, with its checksum over the pseudo-header.
func ICMPv6(src, dst string, typ, code uint8, rest [4]byte, body []byte) []byte {
	b := make([]byte, 8+len(body))
	b[0], b[1] = typ, code
	copy(b[4:], rest[:])
	copy(b[8:], body)
	binary.BigEndian.PutUint16(b[2:], ^sum(pseudoFor(src, dst, 58, len(b)), b))
	return b
}

// IPv4 describes a packet to build.
type IPv4 struct {
	Src, Dst string // dotted quads
	TTL      uint8  // 64 if zero
	Proto    uint8
	ID       uint16
	DF       bool
	MF       bool
	FragOff  int    // in bytes, a multiple of 8
	Options  []byte // padded to a multiple of 4 with zeros
	TOS      uint8
	Payload  []byte
}

func addr4(s string) [4]byte {
	a := netip.MustParseAddr(s)
	if !a.Is4() {
		panic(fmt.Sprintf("packettest: %s is not IPv4", s))
	}
	return a.As4()
}

// Build returns the packet with a correct header checksum. The payload is copied as is.
func (p IPv4) Build() []byte {
	opts := append([]byte(nil), p.Options...)
	for len(opts)%4 != 0 {
		opts = append(opts, 0)
	}
	hl := 20 + len(opts)
	b := make([]byte, hl+len(p.Payload))
	b[0] = 0x40 | byte(hl/4)
	b[1] = p.TOS
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	binary.BigEndian.PutUint16(b[4:], p.ID)
	frag := uint16(p.FragOff / 8)
	if p.DF {
		frag |= 0x4000
	}
	if p.MF {
		frag |= 0x2000
	}
	binary.BigEndian.PutUint16(b[6:], frag)
	b[8] = p.TTL
	if b[8] == 0 {
		b[8] = 64
	}
	b[9] = p.Proto
	src, dst := addr4(p.Src), addr4(p.Dst)
	copy(b[12:], src[:])
	copy(b[16:], dst[:])
	copy(b[20:], opts)
	copy(b[hl:], p.Payload)
	binary.BigEndian.PutUint16(b[10:], ^sum(b[:hl]))
	return b
}

// TCP builds a TCP segment (header, options, data) with its checksum for src and dst (IPv4 or
// IPv6 addresses).
func TCP(src, dst string, sport, dport uint16, flags uint8, options, data []byte) []byte {
	opts := append([]byte(nil), options...)
	for len(opts)%4 != 0 {
		opts = append(opts, 1) // NOP
	}
	hl := 20 + len(opts)
	b := make([]byte, hl+len(data))
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint32(b[4:], 0x01020304)
	binary.BigEndian.PutUint32(b[8:], 0x0a0b0c0d)
	b[12] = byte(hl/4) << 4
	b[13] = flags
	binary.BigEndian.PutUint16(b[14:], 65535)
	copy(b[20:], opts)
	copy(b[hl:], data)
	binary.BigEndian.PutUint16(b[16:], ^sum(pseudoFor(src, dst, 6, len(b)), b))
	return b
}

// UDP builds a UDP datagram with its checksum for src and dst (IPv4 or IPv6); zeroChecksum leaves it 0
// ("no checksum").
func UDP(src, dst string, sport, dport uint16, data []byte, zeroChecksum bool) []byte {
	b := make([]byte, 8+len(data))
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint16(b[4:], uint16(len(b)))
	copy(b[8:], data)
	if !zeroChecksum {
		c := ^sum(pseudoFor(src, dst, 17, len(b)), b)
		if c == 0 {
			c = 0xffff
		}
		binary.BigEndian.PutUint16(b[6:], c)
	}
	return b
}

// ICMP builds an ICMPv4 message: type, code, the 4 "rest of header" bytes, and a body.
func ICMP(typ, code uint8, rest [4]byte, body []byte) []byte {
	b := make([]byte, 8+len(body))
	b[0], b[1] = typ, code
	copy(b[4:], rest[:])
	copy(b[8:], body)
	binary.BigEndian.PutUint16(b[2:], ^sum(b))
	return b
}

// MSSOption is a TCP MSS option.
func MSSOption(mss uint16) []byte { return []byte{2, 4, byte(mss >> 8), byte(mss)} }

// Problem describes the first checksum of pkt (an IPv4 packet) that does not verify, or "" when
// all do: the IP header; for first fragments, the TCP or UDP checksum (when the whole segment is
// present and, for UDP, not zero) or the ICMP checksum; and, inside ICMP errors, the quoted
// header's checksum.
func Problem(pkt []byte) string {
	if len(pkt) < 20 || pkt[0]>>4 != 4 {
		return "not an IPv4 packet"
	}
	hl := int(pkt[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(pkt[2:]))
	if hl < 20 || total < hl || total > len(pkt) {
		return "bad IPv4 lengths"
	}
	if sum(pkt[:hl]) != 0xffff {
		return fmt.Sprintf("IPv4 header checksum %#04x does not verify", binary.BigEndian.Uint16(pkt[10:]))
	}
	if binary.BigEndian.Uint16(pkt[6:])&0x3fff != 0 {
		return "" // a fragment: its transport checksum covers bytes it does not hold
	}
	src, dst := [4]byte(pkt[12:16]), [4]byte(pkt[16:20])
	l4 := pkt[hl:total]
	switch pkt[9] {
	case 6:
		if len(l4) >= 20 && sum(pseudo(src, dst, 6, len(l4)), l4) != 0xffff {
			return "TCP checksum does not verify"
		}
	case 17:
		if len(l4) >= 8 && binary.BigEndian.Uint16(l4[6:]) != 0 && sum(pseudo(src, dst, 17, len(l4)), l4) != 0xffff {
			return "UDP checksum does not verify"
		}
	case 1:
		if len(l4) >= 8 && sum(l4) != 0xffff {
			return "ICMP checksum does not verify"
		}
		if len(l4) >= 28 && (l4[0] == 3 || l4[0] == 11 || l4[0] == 12) {
			inner := l4[8:]
			ihl := int(inner[0]&0x0f) * 4
			if inner[0]>>4 == 4 && ihl >= 20 && ihl <= len(inner) && sum(inner[:ihl]) != 0xffff {
				return "quoted IPv4 header checksum does not verify"
			}
		}
	}
	return ""
}

// Problem6 is Problem for an IPv6 packet: the upper layer's checksum (TCP, UDP unless zero,
// ICMPv6) past the extension headers, with the Routing header's last segment as the final
// destination while segments are left; for ICMPv6 errors whose quote is whole, the quoted
// packet's too. Fragments are not checked.
func Problem6(pkt []byte) string {
	if len(pkt) < 40 || pkt[0]>>4 != 6 {
		return "not an IPv6 packet"
	}
	if 40+int(binary.BigEndian.Uint16(pkt[4:])) != len(pkt) {
		return "IPv6 payload length does not match the packet"
	}
	return problem6(pkt, "")
}

func problem6(pkt []byte, what string) string {
	src, dst := [16]byte(pkt[8:24]), [16]byte(pkt[24:40])
	next, off := pkt[6], 40
	for {
		switch next {
		case 0, 60, 43:
			if off+8 > len(pkt) {
				return what + "extension header cut short"
			}
			n := (int(pkt[off+1]) + 1) * 8
			if off+n > len(pkt) {
				return what + "extension header cut short"
			}
			if next == 43 && pkt[off+3] != 0 && n >= 24 {
				dst = [16]byte(pkt[off+n-16 : off+n])
			}
			next, off = pkt[off], off+n
			continue
		case 44:
			return ""
		}
		break
	}
	l4 := pkt[off:]
	switch next {
	case 6:
		if len(l4) >= 20 && sum(pseudo6(src, dst, 6, len(l4)), l4) != 0xffff {
			return what + "TCP checksum does not verify"
		}
	case 17:
		if len(l4) >= 8 && binary.BigEndian.Uint16(l4[6:]) != 0 && sum(pseudo6(src, dst, 17, len(l4)), l4) != 0xffff {
			return what + "UDP checksum does not verify"
		}
	case 58:
		if len(l4) >= 8 && sum(pseudo6(src, dst, 58, len(l4)), l4) != 0xffff {
			return what + "ICMPv6 checksum does not verify"
		}
		if what == "" && len(l4) >= 48 && l4[0] < 128 {
			inner := l4[8:]
			if inner[0]>>4 == 6 && 40+int(binary.BigEndian.Uint16(inner[4:])) == len(inner) {
				return problem6(inner, "quoted ")
			}
		}
	}
	return ""
}
