package harness

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestPairedRatio(t *testing.T) {
	// Every run 10% faster than the baseline's of the same round, whatever the drift.
	base := []float64{100, 200, 150, 120, 180}
	a := make([]float64, len(base))
	for i, v := range base {
		a[i] = 1.1 * v
	}
	r, ok := pairedRatio(a, base)
	if !ok || math.Abs(r.Mean-1.1) > 1e-9 || math.Abs(r.Low-1.1) > 1e-9 || math.Abs(r.High-1.1) > 1e-9 || r.Pairs != 5 {
		t.Errorf("constant ratio: %+v", r)
	}
	// Ratios 0.9 and 1.1 alternately: the interval must hold 1 and be wider than the spread
	// of the geometric mean alone.
	r, _ = pairedRatio([]float64{90, 110, 90, 110}, []float64{100, 100, 100, 100})
	if !(r.Low < 1 && r.High > 1) || r.Low > 0.9 || r.High < 1.1 {
		t.Errorf("alternating ratios: %+v, want an interval over [0.9, 1.1] holding 1", r)
	}
	// A failed figure (0) in one round leaves that pair out.
	r, _ = pairedRatio([]float64{0, 110, 110}, []float64{100, 100, 100})
	if r.Pairs != 2 || math.Abs(r.Mean-1.1) > 1e-9 {
		t.Errorf("zero figure: %+v", r)
	}
	if _, ok := pairedRatio(nil, []float64{1}); ok {
		t.Error("no pairs reported a ratio")
	}
	if s := (Ratio{Mean: 0.94, Low: 0.91, High: 0.97, Pairs: 5}).String(); s != "0.94x [0.91-0.97]" {
		t.Errorf("String: %q", s)
	}
}

func TestMannWhitney(t *testing.T) {
	for _, c := range []struct {
		x, y []float64
		p    float64
	}{
		// Fully separated samples: the exact two-sided p is 2/C(n1+n2, n1).
		{[]float64{1, 2, 3}, []float64{4, 5, 6}, 2.0 / 20},
		{[]float64{1, 2, 3, 4, 5}, []float64{6, 7, 8, 9, 10}, 2.0 / 252},
		{[]float64{6, 7, 8, 9, 10}, []float64{1, 2, 3, 4, 5}, 2.0 / 252},
		// Interleaved samples: U = 10 of 25, P(U <= 10) = 87/252, far from significant.
		{[]float64{1, 3, 5, 7, 9}, []float64{2, 4, 6, 8, 10}, 174.0 / 252},
		// U = 1 of 25 (one inversion): P(U <= 1) = 2/252, two-sided 4/252.
		{[]float64{1, 2, 3, 4, 6}, []float64{5, 7, 8, 9, 10}, 4.0 / 252},
	} {
		if p := mannWhitneyP(c.x, c.y); math.Abs(p-c.p) > 1e-9 {
			t.Errorf("p(%v, %v) = %v, want %v", c.x, c.y, p, c.p)
		}
	}
	// Ties take the normal approximation: identical samples are never significant, separated
	// ones with a tie inside each still are at 8 a side.
	if p := mannWhitneyP([]float64{1, 1, 1}, []float64{1, 1, 1}); p != 1 {
		t.Errorf("identical samples: p = %v", p)
	}
	if p := mannWhitneyP([]float64{1, 1, 2, 3, 4, 5, 6, 7}, []float64{10, 10, 11, 12, 13, 14, 15, 16}); p >= 0.01 {
		t.Errorf("separated samples with ties: p = %v, want < 0.01", p)
	}
	// The distribution of U sums to C(m+n, m).
	var sum float64
	for _, c := range exactU(6, 4) {
		sum += c
	}
	if sum != 210 {
		t.Errorf("exactU(6, 4) sums to %v, want 210", sum)
	}
}

func result(runs map[string][]float64) *Result {
	r := &Result{Date: time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC), Machine: Machine{CPU: "test cpu", Cores: 2}}
	for name, v := range runs {
		r.Rungs = append(r.Rungs, RungResult{Name: name, Metrics: map[string]Metric{"tcp1": summarize(v), "rr-p50": summarize([]float64{200, 201, 199, 200, 202})}})
	}
	return r
}

