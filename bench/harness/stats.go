package harness

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
)

// Statistics for decisions of a few percent: with interleaved runs, run i of every rung saw the
// same moment of the machine, so a rung's ratio to the baseline is taken run by run (paired)
// and summarised as the geometric mean of those ratios with a 95% confidence interval from
// Student's t on their logarithms. Two reports of the same rung are compared with the
// Mann-Whitney U test, as benchstat does, so that "changed" means more than noise.

// Ratio is a rung's figure over the baseline's.
type Ratio struct {
	// Mean is the geometric mean of the per-run ratios.
	Mean float64 `json:"mean"`
	// Low and High bound the 95% confidence interval of Mean; both are zero with fewer than
	// two paired runs.
	Low  float64 `json:"low,omitempty"`
	High float64 `json:"high,omitempty"`
	// Pairs is the number of runs paired.
	Pairs int `json:"pairs"`
}

// tQuantile975 is the 0.975 quantile of Student's t with df degrees of freedom.
func tQuantile975(df int) float64 {
	table := []float64{0, 12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
		2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086}
	switch {
	case df <= 0:
		return math.Inf(1)
	case df < len(table):
		return table[df]
	default:
		return 1.96 + 2.4/float64(df) // within 0.5% of the exact value beyond 20
	}
}

// pairedRatio compares rung runs a with baseline runs b, pairing them by position (run i of
// both was taken in the same round). Pairs where either figure is not positive are left out.
// There is no ratio (false) when one of its figures would not be a finite positive number
// (figures so far apart that their ratio or its interval overflows): the report would print
// "+Inf" or "NaN", and its JSON could not be written at all.
func pairedRatio(a, b []float64) (Ratio, bool) {
	var logs []float64
	for i := range min(len(a), len(b)) {
		if a[i] > 0 && b[i] > 0 && !math.IsInf(a[i], 0) && !math.IsInf(b[i], 0) {
			logs = append(logs, math.Log(a[i])-math.Log(b[i])) // a[i]/b[i] itself may overflow
		}
	}
	if len(logs) == 0 {
		return Ratio{}, false
	}
	var mean float64
	for _, l := range logs {
		mean += l
	}
	mean /= float64(len(logs))
	r := Ratio{Mean: math.Exp(mean), Pairs: len(logs)}
	if len(logs) > 1 {
		var ss float64
		for _, l := range logs {
			ss += (l - mean) * (l - mean)
		}
		se := math.Sqrt(ss/float64(len(logs)-1)) / math.Sqrt(float64(len(logs)))
		h := tQuantile975(len(logs)-1) * se
		r.Low, r.High = math.Exp(mean-h), math.Exp(mean+h)
	}
	usable := func(v float64) bool { return v > 0 && !math.IsInf(v, 0) } // NaN is not > 0
	if !usable(r.Mean) || r.Pairs > 1 && (!usable(r.Low) || !usable(r.High)) {
		return Ratio{}, false
	}
	return r, true
}

// String is "0.94x [0.91-0.97]", or "0.94x" without an interval.
func (r Ratio) String() string {
	if r.Pairs < 2 {
		return fmt.Sprintf("%.2fx", r.Mean)
	}
	return fmt.Sprintf("%.2fx [%.2f-%.2f]", r.Mean, r.Low, r.High)
}

// PairedRatio is pairedRatio, for the suites that compare two tools' measurements taken in turn.
func PairedRatio(a, b []float64) (Ratio, bool) { return pairedRatio(a, b) }

