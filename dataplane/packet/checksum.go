package packet

import (
	"encoding/binary"
	"math/bits"
)

// Sum adds b to a running one's complement sum (RFC 1071) and returns the new, unfolded sum.
// Bytes are taken as big-endian 16-bit words; an odd final byte is padded with zero. Chain calls
// only on even-length pieces (all but the last), as the pseudo-header and headers are.
//
// It adds 64-bit words with end-around carry: 2^64-1 is a multiple of 2^16-1, so Fold of the
// result equals the 16-bit one's complement sum.
func Sum(b []byte, initial uint64) uint64 {
	s, carry := initial, uint64(0)
	var c uint64
	for len(b) >= 32 {
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b), 0)
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b[8:]), c)
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b[16:]), c)
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b[24:]), c)
		carry += c
		b = b[32:]
	}
	for len(b) >= 8 {
		s, c = bits.Add64(s, binary.BigEndian.Uint64(b), 0)
		carry += c
		b = b[8:]
	}
	var tail uint64
	if len(b) >= 4 {
		tail += uint64(binary.BigEndian.Uint32(b))
		b = b[4:]
	}
	if len(b) >= 2 {
		tail += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		tail += uint64(b[0]) << 8
	}
	s, c = bits.Add64(s, tail, 0)
	carry += c
	s, c = bits.Add64(s, carry, 0)
	return s + c // no further carry: s is now below carry, a small number
}

// Fold folds a running sum to 16 bits with end-around carry. The result is the one's complement
// sum; the checksum field holds its complement.
func Fold(s uint64) uint16 {
	s = (s & 0xffffffff) + (s >> 32)
	s = (s & 0xffffffff) + (s >> 32)
	s = (s & 0xffff) + (s >> 16)
	s = (s & 0xffff) + (s >> 16)
	s = (s & 0xffff) + (s >> 16)
	return uint16(s)
}

// Checksum returns the Internet checksum of b: the complement of its folded sum.
func Checksum(b []byte) uint16 { return ^Fold(Sum(b, 0)) }

// PseudoSum4 is the running sum of the IPv4 pseudo-header for TCP and UDP (RFC 793, RFC 768).
func PseudoSum4(src, dst [4]byte, proto uint8, length int) uint64 {
	return uint64(binary.BigEndian.Uint16(src[:])) + uint64(binary.BigEndian.Uint16(src[2:])) +
		uint64(binary.BigEndian.Uint16(dst[:])) + uint64(binary.BigEndian.Uint16(dst[2:])) +
		uint64(proto) + uint64(length)
}

// UpdateChecksum4 returns checksum field hc updated for a change of 4 bytes (two aligned 16-bit
// words, such as an IPv4 address) from old to new, by RFC 1624 equation 3:
// HC' = ~(~HC + ~m + m'). It never produces 0xffff from a correct checksum, so the result equals
// a full recomputation bit for bit.
func UpdateChecksum4(hc uint16, old, new [4]byte) uint16 {
	return ApplyDelta(hc, Delta4(old, new))
}

// Delta4 is the ~m + m' term of RFC 1624 equation 3 for 4 bytes changing from old to new, kept
// unfolded. When one address change updates several checksums (IPv4 header, TCP or UDP), compute
// it once and apply it to each with ApplyDelta.
func Delta4(old, new [4]byte) uint32 {
	return uint32(^binary.BigEndian.Uint16(old[:])) + uint32(^binary.BigEndian.Uint16(old[2:])) +
		uint32(binary.BigEndian.Uint16(new[:])) + uint32(binary.BigEndian.Uint16(new[2:]))
}

// ApplyDelta returns checksum field hc updated by a Delta4 term; ApplyDelta(hc, Delta4(o, n))
// is UpdateChecksum4(hc, o, n).
func ApplyDelta(hc uint16, d uint32) uint16 {
	s := uint32(^hc) + d
	s = (s & 0xffff) + (s >> 16)
	s = (s & 0xffff) + (s >> 16)
	return ^uint16(s)
}

// UpdateChecksum2 returns checksum field hc updated for one aligned 16-bit word changing from
// old to new (RFC 1624 equation 3).
func UpdateChecksum2(hc, old, new uint16) uint16 {
	s := uint32(^hc) + uint32(^old) + uint32(new)
	s = (s & 0xffff) + (s >> 16)
	s = (s & 0xffff) + (s >> 16)
	return ^uint16(s)
}

// TransportChecksum computes in full the TCP or UDP checksum of l4, the payload of ip (the
// pseudo-header from ip's addresses and protocol), with l4's checksum field zero.
func TransportChecksum(ip IPv4, l4 []byte) uint16 {
	return ^Fold(Sum(l4, PseudoSum4(ip.Src(), ip.Dst(), ip.Protocol(), len(l4))))
}

// CompleteTransportChecksum recomputes in full the TCP or UDP checksum of an unfragmented
// packet: one sent with checksum offload carries only the pseudo-header's sum there. A UDP
// checksum of 0 ("none") stays 0; fragments, other protocols and headers too short to hold a
// checksum are left alone.
func CompleteTransportChecksum(ip IPv4) {
	if ip.IsFragment() {
		return
	}
	l4 := ip.Payload()
	var off int
	switch ip.Protocol() {
	case ProtoTCP:
		if len(l4) < TCPMinHeaderLen {
			return
		}
		off = TCPChecksumOffset
	case ProtoUDP:
		if len(l4) < UDPHeaderLen || l4[6]|l4[7] == 0 {
			return
		}
		off = UDPChecksumOffset
	default:
		return
	}
	l4[off], l4[off+1] = 0, 0
	c := TransportChecksum(ip, l4)
	if c == 0 && ip.Protocol() == ProtoUDP {
		c = 0xffff
	}
	l4[off], l4[off+1] = byte(c>>8), byte(c)
}

// CompleteTransportChecksum6 is CompleteTransportChecksum for IPv6: the TCP or UDP checksum
// past any extension headers, over the IPv6 pseudo-header. A fragment, a packet whose Routing
// header has segments left (the checksum covers a final destination that is not in the fixed
// header), other protocols and headers too short to hold a checksum are left alone. UDP over
// IPv6 always has a checksum, so a zero one is completed too.
func CompleteTransportChecksum6(ip IPv6) {
	up := IPv6Upper{Proto: ip.NextHeader(), Offset: IPv6HeaderLen}
	if up.Proto != ProtoTCP && up.Proto != ProtoUDP {
		var err error
		if up, err = ip.Upper(); err != nil || up.Fragmented || up.SegmentsLeft != 0 {
			return
		}
	}
	l4 := ip[up.Offset:]
	var off int
	switch up.Proto {
	case ProtoTCP:
		if len(l4) < TCPMinHeaderLen {
			return
		}
		off = TCPChecksumOffset
	case ProtoUDP:
		if len(l4) < UDPHeaderLen {
			return
		}
		off = UDPChecksumOffset
	default:
		return
	}
	l4[off], l4[off+1] = 0, 0
	c := ^Fold(Sum(l4, PseudoSum6(ip.Src(), ip.Dst(), up.Proto, len(l4))))
	if c == 0 && up.Proto == ProtoUDP {
		c = 0xffff
	}
	l4[off], l4[off+1] = byte(c>>8), byte(c)
}
