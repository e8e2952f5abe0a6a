// Package ipam decides how this cluster sees a peer's CIDRs: as they are when they clash with
// nothing in use here (NAT-less), otherwise as a free prefix of the same length from the remap
// pools of the same family. It is an in-memory table, rebuilt from the API (Restore) when the
// controller starts; the controller serialises Assign calls, so two peers never get the same
// prefix. An IPv6 remap is checksum-neutral where the pool allows it (see Assign).
package ipam

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/skein-net/skein/dataplane/nat"
)

// DefaultPools are the remap pools.
var DefaultPools = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
}

// DefaultPools6 are the IPv6 remap pools: the unique local addresses (RFC 4193).
var DefaultPools6 = []netip.Prefix{netip.MustParsePrefix("fd00::/8")}

// ErrExhausted means no prefix of the wanted length is free in any pool.
var ErrExhausted = errors.New("no free prefix of that length in the remap pools")

// Allocator holds what is in use.
type Allocator struct {
	mu       sync.Mutex
	pools    []netip.Prefix
	reserved []netip.Prefix          // local CIDRs and reserved ranges, never given out
	nodes    []netip.Prefix          // the nodes' addresses (SetNodes), never given out either
	assigned map[string]netip.Prefix // key (such as "namespace/name/pod") -> prefix as seen here
	// asIs, when set, are the ranges a peer's CIDR may be used in unchanged (SetAsIs); a
	// CIDR outside them (and outside the pools) is remapped.
	asIs []netip.Prefix
}

// PrivateRanges are the ranges no one routes on the internet: RFC 1918, the shared address
// space of RFC 6598 (100.64.0.0/10) and IPv6's unique local addresses (RFC 4193).
var PrivateRanges = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"), netip.MustParsePrefix("100.64.0.0/10"), netip.MustParsePrefix("fc00::/7")}

// SetAsIs makes the allocator remap every CIDR outside ranges (and outside its pools), even
// one that clashes with nothing: a peer's CIDR is routed by every node to its gateway, and a
// peer that publishes a public range (8.8.8.0/24, 52.0.0.0/8) would otherwise take this
// cluster's traffic to those addresses. nil: any CIDR may be used as it is.
func (a *Allocator) SetAsIs(ranges []netip.Prefix) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asIs = slices.Clone(ranges)
}

// within reports whether p lies inside one of ranges.
func within(p netip.Prefix, ranges []netip.Prefix) bool {
	return slices.ContainsFunc(ranges, func(r netip.Prefix) bool { return r.Bits() <= p.Bits() && r.Contains(p.Addr()) })
}

// New returns an allocator with the given pools and the CIDRs in use locally.
func New(pools, reserved []netip.Prefix) (*Allocator, error) {
	a := &Allocator{assigned: map[string]netip.Prefix{}}
	for _, p := range append(append([]netip.Prefix(nil), pools...), reserved...) {
		if !p.IsValid() || p.Addr().Is4In6() {
			return nil, fmt.Errorf("ipam: %v is not an IPv4 or IPv6 CIDR", p)
		}
	}
	for _, p := range pools {
		for _, q := range a.pools {
			if q.Overlaps(p) {
				return nil, fmt.Errorf("ipam: pools %v and %v overlap: list each range once", q, p.Masked())
			}
		}
		a.pools = append(a.pools, p.Masked())
	}
	for _, p := range reserved {
		a.reserved = append(a.reserved, p.Masked())
	}
	return a, nil
}

// Restore records an allocation found in the API (at start-up), so it is neither handed out
// again nor changed.
func (a *Allocator) Restore(key string, p netip.Prefix) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.assigned[key] = p.Masked()
}

// Release frees key's prefix.
func (a *Allocator) Release(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.assigned, key)
}

// ReleaseOwner frees every key that starts with owner (such as "namespace/name/"): all the
// prefixes of one Configuration, however many CIDRs it had.
func (a *Allocator) ReleaseOwner(owner string) { a.ReleaseOwnerExcept(owner, nil) }

