package route

import (
	"cmp"
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"slices"
)

// addr128 is an IPv6 address (or mask) as two big-endian halves.
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

// ipv6Table is the IPv6 half of a Table: one hash table per prefix length present, longest
// first. A lookup probes them in turn with dst masked to each length; a gateway's table has few
// lengths (a pod /128, a node's /64, a cluster's /56 or /48), so it is a few probes of one
// cache line each.
type ipv6Table struct {
	lengths []ipv6Length
}

// ipv6Length holds the routes of one prefix length.
type ipv6Length struct {
	mask addr128
	hops flatHash
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
	for start := 0; start < len(routes); {
		end := start + 1
		for end < len(routes) && routes[end].bits == routes[start].bits {
			end++
		}
		t.lengths = append(t.lengths, ipv6Length{mask: mask128(routes[start].bits), hops: newFlatHash(routes[start:end])})
		start = end
	}
	return t
}

// lookup probes each prefix length, longest first, for dst's masked address.
func (t *ipv6Table) lookup(dst addr128) (hop uint32, ok bool) {
	for i := range t.lengths {
		l := &t.lengths[i]
		if hop, ok := l.hops.get(dst.and(l.mask)); ok {
			return hop, true
		}
	}
	return 0, false
}

// flatHash maps the addresses of one prefix length to their next hops: open addressing with
// linear probing in a power-of-two array at most three quarters full (half full or less for
// most sizes), so a miss ends at an empty slot after a few probes. It replaces a Go map, whose generic hashing of a 16-byte key cost more
// than the rest of a lookup. The hash is a multiply-xor-shift with a multiplier drawn at build
// time: the keys are routes (pod addresses among them), and a fixed hash would let whoever can
// pick many of them line them up in one run of slots.
type flatHash struct {
	slots []flatSlot
	seed  uint64
	shift uint // 64 - log2(len(slots))
}

// flatSlot is one entry (24 bytes).
type flatSlot struct {
	key  addr128
	hop  uint32
	used bool
}

func newFlatHash(routes []route6) flatHash {
	n := 2
	for n < len(routes)+len(routes)/3+1 { // at most three quarters full
		n *= 2
	}
	h := flatHash{slots: make([]flatSlot, n), seed: rand.Uint64() | 1, shift: uint(64 - bits.TrailingZeros(uint(n)))}
	for _, r := range routes {
		i := h.index(r.addr)
		for h.slots[i].used {
			i = (i + 1) & (n - 1)
		}
		h.slots[i] = flatSlot{key: r.addr, hop: r.hop, used: true}
	}
	return h
}

func (h *flatHash) index(k addr128) int {
	x := (k.hi ^ bits.RotateLeft64(k.lo, 29)) * h.seed
	return int((x ^ x>>32) >> h.shift)
}

func (h *flatHash) get(k addr128) (uint32, bool) {
	mask := len(h.slots) - 1
	for i := h.index(k); ; i = (i + 1) & mask {
		s := &h.slots[i]
		if !s.used {
			return 0, false
		}
		if s.key == k {
			return s.hop, true
		}
	}
}
