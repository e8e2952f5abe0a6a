package route

import (
	"cmp"
	"encoding/binary"
	"slices"
)

// addr128 is an IPv6 address (or mask) as two big-endian halves; it is a cheap map key.
type addr128 struct{ hi, lo uint64 }

func addr128From16(b [16]byte) addr128 {
	return addr128{hi: binary.BigEndian.Uint64(b[:8]), lo: binary.BigEndian.Uint64(b[8:])}
}

// mask128 returns the mask of a prefix of the given length (0 to 128). Go shifts of 64 or more
// yield 0, which covers the lengths where a half is all zeros.
func mask128(bits int) addr128 {
	return addr128{hi: ^uint64(0) << (64 - min(bits, 64)), lo: ^uint64(0) << (128 - max(bits, 64))}
}

func (a addr128) and(m addr128) addr128 { return addr128{a.hi & m.hi, a.lo & m.lo} }

// ipv6Table is the IPv6 half of a Table: one map per prefix length present, longest first.
type ipv6Table struct {
	lengths []ipv6Length
}

// ipv6Length holds the routes of one prefix length, keyed by their (masked) address.
type ipv6Length struct {
	mask addr128
	hops map[addr128]uint32
}

// route6 is an IPv6 route with its address as an addr128.
type route6 struct {
	addr addr128
	bits int
	hop  uint32
}

func buildIPv6(routes []route6) ipv6Table {
	slices.SortFunc(routes, func(x, y route6) int { return cmp.Compare(y.bits, x.bits) })
	var t ipv6Table
	for _, r := range routes {
		if n := len(t.lengths); n == 0 || t.lengths[n-1].mask != mask128(r.bits) {
			t.lengths = append(t.lengths, ipv6Length{mask: mask128(r.bits), hops: make(map[addr128]uint32)})
		}
		t.lengths[len(t.lengths)-1].hops[r.addr] = r.hop
	}
	return t
}

// lookup probes each prefix length, longest first, for dst's masked address.
func (t *ipv6Table) lookup(dst addr128) (hop uint32, ok bool) {
	for i := range t.lengths {
		l := &t.lengths[i]
		if hop, ok := l.hops[dst.and(l.mask)]; ok {
			return hop, true
		}
	}
	return 0, false
}
