package harness

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// connectOutput is go test -v's output of a TestConnectTime that passed, as bench/e2e prints
// it (the report line logged by env.connect, and again in the report at the end).
const connectOutput = `=== RUN   TestConnectTime
    e2e_test.go:54: images: skein-controller:v0.2.0-dev sha256:538a233f530dc9a0d7726426522d5ddbd9e0e3dd21009ba9fda21b9434909328
    e2e_test.go:54: lab: 2 clusters x 2 nodes up in 41.2s
=== RUN   TestConnectTime/install
    e2e_test.go:54: install: cluster 0, helm install --wait took 21.5s, 3 pods Ready after 23.0s
    e2e_test.go:54: install: cluster 1, helm install --wait took 19.0s, 3 pods Ready after 19.9s
=== RUN   TestConnectTime/connect
    e2e_test.go:54: connect: skeinctl network connect --server-service-type NodePort --wait: 7.6s to "Connection is established" on both sides; skeinctl: 7.5s (network init 0.3s, server and its pod 2.5s, server endpoint 0.0s, client and keys 0.4s, client pod 2.5s, connections created 0.2s, local connected 1.4s, remote connected 0.2s)

=== skein connect time report
connect: skeinctl network connect --server-service-type NodePort --wait: 7.6s to "Connection is established" on both sides; skeinctl: 7.5s (network init 0.3s, server and its pod 2.5s, server endpoint 0.0s, client and keys 0.4s, client pod 2.5s, connections created 0.2s, local connected 1.4s, remote connected 0.2s)

--- PASS: TestConnectTime (112.31s)
    --- PASS: TestConnectTime/install (45.10s)
    --- PASS: TestConnectTime/connect (7.62s)
PASS
ok  	github.com/skein-net/skein/bench/e2e	125.002s
`

// rows renders figures as "name value unit [target] (covers)" or "name FAILED: ..." lines.
func rows(figs []ScaleFigure) string {
	var out []string
	for _, f := range figs {
		switch {
		case f.Error != "":
			out = append(out, f.Benchmark+" FAILED: "+f.Error)
		case f.Skipped != "":
			out = append(out, f.Benchmark+" SKIPPED: "+f.Skipped)
		default:
			out = append(out, f.Benchmark+" "+format(f.Value)+" "+f.Unit+" ["+f.Target+"]")
		}
	}
	return strings.Join(out, "\n")
}

func TestParseConnect(t *testing.T) {
	figs := parseConnect([]byte(connectOutput), nil, "CMD")
	want := strings.Join([]string{
		"connect 7.60 s [<= 10]",
		"skeinctl's own total 7.50 s []",
		"network init 0.30 s []",
		"server and its pod 2.50 s []",
		"server endpoint 0 s []",
		"client and keys 0.40 s []",
		"client pod 2.50 s []",
		"connections created 0.20 s []",
		"local connected 1.40 s []",
		"remote connected 0.20 s []",
	}, "\n")
	if got := rows(figs); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	for _, f := range figs {
		if f.Command != "CMD" {
			t.Errorf("%s: command %q", f.Benchmark, f.Command)
		}
		if f.Covers == "" {
			t.Errorf("%s: says nothing of what it covers", f.Benchmark)
		}
	}
	// The steps say which of the target's parts they cover.
	for step, part := range map[string]string{"server and its pod": "pod start", "client and keys": "key exchange",
		"local connected": "handshake and first probe", "network init": "objects"} {
		for _, f := range figs {
			if f.Benchmark == step && !strings.Contains(f.Covers, part) {
				t.Errorf("%s covers %q, not %q", step, f.Covers, part)
			}
		}
	}

	// TestE2E's output gives the same figures (its connect step is the same).
	e2e := strings.ReplaceAll(connectOutput, "TestConnectTime", "TestE2E")
	if got := rows(parseConnect([]byte(e2e), nil, "CMD")); got != want {
		t.Errorf("from TestE2E's output: got\n%s\nwant\n%s", got, want)
	}

	// A test that failed after the connect step keeps the figures and says what failed.
	figs = parseConnect([]byte(connectOutput), errors.New("exit status 1"), "CMD")
	if len(figs) != 11 || figs[0].Value != 7.6 || !strings.Contains(figs[10].Error, "exit status 1 after the connect step") {
		t.Errorf("failed after the measurement:\n%s", rows(figs))
	}
}

