package k8sbin

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// entry is one versioned cache directory: binaries under bin/, complete only when stamp.json
// equals what stamp describes now and every binary is there and executable. The Kubernetes
// build and the helm build are one entry each.
type entry struct {
	name     string // for messages
	dir      string
	stamp    func() ([]byte, error)
	binaries []string
}

func (e entry) bin() string { return filepath.Join(e.dir, "bin") }

// ready reports whether the entry is complete. It never builds.
func (e entry) ready() bool {
	want, err := e.stamp()
	if err != nil {
		return false
	}
	got, err := os.ReadFile(filepath.Join(e.dir, "stamp.json"))
	if err != nil || !bytes.Equal(bytes.TrimSpace(got), bytes.TrimSpace(want)) {
		return false
	}
	for _, b := range e.binaries {
		if fi, err := os.Stat(filepath.Join(e.bin(), b)); err != nil || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// ensure runs build into bin/ unless the entry is complete, then writes the stamp. A failed or
// interrupted build leaves no stamp, so the next call starts again (Go's own build cache keeps
// the finished work).
func (e entry) ensure(build func(bin string) error) error {
	if e.ready() {
		return nil
	}
	if err := os.MkdirAll(e.bin(), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", e.bin(), err)
	}
	_ = os.Remove(filepath.Join(e.dir, "stamp.json"))
	if err := build(e.bin()); err != nil {
		return err
	}
	st, err := e.stamp()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(e.dir, "stamp.json"), append(st, '\n'), 0o644); err != nil {
		return fmt.Errorf("write the %s stamp: %w", e.name, err)
	}
	if !e.ready() {
		return errors.New(e.name + ": build finished but the cache is incomplete")
	}
	return nil
}