func TestCompare(t *testing.T) {
	old := result(map[string][]float64{"skein": {2800, 2790, 2810, 2805, 2795}})
	cur := result(map[string][]float64{"skein": {3000, 3010, 2990, 3005, 2995}})
	changes := cur.Compare(old)
	if len(changes) != 2 {
		t.Fatalf("%d changes, want 2 (tcp1 and rr-p50): %+v", len(changes), changes)
	}
	for _, c := range changes {
		switch c.Metric {
		case "tcp1":
			if !c.Significant || math.Abs(c.Delta-(3000.0-2800)/2800) > 1e-9 {
				t.Errorf("tcp1: %+v, want a significant +7.1%%", c)
			}
		case "rr-p50":
			if c.Significant {
				t.Errorf("rr-p50 did not change: %+v", c)
			}
		}
	}
	md := cur.CompareMarkdown(old)
	if !strings.Contains(md, "| skein | TCP 1 stream (Mbit/s) | 2800 | 3000 | +7.1% |") || !strings.Contains(md, "1 of 2 figures show no significant change") {
		t.Errorf("compare report:\n%s", md)
	}
	if !strings.Contains(md, "With 5 runs against 5 the smallest possible p is 0.008") || strings.Contains(md, "different machines") {
		t.Errorf("compare report does not give the smallest p for 5 runs, or calls the same machine different:\n%s", md)
	}
	// 5 runs against 3 (an older report): 2/C(8,3).
	old3 := result(map[string][]float64{"skein": {2800, 2790, 2810}})
	old3.Machine.CPU = "another cpu"
	md = cur.CompareMarkdown(old3)
	if !strings.Contains(md, "With 5 runs against 3 the smallest possible p is 0.036") || !strings.Contains(md, "different machines") {
		t.Errorf("compare with a 3-run report from another machine:\n%s", md)
	}
}

// TestGoBench checks the benchstat input: the Go benchmark format's line grammar (name,
// iterations, then value-unit pairs with units free of spaces), one line per rung and run.
func TestGoBench(t *testing.T) {
	r := result(map[string][]float64{"skein": {1, 2, 3, 4, 5}, "wireguard-go": {1, 2, 3, 4, 5}})
	r.Rungs[0].Metrics["udp64-loss"] = summarize([]float64{1, 2, 3, 4, 5})
	line := regexp.MustCompile(`^Benchmark[^\s]+ 1( \S+ \S+)+$`)
	n := 0
	for _, l := range strings.Split(strings.TrimSpace(r.GoBench()), "\n") {
		if !strings.HasPrefix(l, "Benchmark") {
			continue
		}
		n++
		if !line.MatchString(l) {
			t.Errorf("not a benchmark line: %q", l)
		}
		f := strings.Fields(l)
		for i := 2; i < len(f); i += 2 {
			if _, err := strconv.ParseFloat(f[i], 64); err != nil {
				t.Errorf("value %q in %q", f[i], l)
			}
			if strings.Contains(f[i+1], "%") {
				t.Errorf("unit %q has a %% (benchstat reads it as a format)", f[i+1])
			}
		}
	}
	if n != 10 {
		t.Errorf("%d benchmark lines, want 10 (2 rungs x 5 runs):\n%s", n, r.GoBench())
	}
}

