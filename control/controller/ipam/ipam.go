// Package ipam decides how this cluster sees a peer's CIDRs: as they are when they clash with
// nothing in use here (NAT-less), otherwise as a free prefix of the same length from the remap
// pools. It is an in-memory table, rebuilt from the API (Restore) when the controller starts;
// the controller serialises Assign calls, so two peers never get the same prefix.
package ipam

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
)

// DefaultPools are the remap pools.
var DefaultPools = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
}

// ErrExhausted means no prefix of the wanted length is free in any pool.
var ErrExhausted = errors.New("no free prefix of that length in the remap pools")

// Allocator holds what is in use.
type Allocator struct {
	mu       sync.Mutex
	pools    []netip.Prefix
	reserved []netip.Prefix          // local CIDRs and reserved ranges, never given out
	nodes    []netip.Prefix          // the nodes' addresses (SetNodes), never given out either
	assigned map[string]netip.Prefix // key (such as "namespace/name/pod") -> prefix as seen here
}

// New returns an allocator with the given pools and the CIDRs in use locally.
func New(pools, reserved []netip.Prefix) (*Allocator, error) {
	a := &Allocator{assigned: map[string]netip.Prefix{}}
	for _, p := range append(append([]netip.Prefix(nil), pools...), reserved...) {
		if !p.IsValid() || !p.Addr().Is4() {
			return nil, fmt.Errorf("ipam: %v is not an IPv4 CIDR", p)
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
		if ip.Is4() {
			a.nodes = append(a.nodes, netip.PrefixFrom(ip, 32))
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
	return ""
}

// free reports whether p clashes with nothing reserved and nothing assigned to another key.
func (a *Allocator) free(key string, p netip.Prefix) bool { return a.clash(key, p) == "" }

// Assign returns how this cluster sees the remote prefix want under key: the prefix key
// already holds if it still has want's length and clashes with nothing; else want itself when
// it clashes with nothing (NAT-less); else the first free prefix of the same length in the
// pools. The answer is recorded under key.
func (a *Allocator) Assign(key string, want netip.Prefix) (netip.Prefix, error) {
	if !want.IsValid() || !want.Addr().Is4() {
		return netip.Prefix{}, fmt.Errorf("ipam: %v is not an IPv4 CIDR", want)
	}
	want = want.Masked()
	a.mu.Lock()
	defer a.mu.Unlock()
	if cur, ok := a.assigned[key]; ok && cur.Bits() == want.Bits() && a.free(key, cur) {
		return cur, nil
	}
	if a.free(key, want) {
		a.assigned[key] = want
		return want, nil
	}
	if p, ok := a.search(key, want.Bits()); ok {
		a.assigned[key] = p
		return p, nil
	}
	return netip.Prefix{}, fmt.Errorf("%w: /%d for %v", ErrExhausted, want.Bits(), want)
}

// search finds the first free prefix of length bits in the pools, skipping past whatever is
// in use instead of trying every block.
func (a *Allocator) search(key string, bits int) (netip.Prefix, bool) {
	var busy []netip.Prefix
	busy = append(busy, a.reserved...)
	busy = append(busy, a.nodes...)
	for k, q := range a.assigned {
		if k != key {
			busy = append(busy, q)
		}
	}
	sort.Slice(busy, func(i, j int) bool { return busy[i].Addr().Less(busy[j].Addr()) })
	size := uint64(1) << (32 - bits)
	for _, pool := range a.pools {
		if pool.Bits() > bits {
			continue
		}
		start, end := span(pool)
		for cand := start; cand+size-1 <= end; {
			p := netip.PrefixFrom(addrOf(uint32(cand)), bits)
			clash := false
			for _, b := range busy {
				if b.Overlaps(p) {
					// Jump past the busy prefix (or past the candidate, if it is the larger).
					_, bEnd := span(b)
					next := (max(bEnd, cand+size-1) + 1 + size - 1) / size * size
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

func span(p netip.Prefix) (uint64, uint64) {
	a := p.Masked().Addr().As4()
	s := uint64(binary.BigEndian.Uint32(a[:]))
	return s, s + uint64(1)<<(32-p.Bits()) - 1
}

func addrOf(v uint32) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

// Hosts hands out single addresses from a CIDR (overlay addresses of nodes and gateways,
// nodes' addresses in the external CIDR). The network and broadcast addresses and the first
// Skip hosts are never given out.
type Hosts struct {
	mu       sync.Mutex
	cidr     netip.Prefix
	skip     int
	assigned map[string]netip.Addr
	used     map[netip.Addr]string
}

// NewHosts returns an allocator over cidr.
func NewHosts(cidr netip.Prefix, skip int) (*Hosts, error) {
	if !cidr.IsValid() || !cidr.Addr().Is4() || cidr.Bits() > 30 {
		return nil, fmt.Errorf("ipam: %v: want an IPv4 CIDR of at least 4 addresses", cidr)
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
	for v := start + 1 + uint64(h.skip); v < end; v++ {
		a := addrOf(uint32(v))
		if _, taken := h.used[a]; !taken {
			h.assigned[key] = a
			h.used[a] = key
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%w: no free address in %v", ErrExhausted, h.cidr)
}

// PoolUsage is how much of one remap pool is taken, in addresses.
type PoolUsage struct {
	Pool netip.Prefix
	// Size is every address of the pool; Reserved those inside local CIDRs, reserved ranges
	// and node addresses (never given out); Assigned those inside a peer's CIDR as this cluster sees it (remapped
	// or kept as-is).
	Size, Reserved, Assigned uint64
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
		u := PoolUsage{Pool: pool, Size: uint64(1) << (32 - pool.Bits()), Reserved: r}
		u.Assigned = covered(pool, slices.Concat(reserved, assigned)) - r
		out = append(out, u)
	}
	return out
}

// covered counts the addresses of pool inside at least one of ps. Two prefixes overlap only
// when one holds the other, so the outermost of each nested group are disjoint: clip each to
// the pool, drop those inside another, and add up the rest.
func covered(pool netip.Prefix, ps []netip.Prefix) uint64 {
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
	var n uint64
	for _, p := range in {
		if slices.ContainsFunc(kept, func(k netip.Prefix) bool { return k.Overlaps(p) }) {
			continue
		}
		kept = append(kept, p)
		n += uint64(1) << (32 - p.Bits())
	}
	return n
}

// Usage reports how many addresses h can give out and how many it has.
func (h *Hosts) Usage() (size, assigned uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	total := uint64(1) << (32 - h.cidr.Bits())
	return total - 2 - min(total-2, uint64(h.skip)), uint64(len(h.assigned))
}
