package promtext_test

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/skein-net/skein/control/promtext"
)

// parse reads an exposition with Prometheus's own parser: anything it refuses fails the test.
func parse(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("Prometheus's parser refuses the exposition: %v\n%s", err, text)
	}
	return fams
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// TestWriterGolden: the exact text of a small exposition; labels sorted by name, as
// Prometheus's Go client writes them (a name given twice keeps its first value).
func TestWriterGolden(t *testing.T) {
	var b bytes.Buffer
	w := promtext.NewWriter(&b)
	w.Family("x_total", "Things.", promtext.Counter)
	w.Sample("x_total", 3, "direction", "to-tunnel")
	w.Sample("x_total", 0.5, "direction", "from-tunnel", "odd")
	w.Sample("x_total", 1, "role", "client", "peer_public_key", "k", "peer_endpoint", "", "role", "twice")
	w.Family("h", "A histogram.", promtext.Histogram)
	w.Histogram("h", []float64{0.001, 1}, []uint64{1, 2}, 3, 2.5)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	want := `# HELP x_total Things.
# TYPE x_total counter
x_total{direction="to-tunnel"} 3
x_total{direction="from-tunnel"} 0.5
x_total{peer_endpoint="",peer_public_key="k",role="client"} 1
# HELP h A histogram.
# TYPE h histogram
h_bucket{le="0.001"} 1
h_bucket{le="1"} 2
h_bucket{le="+Inf"} 3
h_sum 2.5
h_count 3
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

// TestWriterRoundTrip: what Prometheus's parser reads back is what was written, for hostile
// label values and help texts (quotes, backslashes, line feeds, invalid UTF-8) and every kind
// of float.
func TestWriterRoundTrip(t *testing.T) {
	values := []float64{0, 1, -1, 1e-9, 1.5e300, 1 << 62, math.Inf(1), math.Inf(-1), math.NaN(), 18446744073709551615}
	labels := []string{"", "plain", `a "quoted" one`, `back\slash`, "two\nlines", "bad \xff utf-8", "ü ✓", `\n literally`, `"`}
	var b bytes.Buffer
	w := promtext.NewWriter(&b)
	w.Family("g", "Help with \\ a backslash,\na line feed and \"quotes\".", promtext.Gauge)
	for i, v := range values {
		w.Sample("g", v, "value", labels[i%len(labels)], "i", strconv.Itoa(i))
	}
	w.Family("h_seconds", "H.", promtext.Histogram)
	w.Histogram("h_seconds", []float64{0.1, 0.2, 0.5}, []uint64{1, 1, 4}, 9, 7.25, "peer", `x"y`)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	fams := parse(t, b.String())
	g := fams["g"]
	if g == nil || g.GetType() != dto.MetricType_GAUGE || g.GetHelp() != "Help with \\ a backslash,\na line feed and \"quotes\"." {
		t.Fatalf("family g: %v", g)
	}
	if len(g.Metric) != len(values) {
		t.Fatalf("%d samples, want %d", len(g.Metric), len(values))
	}
	for _, m := range g.Metric {
		l := labelsOf(m)
		i, _ := strconv.Atoi(l["i"])
		want, got := values[i], m.GetGauge().GetValue()
		if !(got == want || math.IsNaN(want) && math.IsNaN(got)) {
			t.Errorf("sample %d: %v, want %v", i, got, want)
		}
		if wantLabel := strings.ToValidUTF8(labels[i%len(labels)], "\uFFFD"); l["value"] != wantLabel {
			t.Errorf("sample %d: label %q, want %q", i, l["value"], wantLabel)
		}
	}
	h := fams["h_seconds"].GetMetric()[0].GetHistogram()
	if h.GetSampleCount() != 9 || h.GetSampleSum() != 7.25 || len(h.GetBucket()) != 4 || h.GetBucket()[2].GetCumulativeCount() != 4 ||
		labelsOf(fams["h_seconds"].GetMetric()[0])["peer"] != `x"y` {
		t.Errorf("histogram read back as %v", h)
	}
}

// errWriter fails after n bytes.
type errWriter struct{ n int }

func (e *errWriter) Write(p []byte) (int, error) {
	if len(p) > e.n {
		return 0, io.ErrShortWrite
	}
	e.n -= len(p)
	return len(p), nil
}

// TestWriterError: a failed write is reported by Flush, and nothing more is written.
func TestWriterError(t *testing.T) {
	ew := &errWriter{n: 100}
	w := promtext.NewWriter(ew)
	for range 2000 {
		w.Family("x", "X.", promtext.Gauge)
		w.Sample("x", 1)
	}
	if err := w.Flush(); err == nil {
		t.Fatal("no error from a writer that failed")
	}
}

