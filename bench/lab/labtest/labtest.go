// Package labtest holds what tests that start a lab share: the checks that the machine can run
// one, and the directory for the lab's binaries.
package labtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/skein-net/skein/bench/lab"
	"github.com/skein-net/skein/deploy/images"
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

// NeedNodeStack is Need for a lab: it returns the node stack's bin directory too, and fails
// the test when the node stack or CoreDNS is not in the cache.
func NeedNodeStack(t testing.TB) (k8sBin, nodeStack string) {
	t.Helper()
	k8sBin = Need(t)
	stack, ok := k8sbin.NodeStackReady()
	if !ok {
		t.Fatal("the node stack (kubelet, containerd, runc, CNI plugins, flannel) is not in the cache: run make k8s-binaries")
	}
	if _, ok := k8sbin.CoreDNSReady(); !ok {
		t.Fatal("CoreDNS (the clusters' DNS) is not in the cache: run make k8s-binaries")
	}
	return k8sBin, stack
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

// ImageLayout builds skein's images from the lab's binaries in bin for this machine's
// platform, as make images builds them, tagged tag, into an OCI layout (bin/images) for the
// lab's registry, and returns it with each image's index digest.
func ImageLayout(t testing.TB, bin, tag string) (dir string, digests map[string]string) {
	t.Helper()
	dir = filepath.Join(bin, "images")
	digests = map[string]string{}
	m := images.Meta{Version: tag, Revision: "lab", Source: "https://github.com/skein-net/skein", Created: time.Unix(0, 0)}
	p := images.Platform{OS: "linux", Arch: runtime.GOARCH}
	for _, c := range images.Components {
		b, err := os.ReadFile(filepath.Join(bin, c.Name))
		if err != nil {
			t.Fatal(err)
		}
		idx, err := images.Index(c, []images.Platform{p}, map[images.Platform][]byte{p: b}, m, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := images.WriteLayout(dir, c.Name+":"+tag, idx); err != nil {
			t.Fatal(err)
		}
		d, err := idx.Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests[c.Name] = d.String()
	}
	return dir, digests
}