// ReleaseOwnerExcept frees owner's keys that are not in keep.
func (a *Allocator) ReleaseOwnerExcept(owner string, keep map[string]bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k := range a.assigned {
		if strings.HasPrefix(k, owner) && !keep[k] {
			delete(a.assigned, k)
		}
	}
}

// Get returns key's prefix, if it has one.
func (a *Allocator) Get(key string) (netip.Prefix, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p, ok := a.assigned[key]
	return p, ok
}

// SetNodes replaces the nodes' addresses, which no peer's CIDR may cover as seen here: a
// peer on 192.168.0.0/16 beside nodes on 192.168.77.0/24 would otherwise take the route to
// the nodes (the overlay's own underlay) with it. An assignment that covers a node address
// added later is moved by its next Assign.
func (a *Allocator) SetNodes(addrs []netip.Addr) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.nodes = a.nodes[:0]
	for _, ip := range addrs {
		ip = ip.Unmap()
		if ip.IsValid() {
			a.nodes = append(a.nodes, netip.PrefixFrom(ip, ip.BitLen()))
		}
	}
}

// Clash names what p clashes with here, for conditions ("" when nothing): a node's address,
// a local or reserved CIDR, or another key's prefix.
func (a *Allocator) Clash(key string, p netip.Prefix) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.clash(key, p)
}

// clash is Clash with a.mu held.
func (a *Allocator) clash(key string, p netip.Prefix) string {
	for _, r := range a.nodes {
		if r.Overlaps(p) {
			return "the node address " + r.Addr().String()
		}
	}
	for _, r := range a.reserved {
		if r.Overlaps(p) {
			return "the local or reserved CIDR " + r.String()
		}
	}
	for k, q := range a.assigned {
		if k != key && q.Overlaps(p) {
			return q.String() + " (" + k + ")"
		}
	}
	if a.asIs != nil && !within(p, a.asIs) && !within(p, a.pools) {
		return "no private range (a peer's CIDR outside the private ranges is always remapped: ipam.remapPublicPeerCIDRs)"
	}
	return ""
}

// free reports whether p clashes with nothing reserved and nothing assigned to another key
// (prefixes of different families never clash).
func (a *Allocator) free(key string, p netip.Prefix) bool { return a.clash(key, p) == "" }

// Assign returns how this cluster sees the remote prefix want under key: the prefix key
// already holds if it still has want's length and clashes with nothing; else want itself when
// it clashes with nothing (NAT-less); else a free prefix of the same length in the pools of
// want's family: for IPv4 the first, for IPv6 the first whose translation from want changes no
// checksum (its 16-bit words sum to want's, nat.ChecksumNeutral) if one is found among the
// first neutralTries candidates, else the first. The answer is recorded under key.
func (a *Allocator) Assign(key string, want netip.Prefix) (netip.Prefix, error) {
	if !want.IsValid() || want.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("ipam: %v is not an IPv4 or IPv6 CIDR", want)
	}
	want = want.Masked()
	a.mu.Lock()
	defer a.mu.Unlock()
	if cur, ok := a.assigned[key]; ok && cur.Bits() == want.Bits() && cur.Addr().Is4() == want.Addr().Is4() && a.free(key, cur) {
		return cur, nil
	}
	if a.free(key, want) {
		a.assigned[key] = want
		return want, nil
	}
	busy := a.busy(key)
	if want.Addr().Is6() {
		if p, ok := a.searchNeutral(busy, want); ok {
			a.assigned[key] = p
			return p, nil
		}
	}
	if p, ok := a.search(busy, want); ok {
		a.assigned[key] = p
		return p, nil
	}
	return netip.Prefix{}, fmt.Errorf("%w: /%d for %v", ErrExhausted, want.Bits(), want)
}

// busy returns every prefix in use but key's, sorted by address.
func (a *Allocator) busy(key string) []netip.Prefix {
	var busy []netip.Prefix
	busy = append(busy, a.reserved...)
	busy = append(busy, a.nodes...)
	for k, q := range a.assigned {
		if k != key {
			busy = append(busy, q)
		}
	}
	sort.Slice(busy, func(i, j int) bool { return busy[i].Addr().Less(busy[j].Addr()) })
	return busy
}

