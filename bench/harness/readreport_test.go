package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadReport feeds --compare and --from-json what a user may point them at by mistake:
// each is refused with an error naming the file and what is wrong, never a panic, a report
// compared from zeros, or files named 0001-01-01.
func TestReadReport(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	valid, err := result(map[string][]float64{"skein": {2800, 2790, 2810}, "wireguard-go": {900, 910, 905}}).JSON()
	if err != nil {
		t.Fatal(err)
	}
	js := string(valid)
	rung := `{"date": "2026-11-26T00:00:00Z", "rungs": [{"name": "skein", "metrics": {%s}}]}`
	huge, err := os.Create(filepath.Join(dir, "huge.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := huge.Truncate(maxReportSize + 1); err != nil {
		t.Fatal(err)
	}
	huge.Close()
	for _, c := range []struct {
		name, path, want string
	}{
		{"missing", filepath.Join(dir, "nope.json"), "no such file"},
		{"directory", dir, "a directory"},
		{"device", os.DevNull, "not a regular file"},
		{"huge", huge.Name(), "larger than 16 MiB"},
		{"not JSON", write("bench.txt", "BenchmarkLadder/rung=skein 1 2782 tcp1-Mbit/s\n"), "not a bench report's JSON: invalid character 'B' looking for beginning of value at byte 1"},
		{"truncated", write("trunc.json", js[:len(js)/2]), "unexpected end of JSON input"},
		{"empty", write("empty.json", ""), "unexpected end of JSON input"},
		{"another JSON", write("other.json", `{"kind": "Pod"}`), "no date"},
		{"array", write("array.json", `[1, 2]`), "cannot unmarshal array"},
		{"no rungs", write("norungs.json", `{"date": "2026-11-26T00:00:00Z", "rungs": []}`), "no rungs"},
		{"unnamed rung", write("unnamed.json", `{"date": "2026-11-26T00:00:00Z", "rungs": [{"metrics": {}}]}`), "rungs[0] has no name"},
		{"twice", write("twice.json", `{"date": "2026-11-26T00:00:00Z", "rungs": [{"name": "a"}, {"name": "a"}]}`), `rung "a" appears twice`},
		{"out of range", write("range.json", strings.Replace(rung, "%s", `"tcp1": {"median": 1e999, "runs": [1e999]}`, 1)), "cannot unmarshal number 1e999"},
		{"NaN", write("nan.json", strings.Replace(rung, "%s", `"tcp1": {"median": NaN, "runs": [NaN]}`, 1)), "invalid character 'N'"},
		{"negative", write("neg.json", strings.Replace(rung, "%s", `"tcp1": {"median": -5, "min": -5, "max": -5, "runs": [-5]}`, 1)), `rung "skein", tcp1: run 1 is -5`},
		{"edited", write("edited.json", strings.Replace(rung, "%s", `"tcp1": {"median": 3000, "min": 1, "max": 3000, "runs": [1, 2, 3]}`, 1)), "the median is 3000 but its runs [1 2 3] give 2"},
		{"breakdown", write("bd.json", `{"date": "2026-11-26T00:00:00Z", "rungs": [{"name": "a", "breakdown": {"perGB": {"copy": -1}}}]}`), "negative"},
	} {
		_, err := ReadReport(c.path)
		if err == nil {
			t.Errorf("%s: read as a report", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.path) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want the file named and %q", c.name, err, c.want)
		}
	}

	// What the harness writes reads back, a negative loss (iperf3 counts duplicates) included,
	// and so do the reports in bench/results.
	withLoss := strings.Replace(rung, "%s", `"udp64-loss": {"median": -0.1, "min": -0.2, "max": 0, "runs": [-0.2, -0.1, 0]}`, 1)
	for _, p := range []string{write("valid.json", js), write("loss.json", withLoss), "../results/2026-11-21.json", "../results/2026-11-26.json"} {
		if _, err := ReadReport(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}
