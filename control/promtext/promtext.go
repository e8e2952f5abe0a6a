// Package promtext writes metrics in the Prometheus text exposition format (version 0.0.4), and
// the Go runtime's and the process's own metrics under the names Prometheus's Go client uses
// (go_*, process_*), without that client library.
//
// Why: the gateway runs one process per peer (a hub peered with 50 clusters runs 50), each
// within 16 MiB when idle. The client library's registration at start-up (its default
// registry's collectors, the protobuf descriptors of its data model) and the code a scrape
// runs through cost about 2.4 MiB of an idle gateway's memory (BenchmarkIdleRSS). The gateway
// computes its metrics at scrape time anyway, so it needs nothing of the library but the
// format. The controller and the agent keep the library.
//
// A Writer is used by one goroutine: one scrape. Names and label names are the caller's
// constants and are written as they are; label values and help texts are escaped.
package promtext

import (
	"bufio"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// Type is a metric family's type.
type Type string

// The types this package writes.
const (
	Counter   Type = "counter"
	Gauge     Type = "gauge"
	Histogram Type = "histogram"
)

// ContentType is the text format's media type, sent with each scrape.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Writer writes one exposition. The first write error is kept (Err) and later writes do
// nothing.
type Writer struct {
	w   *bufio.Writer
	buf []byte
	err error
}

// NewWriter returns a Writer to w; call Flush at the end.
func NewWriter(w io.Writer) *Writer {
	return &Writer{w: bufio.NewWriterSize(w, 16<<10), buf: make([]byte, 0, 256)}
}

// Family starts a metric family: its HELP and TYPE lines. Its samples follow.
func (w *Writer) Family(name, help string, typ Type) {
	b := append(w.buf[:0], "# HELP "...)
	b = append(b, name...)
	b = append(b, ' ')
	b = appendEscaped(b, help, false)
	b = append(b, "\n# TYPE "...)
	b = append(b, name...)
	b = append(b, ' ')
	b = append(b, typ...)
	b = append(b, '\n')
	w.write(b)
}

// Sample writes one sample of the family just started: labels are name, value pairs (an odd
// one out is dropped), written sorted by name.
func (w *Writer) Sample(name string, value float64, labels ...string) {
	w.write(w.sample(w.buf[:0], name, "", "", value, labels))
}

// Histogram writes a histogram's samples: bounds are the buckets' upper bounds in increasing
// order (without +Inf), cumulative the count of observations at most each bound, count and sum
// those of all observations.
func (w *Writer) Histogram(name string, bounds []float64, cumulative []uint64, count uint64, sum float64, labels ...string) {
	b := w.buf[:0]
	for i, le := range bounds {
		if i < len(cumulative) {
			b = w.sample(b, name+"_bucket", "le", formatFloat(le), float64(cumulative[i]), labels)
		}
	}
	b = w.sample(b, name+"_bucket", "le", "+Inf", float64(count), labels)
	b = w.sample(b, name+"_sum", "", "", sum, labels)
	b = w.sample(b, name+"_count", "", "", float64(count), labels)
	w.write(b)
}

// sample appends one sample line to b: the labels, then extra (if not "") with its value.
func (w *Writer) sample(b []byte, name, extra, extraValue string, value float64, labels []string) []byte {
	b = append(b, name...)
	n := len(labels) / 2
	if n > 0 || extra != "" {
		b = append(b, '{')
		for i, j := range sortedPairs(labels, n) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendLabel(b, labels[2*j], labels[2*j+1])
		}
		if extra != "" {
			if n > 0 {
				b = append(b, ',')
			}
			b = appendLabel(b, extra, extraValue)
		}
		b = append(b, '}')
	}
	b = append(b, ' ')
	b = appendFloat(b, value)
	return append(b, '\n')
}

// sortedPairs returns the order of the n label pairs sorted by name (a pair of the same name
// as an earlier one is left out): the order Prometheus's Go client writes them in, so a series
// reads the same as from other exporters.
func sortedPairs(labels []string, n int) []int {
	order := make([]int, 0, n)
	for i := range n {
		k := len(order)
		for k > 0 && labels[2*order[k-1]] > labels[2*i] {
			k--
		}
		if k > 0 && labels[2*order[k-1]] == labels[2*i] {
			continue
		}
		order = slices.Insert(order, k, i)
	}
	return order
}

func appendLabel(b []byte, name, value string) []byte {
	b = append(b, name...)
	b = append(b, '=', '"')
	b = appendEscaped(b, value, true)
	return append(b, '"')
}

// appendEscaped appends s with backslash and line feed escaped, and double quotes too in a
// label value (the format's rules). Invalid UTF-8 is replaced, as the format allows only UTF-8.
func appendEscaped(b []byte, s string, quote bool) []byte {
	s = strings.ToValidUTF8(s, "\uFFFD")
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			b = append(b, '\\', '\\')
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '"' && quote:
			b = append(b, '\\', '"')
		default:
			b = append(b, c)
		}
	}
	return b
}

func appendFloat(b []byte, v float64) []byte {
	switch {
	case math.IsInf(v, 1):
		return append(b, "+Inf"...)
	case math.IsInf(v, -1):
		return append(b, "-Inf"...)
	case math.IsNaN(v):
		return append(b, "NaN"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}

func formatFloat(v float64) string { return string(appendFloat(nil, v)) }

func (w *Writer) write(b []byte) {
	w.buf = b[:0]
	if w.err == nil {
		_, w.err = w.w.Write(b)
	}
}

// Flush writes what is buffered and returns the first error of the exposition.
func (w *Writer) Flush() error {
	if w.err == nil {
		w.err = w.w.Flush()
	}
	return w.err
}

// Handler serves the exposition that collect writes, at each request, followed by the Go
// runtime's and the process's metrics (Runtime).
func Handler(collect func(*Writer)) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			rw.Header().Set("Allow", "GET, HEAD")
			http.Error(rw, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		rw.Header().Set("Content-Type", ContentType)
		w := NewWriter(rw)
		collect(w)
		Runtime(w)
		_ = w.Flush() // the scraper went away: nothing to tell it
	})
}
