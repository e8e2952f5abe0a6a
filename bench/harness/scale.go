package harness

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// ScaleFigure is one figure of a scale or control-plane benchmark, run with go test -bench:
// the gateway's tables and configuration at the Kubernetes limits, the agent and the controller
// with 1,000 peerings (issue #23's target 7).
type ScaleFigure struct {
	// Benchmark is the benchmark's name without the GOMAXPROCS suffix.
	Benchmark string `json:"benchmark"`
	// Unit is the unit it reported the figure in ("ms/build", "s/1000-peerings", ...).
	Unit  string  `json:"unit"`
	Value float64 `json:"value"`
	// Target is the figure's target, when it has one.
	Target string `json:"target,omitempty"`
	// Command reproduces the figure.
	Command string `json:"command"`
	// Error says why the benchmark gave no figure (then Unit and Value are empty).
	Error string `json:"error,omitempty"`
	// Skipped says why the measurement was skipped (then Unit and Value are empty).
	Skipped string `json:"skipped,omitempty"`
	// Covers says what the figure covers (the connect section's steps).
	Covers string `json:"covers,omitempty"`
}

// scaleBench is a go test -bench invocation of the scale section.
type scaleBench struct {
	pkg, pattern, benchtime string
	// targets are the targets of the figures that have one, by "BenchmarkName unit" or, for
	// every benchmark of the invocation, by unit.
	targets map[string]string
}

// scaleBenches are the scale section's benchmarks, quickest first (about 2 minutes in all on
// the 2-core machine, most of it the controller's 1,000 peerings against a real API server).
var scaleBenches = []scaleBench{
	{pkg: "./dataplane/route", pattern: "^BenchmarkLookup4_(10k|150k)$|^BenchmarkBuild_150k$", benchtime: "",
		targets: map[string]string{"BenchmarkLookup4_150k ns/op": "within 10% of Lookup4_10k", "BenchmarkLookup4_10k ns/op": "(the baseline)"}},
	{pkg: "./dataplane", pattern: "^Benchmark(New|Reconfig)AtLimits$", benchtime: "3x",
		targets: map[string]string{"ms/build": "<= 1000", "ms/reconfig": "<= 1000", "ms-worst": "<= 1000"}},
	{pkg: "./control/gateway", pattern: "^BenchmarkFromObjectsAtLimits$", benchtime: "3x",
		targets: map[string]string{"ms/translate": "<= 1000 with reconcile", "ms/reconcile": "<= 1000"}},
	{pkg: "./control/gateway", pattern: "^BenchmarkPodWatchMemory$/pods=150000/kept=podwatch", benchtime: "3x",
		targets: map[string]string{"MiB": "<= 64 with the tables"}},
	{pkg: "./control/agent", pattern: "^BenchmarkAgent1000$", benchtime: "1x"},
	{pkg: "./control/controller", pattern: "^BenchmarkPeerings1000$", benchtime: "1x",
		targets: map[string]string{"s/1000-peerings": "<= 60"}},
}

// ignoredUnits are go test's own figures, left out of the section unless they are the
// benchmark's point (ns/op of a lookup).
var ignoredUnits = map[string]bool{"B/op": true, "allocs/op": true}

// RunScale runs the scale section's benchmarks from the module root (the directory holding
// go.mod above the working directory) and returns their figures. A benchmark that fails gives
// one figure with its Error; the others still run.
func RunScale(ctx context.Context, log io.Writer) ([]ScaleFigure, error) {
	root, err := moduleRoot(ctx)
	if err != nil {
		return nil, err
	}
	var out []ScaleFigure
	for _, sb := range scaleBenches {
		args := []string{"test", "-run", "XXX", "-count", "1", "-bench", sb.pattern}
		if sb.benchtime != "" {
			args = append(args, "-benchtime", sb.benchtime)
		}
		args = append(args, sb.pkg)
		command := "go " + strings.Join(quoteArgs(args), " ")
		fmt.Fprintf(log, "bench: scale: %s\n", command)
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = root
		var stdout bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stdout
		runErr := cmd.Run()
		figs := parseBenchmarks(stdout.Bytes(), sb.targets, command)
		if runErr != nil || len(figs) == 0 {
			why := "no benchmark figure in its output"
			if runErr != nil {
				why = runErr.Error()
			}
			out = append(out, ScaleFigure{Benchmark: sb.pattern, Command: command, Error: why + ": " + lastLines(stdout.String(), 3)})
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
		}
		out = append(out, figs...)
	}
	return out, nil
}

// parseBenchmarks reads go test -bench output: every "BenchmarkName-N  iterations  value unit
// ..." line gives one figure per unit (ns/op only when it has a target or the benchmark reports
// nothing else).
func parseBenchmarks(b []byte, targets map[string]string, command string) []ScaleFigure {
	var out []ScaleFigure
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		var figs []ScaleFigure
		var nsOp *ScaleFigure
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			unit := f[i+1]
			if err != nil || ignoredUnits[unit] {
				continue
			}
			target, ok := targets[name+" "+unit]
			if !ok {
				target = targets[unit]
			}
			fig := ScaleFigure{Benchmark: name, Unit: unit, Value: v, Target: target, Command: command}
			if unit == "ns/op" && fig.Target == "" {
				nsOp = &fig
				continue
			}
			figs = append(figs, fig)
		}
		if len(figs) == 0 && nsOp != nil {
			figs = append(figs, *nsOp)
		}
		out = append(out, figs...)
	}
	return out
}

// moduleRoot is the directory of the main module's go.mod.
func moduleRoot(ctx context.Context) (string, error) {
	b, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("finding the module root (go env GOMOD): %w", err)
	}
	mod := strings.TrimSpace(string(b))
	if mod == "" || mod == "/dev/null" {
		return "", fmt.Errorf("the scale benchmarks run from skein's source tree: run bench inside it")
	}
	return filepath.Dir(mod), nil
}

func quoteArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, "|^$()* ") {
			a = "'" + a + "'"
		}
		out[i] = a
	}
	return out
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " / ")
}
