package route

import (
	"math/rand/v2"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// refRoute is one route of the naive reference table.
type refRoute struct {
	prefix netip.Prefix
	hop    uint32
}

// refLookup is the reference longest-prefix match: a linear scan keeping the longest prefix
// that contains dst.
func refLookup(routes []refRoute, dst netip.Addr) (hop uint32, ok bool) {
	best := -1
	for _, r := range routes {
		if r.prefix.Bits() > best && r.prefix.Contains(dst) {
			best, hop = r.prefix.Bits(), r.hop
		}
	}
	return hop, best >= 0
}

// build returns a table of routes, failing the test if any route is refused.
func build(tb testing.TB, routes []refRoute) *Table {
	tb.Helper()
	var b Builder
	for _, r := range routes {
		if err := b.Add(r.prefix, r.hop); err != nil {
			tb.Fatalf("Add(%s, %d): %v", r.prefix, r.hop, err)
		}
	}
	return b.Build()
}

func parseRoutes(tb testing.TB, routes map[string]uint32) []refRoute {
	tb.Helper()
	var out []refRoute
	for s, hop := range routes {
		out = append(out, refRoute{netip.MustParsePrefix(s), hop})
	}
	return out
}

// lastAddr returns the last address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// checkLookup compares t's answer for dst (through Lookup and the family's own method) with
// the wanted one.
func checkLookup(t *testing.T, table *Table, dst netip.Addr, wantHop uint32, wantOK bool) {
	t.Helper()
	hop, ok := table.Lookup(dst)
	var famHop uint32
	var famOK bool
	if dst.Is4() {
		famHop, famOK = table.Lookup4(dst.As4())
	} else {
		famHop, famOK = table.Lookup6(dst.As16())
	}
	if hop != wantHop || ok != wantOK || famHop != wantHop || famOK != wantOK {
		t.Errorf("lookup %s = (%d, %v), family lookup = (%d, %v); want (%d, %v)",
			dst, hop, ok, famHop, famOK, wantHop, wantOK)
	}
}

func TestLookup4(t *testing.T) {
	table := build(t, parseRoutes(t, map[string]uint32{
		"0.0.0.0/0":          1,
		"10.0.0.0/8":         2,
		"10.1.0.0/16":        3,
		"10.1.2.0/24":        4,
		"10.1.2.3/32":        5,
		"10.1.2.128/25":      6,
		"172.16.0.0/12":      7,
		"192.168.0.0/23":     8,
		"255.255.255.255/32": 9,
		"0.0.0.0/32":         10,
		"100.64.0.0/20":      0xffffffff, // hops are opaque: the flag bit of an entry must not leak
	}))
	tests := []struct {
		dst  string
		want uint32
	}{
		{"8.8.8.8", 1},         // default route
		{"10.0.0.0", 2},        // first address of the /8
		{"10.255.255.255", 2},  // last address of the /8
		{"9.255.255.255", 1},   // just below the /8
		{"11.0.0.0", 1},        // just above the /8
		{"10.1.0.0", 3},        // first of the /16 inside the /8
		{"10.1.255.255", 3},    // last of the /16
		{"10.0.255.255", 2},    // just below the /16
		{"10.2.0.0", 2},        // just above the /16
		{"10.1.2.0", 4},        // first of the /24 inside the /16
		{"10.1.2.2", 4},        // just below the /32
		{"10.1.2.3", 5},        // the /32 inside the /24
		{"10.1.2.4", 4},        // just above the /32
		{"10.1.2.127", 4},      // just below the /25
		{"10.1.2.128", 6},      // first of the /25
		{"10.1.2.255", 6},      // last of the /25 and of the /24
		{"10.1.1.255", 3},      // just below the /24
		{"10.1.3.0", 3},        // just above the /24
		{"172.16.0.0", 7},      // a /12 spans several top-level entries
		{"172.31.255.255", 7},  // last of the /12
		{"172.15.255.255", 1},  // just below it
		{"172.32.0.0", 1},      // just above it
		{"192.168.0.0", 8},     // a /23 spans two chunk entries
		{"192.168.1.255", 8},   // last of the /23
		{"192.168.2.0", 1},     // just above it
		{"255.255.255.255", 9}, // the last address, as a /32
		{"255.255.255.254", 1}, // just below it
		{"0.0.0.0", 10},        // the first address, as a /32
		{"0.0.0.1", 1},         // just above it
		{"100.64.15.255", 1<<32 - 1},
		{"100.64.16.0", 1},
	}
	for _, tt := range tests {
		checkLookup(t, table, netip.MustParseAddr(tt.dst), tt.want, true)
	}
	// An IPv4-mapped IPv6 address is looked up as IPv4 by Lookup.
	if hop, ok := table.Lookup(netip.MustParseAddr("::ffff:10.1.2.3")); hop != 5 || !ok {
		t.Errorf("Lookup(::ffff:10.1.2.3) = (%d, %v), want (5, true)", hop, ok)
	}
	// No IPv6 routes: the IPv4 default route does not match IPv6 addresses.
	checkLookup(t, table, netip.MustParseAddr("2001:db8::1"), 0, false)
	if got := table.Len(); got != 11 {
		t.Errorf("Len() = %d, want 11", got)
	}
}

func TestLookup4WithoutDefault(t *testing.T) {
	table := build(t, parseRoutes(t, map[string]uint32{
		"10.0.0.0/8":      1,
		"192.0.2.7/32":    2, // a /32 with no shorter prefix around it
		"198.51.100.0/24": 0, // hop 0 is a hop like any other
	}))
	tests := []struct {
		dst    string
		want   uint32
		wantOK bool
	}{
		{"10.20.30.40", 1, true},
		{"11.0.0.0", 0, false},
		{"9.255.255.255", 0, false},
		{"192.0.2.7", 2, true},
		{"192.0.2.6", 0, false},
		{"192.0.2.8", 0, false},
		{"198.51.100.0", 0, true},
		{"198.51.100.255", 0, true},
		{"198.51.101.0", 0, false},
		{"0.0.0.0", 0, false},
		{"255.255.255.255", 0, false},
	}
	for _, tt := range tests {
		checkLookup(t, table, netip.MustParseAddr(tt.dst), tt.want, tt.wantOK)
	}
}

func TestLookup4AllLengths(t *testing.T) {
	// One prefix of every length, nested around one address, each checked at its boundaries.
	addr := netip.MustParseAddr("203.0.113.77")
	var routes []refRoute
	for bits := 0; bits <= 32; bits++ {
		routes = append(routes, refRoute{netip.PrefixFrom(addr, bits).Masked(), uint32(100 + bits)})
	}
	table := build(t, routes)
	for _, r := range routes {
		for _, dst := range []netip.Addr{r.prefix.Addr(), lastAddr(r.prefix), r.prefix.Addr().Prev(), lastAddr(r.prefix).Next()} {
			if !dst.IsValid() {
				continue
			}
			want, wantOK := refLookup(routes, dst)
			checkLookup(t, table, dst, want, wantOK)
		}
	}
}

func TestLookup6(t *testing.T) {
	table := build(t, parseRoutes(t, map[string]uint32{
		"::/0":                1,
		"2001:db8::/32":       2,
		"2001:db8:0:1::/64":   3,
		"2001:db8:0:1::1/128": 4,
		"fd00::/8":            5,
		"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128": 6,
		"10.0.0.0/8": 7,
	}))
	tests := []struct {
		dst  string
		want uint32
	}{
		{"2001:db9::", 1}, // default route
		{"::1", 1},        // default route
		{"::", 1},         // the first address
		{"2001:db8::", 2}, // first of the /32
		{"2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", 2}, // last of the /32
		{"2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", 1}, // just below it
		{"2001:db8:0:1::", 3},                         // first of the /64
		{"2001:db8:0:1:ffff:ffff:ffff:ffff", 3},       // last of the /64
		{"2001:db8:0:0:ffff:ffff:ffff:ffff", 2},       // just below the /64
		{"2001:db8:0:2::", 2},                         // just above the /64
		{"2001:db8:0:1::1", 4},                        // the /128
		{"2001:db8:0:1::2", 3},                        // just above it
		{"fd12:3456::1", 5},
		{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 6}, // the last address, as a /128
		{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe", 1},
	}
	for _, tt := range tests {
		checkLookup(t, table, netip.MustParseAddr(tt.dst), tt.want, true)
	}
	// Lookup6 takes the 16 bytes as they are: a mapped address matches the IPv6 default route,
	// while Lookup unmaps it and finds the IPv4 route.
	mapped := netip.MustParseAddr("::ffff:10.1.2.3")
	if hop, ok := table.Lookup6(mapped.As16()); hop != 1 || !ok {
		t.Errorf("Lookup6(%s) = (%d, %v), want (1, true)", mapped, hop, ok)
	}
	if hop, ok := table.Lookup(mapped); hop != 7 || !ok {
		t.Errorf("Lookup(%s) = (%d, %v), want (7, true)", mapped, hop, ok)
	}
	// The IPv6 default route does not match IPv4 addresses.
	checkLookup(t, table, netip.MustParseAddr("192.0.2.1"), 0, false)
}

func TestNilAndEmptyTables(t *testing.T) {
	for name, table := range map[string]*Table{"nil": nil, "empty": new(Builder).Build()} {
		t.Run(name, func(t *testing.T) {
			for _, s := range []string{"0.0.0.0", "10.1.2.3", "255.255.255.255", "::", "2001:db8::1", "::ffff:10.1.2.3"} {
				checkLookup(t, table, netip.MustParseAddr(s), 0, false)
			}
			if hop, ok := table.Lookup(netip.Addr{}); hop != 0 || ok {
				t.Errorf("Lookup(invalid address) = (%d, %v), want (0, false)", hop, ok)
			}
			if n := table.Len(); n != 0 {
				t.Errorf("Len() = %d, want 0", n)
			}
		})
	}
}

func TestAddErrors(t *testing.T) {
	tests := []struct {
		name    string
		prefix  netip.Prefix
		wantErr []string // substrings of the error; nil means no error
	}{
		{"zero prefix", netip.Prefix{}, []string{"invalid prefix"}},
		{"IPv4 length out of range", netip.PrefixFrom(netip.MustParseAddr("10.0.0.0"), 33), []string{"invalid prefix"}},
		{"IPv4 host bits", netip.MustParsePrefix("10.1.2.3/24"), []string{"10.1.2.3/24", "host bits", "10.1.2.0/24"}},
		{"IPv6 host bits", netip.MustParsePrefix("2001:db8::1/64"), []string{"2001:db8::1/64", "host bits", "2001:db8::/64"}},
		{"4in6 /104", netip.MustParsePrefix("::ffff:10.0.0.0/104"), []string{"::ffff:10.0.0.0/104", "IPv4-mapped", "10.0.0.0/8"}},
		{"4in6 /128", netip.MustParsePrefix("::ffff:10.0.0.1/128"), []string{"IPv4-mapped", "10.0.0.1/32"}},
		{"4in6 /96", netip.MustParsePrefix("::ffff:0.0.0.0/96"), []string{"IPv4-mapped", "0.0.0.0/0"}},
		{"4in6 with host bits", netip.MustParsePrefix("::ffff:10.1.2.3/104"), []string{"IPv4-mapped", "10.0.0.0/8"}},
		{"covers mapped space but is not mapped", netip.MustParsePrefix("::/80"), nil},
		{"IPv4 /0", netip.MustParsePrefix("0.0.0.0/0"), nil},
		{"IPv4 /32", netip.MustParsePrefix("10.1.2.3/32"), nil},
		{"IPv6 /0", netip.MustParsePrefix("::/0"), nil},
		{"IPv6 /128", netip.MustParsePrefix("2001:db8::1/128"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b Builder
			err := b.Add(tt.prefix, 1)
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("Add(%s) = %v, want no error", tt.prefix, err)
			case tt.wantErr != nil && err == nil:
				t.Fatalf("Add(%s) = nil, want an error mentioning %q", tt.prefix, tt.wantErr)
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Add(%s) = %q, want it to mention %q", tt.prefix, err, want)
				}
			}
			want := 1 // a refused route must not reach the table
			if err != nil {
				want = 0
			}
			if got := b.Build().Len(); got != want {
				t.Errorf("Len() after Add = %d, want %d", got, want)
			}
		})
	}
}

