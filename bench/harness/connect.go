package harness

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The connect section: how long skeinctl network connect --wait takes on two fresh installs
// in the lab (issue #23's target: "Connection is established" in <= 10 s), measured by
// bench/e2e's TestConnectTime (TestE2E's install and connect steps alone) and read from its
// report line. Its figures are ScaleFigures, one per row, as the scale section's are.

// ConnectTarget is the connect time's target.
const ConnectTarget = "<= 10"

// connectEnv makes TestConnectTime run (it skips without it, so go test ./... leaves it out).
const connectEnv = "SKEIN_CONNECT_TIME=1"

// connectArgs are go test's arguments for TestConnectTime, from the module root.
var connectArgs = []string{"test", "-count", "1", "-v", "-timeout", "20m", "-run", "^TestConnectTime$", "./bench/e2e/"}

// ConnectCommand reproduces the connect section (1-3 minutes, the most when it builds; root, and the Kubernetes
// binaries, helm and the node stack of make k8s-binaries).
func ConnectCommand() string {
	return connectEnv + " go " + strings.Join(quoteArgs(connectArgs), " ")
}

// connectSteps say what each step of skeinctl's breakdown ("Connected in 7.5s (network init
// 0.3s, ...)", cmd/skeinctl) covers, in the target's terms: objects, pod start, key exchange,
// handshake, first probe. A step skeinctl adds later is reported without one.
var connectSteps = map[string]string{
	"network init":        "objects: each cluster's Configuration of the other, its CIDRs remapped by the IPAM",
	"server and its pod":  "objects and pod start: the GatewayServer rendered in the remote cluster (Deployment, Service, key Secret), until a gateway pod is Ready",
	"server endpoint":     "objects: the GatewayServer's Service endpoint in its status",
	"client and keys":     "objects and key exchange: the GatewayClient rendered here, both key Secrets, a PublicKey each way",
	"client pod":          "pod start: until a client gateway pod is Ready (its readiness does not wait for the tunnel)",
	"connections created": "objects: both gateways created their Connection",
	"local connected":     "handshake and first probe: until the client's Connection is Connected (its gateway configured, its first WireGuard handshake, a probe answered through the tunnel)",
	"remote connected":    "first probe: the server's Connection Connected too",
}

// connectLine matches the connect step's report line (bench/e2e, env.connect), in go test -v's
// log ("    e2e_test.go:54: connect: ...") or in the report printed at the end: the wall-clock
// seconds until both sides said "Connection is established", then skeinctl's own breakdown.
var connectLine = regexp.MustCompile(`connect: skeinctl network connect .*: ([0-9]+(?:\.[0-9]+)?)s to "Connection is established" on both sides; skeinctl: (.*)$`)

// breakdownStep is one "name 1.2s" of skeinctl's breakdown (its names have no digits).
var breakdownStep = regexp.MustCompile(`^([^0-9,;]+) ([0-9]+(?:\.[0-9]+)?)s$`)

// RunConnect runs TestConnectTime from the module root, its output copied to log as it runs,
// and returns the section's figures: the wall-clock time with its target, skeinctl's total and
// every step of its breakdown. A run that measured nothing gives one figure with its Error (or
// Skipped, when the test skipped), never a figure it did not measure. The test's lab is named
// by the harness (prefix "sct" and this process's id) and removed here with bench/cmd/lab if
// the test left it up (killed when ctx ends, or by go test's timeout, before its cleanup ran).
func RunConnect(ctx context.Context, log io.Writer) []ScaleFigure {
	command := ConnectCommand()
	out, runErr, downErr, err := runLabTest(ctx, log, "connect", fmt.Sprintf("sct%d", os.Getpid()), connectArgs, connectEnv, "SKEIN_CONNECT_TIME_PREFIX")
	if err != nil {
		return []ScaleFigure{{Benchmark: "connect", Command: command, Error: err.Error()}}
	}
	figs := parseConnect(out, runErr, command)
	if downErr != nil {
		figs = append(figs, ScaleFigure{Benchmark: "lab teardown", Command: command, Error: downErr.Error()})
	}
	return figs
}

