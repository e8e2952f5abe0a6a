package ipam_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/skein-net/skein/control/controller/ipam"
	"github.com/skein-net/skein/dataplane/nat"
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

var local = []netip.Prefix{pfx("10.244.0.0/16"), pfx("10.96.0.0/12"), pfx("10.70.0.0/16"), pfx("10.80.0.0/16")}

func TestAssign(t *testing.T) {
	a, err := ipam.New(ipam.DefaultPools, local)
	if err != nil {
		t.Fatal(err)
	}
	// Disjoint: kept as is.
	if got, err := a.Assign("a/pod", pfx("10.200.0.0/16")); err != nil || got != pfx("10.200.0.0/16") {
		t.Errorf("disjoint: %v %v", got, err)
	}
	// Three peers on 10.244.0.0/16: three distinct remaps, none overlapping anything.
	seen := map[netip.Prefix]string{}
	for _, k := range []string{"b/pod", "c/pod", "d/pod"} {
		got, err := a.Assign(k, pfx("10.244.0.0/16"))
		if err != nil {
			t.Fatal(err)
		}
		if got.Bits() != 16 || got == pfx("10.244.0.0/16") {
			t.Errorf("%s: %v", k, got)
		}
		for _, l := range append(local, pfx("10.200.0.0/16")) {
			if l.Overlaps(got) {
				t.Errorf("%s got %v, which overlaps %v", k, got, l)
			}
		}
		if other, dup := seen[got]; dup {
			t.Errorf("%s and %s both got %v", k, other, got)
		}
		seen[got] = k
	}
	// Stable: asking again returns the same.
	first, _ := a.Get("b/pod")
	if again, _ := a.Assign("b/pod", pfx("10.244.0.0/16")); again != first {
		t.Errorf("not stable: %v then %v", first, again)
	}
	// Restored allocations survive a new allocator (a restart).
	b, _ := ipam.New(ipam.DefaultPools, local)
	for _, k := range []string{"b/pod", "c/pod", "d/pod"} {
		p, _ := a.Get(k)
		b.Restore(k, p)
	}
	for _, k := range []string{"b/pod", "c/pod", "d/pod"} {
		want, _ := a.Get(k)
		if got, _ := b.Assign(k, pfx("10.244.0.0/16")); got != want {
			t.Errorf("after restart %s: %v, was %v", k, got, want)
		}
	}
	// Release frees.
	p, _ := a.Get("c/pod")
	a.Release("c/pod")
	if got, _ := a.Assign("e/pod", pfx("10.244.0.0/16")); got != p {
		t.Errorf("released %v not reused: got %v", p, got)
	}
}

