// Package golden compares what a test produces with a file kept in the package's testdata,
// for output that people read (CLI output, iproute2 scripts): a reviewer sees a change of
// behaviour as a diff of the golden file.
//
// `go test ./pkg -run TestX -update` rewrites the files the tests check instead of comparing;
// the flag is registered once, here. Test infrastructure: only tests import it.
package golden

import (
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files (testdata/*.golden) with what the tests produce")

// Path is where name's golden file lives: testdata/<name>.golden in the package under test.
func Path(name string) string { return filepath.Join("testdata", name+".golden") }

// Check fails tb unless got equals the golden file of name; with -update it writes got there
// first.
func Check(tb testing.TB, name, got string) {
	tb.Helper()
	path := Path(name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("%v (go test -run '%s' -update creates it)", err, tb.Name())
	}
	if got != string(want) {
		tb.Errorf("%s differs from what the test produced (if the change is meant, go test -run '%s' -update):\n%s",
			path, tb.Name(), Diff(string(want), got))
	}
}

// Diff shows two texts line by line: the lines both have in common at the start and the end
// are left out, the rest of the golden text is marked "-" and what the test produced "+".
func Diff(want, got string) string {
	w, g := strings.Split(strings.TrimSuffix(want, "\n"), "\n"), strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	head := 0
	for head < len(w) && head < len(g) && w[head] == g[head] {
		head++
	}
	tail := 0
	for tail < len(w)-head && tail < len(g)-head && w[len(w)-1-tail] == g[len(g)-1-tail] {
		tail++
	}
	var b strings.Builder
	if head > 0 {
		b.WriteString("  ... (" + strconv.Itoa(head) + " equal lines)\n")
	}
	for _, l := range w[head : len(w)-tail] {
		b.WriteString("- " + l + "\n")
	}
	for _, l := range g[head : len(g)-tail] {
		b.WriteString("+ " + l + "\n")
	}
	if tail > 0 {
		b.WriteString("  ... (" + strconv.Itoa(tail) + " equal lines)\n")
	}
	return b.String()
}
