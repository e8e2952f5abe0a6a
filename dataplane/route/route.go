package route

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
)

// Builder collects routes for a Table. The zero Builder is ready to use. A Builder is not safe
// for concurrent use; Build does not consume it, so routes may be added and built again.
type Builder struct {
	// IPv4 routes are keyed by key4 (a gateway at the Kubernetes limits adds 150,000 of them,
	// and a uint64 key hashes and grows much faster than a netip.Prefix); IPv6 by prefix.
	v4 map[uint64]uint32 // key4 -> next-hop ID
	v6 map[netip.Prefix]uint32
}

// key4 packs an IPv4 prefix into a uint64 that orders prefixes by length, then address: the
// order buildIPv4 inserts them in.
func key4(p netip.Prefix) uint64 {
	a := p.Addr().As4()
	return uint64(p.Bits())<<32 | uint64(binary.BigEndian.Uint32(a[:]))
}

// Add records the route p -> hop. The prefix must be valid and canonical (no bits set past its
// length). IPv4 and IPv6 prefixes are both accepted, but IPv4-mapped IPv6 prefixes
// (::ffff:a.b.c.d/n) are rejected: add them as IPv4 prefixes. Adding the same prefix twice is
// fine if the hop is the same, and an error otherwise.
func (b *Builder) Add(p netip.Prefix, hop uint32) error {
	if err := checkPrefix(p); err != nil {
		return err
	}
	var old uint32
	var dup bool
	if p.Addr().Is4() {
		k := key4(p)
		if old, dup = b.v4[k]; !dup {
			if b.v4 == nil {
				b.v4 = make(map[uint64]uint32)
			}
			b.v4[k] = hop
			return nil
		}
	} else if old, dup = b.v6[p]; !dup {
		if b.v6 == nil {
			b.v6 = make(map[netip.Prefix]uint32)
		}
		b.v6[p] = hop
		return nil
	}
	if old != hop {
		return fmt.Errorf("route %s: already added with next hop %d, cannot add it with next hop %d", p, old, hop)
	}
	return nil
}

// checkPrefix reports why p cannot be a route, or nil if it can.
func checkPrefix(p netip.Prefix) error {
	if !p.IsValid() {
		return errors.New("route: invalid prefix (zero value, or prefix length out of range for the address family)")
	}
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		v4 := netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96).Masked()
		return fmt.Errorf("route %s: IPv4-mapped IPv6 prefix; add it as the IPv4 prefix %s", p, v4)
	}
	if m := p.Masked(); m != p {
		return fmt.Errorf("route %s: host bits set past the prefix length; the masked prefix is %s", p, m)
	}
	return nil
}

// Build returns an immutable Table holding the routes added so far.
func (b *Builder) Build() *Table {
	keys := make([]uint64, 0, len(b.v4))
	for k := range b.v4 {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	routes4 := make([]route4, len(keys))
	for i, k := range keys {
		routes4[i] = route4{addr: uint32(k), bits: int(k >> 32), hop: b.v4[k]}
	}
	routes6 := make([]route6, 0, len(b.v6))
	for p, hop := range b.v6 {
		routes6 = append(routes6, route6{addr: addr128From16(p.Addr().As16()), bits: p.Bits(), hop: hop})
	}
	return &Table{
		v4:  buildIPv4(routes4),
		v6:  buildIPv6(routes6),
		len: len(b.v4) + len(b.v6),
	}
}

// Table is an immutable longest-prefix-match route table; see the package documentation for
// the concurrency rule. A nil *Table holds no routes: every lookup reports ok=false.
type Table struct {
	v4  ipv4Table
	v6  ipv6Table
	len int
}

// Lookup4 returns the next hop of the longest IPv4 prefix containing dst, or ok=false if none
// does. It is the per-packet hot path: at most three array reads, no allocation, no locks.
func (t *Table) Lookup4(dst [4]byte) (hop uint32, ok bool) {
	if t == nil || t.v4.top == nil {
		return 0, false
	}
	e := t.v4.top[uint16(dst[0])<<8|uint16(dst[1])]
	if e&childFlag != 0 {
		e = t.v4.chunks[int(e&^childFlag)<<8|int(dst[2])]
		if e&childFlag != 0 {
			e = t.v4.chunks[int(e&^childFlag)<<8|int(dst[3])]
		}
	}
	return t.v4.hops[e], e != noRoute
}

// Lookup6 returns the next hop of the longest IPv6 prefix containing dst, or ok=false if none
// does. dst is taken as is: an IPv4-mapped address only matches IPv6 prefixes (use Lookup to
// have it unmapped first). It does not allocate.
func (t *Table) Lookup6(dst [16]byte) (hop uint32, ok bool) {
	if t == nil {
		return 0, false
	}
	return t.v6.lookup(addr128From16(dst))
}

// Lookup returns the next hop of the longest prefix containing dst, dispatching on its address
// family; an IPv4-mapped IPv6 address is looked up as IPv4. An invalid dst matches nothing.
func (t *Table) Lookup(dst netip.Addr) (hop uint32, ok bool) {
	switch {
	case dst.Is4() || dst.Is4In6():
		return t.Lookup4(dst.Unmap().As4())
	case dst.Is6():
		return t.Lookup6(dst.As16())
	default:
		return 0, false
	}
}

// Len returns the number of routes (distinct prefixes, both families) in the table.
func (t *Table) Len() int {
	if t == nil {
		return 0
	}
	return t.len
}
