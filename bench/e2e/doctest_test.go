package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/skein-net/skein/internal/docblocks"
	"github.com/skein-net/skein/internal/k8sbin"
)

// docPages are the pages TestDocs runs, in the order a user reads them; docs/standalone.md's
// recipes are the appliance's doc test (appliance/standalone_doc_linux_test.go).
var docPages = []string{"install.md", "verify.md", "services.md", "troubleshooting.md"}

// TestDocs runs the docs' shell blocks marked for it (internal/docblocks) in the lab, as
// written and in the order written: install.md's Helm install in each cluster, connect and
// checks, verify.md's skeinctl test network and bench (their output compared with the
// documented output's shape), services.md's export, import, namespace selection and rotation,
// and at last install.md's uninstall. It fails when a command fails or its output drifts.
//
// The lab is not the reader's clusters, and only this differs from a reader's shell:
//   - a directory with the kubeconfigs the docs name (A.kubeconfig, B.kubeconfig, A, B, and
//     ~/.kube/cluster-b under a HOME of its own), KUBECONFIG set to cluster A's;
//   - helm installs the chart of this checkout (deploy/chart) where the docs say
//     oci://ghcr.io/skein-net/charts/skein --version V, with imageRegistry set to the lab's
//     registry (the lab has no other);
//   - there is no terminal (a command that would ask a question fails: the docs say --yes).
func TestDocs(t *testing.T) {
	e := setup(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	wd := filepath.Join(e.l.StateDir, "doctest")
	home := filepath.Join(wd, "home")
	shims := filepath.Join(wd, "shims")
	for _, d := range []string{filepath.Join(home, ".kube"), shims} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyFile := func(from, to string) {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for i, name := range []string{"A", "B"} {
		copyFile(e.l.Clusters[i].Kubeconfig, filepath.Join(wd, name+".kubeconfig"))
		copyFile(e.l.Clusters[i].Kubeconfig, filepath.Join(wd, name))
	}
	copyFile(e.l.Clusters[1].Kubeconfig, filepath.Join(home, ".kube", "cluster-b"))
	chart, err := filepath.Abs("../../deploy/chart")
	if err != nil {
		t.Fatal(err)
	}
	helm, ok := k8sbin.HelmReady()
	if !ok {
		t.Fatal("helm is not in the cache: run make k8s-binaries")
	}
	shim := fmt.Sprintf(`#!/bin/bash
# The doc test's helm: this checkout's chart for the published one, the lab's registry.
args=()
skip=
install=
for a in "$@"; do
  if [ -n "$skip" ]; then skip=; continue; fi
  case "$a" in
    oci://ghcr.io/skein-net/charts/skein) args+=(%q) ;;
    --version) skip=1 ;;
    install) install=1; args+=("$a") ;;
    *) args+=("$a") ;;
  esac
done
if [ -n "$install" ]; then args+=(--set imageRegistry=%q --timeout 4m); fi
exec %q "${args[@]}"
`, chart, e.l.Registry+"/skein-net", helm)
	if err := os.WriteFile(filepath.Join(shims, "helm"), []byte(shim), 0o755); err != nil {
		t.Fatal(err)
	}

	var pages [][]docblocks.Block
	for _, p := range docPages {
		blocks, err := docblocks.Parse(filepath.Join("..", "..", "docs", p))
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, blocks)
	}
	ran := 0
	run := func(b docblocks.Block, kubeconfig, script string) string {
		t.Helper()
		cctx, ccancel := context.WithTimeout(ctx, 6*time.Minute)
		defer ccancel()
		cmd := e.l.Command(cctx, 0, "bash", "-euo", "pipefail", "-c", script)
		cmd.Dir = wd
		cmd.Env = append(cmd.Env, "KUBECONFIG="+filepath.Join(wd, kubeconfig), "HOME="+home,
			"PATH="+shims+":"+e.l.BinDir+":"+e.l.K8sBin+":"+os.Getenv("PATH"))
		start := time.Now()
		out, err := cmd.CombinedOutput()
		e.t.Logf("%s:%d (KUBECONFIG=%s, %.1fs):\n%s\n%s", b.File, b.Line, kubeconfig, time.Since(start).Seconds(), script, out)
		if err != nil {
			t.Fatalf("%s:%d: the documented commands failed: %v\n%s", b.File, b.Line, err, out)
		}
		ran++
		return string(out)
	}
	do := func(b docblocks.Block) {
		switch b.Kind() {
		case "run":
			run(b, "A.kubeconfig", b.Body)
		case "run in each cluster":
			run(b, "A.kubeconfig", b.Body)
			run(b, "B.kubeconfig", b.Body)
		case "output":
			for _, c := range outputCommands(b.Body) {
				got := run(b, "A.kubeconfig", c.command)
				if why := outputDrift(c.output, got); why != "" {
					t.Errorf("%s:%d: the output of %q drifted from the documented one: %s", b.File, b.Line, c.command, why)
				}
			}
		}
	}
	var last []docblocks.Block
	for _, blocks := range pages {
		for _, b := range blocks {
			if b.Kind() == "run last" {
				last = append(last, b)
				continue
			}
			do(b)
		}
	}
	for _, b := range last {
		run(b, "A.kubeconfig", b.Body)
	}
	if ran == 0 {
		t.Fatal("no documented block ran")
	}
	e.reportf("docs: %d documented blocks ran in the lab", ran)
}

// docCommand is one "$ command" of an output block and the output it documents.
type docCommand struct {
	command string
	output  []string
}

// outputCommands splits an output block into its commands and their documented output.
func outputCommands(body string) []docCommand {
	var out []docCommand
	for _, line := range strings.Split(body, "\n") {
		if c, ok := strings.CutPrefix(line, "$ "); ok {
			out = append(out, docCommand{command: c})
			continue
		}
		if len(out) > 0 && strings.TrimSpace(line) != "" {
			out[len(out)-1].output = append(out[len(out)-1].output, line)
		}
	}
	return out
}

var headerRE = regexp.MustCompile(`^[A-Z][A-Z0-9/,()-]*( +[A-Z][A-Z0-9/,()-]*)+$`)

// outputDrift compares a command's output with the documented one by shape, as addresses,
// names and figures differ from run to run: each table header the docs show is printed as
// written (spacing aside), and each documented line's first word (INFO, a row's first
// column's kind, PASS:) starts a printed line. "" when they agree.
func outputDrift(documented []string, got string) string {
	gotLines := strings.Split(got, "\n")
	norm := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	have := map[string]bool{}
	first := map[string]bool{}
	for _, l := range gotLines {
		have[norm(l)] = true
		if f := strings.Fields(l); len(f) > 0 {
			first[firstWordShape(f[0])] = true
		}
	}
	var missing []string
	for _, l := range documented {
		n := norm(l)
		if n == "" || n == "..." {
			continue
		}
		if headerRE.MatchString(n) {
			if !have[n] {
				missing = append(missing, fmt.Sprintf("header %q", n))
			}
			continue
		}
		if w := firstWordShape(strings.Fields(l)[0]); !first[w] {
			missing = append(missing, fmt.Sprintf("a line starting like %q", l))
		}
	}
	if len(missing) > 0 {
		return "not printed: " + strings.Join(missing, "; ")
	}
	return ""
}

// firstWordShape is a first word without what changes from run to run: digits, and what
// follows a "/" (local/c0-n0 and local/c0-n1 are one shape).
func firstWordShape(w string) string {
	if i := strings.IndexByte(w, '/'); i > 0 {
		w = w[:i+1]
	}
	return strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return '#'
		}
		return r
	}, w)
}