func TestAddDuplicates(t *testing.T) {
	var b Builder
	p := netip.MustParsePrefix("10.1.0.0/16")
	if err := b.Add(p, 7); err != nil {
		t.Fatal(err)
	}
	if err := b.Add(p, 7); err != nil {
		t.Errorf("Add of the same route twice = %v, want no error", err)
	}
	err := b.Add(p, 8)
	if err == nil {
		t.Fatal("Add of the same prefix with another hop = nil, want an error")
	}
	for _, want := range []string{"10.1.0.0/16", "7", "8"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("duplicate error %q does not mention %q", err, want)
		}
	}
	table := b.Build()
	if table.Len() != 1 {
		t.Errorf("Len() = %d, want 1", table.Len())
	}
	checkLookup(t, table, netip.MustParseAddr("10.1.2.3"), 7, true)
}

func TestBuildIsASnapshot(t *testing.T) {
	var b Builder
	mustAdd(t, &b, "10.0.0.0/8", 1)
	first := b.Build()
	mustAdd(t, &b, "10.1.0.0/16", 2)
	second := b.Build()
	checkLookup(t, first, netip.MustParseAddr("10.1.0.1"), 1, true)
	checkLookup(t, second, netip.MustParseAddr("10.1.0.1"), 2, true)
	if first.Len() != 1 || second.Len() != 2 {
		t.Errorf("Len() = %d and %d, want 1 and 2", first.Len(), second.Len())
	}
}

