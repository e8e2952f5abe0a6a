package golden

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDiff(t *testing.T) {
	d := Diff("a\nb\nc\nd\n", "a\nB\nc\nd\n")
	if !strings.Contains(d, "- b\n+ B\n") || !strings.Contains(d, "(1 equal lines)") || !strings.Contains(d, "(2 equal lines)") {
		t.Errorf("diff:\n%s", d)
	}
	if d := Diff("same\n", "same\n"); strings.Contains(d, "-") || strings.Contains(d, "+") {
		t.Errorf("equal texts diff as:\n%s", d)
	}
}

// recorder is a testing.TB that records failures instead of failing the test.
type recorder struct {
	testing.TB
	failed bool
	msg    string
}

func (r *recorder) Helper()                   {}
func (r *recorder) Name() string              { return "TestX" }
func (r *recorder) Errorf(f string, a ...any) { r.failed, r.msg = true, f }
func (r *recorder) Fatalf(f string, a ...any) { r.failed, r.msg = true, f; panic(r) }
func (r *recorder) Fatal(a ...any)            { r.failed = true; panic(r) }

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	wd, _ := os.Getwd()
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(wd)
	check := func(name, got string) (r *recorder) {
		r = &recorder{TB: t}
		defer func() { _ = recover() }()
		Check(r, name, got)
		return r
	}
	if r := check("missing", "x"); !r.failed || !strings.Contains(r.msg, "-update creates it") {
		t.Errorf("a missing golden file: failed %v, %q", r.failed, r.msg)
	}
	*update = true
	if r := check("out", "hello\n"); r.failed {
		t.Errorf("-update failed: %q", r.msg)
	}
	*update = false
	if b, err := os.ReadFile(filepath.Join("testdata", "out.golden")); err != nil || string(b) != "hello\n" {
		t.Errorf("-update wrote %q, %v", b, err)
	}
	if r := check("out", "hello\n"); r.failed {
		t.Errorf("equal output failed: %q", r.msg)
	}
	if r := check("out", "bye\n"); !r.failed {
		t.Error("different output passed")
	}
}

func TestCheckSection(t *testing.T) {
	path := filepath.Join(t.TempDir(), "doc.md")
	doc := "# Title\n<!-- begin -->\nold\n<!-- end -->\ntail\n"
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	check := func(got string) (r *recorder) {
		r = &recorder{TB: t}
		defer func() { _ = recover() }()
		CheckSection(r, path, "<!-- begin -->", "<!-- end -->", got)
		return r
	}
	if r := check("old\n"); r.failed {
		t.Errorf("the same section failed: %q", r.msg)
	}
	if r := check("new\n"); !r.failed {
		t.Error("a different section passed")
	}
	*update = true
	r := check("new\nlines\n")
	*update = false
	if r.failed {
		t.Errorf("-update failed: %q", r.msg)
	}
	if b, _ := os.ReadFile(path); string(b) != "# Title\n<!-- begin -->\nnew\nlines\n<!-- end -->\ntail\n" {
		t.Errorf("-update wrote %q", b)
	}
	if r := check("new\nlines\n"); r.failed {
		t.Errorf("after -update: %q", r.msg)
	}
	if err := os.WriteFile(path, []byte("no markers\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := check("x\n"); !r.failed {
		t.Error("a file without the markers passed")
	}
}
