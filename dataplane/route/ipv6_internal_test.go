package route

import (
	"math/bits"
	"math/rand/v2"
	"testing"
)

// runTestSets are route sets that clustered the first hash of this table: consecutive node
// /64s (whole runs of them landed in a few slots for some multipliers), consecutive pod /128s,
// and /128s built so that the old hash's unseeded first step (hi ^ rotl(lo, 29)) gave all of
// them one slot whatever the multiplier.
func runTestSets() map[string][]route6 {
	sets := map[string][]route6{}
	for i := range 5000 {
		node := addr128{hi: 0xfd00_0244_0000_0000 | uint64(i)}
		sets["5000 node /64s"] = append(sets["5000 node /64s"], route6{addr: node, bits: 64, hop: uint32(i)})
		pod := addr128{hi: 0xfd00_0244_0001_0000, lo: uint64(i)}
		sets["5000 pod /128s"] = append(sets["5000 pod /128s"], route6{addr: pod, bits: 128, hop: uint32(i)})
		const h = 0x0123456789abcdef
		hi := uint64(0xfd00_0244_0000_0000) | uint64(i)
		aimed := addr128{hi: hi, lo: bits.RotateLeft64(hi^h, -29)}
		sets["5000 /128s aimed at one slot"] = append(sets["5000 /128s aimed at one slot"], route6{addr: aimed, bits: 128, hop: uint32(i)})
	}
	return sets
}

// TestFlatHashRuns: for sets that clustered before, the hash itself keeps runs short for
// nearly every pair of multipliers (at most 1 draw in 100 over the bound), and a built table
// never keeps a run longer than maxRunFor (it is drawn again): a lookup, hit or miss, probes
// at most that many slots.
func TestFlatHashRuns(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for name, routes := range runTestSets() {
		n := 8192 // as newFlatHash sizes 5,000 routes
		bad, worst := 0, 0
		for range 200 {
			h := fillFlatHash(routes, n, r.Uint64()|1, r.Uint64()|1)
			run := h.longestRun()
			worst = max(worst, run)
			if run > maxRunFor(n) {
				bad++
			}
		}
		if bad > 2 {
			t.Errorf("%s: %d of 200 draws over %d filled slots in a run (worst %d)", name, bad, maxRunFor(n), worst)
		}
		for range 20 {
			h := newFlatHash(routes)
			if run := h.longestRun(); run > maxRunFor(len(h.slots)) {
				t.Errorf("%s: a built table keeps a run of %d slots, more than %d", name, run, maxRunFor(len(h.slots)))
			}
			for _, rt := range routes[:100] {
				if hop, ok := h.get(rt.addr); !ok || hop != rt.hop {
					t.Fatalf("%s: %v gives %d %v, want %d", name, rt.addr, hop, ok, rt.hop)
				}
			}
		}
		t.Logf("%s: worst run of 200 draws %d (bound %d)", name, worst, maxRunFor(n))
	}
}

// TestDirectRoutes: listed routes with nothing longer inside them are tried first, those with
// a longer route inside are not (a direct match would hide it), and lookups agree with the
// longest match either way.
func TestDirectRoutes(t *testing.T) {
	a := func(hi, lo uint64) addr128 { return addr128{hi: hi, lo: lo} }
	routes := []route6{
		{a(0xfd00_0000_0000_0000, 0), 48, 1},   // holds the /56 and the /64s below: not direct
		{a(0xfd00_0000_0000_0100, 0), 56, 2},   // nothing inside: direct
		{a(0xfd71_0000_0000_0000, 0), 56, 9},   // the peer's network: direct
		{a(0x0064_ff9b_0001_0000, 0), 96, 10},  // the gateways' overlay /96: direct
		{a(0x0064_ff9b_0001_0000, 5), 128, 11}, // a /128 inside it, hashed with the pods below
	}
	for i := range 6 { // hashed /64s inside the /48, outside the /56
		routes = append(routes, route6{a(0xfd00_0000_0000_0000|uint64(i), 0), 64, uint32(20 + i)})
	}
	for i := range 6 {
		routes = append(routes, route6{a(0xfd00_0244_0000_0000, uint64(i)), 128, uint32(40 + i)})
	}
	tbl := buildIPv6(append([]route6(nil), routes...))
	var direct []uint32
	for _, d := range tbl.direct {
		direct = append(direct, d.hop)
	}
	if len(direct) != 2 || !(direct[0] == 9 && direct[1] == 2 || direct[0] == 2 && direct[1] == 9) {
		t.Errorf("direct routes with hops %v, want the two /56s (2 and 9): the /48 and the /96 hold longer routes", direct)
	}
	ref := func(dst addr128) (uint32, bool) {
		best, hop := -1, uint32(0)
		for _, r := range routes {
			if dst.and(mask128(r.bits)) == r.addr && r.bits > best {
				best, hop = r.bits, r.hop
			}
		}
		return hop, best >= 0
	}
	for _, dst := range []addr128{
		a(0xfd00_0000_0000_0100, 7), a(0xfd71_0000_0000_00ff, 1), a(0xfd00_0000_0000_0003, 9), a(0xfd00_0000_0000_0200, 0),
		a(0x0064_ff9b_0001_0000, 5), a(0x0064_ff9b_0001_0000, 6), a(0xfd00_0244_0000_0000, 3), a(0xfe80, 0),
	} {
		hop, ok := tbl.lookup(dst)
		if wantHop, wantOK := ref(dst); hop != wantHop || ok != wantOK {
			t.Errorf("lookup(%x:%x) = %d, %v; want %d, %v", dst.hi, dst.lo, hop, ok, wantHop, wantOK)
		}
	}
}