func mustAdd(t *testing.T, b *Builder, prefix string, hop uint32) {
	t.Helper()
	if err := b.Add(netip.MustParsePrefix(prefix), hop); err != nil {
		t.Fatal(err)
	}
}

// randomRoutes returns n distinct random prefixes of the family of the given bit length (32 or
// 128), clustered around a few base addresses so that many of them nest, and random hops.
func randomRoutes(r *rand.Rand, n, addrBits int) []refRoute {
	bases := make([]netip.Addr, 16)
	for i := range bases {
		bases[i] = randomAddr(r, addrBits)
	}
	seen := make(map[netip.Prefix]bool)
	var routes []refRoute
	for len(routes) < n {
		a := nearAddr(r, bases[r.IntN(len(bases))])
		p := netip.PrefixFrom(a, r.IntN(addrBits+1)).Masked()
		if seen[p] || p.Addr().Is4In6() {
			continue
		}
		seen[p] = true
		routes = append(routes, refRoute{p, r.Uint32()})
	}
	return routes
}

func randomAddr(r *rand.Rand, addrBits int) netip.Addr {
	b := make([]byte, addrBits/8)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// nearAddr returns base with a random number of its low bits randomised.
func nearAddr(r *rand.Rand, base netip.Addr) netip.Addr {
	b := base.AsSlice()
	random := randomAddr(r, len(b)*8).AsSlice()
	for i := r.IntN(len(b)*8 + 1); i < len(b)*8; i++ {
		bit := byte(0x80 >> (i % 8))
		b[i/8] = b[i/8]&^bit | random[i/8]&bit
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// probeAddrs returns addresses worth looking up in routes: each prefix's first and last address
// and their outside neighbours, plus random addresses near and far.
func probeAddrs(r *rand.Rand, routes []refRoute, addrBits, random int) []netip.Addr {
	var addrs []netip.Addr
	for _, rt := range routes {
		for _, a := range []netip.Addr{rt.prefix.Addr(), lastAddr(rt.prefix), rt.prefix.Addr().Prev(), lastAddr(rt.prefix).Next()} {
			if a.IsValid() {
				addrs = append(addrs, a)
			}
		}
	}
	for range random {
		addrs = append(addrs, nearAddr(r, routes[r.IntN(len(routes))].prefix.Addr()), randomAddr(r, addrBits))
	}
	return addrs
}

func TestDifferential(t *testing.T) {
	for _, family := range []struct {
		name     string
		addrBits int
	}{{"IPv4", 32}, {"IPv6", 128}} {
		t.Run(family.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, uint64(family.addrBits)))
			for _, n := range []int{1, 10, 3000} {
				routes := randomRoutes(r, n, family.addrBits)
				table := build(t, routes)
				if table.Len() != n {
					t.Errorf("Len() = %d, want %d", table.Len(), n)
				}
				for _, dst := range probeAddrs(r, routes, family.addrBits, 2000) {
					want, wantOK := refLookup(routes, dst)
					checkLookup(t, table, dst, want, wantOK)
					if t.Failed() {
						t.Fatalf("with %d routes; stopping at the first mismatch", n)
					}
				}
			}
		})
	}
}