func TestExhausted(t *testing.T) {
	a, _ := ipam.New([]netip.Prefix{pfx("192.168.0.0/23")}, []netip.Prefix{pfx("10.244.0.0/16")})
	for i := range 2 {
		if _, err := a.Assign(fmt.Sprint(i), pfx("10.244.0.0/24")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Assign("x", pfx("10.244.0.0/24")); !errors.Is(err, ipam.ErrExhausted) {
		t.Errorf("%v, want exhausted", err)
	}
	if _, err := a.Assign("y", netip.Prefix{}); err == nil {
		t.Error("invalid prefix accepted")
	}
}

// BenchmarkAssign24 fills /24s out of 10.0.0.0/8 around 500 busy ranges.
func BenchmarkAssign24(b *testing.B) {
	for range b.N {
		a, _ := ipam.New(ipam.DefaultPools, local)
		for i := range 500 {
			if _, err := a.Assign(fmt.Sprint(i), pfx("10.244.0.0/24")); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func TestUsage(t *testing.T) {
	a, err := ipam.New([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.0.0/16")},
		[]netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("172.16.0.0/16")})
	if err != nil {
		t.Fatal(err)
	}
	// A clash: remapped to a free /16 of 10/8. A NAT-less /24 in 192.168/16. One outside the pools.
	for key, want := range map[string]string{"a": "10.244.0.0/16", "b": "192.168.7.0/24", "c": "100.64.0.0/20"} {
		if _, err := a.Assign(key, netip.MustParsePrefix(want)); err != nil {
			t.Fatal(err)
		}
	}
	got := a.Usage()
	want := []ipam.PoolUsage{
		{Pool: netip.MustParsePrefix("10.0.0.0/8"), Size: 1 << 24, Reserved: 1<<16 + 1<<20, Assigned: 1 << 16},
		{Pool: netip.MustParsePrefix("192.168.0.0/16"), Size: 1 << 16, Reserved: 0, Assigned: 1 << 8},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("pool %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	a.Release("a")
	if u := a.Usage()[0]; u.Assigned != 0 {
		t.Errorf("after release: %+v", u)
	}

	h, err := ipam.NewHosts(netip.MustParsePrefix("10.80.0.0/29"), 1)
	if err != nil {
		t.Fatal(err)
	}
	h.Assign("x")
	h.Assign("y")
	if size, used := h.Usage(); size != 5 || used != 2 {
		t.Errorf("hosts usage %d/%d, want 2 of 5", used, size)
	}
}

// TestNodesNeverCovered: Calico's default pool 192.168.0.0/16 as a peer's pod CIDR, beside
// local nodes on 192.168.77.0/24, is remapped (kept as-is it would route the nodes' own
// addresses to the gateway); a node that joins later inside a NAT-less peer CIDR moves it.
func TestNodesNeverCovered(t *testing.T) {
	a, err := ipam.New(ipam.DefaultPools, []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")})
	if err != nil {
		t.Fatal(err)
	}
	a.SetNodes([]netip.Addr{netip.MustParseAddr("192.168.77.2"), netip.MustParseAddr("192.168.77.3"), netip.MustParseAddr("fd00::1")})
	calico := netip.MustParsePrefix("192.168.0.0/16")
	got, err := a.Assign("peer/pod", calico)
	if err != nil {
		t.Fatal(err)
	}
	if got == calico || got.Contains(netip.MustParseAddr("192.168.77.2")) || got.Bits() != 16 {
		t.Errorf("192.168.0.0/16 beside nodes on 192.168.77.0/24 seen as %v", got)
	}
	other := netip.MustParsePrefix("172.20.0.0/16")
	if got, _ := a.Assign("other/pod", other); got != other {
		t.Fatalf("172.20.0.0/16 clashes with nothing, got %v", got)
	}
	a.SetNodes([]netip.Addr{netip.MustParseAddr("192.168.77.2"), netip.MustParseAddr("172.20.9.9")})
	if got, _ := a.Assign("other/pod", other); got == other || got.Contains(netip.MustParseAddr("172.20.9.9")) {
		t.Errorf("after a node joined at 172.20.9.9, 172.20.0.0/16 is still seen as %v", got)
	}
	if u := a.Usage(); u[2].Reserved != 1 {
		t.Errorf("192.168/16 pool: %v reserved addresses, want the one node inside it", u[2].Reserved)
	}
}

// TestUsageCountsOnce: nested or repeated reserved ranges and restored assignments that
// overlap them count each address once; pools that overlap are refused.
func TestUsageCountsOnce(t *testing.T) {
	pp := func(ss ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, s := range ss {
			out = append(out, netip.MustParsePrefix(s))
		}
		return out
	}
	a, err := ipam.New(pp("192.168.0.0/16"), pp("192.168.0.0/17", "192.168.0.0/18", "192.168.64.0/18", "192.168.0.0/17"))
	if err != nil {
		t.Fatal(err)
	}
	a.Restore("x", netip.MustParsePrefix("192.168.0.0/24"))   // inside the reserved /17
	a.Restore("y", netip.MustParsePrefix("192.168.128.0/17")) // the other half
	a.Restore("z", netip.MustParsePrefix("192.168.200.0/24")) // inside y
	if u := a.Usage()[0]; u.Reserved != 1<<15 || u.Assigned != 1<<15 || u.Reserved+u.Assigned > u.Size {
		t.Errorf("usage %+v: want half reserved, half assigned", u)
	}
	b, err := ipam.New(pp("10.0.0.0/8"), pp("0.0.0.0/0", "10.0.0.0/8"))
	if err != nil {
		t.Fatal(err)
	}
	if u := b.Usage()[0]; u.Reserved != u.Size {
		t.Errorf("a pool inside a reserved /0: %+v", u)
	}
	for _, pools := range [][]netip.Prefix{pp("10.0.0.0/8", "10.1.2.3/8"), pp("10.0.0.0/8", "10.1.0.0/16")} {
		if _, err := ipam.New(pools, nil); err == nil || !strings.Contains(err.Error(), "overlap") {
			t.Errorf("pools %v: %v", pools, err)
		}
	}
}

// TestAssign6: IPv6 prefixes are kept when they clash with nothing and otherwise remapped into
// the IPv6 pools to a prefix of the same length whose translation changes no checksum; the
// families never mix.
func TestAssign6(t *testing.T) {
	localPods := pfx("fd00:244::/56")
	a, err := ipam.New(append(slices.Clone(ipam.DefaultPools), ipam.DefaultPools6...), append(slices.Clone(local), localPods, pfx("fd80::/64")))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := a.Assign("a/pod6", pfx("2001:db8:1::/48")); err != nil || got != pfx("2001:db8:1::/48") {
		t.Errorf("disjoint: %v %v", got, err)
	}
	seen := map[netip.Prefix]string{}
	for _, k := range []string{"b/pod6", "c/pod6", "d/pod6"} {
		got, err := a.Assign(k, localPods)
		if err != nil {
			t.Fatal(err)
		}
		if got.Bits() != 56 || !got.Addr().Is6() || got == localPods || !pfx("fd00::/8").Contains(got.Addr()) {
			t.Errorf("%s: %v, want another /56 in fd00::/8", k, got)
		}
		if !nat.ChecksumNeutral(nat.Pair{From: got, To: localPods}) {
			t.Errorf("%s: %v is not checksum-neutral with %v", k, got, localPods)
		}
		for _, l := range []netip.Prefix{localPods, pfx("fd80::/64")} {
			if l.Overlaps(got) {
				t.Errorf("%s got %v, which overlaps %v", k, got, l)
			}
		}
		if other, dup := seen[got]; dup {
			t.Errorf("%s and %s both got %v", k, other, got)
		}
		seen[got] = k
	}
	first, _ := a.Get("b/pod6")
	if again, _ := a.Assign("b/pod6", localPods); again != first {
		t.Errorf("not stable: %v then %v", first, again)
	}
	// An IPv4 key that held a prefix asks for IPv6 (the CIDR changed family): a new one.
	if got, err := a.Assign("a/pod6", pfx("10.244.0.0/16")); err != nil || !got.Addr().Is4() {
		t.Errorf("family changed: %v %v", got, err)
	}

	// Only IPv4 pools: a clashing IPv6 prefix has nowhere to go.
	v4, _ := ipam.New(ipam.DefaultPools, []netip.Prefix{localPods})
	if _, err := v4.Assign("x", localPods); !errors.Is(err, ipam.ErrExhausted) {
		t.Errorf("IPv6 with IPv4 pools only: %v", err)
	}
	// A node's IPv6 address inside a peer's prefix makes it clash.
	a.SetNodes([]netip.Addr{netip.MustParseAddr("2001:db8:2::7")})
	if got, _ := a.Assign("e/pod6", pfx("2001:db8:2::/48")); got == pfx("2001:db8:2::/48") || got.Contains(netip.MustParseAddr("2001:db8:2::7")) {
		t.Errorf("a peer's /48 holding a node address kept as %v", got)
	}
}

// TestAssign6NotNeutral: a pool whose free bits hold no whole 16-bit word of the prefix cannot
// make a neutral one; the first free prefix is given instead. The search skips what is busy.
func TestAssign6NotNeutral(t *testing.T) {
	want := pfx("fd00:244::/56")
	a, err := ipam.New([]netip.Prefix{pfx("fd00:abcd:0:100::/52")}, []netip.Prefix{want, pfx("fd00:abcd:0:100::/55")})
	if err != nil {
		t.Fatal(err)
	}
	got, err := a.Assign("x", want)
	if err != nil || got != pfx("fd00:abcd:0:200::/56") {
		t.Errorf("got %v %v, want the first free /56 past the reserved /55: fd00:abcd:0:200::/56", got, err)
	}
	// Exhausted: the pool holds 16 /56s, one reserved pair and x's taken.
	n := 1
	for ; n < 20; n++ {
		if _, err := a.Assign(fmt.Sprintf("k%d", n), want); err != nil {
			if !errors.Is(err, ipam.ErrExhausted) {
				t.Fatal(err)
			}
			break
		}
	}
	if n != 14 {
		t.Errorf("%d more /56s given out of the 13 free", n-1)
	}
}

// TestAssign6Random: random pools, reserved prefixes and wants: every answer has want's length
// and family, lies in a pool (or is want), overlaps nothing reserved or assigned, and is
// checksum-neutral whenever the pool leaves a whole word free inside the prefix.
func TestAssign6Random(t *testing.T) {
	r := rand.New(rand.NewPCG(24, 6))
	randPrefix := func(bits int) netip.Prefix {
		var b [16]byte
		b[0] = 0xfd
		for i := 1; i < 16; i++ {
			b[i] = byte(r.Uint32())
		}
		return netip.PrefixFrom(netip.AddrFrom16(b), bits).Masked()
	}
	for round := range 200 {
		poolBits := 8 + r.IntN(48)
		pool := randPrefix(poolBits)
		var reserved []netip.Prefix
		for range r.IntN(5) {
			reserved = append(reserved, netip.PrefixFrom(pool.Addr(), poolBits+1+r.IntN(8)).Masked())
		}
		a, err := ipam.New([]netip.Prefix{pool}, reserved)
		if err != nil {
			t.Fatal(err)
		}
		given := slices.Clone(reserved) // what no answer may overlap
		for k := range 5 {
			bits := poolBits + 4 + r.IntN(128-poolBits-4)
			// At the pool's start: it clashes with a reserved prefix or an earlier answer, if any.
			want := netip.PrefixFrom(pool.Addr(), bits).Masked()
			got, err := a.Assign(fmt.Sprintf("%d/%d", round, k), want)
			if errors.Is(err, ipam.ErrExhausted) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Bits() != bits || !pool.Contains(got.Addr()) {
				t.Fatalf("round %d: want %v in pool %v: got %v", round, want, pool, got)
			}
			for _, q := range given {
				if q.Overlaps(got) {
					t.Fatalf("round %d: %v overlaps %v", round, got, q)
				}
			}
			w := bits/16 - 1
			if w >= 0 && 16*w >= poolBits && !nat.ChecksumNeutral(nat.Pair{From: got, To: want}) && got != want {
				t.Errorf("round %d: %v for %v in pool %v is not neutral though a whole word is free", round, got, want, pool)
			}
			given = append(given, got)
		}
	}
}

// TestHosts6: an IPv6 external CIDR hands out addresses like an IPv4 one (its first address
// never), keeps them per key, and refuses what is not a CIDR of at least 4 addresses.
func TestHosts6(t *testing.T) {
	h, err := ipam.NewHosts(netip.MustParsePrefix("fd00:70::/126"), 0)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := h.Assign("n0")
	b, _ := h.Assign("n1")
	again, _ := h.Assign("n0")
	if a != netip.MustParseAddr("fd00:70::1") || b != netip.MustParseAddr("fd00:70::2") || again != a {
		t.Errorf("assigned %v, %v, then %v to n0 again; want fd00:70::1, fd00:70::2, fd00:70::1", a, b, again)
	}
	if _, err := h.Assign("n2"); !errors.Is(err, ipam.ErrExhausted) {
		t.Errorf("a /126 gave out a third address (the last is never given): %v", err)
	}
	if size, used := h.Usage(); size != 2 || used != 2 {
		t.Errorf("usage %d/%d, want 2 of 2", used, size)
	}
	big, _ := ipam.NewHosts(netip.MustParsePrefix("fd00:70::/56"), 0)
	if size, _ := big.Usage(); size != math.MaxUint64 {
		t.Errorf("a /56's size %d, want the largest uint64", size)
	}
	for _, bad := range []string{"fd00:70::/127", "::ffff:10.70.0.0/112", "10.70.0.0/31"} {
		if _, err := ipam.NewHosts(netip.MustParsePrefix(bad), 0); err == nil {
			t.Errorf("NewHosts(%s) took it", bad)
		}
	}
}

// TestPublicRangesRemapped (found by an attack review): a peer's CIDR is routed by every node
// to its gateway, so one that publishes public ranges (8.8.8.0/24, 52.0.0.0/8) would take the
// cluster's traffic to them. With SetAsIs(PrivateRanges) a CIDR outside the private ranges is
// remapped from the pools even when it clashes with nothing, and says why; private ones are
// kept; an assignment kept as it was before is remapped at the next Assign.
func TestPublicRangesRemapped(t *testing.T) {
	a, err := ipam.New(slices.Concat(ipam.DefaultPools, ipam.DefaultPools6), local)
	if err != nil {
		t.Fatal(err)
	}
	a.Restore("old/pod", pfx("8.8.4.0/24")) // used as it was, by an older controller
	a.SetAsIs(ipam.PrivateRanges)
	for _, c := range []struct {
		key, want string
		remapped  bool
	}{
		{"a/pod", "8.8.8.0/24", true},
		{"b/pod", "52.1.0.0/16", true},
		{"c/ext", "2001:db8::/48", true},
		{"old/pod", "8.8.4.0/24", true},
		{"d/pod", "10.200.0.0/16", false},
		{"e/pod", "100.64.0.0/16", false},
		{"f/pod", "fd00:244::/56", false},
	} {
		want := pfx(c.want)
		clash := a.Clash(c.key, want)
		got, err := a.Assign(c.key, want)
		if err != nil {
			t.Fatalf("%s: %v", c.want, err)
		}
		if remapped := got != want; remapped != c.remapped || (c.remapped && !within(got, ipam.PrivateRanges)) {
			t.Errorf("%s: assigned %v, want remapped %v into a private range", c.want, got, c.remapped)
		}
		if c.remapped && !strings.Contains(clash, "no private range") {
			t.Errorf("%s: clash %q, want it to say why", c.want, clash)
		}
	}
	// A public /8 finds no room in the pools: not mapped at all (the Configuration is then
	// PoolExhausted and nothing routes it), never used as it is.
	if got, err := a.Assign("g/pod", pfx("52.0.0.0/8")); !errors.Is(err, ipam.ErrExhausted) {
		t.Errorf("52.0.0.0/8: %v %v, want ErrExhausted", got, err)
	}
}

func within(p netip.Prefix, ranges []netip.Prefix) bool {
	return slices.ContainsFunc(ranges, func(r netip.Prefix) bool { return r.Bits() <= p.Bits() && r.Contains(p.Addr()) })
}