// TestCompareAwkwardReports: reports --compare may be given that the happy path does not
// cover. A figure whose old median is 0 (a UDP loss of 0%) has no relative change: it was
// printed as a significant "+0.0%". Reports without a rung in common said "0 of 0 figures
// show no significant change", which reads as "nothing changed".
func TestCompareAwkwardReports(t *testing.T) {
	old := result(map[string][]float64{"skein": {2800, 2790, 2810, 2805, 2795}})
	cur := result(map[string][]float64{"skein": {2800, 2790, 2810, 2805, 2795}})
	old.Rungs[0].Metrics["udp64-loss"] = summarize([]float64{0, 0, 0, 0, 0})
	cur.Rungs[0].Metrics["udp64-loss"] = summarize([]float64{2, 3, 2.5, 4, 3})
	md := cur.CompareMarkdown(old)
	if !strings.Contains(md, "| skein | UDP 64 B loss (%) | 0 | 3.00 | n/a (old median 0) |") {
		t.Errorf("a loss from 0%% to 3%%:\n%s", md)
	}
	for _, bad := range []string{"+0.0%", "NaN", "Inf"} {
		if strings.Contains(md, bad) {
			t.Errorf("the report says %q:\n%s", bad, md)
		}
	}

	other := result(map[string][]float64{"skein-nonat": {1, 2, 3, 4, 5}})
	md = cur.CompareMarkdown(other)
	if !strings.Contains(md, "No figure is in both reports") || strings.Contains(md, "0 of 0") ||
		!strings.Contains(md, "rungs only in this report: skein; rungs only in the old report: skein-nonat") {
		t.Errorf("reports without a rung in common:\n%s", md)
	}
	both := result(map[string][]float64{"skein": {2800, 2790, 2810, 2805, 2795}, "kernel-nat": {1, 2, 3, 4, 5}})
	if md = both.CompareMarkdown(old); !strings.Contains(md, "Not compared: rungs only in this report: kernel-nat.") {
		t.Errorf("a rung the old report lacks is not named:\n%s", md)
	}
}

// TestPairedRatioExtremes: figures a report may hold (read back by --from-json) whose ratio or
// interval does not fit a float64. A ratio of +Inf or an interval of [0-+Inf] was printed as
// such, and the report's JSON then failed to marshal, so no file was written.
func TestPairedRatioExtremes(t *testing.T) {
	for _, c := range []struct{ a, b []float64 }{
		{[]float64{1e300, 1e300}, []float64{1e-300, 1e-290}}, // the ratio overflows
		{[]float64{1e-300, 1e300}, []float64{1, 1}},          // its interval does
		{[]float64{1e-308}, []float64{1e308}},                // it underflows to 0
	} {
		if r, ok := pairedRatio(c.a, c.b); ok {
			t.Errorf("pairedRatio(%v, %v) = %+v (%s)", c.a, c.b, r, r)
		}
	}
	// One pair, identical pairs, and every pair equal: a ratio, an interval only from two.
	if r, ok := pairedRatio([]float64{2}, []float64{1}); !ok || r.Mean != 2 || r.Pairs != 1 || r.String() != "2.00x" {
		t.Errorf("one pair: %+v", r)
	}
	if r, ok := pairedRatio([]float64{5, 5}, []float64{5, 5}); !ok || r.Mean != 1 || r.Low != 1 || r.High != 1 {
		t.Errorf("identical pairs: %+v", r)
	}

	// --from-json of such a report writes its JSON, with the ratio left out.
	res := result(map[string][]float64{"skein": {1e300, 1e300}, "wireguard-go": {1e-300, 1e-290}})
	res.Recompute()
	if _, err := res.JSON(); err != nil {
		t.Errorf("JSON of a recomputed report: %v", err)
	}
}