// runLabTest runs a bench/e2e test from the module root (go test args, with env and
// prefixEnv=prefix added to the environment), its output copied to log after "bench:
// section: | " as it runs, and returns its output and how it ended (runErr). The test's lab is
// named prefix and removed with bench/cmd/lab if the test left it up (killed when ctx ends,
// or by go test's timeout, before its cleanup ran): downErr says when that failed. err is
// set when the test could not be run at all.
func runLabTest(ctx context.Context, log io.Writer, section, prefix string, args []string, env, prefixEnv string, moreEnv ...string) (out []byte, runErr, downErr, err error) {
	root, err := moduleRoot(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	fmt.Fprintf(log, "bench: %s: %s go %s (lab prefix %s)\n", section, env, strings.Join(quoteArgs(args), " "), prefix)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(append(os.Environ(), env, prefixEnv+"="+prefix), moreEnv...)
	// Its own process group: an interrupt ends go test and the test binary together, through
	// ctx, and the lab is removed below.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Killed, the test leaves the directory of the lab's binaries and images behind too
	// (labtest.Build's /var/tmp/skein-e2e-bin-PID): its PID is one of the group's.
	var group []int
	cmd.Cancel = func() error {
		group = processGroup(cmd.Process.Pid)
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	cmd.WaitDelay = 10 * time.Second
	var buf bytes.Buffer
	w := io.MultiWriter(&buf, prefixWriter(log, "bench: "+section+": | "))
	cmd.Stdout, cmd.Stderr = w, w
	runErr = cmd.Run()
	if runErr != nil && ctx.Err() != nil {
		runErr = fmt.Errorf("interrupted (%w)", ctx.Err())
	}
	downErr = labDown(root, prefix, section, log)
	for _, pid := range group {
		dir := fmt.Sprintf("/var/tmp/skein-e2e-bin-%d", pid)
		if _, err := os.Stat(dir); err == nil {
			fmt.Fprintf(log, "bench: %s: removing the killed test's %s\n", section, dir)
			_ = os.RemoveAll(dir)
		}
	}
	return buf.Bytes(), runErr, downErr, nil
}

// processGroup lists the processes of process group pgid (from /proc/PID/stat).
func processGroup(pgid int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var pids []int
	for _, st := range stats {
		b, err := os.ReadFile(st)
		if err != nil {
			continue
		}
		// "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 3 || f[2] != strconv.Itoa(pgid) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(st))); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// labDown removes the lab named prefix with bench/cmd/lab if any of its namespaces or its
// state directory is left.
func labDown(root, prefix, section string, log io.Writer) error {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return fmt.Errorf("ip netns list: %w", err)
	}
	left := 0
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], prefix+"-") {
			left++
		}
	}
	_, statErr := os.Stat(filepath.Join("/var/tmp", "skein-lab-"+prefix))
	if left == 0 && statErr != nil {
		return nil
	}
	fmt.Fprintf(log, "bench: %s: the test left its lab up (%d namespaces): lab down --prefix %s\n", section, left, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "run", "./bench/cmd/lab", "down", "--prefix", prefix)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("lab down --prefix %s: %w: %s", prefix, err, oneLine(string(b), 300))
	}
	return nil
}

// parseConnect reads go test -v's output of TestConnectTime (or of TestE2E: the same connect
// step and report line) and runErr, how the test ended. The figures come only from the
// connect line of a connect step that passed; otherwise one figure says why there is none.
func parseConnect(b []byte, runErr error, command string) []ScaleFigure {
	lines := strings.Split(string(b), "\n")
	res := testResults(lines)
	connectTest, connectStatus := "", ""
	for name, st := range res {
		if strings.HasSuffix(name, "/connect") {
			connectTest, connectStatus = name, st
		}
	}
	fail := func(why string) []ScaleFigure {
		return []ScaleFigure{{Benchmark: "connect", Command: command, Error: why}}
	}
	switch {
	case connectStatus == "":
		// The connect step never ran: the lab or the install failed, the test skipped, or
		// there was no test.
		for name, st := range res {
			if st == "SKIP" && !strings.Contains(name, "/") {
				return []ScaleFigure{{Benchmark: "connect", Command: command, Skipped: oneLine(logOf(lines, name), 300)}}
			}
		}
		why := "no connect step in the test's output"
		if runErr != nil {
			why = "the test ended before the connect step (" + runErr.Error() + ")"
		}
		return fail(why + ": " + oneLine(lastLines(string(b), 4), 600))
	case connectStatus != "PASS":
		return fail(fmt.Sprintf("%s %s: %s", connectTest, map[string]string{"FAIL": "failed", "SKIP": "was skipped"}[connectStatus], oneLine(logOf(lines, connectTest), 600)))
	}
	var m []string
	for _, l := range lines {
		if m = connectLine.FindStringSubmatch(l); m != nil {
			break
		}
	}
	if m == nil {
		return fail(connectTest + " passed but printed no connect line (`connect: skeinctl network connect ...: N.Ns to \"Connection is established\" on both sides; skeinctl: ...`): the harness and bench/e2e disagree on its format")
	}
	wall, _ := strconv.ParseFloat(m[1], 64) // the pattern admits only numbers
	out := []ScaleFigure{{Benchmark: "connect", Unit: "s", Value: wall, Target: ConnectTarget, Command: command,
		Covers: "skeinctl network connect --server-service-type NodePort --wait, run in the lab's workstation, until \"Connection is established\" on both sides"}}
	total, steps, err := parseConnectBreakdown(m[2])
	if err != nil {
		out = append(out, ScaleFigure{Benchmark: "skeinctl's breakdown", Command: command, Error: err.Error()})
	} else {
		out = append(out, ScaleFigure{Benchmark: "skeinctl's own total", Unit: "s", Value: total, Command: command,
			Covers: "from its start to the last Connection established, by its own clock"})
		for _, s := range steps {
			s.Command = command
			out = append(out, s)
		}
	}
	if runErr != nil {
		// The measurement stands; what failed after it is said too.
		out = append(out, ScaleFigure{Benchmark: "the rest of the test", Command: command,
			Error: runErr.Error() + " after the connect step: " + oneLine(lastLines(string(b), 4), 600)})
	}
	return out
}

