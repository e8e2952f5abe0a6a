package ipam_test

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/skein-net/skein/control/controller/ipam"
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
