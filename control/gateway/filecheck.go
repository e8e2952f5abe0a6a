package gateway

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// The standalone gateway's files are checked as wg(8) and OpenSSH check theirs (issue 40):
// whoever can change the config file decides where the gateway sends traffic and which key
// it uses, and whoever can read the key is the gateway. So:
//
//   - a file must be owned by the gateway's effective user or by root;
//   - a config file must not be writable by group or others, a key file not readable or
//     writable by them either (mode 0600 or stricter);
//   - every directory on the way to it, from /, must be owned by the gateway's user or root
//     and not writable by group or others, unless it is sticky (as /tmp) and the entry in it
//     is the gateway's user's or root's, so that no one else can put another file or a
//     symlink in its place; each symlink met on the way is followed and its target's
//     directories checked the same way.
//
// Why the directories rather than opening with O_NOFOLLOW alone: O_NOFOLLOW guards the last
// component only (a symlinked directory on the way is still followed), and it refuses
// harmless links that only the owner could have made (a key linked from a directory a
// configuration manager keeps). Checking the directories refuses exactly the paths another
// user could redirect, wherever the link is. The file itself is then opened with O_NOFOLLOW
// and its owner and mode are taken from the open descriptor (fstat), so what is checked is
// what is read.
//
// There is no switch to skip these checks: fix the files (the errors say how).

// maxLinks bounds the symlinks followed on one path, as the kernel's 40.
const maxLinks = 40

// fileKind says what a file is for and so how strictly it is checked.
type fileKind int

const (
	configFile fileKind = iota
	keyFile
)

// ownerOK: root or the gateway's effective user.
func ownerOK(uid uint32) bool { return uid == 0 || int(uid) == os.Geteuid() }

func statOf(fi fs.FileInfo) *syscall.Stat_t {
	st, _ := fi.Sys().(*syscall.Stat_t)
	return st
}

// checkDir checks one directory on the way to a file: it returns whether the entries in it
// must themselves be owned by root or the gateway's user (a sticky directory others may
// write).
func checkDir(dir string, fi fs.FileInfo, file string) (ownedEntries bool, err error) {
	st := statOf(fi)
	if st == nil {
		return false, nil
	}
	perm := fi.Mode().Perm()
	if !ownerOK(st.Uid) {
		return false, fmt.Errorf("%s is in directory %s, owned by uid %d: that user can replace it; the directories up to the file must be owned by root or the user the gateway runs as (uid %d)", file, dir, st.Uid, os.Geteuid())
	}
	if perm&0o022 == 0 {
		return false, nil
	}
	if fi.Mode()&fs.ModeSticky != 0 {
		return true, nil
	}
	who := "others"
	if perm&0o002 == 0 {
		who = "its group"
	}
	return false, fmt.Errorf("%s is in directory %s, which is writable by %s (mode %04o) and not sticky: anyone who can write there can put another file or a symlink in its place; chmod go-w %s, or keep the file in a directory only root or the gateway's user can write", file, dir, who, perm, dir)
}

// resolveChecked follows path from / one component at a time, checking each directory and
// following each symlink (whose target's directories are checked too), and returns the
// path of the file it names with no symlinks left.
func resolveChecked(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	// A missing or unreadable component is reported as opening the file would report it.
	openErr := func(err error) error {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		var le *os.LinkError
		if errors.As(err, &le) {
			err = le.Err
		}
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	rest := strings.Split(abs, "/")
	cur := "/"
	links := 0
	for len(rest) > 0 {
		name := rest[0]
		rest = rest[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur) // an ancestor: checked on the way down
			continue
		}
		dirInfo, err := os.Stat(cur)
		if err != nil {
			return "", openErr(err)
		}
		ownedEntries, err := checkDir(cur, dirInfo, path)
		if err != nil {
			return "", err
		}
		next := filepath.Join(cur, name)
		fi, err := os.Lstat(next)
		if err != nil {
			return "", openErr(err)
		}
		if st := statOf(fi); ownedEntries && st != nil && !ownerOK(st.Uid) {
			return "", fmt.Errorf("%s: %s is owned by uid %d in %s, a sticky directory others may write (mode %04o): that user may point it anywhere; use a file of your own", path, next, st.Uid, cur, dirInfo.Mode().Perm())
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			if links++; links > maxLinks {
				return "", fmt.Errorf("%s: more than %d symlinks", path, maxLinks)
			}
			target, err := os.Readlink(next)
			if err != nil {
				return "", openErr(err)
			}
			if filepath.IsAbs(target) {
				cur = "/"
			}
			rest = append(strings.Split(target, "/"), rest...)
		case fi.IsDir():
			cur = next
		default:
			if len(rest) > 0 && strings.Join(rest, "") != "" {
				return "", fmt.Errorf("%s: %s is not a directory", path, next)
			}
			cur = next
		}
	}
	return cur, nil
}

// checkFile checks the opened file's owner and mode (from its descriptor).
func checkFile(path string, st fs.FileInfo, kind fileKind) error {
	perm := st.Mode().Perm()
	if s := statOf(st); s != nil && !ownerOK(s.Uid) {
		return fmt.Errorf("%s is owned by uid %d: that user can change it; chown it to the user the gateway runs as (uid %d) or to root", path, s.Uid, os.Geteuid())
	}
	switch kind {
	case keyFile:
		if perm&0o077 != 0 {
			what := "readable or writable"
			if perm&0o022 == 0 {
				what = "readable"
			}
			return fmt.Errorf("%s is %s by group or others (mode %04o): whoever can read it can be this gateway, whoever can write it can replace its identity; chmod 600 %s", path, what, perm, path)
		}
	case configFile:
		if perm&0o022 != 0 {
			return fmt.Errorf("%s is writable by group or others (mode %04o): whoever can write it decides the gateway's key and where its traffic goes; chmod go-w %s", path, perm, path)
		}
	}
	return nil
}

// readChecked reads a regular file of at most limit bytes (not a device, a FIFO or a
// directory: /dev/zero would never end) after the checks above.
func readChecked(path string, limit int64, kind fileKind) ([]byte, error) {
	real, err := resolveChecked(path)
	if err != nil {
		return nil, err
	}
	// Without O_NONBLOCK, opening a FIFO waits for a writer (for ever, and a signal cannot end
	// it); the type is checked right after. O_NOFOLLOW: the path was resolved above, so a
	// symlink here now is one put in since.
	f, err := os.OpenFile(real, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%s changed into a symlink while it was being opened", path)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%v)", path, st.Mode().Type())
	}
	if err := checkFile(path, st, kind); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return b, nil
}
