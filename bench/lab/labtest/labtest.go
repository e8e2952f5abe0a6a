// Package labtest holds what tests that start a lab share: the checks that the machine can run
// one, and the directory for the lab's binaries.
package labtest

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/skein-net/skein/bench/lab"
	"github.com/skein-net/skein/internal/k8sbin"
)

// Need skips the test when SKEIN_SKIP_NETNS is set and fails it without root or without the
// Kubernetes binaries in the cache; it returns their directory.
func Need(t testing.TB) (k8sBin string) {
	t.Helper()
	if os.Getenv("SKEIN_SKIP_NETNS") != "" {
		t.Skip("SKEIN_SKIP_NETNS set: the lab needs network namespaces")
	}
	if os.Geteuid() != 0 {
		t.Fatal("the lab needs root (network namespaces); set SKEIN_SKIP_NETNS=1 to skip")
	}
	k8s, ok := k8sbin.Ready()
	if !ok {
		t.Fatal("the Kubernetes binaries are not in the cache: run make k8s-binaries")
	}
	return k8s
}

// Build compiles the lab's binaries into /var/tmp/<name>-<pid> (not under /tmp: containers see
// a private /tmp) and returns the directory. The caller removes it.
func Build(t testing.TB, name string) string {
	t.Helper()
	bin := fmt.Sprintf("/var/tmp/%s-%d", name, os.Getpid())
	if err := lab.Build(context.Background(), bin); err != nil {
		os.RemoveAll(bin)
		t.Fatal(err)
	}
	return bin
}