// mannWhitneyP is the two-sided p-value of the Mann-Whitney U test that samples x and y come
// from the same distribution: exact (by counting the rank arrangements) up to 60 values in
// all, otherwise the normal approximation with the tie correction. With ties the exact test
// counts the arrangements of the tied ranks as they are (tiedExactP): the approximation is
// far from it with few runs and ties are common there (latencies in whole microseconds),
// and it made 3 runs against 3 "significant" (p = 0.047 for 9, 9, 9 against 10, 10, 10),
// which no arrangement of 6 values can be (the exact p is 0.1).
func mannWhitneyP(x, y []float64) float64 {
	n1, n2 := len(x), len(y)
	if n1 == 0 || n2 == 0 {
		return 1
	}
	type obs struct {
		v     float64
		first bool
	}
	all := make([]obs, 0, n1+n2)
	for _, v := range x {
		all = append(all, obs{v, true})
	}
	for _, v := range y {
		all = append(all, obs{v, false})
	}
	slices.SortFunc(all, func(a, b obs) int {
		switch {
		case a.v < b.v:
			return -1
		case a.v > b.v:
			return 1
		}
		return 0
	})
	// Mid-ranks, doubled in w; ties collected for the variance correction.
	var r1, tieTerm float64
	ties := false
	w := make([]int, len(all))
	r1x2 := 0
	for i := 0; i < len(all); {
		j := i
		for j < len(all) && all[j].v == all[i].v {
			j++
		}
		rank := float64(i+j+1) / 2 // ranks i+1..j averaged
		for k := i; k < j; k++ {
			w[k] = i + j + 1
			if all[k].first {
				r1 += rank
				r1x2 += i + j + 1
			}
		}
		if t := float64(j - i); t > 1 {
			ties = true
			tieTerm += t*t*t - t
		}
		i = j
	}
	u := r1 - float64(n1*(n1+1))/2
	mean := float64(n1*n2) / 2
	if ties && n1+n2 <= 60 {
		return tiedExactP(w, n1, r1x2)
	}
	if !ties && n1+n2 <= 60 {
		// counts[k] = arrangements giving U = k; built by the recurrence on the largest value.
		dist := exactU(n1, n2)
		var total, tail float64
		lo := math.Min(u, float64(n1*n2)-u)
		for k, c := range dist {
			total += c
			if float64(k) <= lo+1e-9 {
				tail += c
			}
		}
		return math.Min(1, 2*tail/total)
	}
	n := float64(n1 + n2)
	v := float64(n1*n2) / 12 * (n + 1 - tieTerm/(n*(n-1)))
	if v <= 0 {
		return 1
	}
	z := (math.Abs(u-mean) - 0.5) / math.Sqrt(v)
	if z < 0 {
		z = 0
	}
	return math.Erfc(z / math.Sqrt2)
}

// tiedExactP is the exact two-sided p-value of the rank-sum test with ties: the share of the
// ways to pick n1 of the observations, whose doubled mid-ranks are w (integers), that give a
// rank sum at least as far from its mean as r1x2, the first sample's doubled rank sum. It
// takes about len(w) * n1 * len(w)^2 steps (13 million for 60 observations).
func tiedExactP(w []int, n1 int, r1x2 int) float64 {
	n := len(w)
	total := 0
	for _, v := range w {
		total += v
	}
	// f[k][s]: the ways to pick k of the observations seen so far with doubled rank sum s.
	f := make([][]float64, n1+1)
	for k := range f {
		f[k] = make([]float64, total+1)
	}
	f[0][0] = 1
	for i, v := range w {
		for k := min(i+1, n1); k >= 1; k-- {
			prev, cur := f[k-1], f[k]
			for s := total; s >= v; s-- {
				cur[s] += prev[s-v]
			}
		}
	}
	mean2 := n1 * (n + 1) // the doubled rank sum's mean
	far := r1x2 - mean2
	if far < 0 {
		far = -far
	}
	var all, tail float64
	for s, c := range f[n1] {
		all += c
		if d := s - mean2; d >= far || -d >= far {
			tail += c
		}
	}
	return math.Min(1, tail/all)
}

// exactU returns, for samples of sizes m and n without ties, the number of rank arrangements
// giving each value of U (index 0..m*n).
func exactU(m, n int) []float64 {
	// f[i][j] is the distribution for sizes i and j; f(i,j,u) = f(i-1,j,u-j) + f(i,j-1,u).
	f := make([][][]float64, m+1)
	for i := range f {
		f[i] = make([][]float64, n+1)
		for j := range f[i] {
			d := make([]float64, i*j+1)
			switch {
			case i == 0 || j == 0:
				d[0] = 1
			default:
				for u := range d {
					if u-j >= 0 && u-j < len(f[i-1][j]) {
						d[u] += f[i-1][j][u-j]
					}
					if u < len(f[i][j-1]) {
						d[u] += f[i][j-1][u]
					}
				}
			}
			f[i][j] = d
		}
	}
	return f[m][n]
}

