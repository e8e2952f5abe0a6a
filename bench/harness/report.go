package harness

import (
	"encoding/json"
	"fmt"
	"html"
	"math"
	"strings"
	"time"
)

// baseline is the rung ratios are given against.
const baseline = "wireguard-go"

// ipv6Suffix names a rung that carries IPv6 inside the tunnel.
const ipv6Suffix = "-ipv6"

// baselineOf is the rung name's ratios are given against: baseline, or baseline beside the
// hog for a contended rung other than that one (which is set against baseline), or baseline
// over IPv6 for an IPv6 rung.
func baselineOf(name string) string {
	if strings.HasSuffix(name, contendedSuffix) && name != baseline+contendedSuffix {
		return baseline + contendedSuffix
	}
	if strings.HasSuffix(name, ipv6Suffix) && name != baseline+ipv6Suffix {
		return baseline + ipv6Suffix
	}
	return baseline
}

func (r *Result) rung(name string) *RungResult {
	for i := range r.Rungs {
		if r.Rungs[i].Name == name {
			return &r.Rungs[i]
		}
	}
	return nil
}

func format(v float64) string {
	switch {
	case v == 0:
		return "0"
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// Markdown is the human report: machine facts, settings, one row per rung with medians, the
// spread over runs and the ratio to bare wireguard-go.
func (r *Result) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# skein benchmark ladder, %s\n\n", r.Date.Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "- machine: %s, %d cores, kernel %s, %s\n", r.Machine.CPU, r.Machine.Cores, r.Machine.Kernel, r.Machine.Go)
	if len(r.Rungs) == 0 {
		// A section measured alone (--connect-only, --lab-only): no ladder.
		fmt.Fprintf(&b, "- settings: %s\n", r.Settings)
		b.WriteString(r.scaleMarkdown())
		b.WriteString(r.connectMarkdown())
		b.WriteString(r.labMarkdown())
		return b.String()
	}
	fmt.Fprintf(&b, "- settings: %s\n- CPU placement: %s\n", r.Settings, r.Placement)
	b.WriteString("- each cell: median [min-max] over the runs; (x.xx [lo-hi]) is the ratio to bare wireguard-go (for a +hog rung to wireguard-go+hog, and for wireguard-go+hog to wireguard-go without the hog): the geometric mean of the run-by-run ratios of interleaved runs, with its 95% confidence interval\n")
	b.WriteString("- CPU per GB: user+system seconds of iperf3 (both ends) and the gateway processes per GB received in the 1-stream test; kernel softirq work is charged to whichever of them runs\n\n")
	for _, rg := range r.Rungs {
		fmt.Fprintf(&b, "- **%s**: %s", rg.Name, rg.Description)
		if rg.Error != "" {
			fmt.Fprintf(&b, " (FAILED: %s)", rg.Error)
		}
		b.WriteString("\n")
	}
	b.WriteString("\n| metric |")
	for _, rg := range r.Rungs {
		fmt.Fprintf(&b, " %s |", rg.Name)
	}
	b.WriteString("\n|---|")
	for range r.Rungs {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, mo := range metricOrder {
		fmt.Fprintf(&b, "| %s (%s) |", mo.title, mo.unit)
		for _, rg := range r.Rungs {
			m, ok := rg.Metrics[mo.key]
			if !ok {
				b.WriteString(" - |")
				continue
			}
			cell := format(m.Median)
			if len(m.Runs) > 1 {
				cell += fmt.Sprintf(" [%s-%s]", format(m.Min), format(m.Max))
			}
			if ra, ok := rg.Ratios[mo.key]; ok && !strings.HasSuffix(mo.key, "-loss") {
				cell += " (" + ra.String() + ")"
			} else if base := r.rung(baselineOf(rg.Name)); base != nil && base.Name != rg.Name && rg.Ratios == nil {
				// A report from before the paired ratios: the ratio of the medians (to the
				// rung's own baseline: a +hog rung's is wireguard-go+hog, and without it
				// there is no ratio, not one to wireguard-go without the hog).
				if bm, ok := base.Metrics[mo.key]; ok && bm.Median != 0 && !strings.HasSuffix(mo.key, "-loss") {
					cell += fmt.Sprintf(" (%.2fx)", m.Median/bm.Median)
				}
			}
			fmt.Fprintf(&b, " %s |", cell)
		}
		b.WriteString("\n")
	}
	b.WriteString(r.breakdownMarkdown())
	b.WriteString(r.scaleMarkdown())
	b.WriteString(r.connectMarkdown())
	b.WriteString(r.labMarkdown())
	return b.String()
}

// NewResult is a report without rungs, for sections measured alone (--connect-only, --lab-only).
func NewResult(settings string) *Result {
	return &Result{Date: time.Now().UTC(), Machine: machine(), Settings: settings}
}

// connectMarkdown is the table of the connect section's figures, or "" when it did not run.
func (r *Result) connectMarkdown() string {
	if len(r.Connect) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n## Connect time\n\n")
	b.WriteString("`skeinctl network connect --server-service-type NodePort --wait` between two clusters of the lab just installed with Helm (2 gateway replicas each), measured once by bench/e2e's TestConnectTime (TestE2E's install and connect steps alone; the command below reproduces it): the time until \"Connection is established\" on both sides, then skeinctl's own breakdown of it, each step with what it covers (objects, pod start, key exchange, handshake, first probe).\n\n")
	b.WriteString("| step | figure | target | covers |\n|---|---|---|---|\n")
	last := ""
	for _, f := range r.Connect {
		if f.Command != last {
			b.WriteString(tableRow("`"+f.Command+"`", "", "", ""))
			last = f.Command
		}
		figure := format(f.Value) + " " + f.Unit
		switch {
		case f.Error != "":
			figure = "FAILED: " + f.Error
		case f.Skipped != "":
			figure = "SKIPPED: " + f.Skipped
		}
		b.WriteString(tableRow(f.Benchmark, figure, f.Target, f.Covers))
	}
	return b.String()
}

// tableRow is a markdown table's row of cells (each made safe by cell; an empty one is "| |").
func tableRow(cells ...string) string {
	var b strings.Builder
	b.WriteString("|")
	for _, c := range cells {
		if c = cell(c); c != "" {
			b.WriteString(" " + c)
		}
		b.WriteString(" |")
	}
	return b.String() + "\n"
}

// cell is s made safe inside a markdown table cell: a | ends a cell, even between
// backquotes, unless escaped; a line break ends the row.
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

// scaleMarkdown is the table of the scale and control-plane figures, or "" when they did not
// run.
func (r *Result) scaleMarkdown() string {
	if len(r.Scale) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n## Scale and the control plane\n\n")
	b.WriteString("Go benchmarks run once each after the ladder (the command under each group reproduces it): the gateway's route table and configuration at the Kubernetes limits (5,000 nodes, 150,000 pod routes), its pod watch's memory per pod, the node agent programming 1,000 peerings in a network namespace, and the controller filling the status of 1,000 peerings created at once against a real API server.\n\n")
	b.WriteString("| benchmark | figure | target |\n|---|---|---|\n")
	last := ""
	for _, f := range r.Scale {
		if f.Command != last {
			// A | inside a table cell ends it, even between backquotes, unless escaped.
			fmt.Fprintf(&b, "| `%s` | | |\n", strings.ReplaceAll(f.Command, "|", `\|`))
			last = f.Command
		}
		if f.Error != "" {
			fmt.Fprintf(&b, "| %s | FAILED: %s | |\n", f.Benchmark, strings.ReplaceAll(f.Error, "|", "/"))
			continue
		}
		fmt.Fprintf(&b, "| %s | %s %s | %s |\n", strings.TrimPrefix(f.Benchmark, "Benchmark"), format(f.Value), f.Unit, f.Target)
	}
	return b.String()
}

// breakdownMarkdown is the table of where each rung's CPU per GB goes, or "" when no rung has
// a breakdown.
func (r *Result) breakdownMarkdown() string {
	var rungs []RungResult
	var missing []string
	for _, rg := range r.Rungs {
		switch {
		case rg.Breakdown != nil:
			rungs = append(rungs, rg)
		case rg.BreakdownError != "":
			missing = append(missing, fmt.Sprintf("%s: %s", rg.Name, rg.BreakdownError))
		}
	}
	if len(rungs) == 0 && len(missing) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n## Where the CPU per GB goes\n\n")
	b.WriteString("CPU seconds per GB received in one extra single-stream TCP test per rung, sampled on every CPU by `perf record -e cpu-clock -g` ")
	b.WriteString("(iperf3 at both ends, the gateways, and the kernel's softirq work wherever it ran); each sample is put in the first category ")
	b.WriteString("its stack matches, in the order of the rows (a copy inside a system call is a copy). Sampling costs a little, so the total ")
	b.WriteString("may differ from the measured CPU per GB above.\n\n")
	if len(rungs) > 0 {
		b.WriteString("| category |")
		for _, rg := range rungs {
			fmt.Fprintf(&b, " %s |", rg.Name)
		}
		b.WriteString("\n|---|")
		for range rungs {
			b.WriteString("---|")
		}
		b.WriteString("\n")
		for _, c := range breakdownOrder {
			fmt.Fprintf(&b, "| %s |", c.title)
			for _, rg := range rungs {
				fmt.Fprintf(&b, " %s |", format(rg.Breakdown.PerGB[c.key]))
			}
			b.WriteString("\n")
		}
		b.WriteString("| **total** |")
		for _, rg := range rungs {
			var t float64
			for _, v := range rg.Breakdown.PerGB {
				t += v
			}
			fmt.Fprintf(&b, " **%s** (%d samples, %.1f GB) |", format(t), rg.Breakdown.Samples, rg.Breakdown.GB)
		}
		b.WriteString("\n| CPUs kept busy (rung CPU seconds / test seconds) |")
		for _, rg := range rungs {
			if c := rg.Breakdown.CoresBusy(); c > 0 {
				fmt.Fprintf(&b, " %.2f of %d |", c, rg.Breakdown.CPUs)
			} else {
				b.WriteString(" - |")
			}
		}
		b.WriteString("\n")
	}
	for _, m := range missing {
		fmt.Fprintf(&b, "\nNo breakdown for %s\n", m)
	}
	return b.String()
}

// JSON is the machine-readable report.
func (r *Result) JSON() ([]byte, error) { return json.MarshalIndent(r, "", "  ") }

// SVG draws two bar charts side by side: single-stream TCP throughput and CPU per GB, one bar
// per rung with its min-max spread as a whisker.
func (r *Result) SVG() string {
	const w, h, pad, chartW = 760, 340, 50, 320
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14" font-weight="bold">skein benchmark ladder, %s (%s, %d cores)</text>`+"\n",
		pad, r.Date.Format("2006-01-02"), html.EscapeString(r.Machine.CPU), r.Machine.Cores)
	colors := []string{"#8c8c8c", "#4e79a7", "#f28e2b", "#59a14f", "#e15759"}
	for ci, chart := range []struct{ key, title string }{
		{"tcp1", "TCP, 1 stream (Mbit/s, higher is better)"},
		{"cpu-per-gb", "CPU seconds per GB (lower is better)"},
	} {
		x0 := pad + ci*(chartW+pad)
		top, bottom := 60, h-60
		var maxV float64
		for _, rg := range r.Rungs {
			maxV = max(maxV, rg.Metrics[chart.key].Max)
		}
		if maxV == 0 {
			maxV = 1
		}
		fmt.Fprintf(&b, `<text x="%d" y="45">%s</text>`+"\n", x0, chart.title)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", x0, bottom, x0+chartW, bottom)
		var plain []RungResult // the +hog rungs are in the tables only
		for _, rg := range r.Rungs {
			if !strings.HasSuffix(rg.Name, contendedSuffix) {
				plain = append(plain, rg)
			}
		}
		n := max(len(plain), 1)
		bw := chartW / n
		for i, rg := range plain {
			m := rg.Metrics[chart.key]
			scale := func(v float64) int { return bottom - int(v/maxV*float64(bottom-top)) }
			x := x0 + i*bw + bw/6
			bar := bw * 2 / 3
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`+"\n", x, scale(m.Median), bar, bottom-scale(m.Median), colors[i%len(colors)])
			cx := x + bar/2
			fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", cx, scale(m.Min), cx, scale(m.Max))
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", cx, scale(m.Max)-4, format(m.Median))
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", cx, bottom+16, html.EscapeString(rg.Name))
		}
	}
	b.WriteString("</svg>\n")
	return b.String()
}
