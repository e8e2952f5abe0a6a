package skein_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// copyTree copies the files git would see (tracked and untracked, not ignored) into a fresh
// git repository under a temporary directory, so that `make verify` runs on exactly this tree.
func copyTree(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	files, err := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(files), "\x00"), "\x00") {
		fi, err := os.Lstat(f)
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the work tree, or not a plain file
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, f), data, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	run(t, dst, "git", "init", "-q")
	run(t, dst, "git", "add", "-A")
	return dst
}

func run(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func makeVerify(dir string) (string, error) {
	cmd := exec.Command("make", "--no-print-directory", "verify")
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// TestMakeVerify runs `make verify` on a copy of this tree (it must pass: generated files are
// current), then hand-edits generated files one at a time and checks verify fails naming them.
func TestMakeVerify(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatal("make is not installed; .ci/run installs it")
	}
	dir := copyTree(t)
	if out, err := makeVerify(dir); err != nil {
		t.Fatalf("make verify fails on this tree; run 'make generate && go mod tidy && gofmt -w .':\n%s", out)
	}

	edits := []struct {
		file, old, new string
	}{
		{"control/api/networking/v1alpha1/zz_generated.deepcopy.go", "func (in *Configuration) DeepCopyInto(out *Configuration) {\n", "func (in *Configuration) DeepCopyInto(out *Configuration) {\n\t// hand edit\n"},
		{"deploy/crds/networking.liqo.io_gatewayservers.yaml", "minimum: 576", "minimum: 1"},
		{"go.mod", "module github.com/skein-net/skein\n", "module github.com/skein-net/skein\n\nrequire github.com/google/uuid v1.6.0\n"},
	}
	for _, e := range edits {
		path := filepath.Join(dir, e.file)
		orig, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		edited := strings.Replace(string(orig), e.old, e.new, 1)
		if edited == string(orig) {
			t.Fatalf("%s no longer contains %q; update this test", e.file, e.old)
		}
		if err := os.WriteFile(path, []byte(edited), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := makeVerify(dir)
		if err == nil {
			t.Errorf("make verify passed after a hand edit of %s:\n%s", e.file, out)
		} else if !strings.Contains(out, e.file) {
			t.Errorf("make verify failed after editing %s but did not name it:\n%s", e.file, out)
		}
		if err := os.WriteFile(path, orig, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