// TestMannWhitneySmallSamples: the sample sizes and values a comparison meets with few runs.
// Ties (figures in whole microseconds, identical runs) took the normal approximation, which
// called 3 runs against 3 significant although no arrangement of 6 values can be; the exact
// test with ties is checked against counting every split of the pooled values by brute force.
func TestMannWhitneySmallSamples(t *testing.T) {
	for _, c := range []struct {
		x, y []float64
		p    float64
	}{
		{nil, nil, 1},
		{nil, []float64{1, 2}, 1},
		{[]float64{1}, []float64{2}, 1},
		{[]float64{1}, []float64{1}, 1},
		{[]float64{1, 1}, []float64{1, 1}, 1},
		{[]float64{1, 2}, []float64{3, 4}, 2.0 / 6},
		{[]float64{9, 9, 9}, []float64{10, 10, 10}, 2.0 / 20}, // was 0.047: "significant"
		{[]float64{9, 9, 9, 9, 9}, []float64{10, 10, 10, 10, 10}, 2.0 / 252},
		{[]float64{5, 5, 5, 5, 5}, []float64{5, 5, 5, 5, 5}, 1},
	} {
		if p := mannWhitneyP(c.x, c.y); math.Abs(p-c.p) > 1e-9 {
			t.Errorf("p(%v, %v) = %v, want %v", c.x, c.y, p, c.p)
		}
	}
	if p := mannWhitneyP([]float64{9, 9, 9}, []float64{10, 10, 10}); p < 0.05 {
		t.Errorf("3 runs against 3 are significant: p = %v", p)
	}

	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		n1, n2 := 1+rng.IntN(6), 1+rng.IntN(6)
		var x, y []float64
		for range n1 {
			x = append(x, float64(rng.IntN(4)))
		}
		for range n2 {
			y = append(y, float64(rng.IntN(4)))
		}
		if got, want := mannWhitneyP(x, y), bruteForceP(x, y); math.Abs(got-want) > 1e-9 {
			t.Errorf("p(%v, %v) = %v, counting every split gives %v", x, y, got, want)
		}
	}
	// 60 tied values, the most the exact test takes.
	x, y := make([]float64, 30), make([]float64, 30)
	for i := range x {
		x[i], y[i] = float64(i%5), float64(i%5+1)
	}
	if p := mannWhitneyP(x, y); !(p > 0 && p < 0.05) {
		t.Errorf("30 against 30 shifted by one, with ties: p = %v", p)
	}
}

// bruteForceP is the two-sided rank-sum p-value by trying every split of the pooled values
// into samples of x's and y's sizes (ties given their mid-ranks).
func bruteForceP(x, y []float64) float64 {
	pool := append(slices.Clone(x), y...)
	rank := func(v float64) float64 { // the mid-rank of v in pool
		below, equal := 0, 0
		for _, w := range pool {
			switch {
			case w < v:
				below++
			case w == v:
				equal++
			}
		}
		return float64(below) + float64(equal+1)/2
	}
	sum := func(s []float64) float64 {
		var r float64
		for _, v := range s {
			r += rank(v)
		}
		return r
	}
	n, n1 := len(pool), len(x)
	mean := float64(n1*(n+1)) / 2
	obs := math.Abs(sum(x) - mean)
	var all, tail float64
	for mask := 0; mask < 1<<n; mask++ {
		if bits.OnesCount(uint(mask)) != n1 {
			continue
		}
		var r float64
		for i := range n {
			if mask&(1<<i) != 0 {
				r += rank(pool[i])
			}
		}
		all++
		if math.Abs(r-mean) >= obs-1e-9 {
			tail++
		}
	}
	return tail / all
}

// TestMarkdownContendedWithoutItsBaseline: a +hog rung without wireguard-go+hog beside it
// (--contention-rungs skein, or wireguard-go+hog failed) has no ratio. The report's fallback
// for reports from before the paired ratios divided its medians by bare wireguard-go's, a
// contended figure over an uncontended one, printed as if it were its ratio.
func TestMarkdownContendedWithoutItsBaseline(t *testing.T) {
	r := result(map[string][]float64{"skein+hog": {5, 6, 7, 8, 9}, "wireguard-go": {10, 10, 10, 10, 10}, "skein": {20, 20, 20, 20, 20}})
	for _, recompute := range []bool{false, true} { // as Run leaves it, and as --from-json does
		if recompute {
			r.Recompute()
		}
		for _, l := range strings.Split(r.Markdown(), "\n") {
			if !strings.HasPrefix(l, "| TCP 1 stream (Mbit/s) |") {
				continue
			}
			if strings.Contains(l, "0.70x") {
				t.Errorf("recomputed %v: skein+hog set against wireguard-go without the hog: %s", recompute, l)
			}
			if !strings.Contains(l, "(2.00x") {
				t.Errorf("recomputed %v: skein has no ratio to wireguard-go: %s", recompute, l)
			}
		}
	}
}
