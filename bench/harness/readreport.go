package harness

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
)

// maxReportSize bounds what ReadReport reads: a report of the whole ladder with its
// contended rungs and 5 runs is about 45 KB, so anything this large is another file (and
// /dev/zero or a FIFO would otherwise be read until memory ran out).
const maxReportSize = 16 << 20

// ReadReport reads the JSON of a report written by an earlier run (Result.JSON), for
// --compare and --from-json, and checks it is one: every error names the file and says what
// is wrong with it. A report whose medians do not match its runs (edited by hand, or from a
// harness that summarised differently) is refused rather than compared: Compare reads the
// medians, the statistics read the runs.
func ReadReport(path string) (*Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err // a *PathError: "open PATH: ..."
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		what := "not a regular file"
		if st.IsDir() {
			what = "a directory"
		}
		return nil, fmt.Errorf("%s: %s, not a bench report's JSON file", path, what)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxReportSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxReportSize {
		return nil, fmt.Errorf("%s: larger than %d MiB: not a bench report's JSON (one is about 50 KB)", path, maxReportSize>>20)
	}
	r := new(Result)
	if err := json.Unmarshal(b, r); err != nil {
		if se := (*json.SyntaxError)(nil); errors.As(err, &se) {
			return nil, fmt.Errorf("%s: not a bench report's JSON: %v at byte %d of %d", path, err, se.Offset, len(b))
		}
		return nil, fmt.Errorf("%s: not a bench report's JSON: %w", path, err)
	}
	if err := r.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// check reports what makes r something the harness did not write.
func (r *Result) check() error {
	if r.Date.IsZero() {
		return errors.New("no date: not a bench report (the report files are named after it)")
	}
	if len(r.Rungs) == 0 && len(r.Scale) == 0 && len(r.Connect) == 0 && r.Lab == nil {
		return errors.New("no rungs: not a bench report, or one of a run that measured nothing")
	}
	if r.Lab != nil {
		for _, m := range r.Lab.Measurements {
			for k, mt := range map[string]*Metric{"mbps": &m.Mbps, "cpuPerGB": m.CPUPerGB, "p50": m.P50, "p99": m.P99} {
				if mt == nil {
					continue
				}
				if err := mt.check(k); err != nil {
					return fmt.Errorf("the lab rung's %q, %s: %w", m.Name, k, err)
				}
			}
		}
	}
	names := map[string]bool{}
	for i, rg := range r.Rungs {
		switch {
		case rg.Name == "":
			return fmt.Errorf("rungs[%d] has no name", i)
		case names[rg.Name]:
			return fmt.Errorf("rung %q appears twice", rg.Name)
		}
		names[rg.Name] = true
		for k, m := range rg.Metrics {
			if err := m.check(k); err != nil {
				return fmt.Errorf("rung %q, %s: %w", rg.Name, k, err)
			}
		}
		if b := rg.Breakdown; b != nil {
			for k, v := range b.PerGB {
				if v < 0 {
					return fmt.Errorf("rung %q, CPU breakdown %s: %v seconds per GB is negative", rg.Name, k, v)
				}
			}
			if b.GB < 0 || b.Seconds < 0 || b.Samples < 0 || b.CPUs < 0 {
				return fmt.Errorf("rung %q: CPU breakdown has a negative figure (%v GB, %v s, %d samples, %d CPUs)", rg.Name, b.GB, b.Seconds, b.Samples, b.CPUs)
			}
		}
	}
	return nil
}

// check reports what is wrong with a metric read back: a figure that cannot be measured (a
// negative throughput, latency, CPU time or memory; iperf3 does report a negative loss when
// it counts duplicates) or a summary that is not its runs'.
func (m Metric) check(key string) error {
	canBeNegative := strings.HasSuffix(key, "-loss")
	for i, v := range m.Runs {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 && !canBeNegative {
			return fmt.Errorf("run %d is %v, which no measurement gives", i+1, v)
		}
	}
	if len(m.Runs) == 0 {
		return nil
	}
	s := summarize(m.Runs)
	for _, f := range []struct {
		name      string
		got, want float64
	}{{"median", m.Median, s.Median}, {"min", m.Min, s.Min}, {"max", m.Max, s.Max}} {
		if math.Abs(f.got-f.want) > 1e-9*math.Max(1, math.Abs(f.want)) {
			return fmt.Errorf("the %s is %v but its runs %v give %v (edited by hand?)", f.name, f.got, m.Runs, f.want)
		}
	}
	return nil
}
