package promtext

import (
	"bytes"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// clockTicks is the unit of /proc's CPU times (USER_HZ, 100 on every Linux architecture Go
// runs on).
const clockTicks = 100

// process writes the process_* families from /proc/self and the file descriptor limit, each
// only when it could be read.
func process(w *Writer) {
	if st, err := os.ReadFile("/proc/self/stat"); err == nil {
		// The fields after the command, whose parentheses may hold anything.
		if i := bytes.LastIndexByte(st, ')'); i >= 0 {
			f := bytes.Fields(st[i+1:])
			field := func(n int) float64 { // n: the field's number in proc(5)
				if n-3 >= len(f) {
					return -1
				}
				v, err := strconv.ParseFloat(string(f[n-3]), 64)
				if err != nil {
					return -1
				}
				return v
			}
			if utime, stime := field(14), field(15); utime >= 0 && stime >= 0 {
				w.Family("process_cpu_seconds_total", "User and system CPU time of the process, in seconds.", Counter)
				w.Sample("process_cpu_seconds_total", (utime+stime)/clockTicks)
			}
			if threads := field(20); threads >= 0 {
				w.Family("go_threads", "Operating system threads of the process.", Gauge)
				w.Sample("go_threads", threads)
			}
			if vsize := field(23); vsize >= 0 {
				w.Family("process_virtual_memory_bytes", "Virtual memory size of the process, in bytes.", Gauge)
				w.Sample("process_virtual_memory_bytes", vsize)
			}
			if rss := field(24); rss >= 0 {
				w.Family("process_resident_memory_bytes", "Resident memory size of the process, in bytes.", Gauge)
				w.Sample("process_resident_memory_bytes", rss*float64(os.Getpagesize()))
			}
			if start, boot := field(22), bootTime(); start >= 0 && boot > 0 {
				w.Family("process_start_time_seconds", "Start time of the process since the Unix epoch, in seconds.", Gauge)
				w.Sample("process_start_time_seconds", boot+start/clockTicks)
			}
		}
	}
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		w.Family("process_open_fds", "Open file descriptors of the process.", Gauge)
		w.Sample("process_open_fds", float64(len(fds)-1)) // less the one reading the folder
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err == nil {
		w.Family("process_max_fds", "Most open file descriptors the process may have.", Gauge)
		w.Sample("process_max_fds", float64(lim.Cur))
	}
	if err := unix.Getrlimit(unix.RLIMIT_AS, &lim); err == nil {
		w.Family("process_virtual_memory_max_bytes", "Most virtual memory the process may map, in bytes (2^64-1: no limit).", Gauge)
		w.Sample("process_virtual_memory_max_bytes", float64(lim.Cur))
	}
}

// bootTime returns the system's boot time from /proc/stat (btime), in seconds since the Unix
// epoch, or 0.
func bootTime() float64 {
	st, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	for line := range bytes.Lines(st) {
		if rest, ok := bytes.CutPrefix(line, []byte("btime ")); ok {
			v, err := strconv.ParseFloat(string(bytes.TrimSpace(rest)), 64)
			if err == nil {
				return v
			}
		}
	}
	return 0
}
