package apitest

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// childrenOf lists the PIDs whose parent is pid, with their executable's base name.
func childrenOf(pid int) map[int]string {
	kids := map[int]string{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		status, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "PPid:"); ok && strings.TrimSpace(v) == strconv.Itoa(pid) {
				exe, _ := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
				kids[child] = filepath.Base(exe)
			}
		}
	}
	return kids
}

// TestHelperStartsAndPanics is the child half of TestServerDiesWithTest: it starts a server,
// prints the PIDs of etcd and kube-apiserver, and panics without cleaning up.
func TestHelperStartsAndPanics(t *testing.T) {
	if os.Getenv("SKEIN_APITEST_PANIC_HELPER") != "1" {
		t.Skip("helper for TestServerDiesWithTest, run only as its child process")
	}
	Start(t)
	for pid, exe := range childrenOf(os.Getpid()) {
		os.Stdout.WriteString("child " + strconv.Itoa(pid) + " " + exe + "\n")
	}
	panic("test panics with the API server running")
}

// TestServerDiesWithTest checks that etcd and kube-apiserver do not outlive a test binary that
// panics before its cleanup runs.
func TestServerDiesWithTest(t *testing.T) {
	if testing.Short() {
		t.Skip(ShortSkip)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperStartsAndPanics$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SKEIN_APITEST_PANIC_HELPER=1")
	out, err := cmd.Output()
	if err == nil {
		t.Fatalf("helper did not panic:\n%s", out)
	}
	seen := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 3 && f[0] == "child" {
			pid, _ := strconv.Atoi(f[1])
			seen[f[2]] = pid
		}
	}
	if seen["etcd"] == 0 || seen["kube-apiserver"] == 0 {
		t.Fatalf("helper did not report etcd and kube-apiserver children:\n%s", out)
	}
	for name, pid := range seen {
		deadline := time.Now().Add(10 * time.Second)
		for {
			exe, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "exe"))
			if err != nil || filepath.Base(exe) != name {
				break // gone (or the PID now belongs to something else)
			}
			if time.Now().After(deadline) {
				_ = exec.Command("kill", "-9", strconv.Itoa(pid)).Run()
				t.Errorf("%s (pid %d) outlived the test binary that started it", name, pid)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}
