package lab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
)

// A lab's prefix names its namespaces, its state dir, its nodes' cgroups; Down removes what it
// names. So it is checked before it is used: letters and digits only (no "/", "..", "-" or glob
// characters that would name another lab's things or a directory outside /var/tmp).
var prefixRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,11}$`)

// CheckPrefix says whether prefix can name a lab.
func CheckPrefix(prefix string) error {
	if !prefixRE.MatchString(prefix) {
		return fmt.Errorf("lab: prefix %q: want a lower-case letter, then at most 11 lower-case letters or digits", prefix)
	}
	return nil
}

// ErrAlreadyUp is Start's error when a lab with the prefix exists or is starting; the caller
// must not Down it (it is somebody else's).
var ErrAlreadyUp = errors.New("lab: a lab with this prefix is already up or starting")

// lockDir is the directory every lab's state dir lies in; an exclusive flock on it serializes
// Start's claim of a prefix, Down, and the removal of what labs share (cgroup parents, the
// empty host mountpoints), across processes.
const lockDir = "/var/tmp"

// lockLabs takes the labs' lock and returns its release.
func lockLabs() (func(), error) {
	f, err := os.Open(lockDir)
	if err != nil {
		return nil, fmt.Errorf("lab: open %s to lock it: %w", lockDir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lab: lock %s: %w", lockDir, err)
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// ownerFile, in a state dir, holds the PID of the process whose Start claimed it.
const ownerFile = "owner"

// claim makes stateDir this process's, under the labs' lock: ErrAlreadyUp when the prefix has
// namespaces or another live process is starting a lab in stateDir; otherwise what is left
// of a dead lab's state dir is removed and a fresh one made.
func claim(prefix, stateDir string) error {
	unlock, err := lockLabs()
	if err != nil {
		return err
	}
	defer unlock()
	if names, _ := Namespaces(prefix); len(names) > 0 {
		return fmt.Errorf("%w: prefix %q has %d namespaces; run 'lab down --prefix %s' first", ErrAlreadyUp, prefix, len(names), prefix)
	}
	if b, err := os.ReadFile(filepath.Join(stateDir, ownerFile)); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid != os.Getpid() && syscall.Kill(pid, 0) == nil {
			return fmt.Errorf("%w: process %d is starting a lab with prefix %q", ErrAlreadyUp, pid, prefix)
		}
	}
	if err := os.RemoveAll(stateDir); err != nil {
		return err
	}
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(stateDir, ownerFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644)
}

// checkInotify refuses a lab the machine's inotify limit cannot hold: fs.inotify.max_user_instances
// counts every root process's inotify instances together, and a node's kubelet (6) and
// containerd (2) and a cluster's control plane (4) hold some each; a kubelet that gets EMFILE
// from inotify_init fails in ways far from the cause.
func checkInotify(o Options) error {
	b, err := os.ReadFile("/proc/sys/fs/inotify/max_user_instances")
	if err != nil {
		return nil // no such limit here
	}
	limit, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return nil
	}
	clusters, nodes := o.Clusters, o.Nodes
	if clusters == 0 {
		clusters = 2
	}
	if nodes == 0 {
		nodes = 2
	}
	need := clusters*nodes*9 + clusters*5
	used := rootInotifyInstances()
	if limit-used < need {
		return fmt.Errorf("lab: %d clusters of %d nodes need about %d inotify instances, but root has %d of fs.inotify.max_user_instances=%d in use: "+
			"take another lab down, or raise the limit (sysctl -w fs.inotify.max_user_instances=512)", clusters, nodes, need, used, limit)
	}
	return nil
}

// rootInotifyInstances counts the inotify instances open in processes whose real user is root.
func rootInotifyInstances() int {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	n := 0
	for _, p := range procs {
		st, err := os.ReadFile(filepath.Join(p, "status"))
		if err != nil {
			continue
		}
		root := false
		for _, l := range strings.Split(string(st), "\n") {
			if v, ok := strings.CutPrefix(l, "Uid:"); ok {
				f := strings.Fields(v)
				root = len(f) > 0 && f[0] == "0"
				break
			}
		}
		if !root {
			continue
		}
		fds, _ := os.ReadDir(filepath.Join(p, "fd"))
		for _, fd := range fds {
			if t, err := os.Readlink(filepath.Join(p, "fd", fd.Name())); err == nil && t == "anon_inode:inotify" {
				n++
			}
		}
	}
	return n
}