func FuzzLookup4(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0, 0, 1})                                          // 0.0.0.0/0
	f.Add([]byte{10, 0, 0, 0, 8, 1, 10, 1, 0, 0, 16, 2, 10, 1, 2, 3, 32, 3}) // nested /8, /16, /32
	f.Add([]byte{10, 1, 2, 200, 25, 4, 10, 1, 2, 0, 24, 5, 10, 1, 2, 129})   // /25 in /24, and a probe
	f.Add([]byte{255, 255, 255, 255, 32, 9, 255, 255, 255, 255, 32, 8})      // duplicate, other hop
	f.Fuzz(func(t *testing.T, data []byte) {
		// Each 6-byte record is a route: 4 address bytes, a length byte (taken modulo 33) and a
		// hop byte. The bytes left over are probe addresses, 4 bytes each. Both are capped to
		// keep executions fast (and minimisation short).
		var b Builder
		var routes []refRoute
		var probes []netip.Addr
		for ; len(data) >= 6 && len(routes) < 32; data = data[6:] {
			addr := netip.AddrFrom4([4]byte(data[:4]))
			raw := netip.PrefixFrom(addr, int(data[4])%33)
			p, hop := raw.Masked(), uint32(data[5])
			if raw != p && b.Add(raw, hop) == nil {
				t.Fatalf("Add(%s) with host bits set succeeded", raw)
			}
			err := b.Add(p, hop)
			old, dup := refFind(routes, p)
			switch {
			case dup && old != hop && err == nil:
				t.Fatalf("Add(%s, %d) after Add(%s, %d) succeeded", p, hop, p, old)
			case (!dup || old == hop) && err != nil:
				t.Fatalf("Add(%s, %d): %v", p, hop, err)
			case !dup:
				routes = append(routes, refRoute{p, hop})
			}
			probes = append(probes, addr, p.Addr(), lastAddr(p), p.Addr().Prev(), lastAddr(p).Next())
		}
		for ; len(data) >= 4 && len(probes) < 6*64; data = data[4:] {
			probes = append(probes, netip.AddrFrom4([4]byte(data[:4])))
		}
		table := b.Build()
		for _, dst := range probes {
			if !dst.IsValid() {
				continue
			}
			want, wantOK := refLookup(routes, dst)
			if hop, ok := table.Lookup4(dst.As4()); hop != want || ok != wantOK {
				t.Fatalf("Lookup4(%s) = (%d, %v), want (%d, %v); routes %v", dst, hop, ok, want, wantOK, routes)
			}
		}
	})
}