// TestParseConnectNoFigure: a connect step that failed, did not run or was skipped gives no
// figure, only why.
func TestParseConnectNoFigure(t *testing.T) {
	failedConnect := strings.NewReplacer(
		"    --- PASS: TestConnectTime/connect (7.62s)", "    --- FAIL: TestConnectTime/connect (7.62s)",
		"--- PASS: TestConnectTime (112.31s)", "--- FAIL: TestConnectTime (112.31s)",
		`remote connected 0.2s)
`, `remote connected 0.2s)
    e2e_test.go:445: skeinctl network connect: no "(remote) Connection is established" line in:
        INFO   (local) Connection is established
`).Replace(connectOutput)
	installFailed := `=== RUN   TestConnectTime
    e2e_test.go:54: lab: 2 clusters x 2 nodes up in 41.2s
=== RUN   TestConnectTime/install
    e2e_test.go:63: lab exec: exit status 1: Error: INSTALLATION FAILED: context deadline exceeded
--- FAIL: TestConnectTime (200.00s)
    --- FAIL: TestConnectTime/install (180.00s)
FAIL
FAIL	github.com/skein-net/skein/bench/e2e	210.000s
`
	skipped := `=== RUN   TestConnectTime
    connecttime_test.go:22: SKEIN_SKIP_NETNS set: the lab needs network namespaces
--- SKIP: TestConnectTime (0.00s)
PASS
ok  	github.com/skein-net/skein/bench/e2e	0.020s
`
	noLine := strings.ReplaceAll(connectOutput, "to \"Connection is established\"", "until established")
	badBreakdown := strings.ReplaceAll(connectOutput, "skeinctl: 7.5s (network init 0.3s,", "skeinctl: 7.5s (network init soon,")
	for _, c := range []struct {
		name, out string
		err       error
		want      []string // substrings of the rows, in order
		figures   int      // how many figures with a value
	}{
		{"connect failed", failedConnect, errors.New("exit status 1"),
			[]string{"connect FAILED: TestConnectTime/connect failed:", `no "(remote) Connection is established" line`}, 0},
		{"install failed", installFailed, errors.New("exit status 1"),
			[]string{"connect FAILED: the test ended before the connect step (exit status 1):", "FAIL github.com/skein-net/skein/bench/e2e"}, 0},
		{"skipped", skipped, nil, []string{"connect SKIPPED: connecttime_test.go:22: SKEIN_SKIP_NETNS set: the lab needs network namespaces"}, 0},
		{"no test", "testing: warning: no tests to run\nPASS\nok  \tgithub.com/skein-net/skein/bench/e2e\t0.01s [no tests to run]\n", nil,
			[]string{"connect FAILED: no connect step in the test's output:", "no tests to run"}, 0},
		{"no build", "# github.com/skein-net/skein/bench/e2e\nbench/e2e/x_test.go:1:1: syntax error\nFAIL\tgithub.com/skein-net/skein/bench/e2e [build failed]\n", errors.New("exit status 1"),
			[]string{"connect FAILED: the test ended before the connect step", "syntax error"}, 0},
		{"no connect line", noLine, nil, []string{"connect FAILED: TestConnectTime/connect passed but printed no connect line"}, 0},
		{"breakdown unreadable", badBreakdown, nil,
			[]string{"connect 7.60 s [<= 10]", `skeinctl's breakdown FAILED: skeinctl's breakdown "7.5s (network init soon,`, `step "network init soon" is not`}, 1},
	} {
		figs := parseConnect([]byte(c.out), c.err, "CMD")
		got := rows(figs)
		rest := got
		for _, w := range c.want {
			i := strings.Index(rest, w)
			if i < 0 {
				t.Errorf("%s: %q not in (or not after the previous want)\n%s", c.name, w, got)
				break
			}
			rest = rest[i+len(w):]
		}
		n := 0
		for _, f := range figs {
			if f.Unit != "" || f.Value != 0 {
				n++
				if f.Error != "" || f.Skipped != "" {
					t.Errorf("%s: a figure with an error: %+v", c.name, f)
				}
			}
		}
		if n != c.figures {
			t.Errorf("%s: %d figures, want %d:\n%s", c.name, n, c.figures, got)
		}
	}
}