// search finds the first free prefix of want's length and family in the pools, skipping past
// whatever is in use instead of trying every block.
func (a *Allocator) search(busy []netip.Prefix, want netip.Prefix) (netip.Prefix, bool) {
	bits, family := want.Bits(), want.Addr().BitLen()
	size := pow2(family - bits)
	for _, pool := range a.pools {
		if pool.Addr().BitLen() != family || pool.Bits() > bits {
			continue
		}
		start, end := span(pool)
		for cand := start; !end.less(cand.add(size).sub(one)); {
			p := netip.PrefixFrom(cand.addr(family), bits)
			clash := false
			for _, b := range busy {
				if b.Overlaps(p) {
					// Jump past the busy prefix (or past the candidate, if it is the larger).
					_, bEnd := span(b)
					last := cand.add(size).sub(one)
					if last.less(bEnd) {
						last = bEnd
					}
					next, ok := alignUp(last.add(one), size)
					if !ok || last == maxU128 {
						return netip.Prefix{}, false
					}
					cand = next
					clash = true
					break
				}
			}
			if !clash {
				return p, true
			}
		}
	}
	return netip.Prefix{}, false
}

// neutralTries bounds the candidates searchNeutral looks at.
const neutralTries = 4096

// searchNeutral looks for a free IPv6 prefix of want's length whose translation from want is
// checksum-neutral: a pool whose free bits hold a whole 16-bit word (pool.Bits() <= 16w and
// 16(w+1) <= want.Bits()) can make any candidate neutral by choosing that word, so the
// candidates are the other free bits in order, each with the word that balances it.
func (a *Allocator) searchNeutral(busy []netip.Prefix, want netip.Prefix) (netip.Prefix, bool) {
	bits := want.Bits()
	target := onesSum(want.Addr().As16())
	for _, pool := range a.pools {
		if !pool.Addr().Is6() || pool.Bits() > bits {
			continue
		}
		w := bits/16 - 1 // the lowest whole word inside the prefix
		if w < 0 || 16*w < pool.Bits() {
			continue
		}
		below := bits - 16*(w+1)    // free bits below the word, inside the prefix
		above := 16*w - pool.Bits() // free bits above it
		block := 128 - 16*w         // a value of the bits above spans 2^block addresses
		start, _ := span(pool)
		base := pool.Masked().Addr().As16()
		tries := 0
		hiEnd := pow2(above) // above <= 120
		for hi := (u128{}); hi.less(hiEnd) && tries < neutralTries; {
			next := hi.add(one)
		lower:
			for lo := uint64(0); lo < 1<<min(below, 62) && tries < neutralTries; lo++ {
				tries++
				x := base
				setBits(&x, hi, above, pool.Bits())
				setBits(&x, u128{lo: lo}, below, 16*(w+1))
				// x's word w is 0: choose it so that the words sum to want's.
				word := onesSub(target, onesSum(x))
				for _, v := range []uint16{word, ^word} { // 0 and 0xffff are the same sum
					x[2*w], x[2*w+1] = byte(v>>8), byte(v)
					p := netip.PrefixFrom(netip.AddrFrom16(x), bits)
					if !nat.ChecksumNeutral(nat.Pair{From: p, To: want}) {
						continue
					}
					i := slices.IndexFunc(busy, p.Overlaps)
					if i < 0 {
						return p, true
					}
					if b := busy[i]; b.Bits() <= 16*w {
						// b holds every candidate with these bits above the word: go on
						// past its end.
						_, bEnd := span(b)
						next = bEnd.sub(start).shr(block).add(one)
						break lower
					}
				}
			}
			hi = next
		}
	}
	return netip.Prefix{}, false
}

// setBits writes the low width bits of v into x from bit offset at (0 is the most significant
// bit of x[0]).
func setBits(x *[16]byte, v u128, width, at int) {
	for i := range width {
		bit := at + i
		if v.shr(width-1-i).lo&1 == 1 {
			x[bit/8] |= 0x80 >> (bit % 8)
		} else {
			x[bit/8] &^= 0x80 >> (bit % 8)
		}
	}
}

