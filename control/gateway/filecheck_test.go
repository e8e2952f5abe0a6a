package gateway_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skein-net/skein/control/gateway"
)

// site is a config file and its key in a directory of the test's own, with the modes and
// owners a case sets before loading.
type site struct {
	dir, key, config string
}

func newSite(t *testing.T) *site {
	t.Helper()
	p := writeConfig(t, goodServer)
	return &site{dir: filepath.Dir(p), key: filepath.Join(filepath.Dir(p), "private.key"), config: p}
}

// load loads and resolves the site's config, returning the error (nil: accepted).
func (s *site) load() error {
	c, err := gateway.LoadFile(s.config)
	if err != nil {
		return err
	}
	_, err = c.Resolve()
	return err
}

// pointKeyAt rewrites the config's privateKeyFile.
func (s *site) pointKeyAt(t *testing.T, key string) {
	t.Helper()
	b, err := os.ReadFile(s.config)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.config, []byte(strings.Replace(string(b), s.key, key, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustChmod(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func wantRefused(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted, want an error naming %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not name %q", err, p)
		}
	}
}

// TestStandaloneFilesChecked: the standalone gateway checks its key and config files as wg(8)
// and OpenSSH check theirs (issue 40): a key others may read or write, a config others may
// write, a file owned by another user, and a file reached through a directory another user
// may write (a symlink there can be swapped) are refused with the file, its mode and the fix.
func TestStandaloneFilesChecked(t *testing.T) {
	t.Run("key 0600 accepted", func(t *testing.T) {
		if err := newSite(t).load(); err != nil {
			t.Fatal(err)
		}
	})
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o660} {
		t.Run(fmt.Sprintf("key %04o", mode), func(t *testing.T) {
			s := newSite(t)
			mustChmod(t, s.key, mode)
			wantRefused(t, s.load(), s.key, fmt.Sprintf("mode %04o", mode), "chmod 600 "+s.key)
		})
	}
	t.Run("key 0644 message", func(t *testing.T) {
		s := newSite(t)
		mustChmod(t, s.key, 0o644)
		wantRefused(t, s.load(), "mode 0644", "readable")
	})
	for _, mode := range []os.FileMode{0o666, 0o664, 0o646} {
		t.Run(fmt.Sprintf("config %04o", mode), func(t *testing.T) {
			s := newSite(t)
			mustChmod(t, s.config, mode)
			wantRefused(t, s.load(), s.config, fmt.Sprintf("mode %04o", mode), "writable by group or others", "chmod go-w "+s.config)
		})
	}
	t.Run("config 0644 accepted", func(t *testing.T) {
		s := newSite(t)
		mustChmod(t, s.config, 0o644)
		if err := s.load(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("symlinked key in a world-writable directory", func(t *testing.T) {
		s := newSite(t)
		shared := filepath.Join(s.dir, "shared")
		if err := os.Mkdir(shared, 0o755); err != nil {
			t.Fatal(err)
		}
		mustChmod(t, shared, 0o777)
		link := filepath.Join(shared, "private.key")
		if err := os.Symlink(s.key, link); err != nil {
			t.Fatal(err)
		}
		s.pointKeyAt(t, link)
		wantRefused(t, s.load(), shared, "writable by others", "0777")
	})
	t.Run("key below a symlinked directory in a world-writable directory", func(t *testing.T) {
		// O_NOFOLLOW alone would not see this one: the link is not the last component.
		s := newSite(t)
		shared := filepath.Join(s.dir, "shared")
		if err := os.Mkdir(shared, 0o755); err != nil {
			t.Fatal(err)
		}
		mustChmod(t, shared, 0o777)
		if err := os.Symlink(s.dir, filepath.Join(shared, "keys")); err != nil {
			t.Fatal(err)
		}
		s.pointKeyAt(t, filepath.Join(shared, "keys", "private.key"))
		wantRefused(t, s.load(), shared, "writable by others")
	})
	t.Run("key in a world-writable directory", func(t *testing.T) {
		s := newSite(t)
		mustChmod(t, s.dir, 0o777)
		t.Cleanup(func() { _ = os.Chmod(s.dir, 0o700) })
		wantRefused(t, s.load(), s.dir, "writable by others")
	})
	t.Run("symlinked key in a private directory accepted", func(t *testing.T) {
		// A symlink is fine where only the owner could have made it (a key linked from a
		// directory a configuration manager keeps, say).
		s := newSite(t)
		link := filepath.Join(s.dir, "current.key")
		if err := os.Symlink("private.key", link); err != nil {
			t.Fatal(err)
		}
		s.pointKeyAt(t, link)
		if err := s.load(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("sticky directory, own key accepted", func(t *testing.T) {
		// As /tmp: others may create files there but not replace ours.
		s := newSite(t)
		sticky := filepath.Join(s.dir, "sticky")
		if err := os.Mkdir(sticky, 0o755); err != nil {
			t.Fatal(err)
		}
		mustChmod(t, sticky, 0o777|os.ModeSticky)
		key := filepath.Join(sticky, "private.key")
		if err := os.Rename(s.key, key); err != nil {
			t.Fatal(err)
		}
		s.pointKeyAt(t, key)
		if err := s.load(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("owned by another user", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("chown to another uid needs root: not run as root, so the ownership check is not exercised here")
		}
		const other = 12345
		s := newSite(t)
		if err := os.Chown(s.key, other, other); err != nil {
			t.Fatal(err)
		}
		wantRefused(t, s.load(), s.key, "owned by uid 12345", "chown")

		s = newSite(t)
		if err := os.Chown(s.config, other, other); err != nil {
			t.Fatal(err)
		}
		wantRefused(t, s.load(), s.config, "owned by uid 12345", "chown")

		// Another user's symlink in a sticky directory: they may point it anywhere.
		s = newSite(t)
		sticky := filepath.Join(s.dir, "sticky")
		if err := os.Mkdir(sticky, 0o755); err != nil {
			t.Fatal(err)
		}
		mustChmod(t, sticky, 0o777|os.ModeSticky)
		link := filepath.Join(sticky, "private.key")
		if err := os.Symlink(s.key, link); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(link, other, other); err != nil {
			t.Fatal(err)
		}
		s.pointKeyAt(t, link)
		wantRefused(t, s.load(), link, "owned by uid 12345")

		// A directory on the way owned by another user.
		s = newSite(t)
		if err := os.Chown(s.dir, other, other); err != nil {
			t.Fatal(err)
		}
		wantRefused(t, s.load(), s.dir, "owned by uid 12345")
	})
}
