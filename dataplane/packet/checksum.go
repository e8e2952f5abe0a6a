package packet

import "encoding/binary"

// Sum adds b to a running one's complement sum (RFC 1071) and returns the new, unfolded sum.
// Bytes are taken as big-endian 16-bit words; an odd final byte is padded with zero. Chain calls
// only on even-length pieces (all but the last), as the pseudo-header and headers are.
func Sum(b []byte, initial uint64) uint64 {
	s := initial
	for len(b) >= 8 {
		s += uint64(binary.BigEndian.Uint32(b)) + uint64(binary.BigEndian.Uint32(b[4:]))
		b = b[8:]
	}
	if len(b) >= 4 {
		s += uint64(binary.BigEndian.Uint32(b))
		b = b[4:]
	}
	if len(b) >= 2 {
		s += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint64(b[0]) << 8
	}
	return s
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
