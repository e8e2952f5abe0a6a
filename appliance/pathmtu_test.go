package appliance

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"
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

// TestPathMTUSchedule runs the schedule with short intervals and answers each search and
// confirmation: a search once up, a retry after a search that found nothing, confirmations,
// a search at once when one fails (the path narrowed), and nothing while down.
func TestPathMTUSchedule(t *testing.T) {
	var up atomic.Bool
	up.Store(true)
	calls := make(chan string)
	answers := make(chan bool)
	call := func(name string) bool { calls <- name; return <-answers }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s := pathMTUSchedule{
		up:      up.Load,
		search:  func() bool { return call("search") },
		confirm: func() bool { return call("confirm") },
		wait:    time.Millisecond, retry: time.Millisecond, every: time.Millisecond, raise: time.Hour,
	}
	go func() { s.run(ctx); close(done) }()
	var seen []string
	next := func(want string, answer bool) {
		t.Helper()
		select {
		case got := <-calls:
			seen = append(seen, got)
			if got != want {
				t.Fatalf("did %s, want %s (so far %v)", got, want, seen)
			}
			answers <- answer
		case <-time.After(10 * time.Second):
			t.Fatalf("nothing happened; want %s (so far %v)", want, seen)
		}
	}
	next("search", false) // found nothing: retried
	next("search", true)
	next("confirm", true)
	next("confirm", false) // the path narrowed: searched at once
	next("search", true)
	up.Store(false)
	select {
	case got := <-calls:
		// A confirmation already under way when it went down is fine; then nothing.
		answers <- true
		if got != "confirm" {
			t.Fatalf("did %s while down", got)
		}
	case <-time.After(20 * time.Millisecond):
	}
	select {
	case got := <-calls:
		t.Fatalf("did %s while down", got)
	case <-time.After(50 * time.Millisecond):
	}
	up.Store(true)
	next("search", true) // up again: a new search
	cancel()
	go func() {
		for range calls {
			answers <- true
		}
	}()
	<-done
}

// TestPathMTURaise: with a zero raise interval every round after a search is a new search
// (the path may have widened).
func TestPathMTURaise(t *testing.T) {
	searches, confirms := 0, 0
	ctx, cancel := context.WithCancel(context.Background())
	s := pathMTUSchedule{
		up: func() bool { return true },
		search: func() bool {
			searches++
			if searches == 3 {
				cancel()
			}
			return true
		},
		confirm: func() bool { confirms++; return true },
		wait:    time.Millisecond, retry: time.Millisecond, every: time.Millisecond, raise: 0,
	}
	s.run(ctx)
	if searches != 3 || confirms != 0 {
		t.Errorf("%d searches, %d confirmations; want searches only", searches, confirms)
	}
}
