package harness

import (
	"strings"
	"testing"
)

func TestParseBenchmarks(t *testing.T) {
	out := `goos: linux
BenchmarkLookup4_150k-2   	100000000	        4.97 ns/op	       0 B/op	       0 allocs/op
BenchmarkBuild_150k-2     	      32	  34512345 ns/op	        34.50 ms/build	   4718592 bytes/table
BenchmarkPeerings1000-2   	       1	60308339849 ns/op	       135.8 controller-peak-RSS-MiB	        48.90 s/1000-peerings
BenchmarkOdd-2 	 1 	 12 ns/op	 x
BenchmarkPeerings1000-2   	[controller-runtime] log.SetLogger(...) was never called
PASS
`
	got := parseBenchmarks([]byte(out), map[string]string{"BenchmarkLookup4_150k ns/op": "within 10%", "s/1000-peerings": "<= 60"}, "go test")
	var rows []string
	for _, f := range got {
		rows = append(rows, f.Benchmark+" "+format(f.Value)+" "+f.Unit+" "+f.Target)
	}
	want := []string{
		"BenchmarkLookup4_150k 4.97 ns/op within 10%",
		"BenchmarkBuild_150k 34.5 ms/build ",
		"BenchmarkBuild_150k 4718592 bytes/table ",
		"BenchmarkPeerings1000 136 controller-peak-RSS-MiB ",
		"BenchmarkPeerings1000 48.9 s/1000-peerings <= 60",
	}
	if strings.Join(rows, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}
	// Without a target for ns/op it is kept only where it is the only figure.
	got = parseBenchmarks([]byte(out), nil, "go test")
	if len(got) != 5 || got[0].Unit != "ns/op" || got[1].Unit != "ms/build" {
		t.Errorf("without targets: %+v", got)
	}

	got = append(got, ScaleFigure{Benchmark: "BenchmarkX", Unit: "s", Value: 1, Command: "go test -bench 'A|B'"})
	r := &Result{Scale: append(got, ScaleFigure{Benchmark: "^BenchmarkAgent1000$", Command: "go test agent", Error: "exit status 1: needs root | really"})}
	md := r.scaleMarkdown()
	for _, s := range []string{"## Scale and the control plane", "| `go test` | | |", "| Build_150k | 34.5 ms/build |", "FAILED: exit status 1: needs root / really", "| `go test -bench 'A\\|B'` | | |"} {
		if !strings.Contains(md, s) {
			t.Errorf("the section lacks %q:\n%s", s, md)
		}
	}
	if (&Result{}).scaleMarkdown() != "" {
		t.Error("a section without figures")
	}
}