func refFind(routes []refRoute, p netip.Prefix) (hop uint32, ok bool) {
	for _, r := range routes {
		if r.prefix == p {
			return r.hop, true
		}
	}
	return 0, false
}

func TestLookupAllocs(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	routes := append(gatewayRoutes4(r, 1000), randomRoutes(r, 100, 128)...)
	table := build(t, routes)
	v4 := routes[len(routes)/2].prefix.Addr()
	v6 := routes[len(routes)-1].prefix.Addr()
	mapped := netip.AddrFrom16(v4.As16())
	lookups := map[string]func(){
		"Lookup4":        func() { table.Lookup4(v4.As4()) },
		"Lookup6":        func() { table.Lookup6(v6.As16()) },
		"Lookup IPv4":    func() { table.Lookup(v4) },
		"Lookup IPv6":    func() { table.Lookup(v6) },
		"Lookup mapped":  func() { table.Lookup(mapped) },
		"Lookup4 on nil": func() { (*Table)(nil).Lookup4(v4.As4()) },
	}
	for name, lookup := range lookups {
		if n := testing.AllocsPerRun(1000, lookup); n != 0 {
			t.Errorf("%s allocates %v times per call, want 0", name, n)
		}
	}
}

func TestConcurrentLookups(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	routes := gatewayRoutes4(r, 2000)
	table := build(t, routes)
	addrs := probeAddrs(r, routes, 32, 100)
	want := make([]uint32, len(addrs))
	for i, a := range addrs {
		want[i], _ = table.Lookup(a)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i, a := range addrs {
				if hop, _ := table.Lookup(a); hop != want[i] {
					t.Errorf("concurrent Lookup(%s) = %d, want %d", a, hop, want[i])
					return
				}
			}
		})
	}
	wg.Wait()
}