// Change is one figure that differs between an old and a new report.
type Change struct {
	Rung, Metric string
	Old, New     float64 // medians
	// Delta is (New-Old)/Old; NaN when Old is not positive (a loss of 0%), where a relative
	// change means nothing.
	Delta float64
	P     float64
	// Significant: the runs differ at p < 0.05.
	Significant bool
}

// labRungName names the lab rung in "Not compared" (its measurements' changes are named
// "lab: fabric" and so on).
const labRungName = "the lab rung"

// Compare sets every figure of r against old's (same rung, same metric) and returns them all,
// significant or not, in report order, the lab rung's measurements after the ladder's rungs.
// Rungs or figures missing from either are skipped.
func (r *Result) Compare(old *Result) []Change {
	var out []Change
	add := func(rung, key string, om, nm Metric) {
		if len(nm.Runs) == 0 || len(om.Runs) == 0 {
			return
		}
		c := Change{Rung: rung, Metric: key, Old: om.Median, New: nm.Median, P: mannWhitneyP(om.Runs, nm.Runs)}
		c.Delta = math.NaN()
		if om.Median > 0 {
			c.Delta = (nm.Median - om.Median) / om.Median
		}
		c.Significant = c.P < 0.05
		out = append(out, c)
	}
	for _, rg := range r.Rungs {
		og := old.rung(rg.Name)
		if og == nil {
			continue
		}
		for _, mo := range metricOrder {
			nm, ok1 := rg.Metrics[mo.key]
			om, ok2 := og.Metrics[mo.key]
			if ok1 && ok2 {
				add(rg.Name, mo.key, om, nm)
			}
		}
	}
	if r.Lab == nil || old.Lab == nil {
		return out
	}
	for _, m := range r.Lab.Measurements {
		om := old.Lab.measurement(m.Name)
		if om == nil {
			continue
		}
		for _, f := range []struct {
			key      string
			old, new *Metric
		}{{"tcp1", &om.Mbps, &m.Mbps}, {"rr-p50", om.P50, m.P50}, {"rr-p99", om.P99, m.P99}, {"cpu-per-gb", om.CPUPerGB, m.CPUPerGB}} {
			if f.old != nil && f.new != nil {
				add("lab: "+m.Name, f.key, *f.old, *f.new)
			}
		}
	}
	return out
}

// CompareMarkdown is the report of Compare: the significant changes first, then how many
// figures did not change, with the smallest p-value the run counts allow (with 3 runs a side
// nothing can reach p < 0.05).
func (r *Result) CompareMarkdown(old *Result) string {
	var b strings.Builder
	changes := r.Compare(old)
	fmt.Fprintf(&b, "## Compared with the report of %s\n\n", old.Date.Format("2006-01-02 15:04 UTC"))
	if old.Machine.CPU != r.Machine.CPU || old.Machine.Cores != r.Machine.Cores || old.Machine.Kernel != r.Machine.Kernel {
		fmt.Fprintf(&b, "The reports come from different machines (%s, %d cores, kernel %s; now %s, %d cores, kernel %s): "+
			"the changes below are the machines' as much as the code's.\n\n",
			old.Machine.CPU, old.Machine.Cores, old.Machine.Kernel, r.Machine.CPU, r.Machine.Cores, r.Machine.Kernel)
	}
	var same int
	b.WriteString("| rung | metric | old median | new median | change | p |\n|---|---|---|---|---|---|\n")
	for _, c := range changes {
		if !c.Significant {
			same++
			continue
		}
		change := fmt.Sprintf("%+.1f%%", 100*c.Delta)
		if math.IsNaN(c.Delta) {
			change = "n/a (old median " + format(c.Old) + ")"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %.3f |\n", c.Rung, title(c.Metric), format(c.Old), format(c.New), change, c.P)
	}
	if onlyNew, onlyOld := unpaired(r, old), unpaired(old, r); len(onlyNew)+len(onlyOld) > 0 {
		b.WriteString("\nNot compared: ")
		if len(onlyNew) > 0 {
			fmt.Fprintf(&b, "rungs only in this report: %s", strings.Join(onlyNew, ", "))
			if len(onlyOld) > 0 {
				b.WriteString("; ")
			}
		}
		if len(onlyOld) > 0 {
			fmt.Fprintf(&b, "rungs only in the old report: %s", strings.Join(onlyOld, ", "))
		}
		b.WriteString(".\n")
	}
	if len(changes) == 0 {
		b.WriteString("\nNo figure is in both reports: nothing was compared.\n")
		return b.String()
	}
	fmt.Fprintf(&b, "\n%d of %d figures show no significant change (Mann-Whitney U, p >= 0.05).", same, len(changes))
	if n, m := minRuns(r), minRuns(old); n > 0 && m > 0 {
		fmt.Fprintf(&b, " With %d runs against %d the smallest possible p is %.3f.", n, m, mannWhitneyP(ones(n, 0), ones(m, 1)))
	}
	b.WriteString("\n")
	return b.String()
}

// unpaired names the rungs of r that other does not have, the lab rung among them.
func unpaired(r, other *Result) []string {
	var out []string
	for _, rg := range r.Rungs {
		if other.rung(rg.Name) == nil {
			out = append(out, rg.Name)
		}
	}
	if r.Lab != nil && len(r.Lab.Measurements) > 0 && (other.Lab == nil || len(other.Lab.Measurements) == 0) {
		out = append(out, labRungName)
	}
	return out
}

func ones(n int, v float64) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = v + float64(i)/float64(2*n) // distinct values, all below v+0.5
	}
	return s
}

