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
	// direct are the listed routes (see maxFew) with no longer route inside them: a match is
	// final whatever the longer lengths hold, so lookup tries them before probing those
	// (into the tunnel a packet is for the peer's network, a short listed prefix, behind a
	// hashed /128 of every local pod and a /64 of every node: two misses saved). They never
	// nest, so at most one matches.
	direct  []directRoute
	lengths []ipv6Length
}

// directRoute is a route of ipv6Table.direct.
type directRoute struct {
	mask, key addr128
	hop       uint32
}

// ipv6Length holds the routes of one prefix length: up to maxFew in few, compared one by one
// (a gateway's own /128s, its peer's one or two networks: no hash to compute), more in hops.
type ipv6Length struct {
	mask addr128
	few  []flatSlot
	hops flatHash
}

// maxFew is the most routes of one length kept in a list rather than hashed: comparing four
// keys costs less than hashing one.
const maxFew = 4

// route6 is an IPv6 route with its address as an addr128.
type route6 struct {
	addr addr128
	bits int
	hop  uint32
}

func buildIPv6(routes []route6) ipv6Table {
	slices.SortFunc(routes, func(x, y route6) int { return cmp.Compare(y.bits, x.bits) })
	var t ipv6Table
	var listed []int // indexes in routes of the listed routes, longest first
	for start := 0; start < len(routes); {
		end := start + 1
		for end < len(routes) && routes[end].bits == routes[start].bits {
			end++
		}
		l := ipv6Length{mask: mask128(routes[start].bits)}
		if end-start <= maxFew {
			for i, r := range routes[start:end] {
				l.few = append(l.few, flatSlot{key: r.addr, hop: r.hop, used: true})
				listed = append(listed, start+i)
			}
		} else {
			l.hops = newFlatHash(routes[start:end])
		}
		t.lengths = append(t.lengths, l)
		start = end
	}
	// routes is sorted longest first: a listed route is direct unless a route before it (a
	// longer one) lies inside it. The shortest listed routes are tried (the peer's networks),
	// at most maxDirect of them: each costs a pass over the longer routes here and a compare
	// per lookup.
	for i := len(listed) - 1; i >= 0 && len(t.direct) < maxDirect; i-- {
		r := routes[listed[i]]
		m := mask128(r.bits)
		inside := false
		for _, longer := range routes[:listed[i]] {
			if longer.bits > r.bits && longer.addr.and(m) == r.addr {
				inside = true
				break
			}
		}
		if !inside {
			t.direct = append(t.direct, directRoute{mask: m, key: r.addr, hop: r.hop})
		}
	}
	return t
}

// maxDirect is the most direct routes a table keeps.
const maxDirect = 8

// lookup tries the direct routes, then probes each prefix length, longest first, for dst's
// masked address.
func (t *ipv6Table) lookup(dst addr128) (hop uint32, ok bool) {
	for i := range t.direct {
		if d := &t.direct[i]; dst.and(d.mask) == d.key {
			return d.hop, true
		}
	}
	for i := range t.lengths {
		l := &t.lengths[i]
		k := dst.and(l.mask)
		if l.few != nil {
			for j := range l.few {
				if l.few[j].key == k {
					return l.few[j].hop, true
				}
			}
			continue
		}
		if hop, ok := l.hops.get(k); ok {
			return hop, true
		}
	}
	return 0, false
}

// flatHash maps the addresses of one prefix length to their next hops: open addressing with
// linear probing in a power-of-two array at most three quarters full, so a miss ends at an
// empty slot after a few probes. It replaces a Go map, whose generic hashing of a 16-byte key
// cost more than the rest of a lookup. The keys are routes, pod addresses among them, which
// whoever runs many pods may partly choose; the lookups are packets' addresses, which anyone
// sending may choose. So the hash mixes both halves with multipliers drawn at build time and a
// finisher (nobody can line keys up without knowing them), and a table whose longest run of
// filled slots is still long (bad luck) is built again with other multipliers, or larger: a
// lookup never probes more than maxRunFor(len(slots)) slots.
type flatHash struct {
	slots  []flatSlot
	s1, s2 uint64
	shift  uint // 64 - log2(len(slots))
}

// flatSlot is one entry (24 bytes).
type flatSlot struct {
	key  addr128
	hop  uint32
	used bool
}

// maxRunFor is the longest run of filled slots a table of n slots may keep: 8 log2 n (104 for
// the 8,192 slots of 5,000 routes). With a random hash, linear probing at a load of 3/4 or less
// has a longest run of about ln n / (a - 1 - ln a) for load a: 84 at a load of 0.61 in 8,192
// slots, which 5,000 routes reached in 200 draws (BenchmarkLookup6's tables and
// TestFlatHashRuns); a longer run means the draw was unlucky or the keys were chosen.

func maxRunFor(n int) int { return 8 * (bits.Len(uint(n)) - 1) }

func newFlatHash(routes []route6) flatHash {
	n := 2
	for n < len(routes)+len(routes)/3+1 { // at most three quarters full
		n *= 2
	}
	for try := 0; ; try++ {
		if try > 0 && try%4 == 0 {
			n *= 2 // four unlucky draws: more room
		}
		h := fillFlatHash(routes, n, rand.Uint64()|1, rand.Uint64()|1)
		if h.longestRun() <= maxRunFor(n) || try == 15 {
			return h
		}
	}
}

// fillFlatHash builds the table of n slots (a power of two, more than len(routes)) with the
// multipliers s1 and s2 (odd).
func fillFlatHash(routes []route6, n int, s1, s2 uint64) flatHash {
	h := flatHash{slots: make([]flatSlot, n), s1: s1, s2: s2, shift: uint(64 - bits.TrailingZeros(uint(n)))}
	for _, r := range routes {
		i := h.index(r.addr)
		for h.slots[i].used {
			i = (i + 1) & (n - 1)
		}
		h.slots[i] = flatSlot{key: r.addr, hop: r.hop, used: true}
	}
	return h
}

// longestRun is the longest run of filled slots, wrapping around the end.
func (h *flatHash) longestRun() int {
	best, run := 0, 0
	for i := range 2 * len(h.slots) {
		if h.slots[i%len(h.slots)].used {
			run++
			best = max(best, run)
		} else {
			run = 0
		}
	}
	return min(best, len(h.slots))
}

func (h *flatHash) index(k addr128) int {
	x := k.hi*h.s1 ^ bits.RotateLeft64(k.lo*h.s2, 32)
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	return int(x >> h.shift)
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