// gatewayRoutes4 returns about n IPv4 routes shaped like a gateway's: a default route, a few
// /8 and /16 cluster ranges, one /24 pod CIDR per remote node (a tenth of the routes) and /32
// routes to pods inside those node CIDRs (the rest).
func gatewayRoutes4(r *rand.Rand, n int) []refRoute {
	var routes []refRoute
	hop := uint32(0)
	add := func(p netip.Prefix) {
		hop++
		routes = append(routes, refRoute{p, hop})
	}
	for _, s := range []string{"0.0.0.0/0", "10.0.0.0/8", "100.0.0.0/8", "172.16.0.0/16", "192.168.0.0/16"} {
		add(netip.MustParsePrefix(s))
	}
	const clusters = 8 // pod CIDRs 10.<cluster>.0.0/16
	for c := range clusters {
		add(netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(c), 0, 0}), 16))
	}
	nodes := max(1, n/10)
	var nodeCIDRs []netip.Prefix
	for i := range nodes {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i % clusters), byte(i / clusters), 0}), 24)
		nodeCIDRs = append(nodeCIDRs, p)
		add(p)
	}
	seen := make(map[netip.Addr]bool)
	for len(routes) < n {
		node := nodeCIDRs[r.IntN(len(nodeCIDRs))].Addr().As4()
		node[3] = byte(1 + r.IntN(254))
		if a := netip.AddrFrom4(node); !seen[a] {
			seen[a] = true
			add(netip.PrefixFrom(a, 32))
		}
	}
	return routes
}

// gatewayAddrs4 returns 4096 destination addresses for routes from gatewayRoutes4: half of them
// pod addresses with a /32 route, a third random addresses in node CIDRs, the rest random.
func gatewayAddrs4(r *rand.Rand, routes []refRoute) [][4]byte {
	var pods, nodes []netip.Prefix
	for _, rt := range routes {
		switch rt.prefix.Bits() {
		case 32:
			pods = append(pods, rt.prefix)
		case 24:
			nodes = append(nodes, rt.prefix)
		}
	}
	if len(nodes) == 0 { // no node CIDRs (watchPodsRoutes4): the /24s the pods are in
		for _, p := range pods {
			nodes = append(nodes, netip.PrefixFrom(p.Addr(), 24).Masked())
		}
	}
	addrs := make([][4]byte, 4096)
	for i := range addrs {
		switch x := r.IntN(6); {
		case x < 3 && len(pods) > 0:
			addrs[i] = pods[r.IntN(len(pods))].Addr().As4()
		case x < 5 && len(nodes) > 0:
			addrs[i] = nearAddr(r, nodes[r.IntN(len(nodes))].Addr()).As4()
			addrs[i][3] = byte(r.Uint32())
		default:
			addrs[i] = randomAddr(r, 32).As4()
		}
	}
	return addrs
}