// minRuns is the fewest runs any rung of r has (the lab rung's rounds in a report without
// the ladder).
func minRuns(r *Result) int {
	n := 0
	for _, rg := range r.Rungs {
		if m, ok := rg.Metrics["tcp1"]; ok && (n == 0 || len(m.Runs) < n) {
			n = len(m.Runs)
		}
	}
	if len(r.Rungs) == 0 && r.Lab != nil {
		for _, m := range r.Lab.Measurements {
			if n == 0 || len(m.Mbps.Runs) < n {
				n = len(m.Mbps.Runs)
			}
		}
	}
	return n
}

func title(key string) string {
	for _, mo := range metricOrder {
		if mo.key == key {
			return mo.title + " (" + mo.unit + ")"
		}
	}
	return key
}

// GoBench is the result in the Go benchmark format, one line per rung and run with every
// figure as a value-unit pair, so that `benchstat old.txt new.txt` compares two reports:
//
//	BenchmarkLadder/rung=skein 1 2782 tcp1-Mbit/s 2776 tcp1-reverse-Mbit/s ...
func (r *Result) GoBench() string {
	var b strings.Builder
	fmt.Fprintf(&b, "goos: linux\ngoarch: %s\ncpu: %s\npkg: github.com/skein-net/skein/bench/harness\n", runtime.GOARCH, r.Machine.CPU)
	runs := 0
	for _, rg := range r.Rungs {
		for _, m := range rg.Metrics {
			runs = max(runs, len(m.Runs))
		}
	}
	for run := range runs {
		for _, rg := range r.Rungs {
			var line strings.Builder
			for _, mo := range metricOrder {
				m, ok := rg.Metrics[mo.key]
				if !ok || run >= len(m.Runs) {
					continue
				}
				fmt.Fprintf(&line, " %g %s-%s", m.Runs[run], mo.key, strings.ReplaceAll(mo.unit, "%", "pct"))
			}
			if line.Len() > 0 {
				fmt.Fprintf(&b, "BenchmarkLadder/rung=%s 1%s\n", rg.Name, line.String())
			}
		}
	}
	return b.String()
}

// Recompute fills every rung's Ratios again from the runs its report holds, as Run does: for
// a report read back from JSON, written by an older harness or before a change to the ratios.
func (r *Result) Recompute() {
	if r.Lab != nil {
		r.Lab.Recompute()
	}
	for i := range r.Rungs {
		rg := &r.Rungs[i]
		b := r.rung(baselineOf(rg.Name))
		if b == nil || b.Name == rg.Name {
			rg.Ratios = nil
			continue
		}
		rg.Ratios = map[string]Ratio{}
		for k, m := range rg.Metrics {
			if ra, ok := pairedRatio(m.Runs, b.Metrics[k].Runs); ok {
				rg.Ratios[k] = ra
			}
		}
	}
}