// TestRuntimeAgainstClientLibrary: the go_* and process_* families parse, have the types
// Prometheus's Go client gives them, and agree with the client library's process collector
// where both read the same thing (start time, file descriptor limits) and closely where they
// read moving figures (CPU time, resident memory, open files). (Goroutines are not compared:
// the library's Gather runs its own while it counts; TestRuntimeFollows checks them.)
func TestRuntimeAgainstClientLibrary(t *testing.T) {
	// Burn a little CPU so the process's CPU time is not zero (bounded: 200 ms).
	for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); {
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	theirs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	w := promtext.NewWriter(&b)
	promtext.Runtime(w)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	ours := parse(t, b.String())
	ref := map[string]*dto.MetricFamily{}
	for _, f := range theirs {
		ref[f.GetName()] = f
	}
	value := func(f *dto.MetricFamily) float64 {
		m := f.GetMetric()[0]
		if f.GetType() == dto.MetricType_COUNTER {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	for name, tol := range map[string]float64{
		"process_start_time_seconds":       0.02,
		"process_max_fds":                  0,
		"process_virtual_memory_max_bytes": 0,
		"process_cpu_seconds_total":        0.5,
		"process_resident_memory_bytes":    0.5,
		"process_open_fds":                 0.5,
		"go_info":                          0,
		"go_threads":                       0.5,
	} {
		o, r := ours[name], ref[name]
		if o == nil || r == nil {
			t.Errorf("%s: ours %v, the client library's %v", name, o != nil, r != nil)
			continue
		}
		if o.GetType() != r.GetType() {
			t.Errorf("%s: type %v, the client library's %v", name, o.GetType(), r.GetType())
		}
		ov, rv := value(o), value(r)
		if ov <= 0 || math.Abs(ov-rv) > tol*math.Max(math.Abs(rv), 1) {
			t.Errorf("%s: %v, the client library's %v", name, ov, rv)
		}
	}
	if v := labelsOf(ours["go_info"].GetMetric()[0])["version"]; v != labelsOf(ref["go_info"].GetMetric()[0])["version"] {
		t.Errorf("go_info version %q", v)
	}
}

// TestRuntimeFollows: the figures move with what they count (a file opened, goroutines
// started), and the memory figures agree with runtime.ReadMemStats.
func TestRuntimeFollows(t *testing.T) {
	read := func() map[string]float64 {
		var b bytes.Buffer
		w := promtext.NewWriter(&b)
		promtext.Runtime(w)
		w.Flush()
		out := map[string]float64{}
		for name, f := range parse(t, b.String()) {
			m := f.GetMetric()[0]
			out[name] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
		return out
	}
	before := read()
	var files []*os.File
	for range 20 {
		f, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	stop := make(chan struct{})
	for range 100 {
		go func() { <-stop }()
	}
	after := read()
	close(stop)
	for _, f := range files {
		f.Close()
	}
	if d := after["process_open_fds"] - before["process_open_fds"]; d != 20 {
		t.Errorf("process_open_fds grew by %v after opening 20 files", d)
	}
	if d := after["go_goroutines"] - before["go_goroutines"]; d < 100 {
		t.Errorf("go_goroutines grew by %v after starting 100", d)
	}
	// The runtime's figures move between two reads (a collection in between halves a small
	// heap): each comparison is made again, a few times, until one agrees.
	var mismatch []string
	for range 5 {
		mismatch = nil
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		now := read()
		for name, want := range map[string]uint64{"go_memstats_sys_bytes": ms.Sys, "go_memstats_heap_inuse_bytes": ms.HeapInuse,
			"go_memstats_heap_sys_bytes": ms.HeapSys, "go_memstats_stack_inuse_bytes": ms.StackInuse} {
			if got := now[name]; math.Abs(got-float64(want)) > 0.25*float64(want) {
				mismatch = append(mismatch, fmt.Sprintf("%s: %v, runtime.ReadMemStats says %d", name, got, want))
			}
		}
		if len(mismatch) == 0 {
			break
		}
	}
	for _, m := range mismatch {
		t.Error(m)
	}
	if after["go_memstats_alloc_bytes_total"] <= before["go_memstats_alloc_bytes_total"] {
		t.Errorf("go_memstats_alloc_bytes_total did not grow: %v then %v", before["go_memstats_alloc_bytes_total"], after["go_memstats_alloc_bytes_total"])
	}
}

// TestHandler: a scrape gets the format's content type, the collector's families and the
// runtime's; other methods are refused.
func TestHandler(t *testing.T) {
	srv := httptest.NewServer(promtext.Handler(func(w *promtext.Writer) {
		w.Family("skein_x", "X.", promtext.Gauge)
		w.Sample("skein_x", 7)
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != promtext.ContentType {
		t.Errorf("content type %q", ct)
	}
	fams := parse(t, string(body))
	if fams["skein_x"] == nil || fams["go_goroutines"] == nil || fams["process_resident_memory_bytes"] == nil {
		t.Errorf("families missing from\n%s", body)
	}
	resp, err = http.Post(srv.URL, "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %s", resp.Status)
	}
}
