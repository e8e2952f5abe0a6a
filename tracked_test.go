package skein_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"os/exec"
	"path"
	"strings"
	"testing"
)

// maxTracked is the largest file the repository may hold outside testdata and results.
const maxTracked = 1 << 20

// executableFormat names the executable format data starts with ("" for none): ELF, Mach-O
// (thin or universal) or PE (an MZ header pointing at a PE signature).
func executableFormat(head []byte) string {
	switch {
	case bytes.HasPrefix(head, []byte("\x7fELF")):
		return "ELF"
	case len(head) >= 4 && (binary.BigEndian.Uint32(head) == 0xfeedface || binary.BigEndian.Uint32(head) == 0xfeedfacf ||
		binary.LittleEndian.Uint32(head) == 0xfeedface || binary.LittleEndian.Uint32(head) == 0xfeedfacf):
		return "Mach-O"
	case len(head) >= 8 && binary.BigEndian.Uint32(head) == 0xcafebabe && binary.BigEndian.Uint32(head[4:]) < 64:
		return "Mach-O universal" // an architecture count; a Java class file, also 0xcafebabe, has its version (45 or more) there
	case len(head) >= 0x40 && bytes.HasPrefix(head, []byte("MZ")):
		if off := binary.LittleEndian.Uint32(head[0x3c:]); int(off)+4 <= len(head) && bytes.Equal(head[off:off+4], []byte("PE\x00\x00")) {
			return "PE"
		}
	}
	return ""
}

// exempt reports whether a tracked file may be large: test data and benchmark results.
func exempt(name string) bool {
	for dir := name; dir != "." && dir != "/"; dir = path.Dir(dir) {
		if b := path.Base(dir); b == "testdata" {
			return true
		}
	}
	return strings.HasPrefix(name, "bench/results/")
}

// TestNoBinariesTracked: no executable is committed (51 MB of them once were: every clone
// downloads them forever), and no file over 1 MiB outside testdata and bench/results.
func TestNoBinariesTracked(t *testing.T) {
	out, err := exec.Command("git", "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files (the test reads what the repository tracks; run it in a git checkout): %v", err)
	}
	n := 0
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		fi, err := os.Lstat(name)
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the work tree, or a symlink
		}
		n++
		if fi.Size() > maxTracked && !exempt(name) {
			t.Errorf("%s is %d bytes: files over %d bytes belong in testdata/ or bench/results/, or out of git", name, fi.Size(), maxTracked)
		}
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		head := make([]byte, 4096)
		k, _ := io.ReadFull(f, head)
		f.Close()
		if format := executableFormat(head[:k]); format != "" {
			t.Errorf("%s is an %s executable: build output never goes into git (`git rm --cached %s`, and .gitignore it)", name, format, name)
		}
	}
	if n < 100 {
		t.Fatalf("only %d tracked files read: not the repository's root?", n)
	}
}

// TestBuildOutputIgnored: what `go build` of each command at the root and `make build` write is
// ignored by git, so a `git add -A` cannot pick it up.
func TestBuildOutputIgnored(t *testing.T) {
	dirs, err := os.ReadDir("cmd")
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"bin/skeinctl", "bin/images/index.json", "skein.test", "cover.out", "lab", "lab-probe", "pause", "k8s-binaries"}
	for _, d := range dirs {
		if d.IsDir() {
			names = append(names, d.Name())
		}
	}
	for _, name := range names {
		if err := exec.Command("git", "check-ignore", "-q", "--no-index", name).Run(); err != nil {
			t.Errorf("%s (build output) is not ignored by .gitignore: %v", name, err)
		}
	}
}

// TestExecutableFormat: the check knows each format, and text is not one.
func TestExecutableFormat(t *testing.T) {
	pe := make([]byte, 0x100)
	copy(pe, "MZ")
	binary.LittleEndian.PutUint32(pe[0x3c:], 0x80)
	copy(pe[0x80:], "PE\x00\x00")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	elf, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		head []byte
		want string
	}{
		{elf[:4096], "ELF"},
		{[]byte{0xcf, 0xfa, 0xed, 0xfe, 7, 0, 0, 1}, "Mach-O"},
		{[]byte{0xca, 0xfe, 0xba, 0xbe, 0, 0, 0, 2}, "Mach-O universal"},
		{pe, "PE"},
		{[]byte("MZ is a text file's first word, nothing more, and long enough to have an offset at 0x3c in it."), ""},
		{[]byte("package main\n"), ""},
		{[]byte("#!/bin/sh\n"), ""},
	} {
		if got := executableFormat(c.head); got != c.want {
			t.Errorf("%q...: %q, want %q", c.head[:8], got, c.want)
		}
	}
}