// retainedBytes returns how much heap the table made by build keeps alive.
func retainedBytes(build func() *Table) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	table := build()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(table)
	return float64(after.HeapAlloc) - float64(before.HeapAlloc)
}

func benchmarkLookup4(b *testing.B, n int) {
	r := rand.New(rand.NewPCG(4, uint64(n)))
	benchmarkLookup4Routes(b, r, gatewayRoutes4(r, n))
}

// benchmarkLookup4Routes looks up addresses in and near routes' prefixes, reporting the
// table's retained size.
func benchmarkLookup4Routes(b *testing.B, r *rand.Rand, routes []refRoute) {
	var table *Table
	tableBytes := retainedBytes(func() *Table { table = build(b, routes); return table })
	addrs := gatewayAddrs4(r, routes)
	var sum uint32
	for i := 0; b.Loop(); i++ {
		hop, _ := table.Lookup4(addrs[i&(len(addrs)-1)])
		sum += hop
	}
	runtime.KeepAlive(sum)
	b.ReportMetric(tableBytes, "bytes/table") // after the loop: b.Loop's timer reset drops metrics
}

func BenchmarkLookup4_10k(b *testing.B) { benchmarkLookup4(b, 10_000) }
func BenchmarkLookup4_100(b *testing.B) { benchmarkLookup4(b, 100) }

// Kubernetes' scalability limits: 5,000 nodes, 150,000 pods.
const (
	limitNodes = 5_000
	limitPods  = 150_000
)

// watchPodsRoutes4 returns the routes of a gateway run with --watch-pods at the given scale:
// the tunnel's prefixes of gatewayRoutes4 (a default route, /8 and /16 ranges) and a /32 per
// pod, for a CNI that gives nodes no pod CIDR of their own but hands each a /26 block (the
// reason to watch pods): pods spread evenly over the nodes, node i's in the i-th /26 of
// 10.64.0.0/12, the hop being the node.
func watchPodsRoutes4(nodes, pods int) []refRoute {
	var routes []refRoute
	for i, s := range []string{"0.0.0.0/0", "10.0.0.0/8", "100.0.0.0/8", "172.16.0.0/16", "192.168.0.0/16", "10.1.0.0/16"} {
		routes = append(routes, refRoute{netip.MustParsePrefix(s), uint32(i)})
	}
	const base = 10<<24 | 64<<16 // 10.64.0.0
	perNode := (pods + nodes - 1) / nodes
	for i := range pods {
		node, k := i%nodes, i/nodes
		a := uint32(base + node*64 + 1 + k%perNode)
		routes = append(routes, refRoute{netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)}), 32), uint32(8 + node)})
	}
	return routes
}

// BenchmarkLookup4_150k is BenchmarkLookup4_10k at the scale limits (watchPodsRoutes4): the
// per-packet lookup must stay within 10% of the 10k table's.
func BenchmarkLookup4_150k(b *testing.B) {
	benchmarkLookup4Routes(b, rand.New(rand.NewPCG(4, limitPods)), watchPodsRoutes4(limitNodes, limitPods))
}

func BenchmarkBuild_10k(b *testing.B) {
	routes := gatewayRoutes4(rand.New(rand.NewPCG(5, 5)), 10_000)
	for b.Loop() {
		build(b, routes)
	}
}

