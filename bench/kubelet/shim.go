package kubelet

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// ShimSpec is what the shim sets up before it turns into a container's process. The kubelet
// writes it as JSON and starts "ip netns exec <pod namespace> <shim> <spec file>", so the shim
// starts in the pod's network namespace and in a mount namespace of its own (ip netns exec
// makes one), where it may mount without touching the machine's.
type ShimSpec struct {
	// Mounts are bind mounts, done in order, after /run and /tmp got a tmpfs of their own.
	Mounts []Mount `json:"mounts,omitempty"`
	// ReadOnlyRoot remounts / read-only (readOnlyRootFilesystem).
	ReadOnlyRoot bool `json:"readOnlyRoot,omitempty"`
	// UID and GID switch user when set (runAsUser, runAsGroup).
	UID *int64 `json:"uid,omitempty"`
	GID *int64 `json:"gid,omitempty"`
	// Caps is the capability bounding set, lower-case names without CAP_ (such as net_admin);
	// AllCaps keeps every capability (privileged).
	Caps    []string `json:"caps,omitempty"`
	AllCaps bool     `json:"allCaps,omitempty"`
	// Hostname is set in a UTS namespace of the container's own (the pod's name), unless empty
	// (host-network pods keep the node's).
	Hostname string `json:"hostname,omitempty"`
	// NoNewPrivs is allowPrivilegeEscalation: false.
	NoNewPrivs bool     `json:"noNewPrivs,omitempty"`
	Argv       []string `json:"argv"`
	Env        []string `json:"env"`
	Dir        string   `json:"dir,omitempty"`
}

// Mount is a bind mount of a host path onto a path seen by the container.
type Mount struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"readOnly,omitempty"`
}

// privateDirs get a fresh tmpfs in every container: the container's view of /run and /tmp is
// its own, and mount points under them can be made without writing to the machine's disk.
var privateDirs = []string{"/run", "/tmp"}

// checkMountTarget tells whether the shim can mount on target: under a private directory, or
// an existing directory or file of the machine.
func checkMountTarget(target string) error {
	t := resolveVarRun(filepath.Clean(target))
	for _, d := range privateDirs {
		if t == d || strings.HasPrefix(t, d+"/") {
			return nil
		}
	}
	if _, err := os.Stat(t); err == nil {
		return nil
	}
	return fmt.Errorf("mountPath %s is not supported by the lab's kubelet: it must lie under /run, /var/run or /tmp, or exist on the machine", target)
}

func resolveVarRun(p string) string {
	if p == "/var/run" || strings.HasPrefix(p, "/var/run/") {
		return "/run" + strings.TrimPrefix(p, "/var/run")
	}
	return p
}

// Shim runs in the container's namespaces: it prepares the mounts and replaces itself with
// setpriv (util-linux), which sets user, groups, capabilities and no_new_privs and then
// executes the container's command. It returns only on error.
func Shim(specPath string) error {
	data, err := os.ReadFile(specPath)
	if err != nil {
		return err
	}
	var s ShimSpec
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("shim spec %s: %w", specPath, err)
	}
	if len(s.Argv) == 0 {
		return fmt.Errorf("shim spec %s: no command", specPath)
	}
	// unshare(CLONE_NEWUTS) applies to this thread only: stay on it until exec.
	runtime.LockOSThread()
	if s.Hostname != "" {
		if err := syscall.Unshare(syscall.CLONE_NEWUTS); err != nil {
			return fmt.Errorf("UTS namespace: %w", err)
		}
		if err := syscall.Sethostname([]byte(s.Hostname)); err != nil {
			return fmt.Errorf("hostname %s: %w", s.Hostname, err)
		}
	}
	// ip netns exec made this mount namespace and marked / as a slave, so nothing below
	// propagates to the machine.
	for _, d := range privateDirs {
		if err := syscall.Mount("tmpfs", d, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=1777,size=64m"); err != nil {
			return fmt.Errorf("mount tmpfs on %s: %w", d, err)
		}
	}
	for _, m := range s.Mounts {
		target := resolveVarRun(filepath.Clean(m.Target))
		fi, err := os.Stat(m.Source)
		if err != nil {
			return fmt.Errorf("volume source %s: %w", m.Source, err)
		}
		if fi.IsDir() {
			err = os.MkdirAll(target, 0o755)
		} else if _, serr := os.Stat(target); serr != nil {
			if err = os.MkdirAll(filepath.Dir(target), 0o755); err == nil {
				err = os.WriteFile(target, nil, 0o644)
			}
		}
		if err != nil {
			return fmt.Errorf("mount point %s: %w", m.Target, err)
		}
		if err := syscall.Mount(m.Source, target, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s on %s: %w", m.Source, m.Target, err)
		}
		if m.ReadOnly {
			if err := syscall.Mount("", target, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""); err != nil {
				return fmt.Errorf("make %s read-only: %w", m.Target, err)
			}
		}
	}
	// Container runtimes mount /proc/sys read-only unless the container is privileged; so does
	// the lab, so that a component that writes sysctls fails here as it would on a cluster.
	if !s.AllCaps {
		if err := syscall.Mount("/proc/sys", "/proc/sys", "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind /proc/sys: %w", err)
		}
		if err := syscall.Mount("", "/proc/sys", "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("make /proc/sys read-only: %w", err)
		}
	}
	if s.ReadOnlyRoot {
		if err := syscall.Mount("", "/", "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("make / read-only: %w", err)
		}
	}
	if s.Dir != "" {
		if err := os.Chdir(s.Dir); err != nil {
			return fmt.Errorf("workingDir %s: %w", s.Dir, err)
		}
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		return fmt.Errorf("setpriv (Debian package util-linux) is needed: %w", err)
	}
	args := []string{"setpriv"}
	if s.UID != nil {
		args = append(args, "--reuid", strconv.FormatInt(*s.UID, 10))
		gid := *s.UID
		if s.GID != nil {
			gid = *s.GID
		}
		args = append(args, "--regid", strconv.FormatInt(gid, 10), "--clear-groups")
	} else if s.GID != nil {
		args = append(args, "--regid", strconv.FormatInt(*s.GID, 10), "--clear-groups")
	}
	if !s.AllCaps {
		bset := "-all"
		for _, c := range s.Caps {
			bset += ",+" + c
		}
		args = append(args, "--bounding-set", bset, "--inh-caps", "-all")
	}
	if s.NoNewPrivs {
		args = append(args, "--no-new-privs")
	}
	args = append(args, "--")
	args = append(args, s.Argv...)
	return syscall.Exec(setpriv, args, s.Env)
}

// defaultCaps is the capability set a container gets when its securityContext says nothing,
// the same as common container runtimes give.
var defaultCaps = []string{"chown", "dac_override", "fowner", "fsetid", "kill", "setgid", "setuid",
	"setpcap", "net_bind_service", "net_raw", "sys_chroot", "mknod", "audit_write", "setfcap"}

// capSet applies a container's add and drop lists to the default set.
func capSet(add, drop []string) []string {
	caps := slices.Clone(defaultCaps)
	norm := func(c string) string { return strings.TrimPrefix(strings.ToLower(c), "cap_") }
	for _, d := range drop {
		if norm(d) == "all" {
			caps = nil
			break
		}
		caps = slices.DeleteFunc(caps, func(c string) bool { return c == norm(d) })
	}
	for _, a := range add {
		if n := norm(a); !slices.Contains(caps, n) {
			caps = append(caps, n)
		}
	}
	return caps
}
