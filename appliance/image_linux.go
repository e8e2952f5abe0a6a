//go:build linux

package appliance

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// dropImagePages unmaps the pages of the executable's code and read-only data that this
// process has faulted in (madvise MADV_DONTNEED on its read-only mappings of /proc/self/exe):
// package initialisation and start-up touch megabytes of them once, and the kernel maps
// 64 KiB around every fault. The pages stay in the page cache, shared with every other process
// running the same binary; those the gateway uses again fault back in (minor faults, no I/O).
// A mapping holding anonymous (copied-on-write) pages, such as relocated data of a PIE
// binary, is left alone: dropping it would bring back the file's content. It returns the
// bytes of mappings dropped.
func dropImagePages() (int64, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, err
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	type mapping struct {
		start, end uintptr
		ours       bool
		anon       bool
	}
	var maps []mapping
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if lo, hi, ok := strings.Cut(f[0], "-"); ok && len(f) >= 5 && !strings.HasSuffix(f[0], ":") {
			start, err1 := strconv.ParseUint(lo, 16, 64)
			end, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 != nil || err2 != nil {
				continue
			}
			path := ""
			if len(f) >= 6 {
				path = f[5]
			}
			maps = append(maps, mapping{start: uintptr(start), end: uintptr(end),
				ours: path == exe && !strings.Contains(f[1], "w")})
			continue
		}
		if f[0] == "Anonymous:" && len(maps) > 0 && len(f) >= 2 && f[1] != "0" {
			maps[len(maps)-1].anon = true
		}
	}
	var dropped int64
	for _, m := range maps {
		if !m.ours || m.anon {
			continue
		}
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, m.start, m.end-m.start, unix.MADV_DONTNEED); errno != 0 {
			return dropped, fmt.Errorf("madvise %x-%x: %w", m.start, m.end, errno)
		}
		dropped += int64(m.end - m.start)
	}
	return dropped, nil
}
