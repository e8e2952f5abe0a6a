package appliance

import (
	"context"
	"slices"
	"testing"
)

func TestPathMTUCandidates(t *testing.T) {
	// IPv4: 1280 on the wire less 60 is 1220, down to a multiple of 16: 1216.
	if got, want := pathMTUCandidates(1340, outerOverhead), []int{1216, 1232, 1248, 1264, 1280, 1296, 1312, 1328, 1340}; !slices.Equal(got, want) {
		t.Errorf("IPv4 candidates %v, want %v", got, want)
	}
	if got := pathMTUCandidates(1340, outerOverhead+20); got[0] != 1200 || got[len(got)-1] != 1340 {
		t.Errorf("IPv6 candidates %v, want 1200 ... 1340", got)
	}
	if got := pathMTUCandidates(1200, outerOverhead); !slices.Equal(got, []int{1200}) {
		t.Errorf("a configured MTU below the smallest: %v, want it alone", got)
	}
}

// TestSearchPathMTU searches paths of every MTU from 1280 to 1500 on the wire (IPv4): the
// result is the largest candidate whose datagram fits, found with few probes.
func TestSearchPathMTU(t *testing.T) {
	cands := pathMTUCandidates(1340, outerOverhead)
	for wire := 1280; wire <= 1500; wire++ {
		probes := 0
		got, ok := searchPathMTU(context.Background(), cands, func(size int) (bool, bool) {
			probes++
			return size+outerOverhead <= wire, true
		})
		want := 0
		for _, c := range cands {
			if c+outerOverhead <= wire {
				want = c
			}
		}
		if !ok || got != want {
			t.Errorf("path %d: found %d (%v), want %d", wire, got, ok, want)
		}
		if probes > 6 {
			t.Errorf("path %d: %d probes, want at most 6 (the top, the bottom, a bisection of 9)", wire, probes)
		}
	}
	// Nothing answers: nothing found; undecided: nothing found.
	if _, ok := searchPathMTU(context.Background(), cands, func(int) (bool, bool) { return false, true }); ok {
		t.Error("found a size though no probe passed")
	}
	if _, ok := searchPathMTU(context.Background(), cands, func(int) (bool, bool) { return false, false }); ok {
		t.Error("found a size though no probe was decided")
	}
}
