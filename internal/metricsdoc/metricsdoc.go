// Package metricsdoc holds docs/metrics.md to what the daemons expose: Check compares a live
// /metrics scrape with the reference table and lints it; Names lists what dashboards and alert
// rules may query.
package metricsdoc

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metric is one row of the reference.
type Metric struct {
	Name, Type string
	Labels     []string // sorted
	Deprecated bool
}

// Path is docs/metrics.md in this checkout.
func Path() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "docs", "metrics.md")
}

// Load parses the tables of docs/metrics.md whose first column is a backquoted skein_ name.
func Load() (map[string]Metric, error) {
	f, err := os.Open(Path())
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]Metric{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		cells := strings.Split(strings.Trim(strings.TrimSpace(sc.Text()), "|"), "|")
		if len(cells) != 4 {
			continue
		}
		name := strings.TrimSpace(cells[0])
		if !strings.HasPrefix(name, "`skein_") || !strings.HasSuffix(name, "`") {
			continue
		}
		m := Metric{Name: strings.Trim(name, "`"), Type: strings.TrimSpace(cells[1]),
			Deprecated: strings.HasPrefix(strings.TrimSpace(cells[3]), "Deprecated")}
		for _, l := range strings.Split(cells[2], ",") {
			if l = strings.TrimSpace(l); l != "" {
				m.Labels = append(m.Labels, l)
			}
		}
		slices.Sort(m.Labels)
		if _, dup := out[m.Name]; dup {
			return nil, fmt.Errorf("%s:%d: %s listed twice", Path(), n, m.Name)
		}
		switch m.Type {
		case "counter", "gauge", "histogram":
		default:
			return nil, fmt.Errorf("%s:%d: %s: type %q", Path(), n, m.Name, m.Type)
		}
		out[m.Name] = m
	}
	return out, sc.Err()
}

// Names are the series names queries may use: every metric of the reference that is not
// deprecated, a histogram as its _bucket, _sum and _count series.
func Names() (map[string]bool, error) {
	ref, err := Load()
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, m := range ref {
		if m.Deprecated {
			continue
		}
		if m.Type == "histogram" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				out[m.Name+s] = true
			}
			continue
		}
		out[m.Name] = true
	}
	return out, nil
}

// Check fails t unless the scrape (Prometheus text format) passes promlint and its
// skein_<component>_ families are exactly the reference's, with the same types and labels.
func Check(t testing.TB, component, scrape string) {
	t.Helper()
	ref, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.New(strings.NewReader(scrape)).Lint()
	if err != nil {
		t.Fatalf("promlint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(scrape))
	if err != nil {
		t.Fatalf("parsing the scrape: %v", err)
	}
	prefix := "skein_" + component + "_"
	seen := map[string]bool{}
	for name, f := range families {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		seen[name] = true
		m, ok := ref[name]
		if !ok {
			t.Errorf("%s is exposed but not in %s", name, Path())
			continue
		}
		if typ := strings.ToLower(f.GetType().String()); typ != m.Type {
			t.Errorf("%s is a %s, %s says %s", name, typ, Path(), m.Type)
		}
		if dep := strings.HasPrefix(f.GetHelp(), "Deprecated"); dep != m.Deprecated {
			t.Errorf("%s: its help says deprecated %v, %s says %v", name, dep, Path(), m.Deprecated)
		}
		if labels := labelNames(f); !slices.Equal(labels, m.Labels) {
			t.Errorf("%s has labels %v, %s says %v", name, labels, Path(), m.Labels)
		}
	}
	for name := range ref {
		if strings.HasPrefix(name, prefix) && !seen[name] {
			t.Errorf("%s is in %s but skein-%s does not expose it", name, Path(), component)
		}
	}
}

func labelNames(f *dto.MetricFamily) []string {
	set := map[string]bool{}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			set[l.GetName()] = true
		}
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Sample returns the value of the first sample in scrape whose line starts with series (a
// name, or a name and the first labels in their exposition order, such as
// `skein_agent_x{range="internal"`).
func Sample(scrape, series string) (float64, bool) {
	for l := range strings.Lines(scrape) {
		if strings.HasPrefix(l, series) {
			fields := strings.Fields(l)
			var v float64
			if _, err := fmt.Sscan(fields[len(fields)-1], &v); err == nil {
				return v, true
			}
		}
	}
	return 0, false
}