// BenchmarkBuild_150k is a full rebuild of the table at the scale limits (watchPodsRoutes4),
// Builder.Add of every route included: what every reconfiguration of such a gateway pays.
func BenchmarkBuild_150k(b *testing.B) {
	routes := watchPodsRoutes4(limitNodes, limitPods)
	for b.Loop() {
		build(b, routes)
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/build")
}

func BenchmarkLookup6_1k(b *testing.B) {
	r := rand.New(rand.NewPCG(6, 6))
	// A default route, a /48 per cluster, a /64 per node and /128 routes to pods.
	routes := []refRoute{{netip.MustParsePrefix("::/0"), 0}}
	for len(routes) < 1000 {
		cluster := [16]byte{0xfd, 0, 0, byte(r.IntN(8))}
		node, pod := cluster, cluster
		node[6], node[7] = 0, byte(r.IntN(100))
		pod = node
		pod[15] = byte(r.Uint32())
		for _, p := range []netip.Prefix{
			netip.PrefixFrom(netip.AddrFrom16(cluster), 48),
			netip.PrefixFrom(netip.AddrFrom16(node), 64),
			netip.PrefixFrom(netip.AddrFrom16(pod), 128),
		} {
			if _, dup := refFind(routes, p); !dup && len(routes) < 1000 {
				routes = append(routes, refRoute{p, uint32(len(routes))})
			}
		}
	}
	benchmarkLookup6Routes(b, r, routes)
}

// benchmarkLookup6Routes looks up addresses in or near routes (half of them inside a route,
// half near one), as benchmarkLookup4Routes does for IPv4.
func benchmarkLookup6Routes(b *testing.B, r *rand.Rand, routes []refRoute) {
	var table *Table
	tableBytes := retainedBytes(func() *Table { table = build(b, routes); return table })
	addrs := make([][16]byte, 4096)
	for i := range addrs {
		a := routes[r.IntN(len(routes))].prefix.Addr()
		if r.IntN(2) == 0 {
			a = nearAddr(r, a)
		}
		addrs[i] = a.As16()
	}
	var sum uint32
	for i := 0; b.Loop(); i++ {
		hop, _ := table.Lookup6(addrs[i&(len(addrs)-1)])
		sum += hop
	}
	runtime.KeepAlive(sum)
	b.ReportMetric(tableBytes, "bytes/table")
}

// BenchmarkLookup6_gateway is a dual-stack gateway's IPv6 table: the peer's pod CIDR as seen
// here (a /56), this cluster's node pod CIDRs (a /64 each, 10 nodes), and its own IPv6
// addresses (/128): what every IPv6 packet looks up twice (destination, then the source's
// node).
func BenchmarkLookup6_gateway(b *testing.B) {
	routes := []refRoute{{netip.MustParsePrefix("fd71::/56"), 0}, {netip.MustParsePrefix("fd80::1/128"), 1}, {netip.MustParsePrefix("fd99::1/128"), 1}}
	for i := range 10 {
		routes = append(routes, refRoute{netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 0, 2, 0x44, 0, 0, 0, byte(i + 1)}), 64), uint32(2 + i)})
	}
	benchmarkLookup6Routes(b, rand.New(rand.NewPCG(6, 7)), routes)
}

// BenchmarkLookup6_150k is the IPv6 table at the scale limits: 5,000 node /64s, 150,000 pod
// /128s (--watch-pods) and the peer's /56.
func BenchmarkLookup6_150k(b *testing.B) {
	routes := []refRoute{{netip.MustParsePrefix("fd71::/56"), 0}}
	for n := range limitNodes {
		node := [16]byte{0xfd, 0, 2, 0x44, 0, 0, byte(n >> 8), byte(n)}
		routes = append(routes, refRoute{netip.PrefixFrom(netip.AddrFrom16(node), 64), uint32(1 + n)})
	}
	for p := range limitPods {
		pod := [16]byte{0xfd, 0, 2, 0x44, 0, 1, 0, 0, 0, 0, 0, 0, byte(p >> 24), byte(p >> 16), byte(p >> 8), byte(p)}
		routes = append(routes, refRoute{netip.PrefixFrom(netip.AddrFrom16(pod), 128), uint32(1 + p%limitNodes)})
	}
	benchmarkLookup6Routes(b, rand.New(rand.NewPCG(6, 8)), routes)
}
