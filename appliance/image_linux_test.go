//go:build linux

package appliance

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// rssFileKiB is this process's RssFile.
func rssFileKiB(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.Lines(string(b)) {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "RssFile:" {
			v, _ := strconv.Atoi(f[1])
			return v
		}
	}
	t.Fatal("no RssFile in /proc/self/status")
	return 0
}

// TestDropImagePages drops the test binary's code and read-only data from the process: they
// leave its RSS and the code still runs (faulting back what it needs).
func TestDropImagePages(t *testing.T) {
	before := rssFileKiB(t)
	dropped, err := dropImagePages()
	if err != nil {
		t.Fatal(err)
	}
	after := rssFileKiB(t)
	if dropped == 0 || after >= before {
		t.Fatalf("dropped %d bytes of mappings, RssFile %d -> %d KiB: want fewer pages", dropped, before, after)
	}
	if s := strconv.Itoa(len(strings.Repeat("ab", 3))); s != "6" {
		t.Fatalf("code after the drop computed %q", s)
	}
	t.Logf("dropped %d MiB of mappings: RssFile %d -> %d KiB", dropped>>20, before, after)
}
