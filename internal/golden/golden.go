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
	}
	CheckFile(tb, path, got)
}

// CheckFile is Check for a file kept elsewhere than testdata (a generated reference in docs/,
// say): it fails tb unless the file at path holds got; with -update it writes got there first.
func CheckFile(tb testing.TB, path, got string) {
	tb.Helper()
	if *update {
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

// CheckSection is CheckFile for the part of a hand-written file between the line begin and
// the line end (markers such as HTML comments in Markdown): that part must be got; with
// -update it is replaced, and the rest of the file is left as it is.
func CheckSection(tb testing.TB, path, begin, end, got string) {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	text := string(b)
	i := strings.Index(text, begin+"\n")
	j := strings.Index(text, "\n"+end)
	if i < 0 || j < i {
		tb.Fatalf("%s has no section between the lines %q and %q", path, begin, end)
	}
	start, stop := i+len(begin)+1, j+1
	if *update {
		text = text[:start] + got + text[stop:]
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			tb.Fatal(err)
		}
		stop = start + len(got)
	}
	if want := text[start:stop]; got != want {
		tb.Errorf("%s, between %q and %q, differs from what the test generated (go test -run '%s' -update rewrites it):\n%s", path, begin, end, tb.Name(), Diff(want, got))
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