// parseConnectBreakdown reads skeinctl's "7.5s (network init 0.3s, server and its pod 2.5s,
// ...)" into its total and one figure per step.
func parseConnectBreakdown(s string) (total float64, steps []ScaleFigure, err error) {
	s = strings.TrimSpace(s)
	head, rest, ok := strings.Cut(s, "s (")
	if !ok || !strings.HasSuffix(rest, ")") {
		return 0, nil, fmt.Errorf("skeinctl's breakdown %q is not \"N.Ns (step N.Ns, ...)\"", s)
	}
	if total, err = strconv.ParseFloat(head, 64); err != nil {
		return 0, nil, fmt.Errorf("skeinctl's breakdown %q: its total %q is not a number", s, head)
	}
	for _, part := range strings.Split(strings.TrimSuffix(rest, ")"), ", ") {
		m := breakdownStep.FindStringSubmatch(strings.TrimSpace(part))
		if m == nil {
			return 0, nil, fmt.Errorf("skeinctl's breakdown %q: step %q is not \"name N.Ns\"", s, part)
		}
		v, _ := strconv.ParseFloat(m[2], 64)
		steps = append(steps, ScaleFigure{Benchmark: m[1], Unit: "s", Value: v, Covers: connectSteps[m[1]]})
	}
	return total, steps, nil
}

// testResults are go test -v's "--- PASS|FAIL|SKIP: Name (1.2s)" lines, by test name.
func testResults(lines []string) map[string]string {
	res := map[string]string{}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) >= 3 && f[0] == "---" && (f[1] == "PASS:" || f[1] == "FAIL:" || f[1] == "SKIP:") {
			res[f[2]] = strings.TrimSuffix(f[1], ":")
		}
	}
	return res
}

// logOf is what test name logged in go test -v's output: the lines after its "=== RUN",
// "=== CONT" or "=== NAME" headers up to the next header or result line (with go test -v a
// test's log is streamed so), trimmed.
func logOf(lines []string, name string) string {
	var out []string
	in := false
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- ") {
			f := strings.Fields(t)
			in = len(f) == 3 && (f[1] == "RUN" || f[1] == "CONT" || f[1] == "NAME") && f[2] == name
			continue
		}
		if in && t != "" {
			out = append(out, t)
		}
	}
	return strings.Join(out, " / ")
}

// oneLine is s on one line, cut to at most n bytes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + "..."
	}
	return s
}

// prefixWriter writes each line written to w with prefix first.
func prefixWriter(w io.Writer, prefix string) io.Writer { return &linePrefixer{w: w, prefix: prefix} }

type linePrefixer struct {
	w       io.Writer
	prefix  string
	midLine bool
}

func (p *linePrefixer) Write(b []byte) (int, error) {
	n := len(b)
	for len(b) > 0 {
		if !p.midLine {
			if _, err := io.WriteString(p.w, p.prefix); err != nil {
				return 0, err
			}
		}
		i := bytes.IndexByte(b, '\n')
		chunk := b
		if i >= 0 {
			chunk = b[:i+1]
		}
		if _, err := p.w.Write(chunk); err != nil {
			return 0, err
		}
		p.midLine = i < 0
		b = b[len(chunk):]
	}
	return n, nil
}