// onesSum is the one's complement sum of an IPv6 address's eight 16-bit words.
func onesSum(a [16]byte) uint16 {
	var s uint32
	for i := 0; i < 16; i += 2 {
		s += uint32(a[i])<<8 | uint32(a[i+1])
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// onesSub returns x - y in one's complement arithmetic: the v with onesSum(y + v) = x.
func onesSub(x, y uint16) uint16 {
	s := uint32(x) + uint32(^y)
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// u128 is an address of either family as a 128-bit number (an IPv4 address in the low 32
// bits), for the arithmetic of searching.
type u128 struct{ hi, lo uint64 }

var (
	one     = u128{lo: 1}
	maxU128 = u128{^uint64(0), ^uint64(0)}
)

func u128Of(a netip.Addr) u128 {
	if a.Is4() {
		b := a.As4()
		return u128{lo: uint64(binary.BigEndian.Uint32(b[:]))}
	}
	b := a.As16()
	return u128{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

// addr returns x as an address of the family of bitLen bits (32 or 128).
func (x u128) addr(bitLen int) netip.Addr {
	if bitLen == 32 {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(x.lo))
		return netip.AddrFrom4(b)
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], x.hi)
	binary.BigEndian.PutUint64(b[8:], x.lo)
	return netip.AddrFrom16(b)
}

func (x u128) add(y u128) u128 {
	lo, carry := bits.Add64(x.lo, y.lo, 0)
	hi, _ := bits.Add64(x.hi, y.hi, carry)
	return u128{hi, lo}
}

func (x u128) sub(y u128) u128 {
	lo, borrow := bits.Sub64(x.lo, y.lo, 0)
	hi, _ := bits.Sub64(x.hi, y.hi, borrow)
	return u128{hi, lo}
}

// shr shifts x right by n bits (0-127).
func (x u128) shr(n int) u128 {
	switch {
	case n == 0:
		return x
	case n >= 64:
		return u128{lo: x.hi >> (n - 64)}
	}
	return u128{hi: x.hi >> n, lo: x.lo>>n | x.hi<<(64-n)}
}

func (x u128) less(y u128) bool { return x.hi < y.hi || x.hi == y.hi && x.lo < y.lo }

// pow2 is 2^n for n in 0-128 (2^128 wraps to 0, the size of ::/0 less nothing it is used for:
// a /0 remap is refused before).
func pow2(n int) u128 {
	switch {
	case n >= 128:
		return u128{}
	case n >= 64:
		return u128{hi: 1 << (n - 64)}
	}
	return u128{lo: 1 << n}
}

// alignUp rounds x up to a multiple of size (a power of two); ok is false when that wraps.
func alignUp(x, size u128) (u128, bool) {
	m := size.sub(one)
	y := x.add(m)
	if y.less(x) {
		return u128{}, false
	}
	return u128{y.hi &^ m.hi, y.lo &^ m.lo}, true
}

// span returns the first and last address of p.
func span(p netip.Prefix) (u128, u128) {
	s := u128Of(p.Masked().Addr())
	return s, s.add(pow2(p.Addr().BitLen() - p.Bits())).sub(one)
}

// Hosts hands out single addresses from a CIDR (overlay addresses of nodes and gateways,
// nodes' addresses in the external CIDRs). The first and last addresses (IPv4's network and
// broadcast addresses, IPv6's subnet-router anycast and its twin) and the first Skip hosts
// are never given out.
type Hosts struct {
	mu       sync.Mutex
	cidr     netip.Prefix
	skip     int
	assigned map[string]netip.Addr
	used     map[netip.Addr]string
}

// NewHosts returns an allocator over cidr, IPv4 or IPv6.
func NewHosts(cidr netip.Prefix, skip int) (*Hosts, error) {
	if !cidr.IsValid() || cidr.Addr().Is4In6() || cidr.Addr().Zone() != "" || cidr.Bits() > cidr.Addr().BitLen()-2 {
		return nil, fmt.Errorf("ipam: %v: want an IPv4 or IPv6 CIDR of at least 4 addresses", cidr)
	}
	return &Hosts{cidr: cidr.Masked(), skip: skip, assigned: map[string]netip.Addr{}, used: map[netip.Addr]string{}}, nil
}

// Restore records an address found in the API.
func (h *Hosts) Restore(key string, a netip.Addr) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.cidr.Contains(a) {
		return
	}
	h.assigned[key] = a
	h.used[a] = key
}

// Release frees key's address.
func (h *Hosts) Release(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if a, ok := h.assigned[key]; ok {
		delete(h.used, a)
		delete(h.assigned, key)
	}
}

// Assign returns key's address, giving it the lowest free one first.
func (h *Hosts) Assign(key string) (netip.Addr, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if a, ok := h.assigned[key]; ok {
		return a, nil
	}
	start, end := span(h.cidr)
	for v := start.add(one).add(u128{lo: uint64(h.skip)}); v.less(end); v = v.add(one) {
		a := v.addr(h.cidr.Addr().BitLen())
		if _, taken := h.used[a]; !taken {
			h.assigned[key] = a
			h.used[a] = key
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%w: no free address in %v", ErrExhausted, h.cidr)
}

// PoolUsage is how much of one remap pool is taken, in addresses (float64: an IPv6 pool holds
// more than a uint64 counts; IPv4 counts are exact).
type PoolUsage struct {
	Pool netip.Prefix
	// Size is every address of the pool; Reserved those inside local CIDRs, reserved ranges
	// and node addresses (never given out); Assigned those inside a peer's CIDR as this
	// cluster sees it (remapped or kept as-is).
	Size, Reserved, Assigned float64
}

// Usage reports each pool's use, in the pools' order. Each address counts once, however many
// reserved or assigned prefixes hold it; an address both reserved and assigned (a restored
// assignment) counts as reserved.
func (a *Allocator) Usage() []PoolUsage {
	a.mu.Lock()
	defer a.mu.Unlock()
	reserved := slices.Concat(a.reserved, a.nodes)
	assigned := make([]netip.Prefix, 0, len(a.assigned))
	for _, q := range a.assigned {
		assigned = append(assigned, q)
	}
	out := make([]PoolUsage, 0, len(a.pools))
	for _, pool := range a.pools {
		r := covered(pool, reserved)
		u := PoolUsage{Pool: pool, Size: addresses(pool), Reserved: r}
		u.Assigned = covered(pool, slices.Concat(reserved, assigned)) - r
		out = append(out, u)
	}
	return out
}

// covered counts the addresses of pool inside at least one of ps. Two prefixes overlap only
// when one holds the other, so the outermost of each nested group are disjoint: clip each to
// the pool, drop those inside another, and add up the rest.
func covered(pool netip.Prefix, ps []netip.Prefix) float64 {
	var in []netip.Prefix
	for _, p := range ps {
		switch {
		case !pool.Overlaps(p):
		case p.Bits() <= pool.Bits():
			in = append(in, pool) // p holds the whole pool
		default:
			in = append(in, p.Masked())
		}
	}
	// Shortest first: a prefix is dropped when one kept before it holds it.
	slices.SortFunc(in, func(x, y netip.Prefix) int { return x.Bits() - y.Bits() })
	var kept []netip.Prefix
	var n float64
	for _, p := range in {
		if slices.ContainsFunc(kept, func(k netip.Prefix) bool { return k.Overlaps(p) }) {
			continue
		}
		kept = append(kept, p)
		n += addresses(p)
	}
	return n
}

// addresses is the number of addresses of p.
func addresses(p netip.Prefix) float64 { return math.Ldexp(1, p.Addr().BitLen()-p.Bits()) }

// Usage reports how many addresses h can give out and how many it has.
func (h *Hosts) Usage() (size, assigned uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	hostBits := h.cidr.Addr().BitLen() - h.cidr.Bits()
	if hostBits >= 64 {
		return math.MaxUint64, uint64(len(h.assigned)) // more than a uint64 counts
	}
	total := uint64(1) << hostBits
	return total - 2 - min(total-2, uint64(h.skip)), uint64(len(h.assigned))
}