func TestParseConnectBreakdown(t *testing.T) {
	total, steps, err := parseConnectBreakdown("12.25s (network init 0.3s, a new step 11.95s)")
	if err != nil || total != 12.25 || len(steps) != 2 || steps[1].Benchmark != "a new step" || steps[1].Value != 11.95 || steps[1].Covers != "" ||
		steps[0].Covers != connectSteps["network init"] {
		t.Errorf("got %v %+v %v", total, steps, err)
	}
	for _, bad := range []string{"", "7.5s", "7.5s ()", "7.5s (network init 0.3s", "x.5s (network init 0.3s)", "7.5s (network init 0.3)",
		"7.5s (network init 0.3s; client pod 1s)", "7.5s (0.3s)"} {
		if _, _, err := parseConnectBreakdown(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestConnectMarkdown(t *testing.T) {
	r := &Result{Connect: parseConnect([]byte(connectOutput), nil, ConnectCommand())}
	md := r.Markdown()
	for _, s := range []string{
		"## Connect time",
		"| `SKEIN_CONNECT_TIME=1 go test -count 1 -v -timeout 20m -run '^TestConnectTime$' ./bench/e2e/` | | | |",
		"| connect | 7.60 s | <= 10 | skeinctl network connect",
		"| skeinctl's own total | 7.50 s | |",
		"| client and keys | 0.40 s | | objects and key exchange:",
		"| local connected | 1.40 s | | handshake and first probe:",
	} {
		if !strings.Contains(md, s) {
			t.Errorf("the section lacks %q:\n%s", s, md)
		}
	}
	if strings.Contains(md, "| metric |") {
		t.Errorf("a report without rungs has a ladder table:\n%s", md)
	}
	r = &Result{Connect: []ScaleFigure{
		{Benchmark: "connect", Command: "A|B", Error: "lab: exit status 1 | helm\nfailed"},
		{Benchmark: "connect", Command: "C", Skipped: "no root"},
	}}
	md = r.connectMarkdown()
	for _, s := range []string{"| `A\\|B` | | | |", "| connect | FAILED: lab: exit status 1 \\| helm failed | | |", "| `C` | | | |", "| connect | SKIPPED: no root | | |"} {
		if !strings.Contains(md, s) {
			t.Errorf("the section lacks %q:\n%s", s, md)
		}
	}
	if (&Result{}).connectMarkdown() != "" {
		t.Error("a section without figures")
	}
}

// TestConnectJSON: the section's figures go into the JSON under "connect" and come back; a
// report of the connect section alone reads back.
func TestConnectJSON(t *testing.T) {
	r := NewResult("alone")
	r.Connect = parseConnect([]byte(connectOutput), nil, "CMD")
	js, err := r.JSON()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"connect": [`, `"benchmark": "connect"`, `"unit": "s"`, `"value": 7.6`, `"target": "\u003c= 10"`, `"covers": "pod start: until a client gateway pod is Ready`} {
		if !strings.Contains(string(js), s) {
			t.Errorf("the JSON lacks %s:\n%s", s, js)
		}
	}
	path := filepath.Join(t.TempDir(), "r.json")
	if err := os.WriteFile(path, js, 0o644); err != nil {
		t.Fatal(err)
	}
	back, err := ReadReport(path)
	if err != nil {
		t.Fatal(err)
	}
	if rows(back.Connect) != rows(r.Connect) {
		t.Errorf("read back:\n%s\nwant\n%s", rows(back.Connect), rows(r.Connect))
	}
}

func TestPrefixWriter(t *testing.T) {
	var b strings.Builder
	w := prefixWriter(&b, "> ")
	for _, s := range []string{"one\ntw", "o\n", "", "three\nfour\n"} {
		if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if want := "> one\n> two\n> three\n> four\n"; b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}

// TestConnectInStep: the harness reads what bench/e2e and skeinctl print, so it checks their
// sources: env.connect's report line is one connectLine reads, and every step skeinctl's
// breakdown names is one connectSteps covers (and the other way round).
func TestConnectInStep(t *testing.T) {
	e2e, err := os.ReadFile("../e2e/e2e_test.go")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`e\.reportf\(("connect: (?:[^"\\]|\\.)*")`).FindSubmatch(e2e)
	if m == nil {
		t.Fatal(`bench/e2e/e2e_test.go has no e.reportf("connect: ...") line`)
	}
	format, err := strconv.Unquote(string(m[1]))
	if err != nil {
		t.Fatal(err)
	}
	line := "    e2e_test.go:55: " + fmt.Sprintf(format, 5.6, "5.4s (network init 0.3s, client pod 5.1s)")
	if got := rows(parseConnect([]byte(strings.Replace(connectOutput, strings.Split(connectOutput, "\n")[7], line, 1)), nil, "CMD")); !strings.HasPrefix(got, "connect 5.60 s [<= 10]\nskeinctl's own total 5.40 s []\nnetwork init 0.30 s []\nclient pod 5.10 s []") {
		t.Errorf("bench/e2e's connect line %q reads as\n%s", line, got)
	}

	skeinctl, err := os.ReadFile("../../cmd/skeinctl/network.go")
	if err != nil {
		t.Fatal(err)
	}
	steps := map[string]bool{}
	for _, m := range regexp.MustCompile(`took\.done\("([^"]+)"\)`).FindAllSubmatch(skeinctl, -1) {
		steps[string(m[1])] = true
	}
	if !bytes.Contains(skeinctl, []byte(`took.done(s.sd.label + " connected")`)) {
		t.Error(`cmd/skeinctl/network.go no longer ends a step with took.done(s.sd.label + " connected")`)
	}
	steps["local connected"], steps["remote connected"] = true, true
	for s := range steps {
		if connectSteps[s] == "" {
			t.Errorf("skeinctl's step %q: connectSteps does not say what it covers", s)
		}
	}
	for s := range connectSteps {
		if !steps[s] {
			t.Errorf("connectSteps covers %q, which skeinctl no longer has", s)
		}
	}
}

func TestProcessGroup(t *testing.T) {
	if !slices.Contains(processGroup(syscall.Getpgrp()), os.Getpid()) {
		t.Errorf("this process (%d) is not in its own group %d: %v", os.Getpid(), syscall.Getpgrp(), processGroup(syscall.Getpgrp()))
	}
}
