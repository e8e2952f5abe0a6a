package promtext

import (
	"math"
	"runtime"
	"runtime/metrics"
)

// goMetrics are the runtime/metrics read for the go_* families, in the order of their samples.
var goMetrics = []string{
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/unused:bytes",
	"/memory/classes/heap/free:bytes",
	"/memory/classes/heap/released:bytes",
	"/gc/heap/objects:objects",
	"/memory/classes/heap/stacks:bytes",
	"/memory/classes/total:bytes",
	"/gc/heap/goal:bytes",
	"/gc/heap/allocs:bytes",
	"/gc/heap/allocs:objects",
	"/gc/heap/frees:objects",
	"/gc/cycles/total:gc-cycles",
	"/gc/gogc:percent",
	"/gc/gomemlimit:bytes",
	"/sched/gomaxprocs:threads",
}

const (
	heapObjectBytes = iota
	heapUnused
	heapFree
	heapReleased
	heapObjects
	stacks
	total
	heapGoal
	allocBytes
	allocObjects
	freeObjects
	gcCycles
	gogc
	memLimit
	maxprocs
)

// Runtime writes the Go runtime's metrics (go_*) and, where the system has them, the process's
// (process_*: CPU time, resident and virtual memory, open and most file descriptors, start
// time), named as Prometheus's Go client names them, so dashboards and alerts built for other
// Go programs work unchanged. It reads runtime/metrics, which does not stop the world as
// runtime.ReadMemStats does.
func Runtime(w *Writer) {
	s := make([]metrics.Sample, len(goMetrics))
	for i, name := range goMetrics {
		s[i].Name = name
	}
	metrics.Read(s)
	v := func(i int) float64 {
		switch s[i].Value.Kind() {
		case metrics.KindUint64:
			return float64(s[i].Value.Uint64())
		case metrics.KindFloat64:
			return s[i].Value.Float64()
		}
		return math.NaN()
	}
	gauge := func(name, help string, value float64) {
		w.Family(name, help, Gauge)
		w.Sample(name, value)
	}
	counter := func(name, help string, value float64) {
		w.Family(name, help, Counter)
		w.Sample(name, value)
	}
	gauge("go_goroutines", "Goroutines that currently exist.", float64(runtime.NumGoroutine()))
	w.Family("go_info", "Always 1; the label names the Go version the program was built with.", Gauge)
	w.Sample("go_info", 1, "version", runtime.Version())
	gauge("go_memstats_alloc_bytes", "Bytes of heap objects, live and not yet collected (as go_memstats_heap_alloc_bytes).", v(heapObjectBytes))
	gauge("go_memstats_heap_alloc_bytes", "Bytes of heap objects, live and not yet collected.", v(heapObjectBytes))
	gauge("go_memstats_heap_sys_bytes", "Bytes of memory mapped for the heap, in use, idle or returned to the system.", v(heapObjectBytes)+v(heapUnused)+v(heapFree)+v(heapReleased))
	gauge("go_memstats_heap_inuse_bytes", "Bytes of heap spans holding at least one object.", v(heapObjectBytes)+v(heapUnused))
	gauge("go_memstats_heap_idle_bytes", "Bytes of heap spans holding no object, returned to the system or not.", v(heapFree)+v(heapReleased))
	gauge("go_memstats_heap_released_bytes", "Bytes of idle heap spans returned to the system.", v(heapReleased))
	gauge("go_memstats_heap_objects", "Heap objects, live and not yet collected.", v(heapObjects))
	gauge("go_memstats_stack_inuse_bytes", "Bytes of stack spans in use.", v(stacks))
	gauge("go_memstats_sys_bytes", "Bytes of memory the Go runtime has mapped from the system.", v(total))
	gauge("go_memstats_next_gc_bytes", "Heap size at which the next garbage collection is due.", v(heapGoal))
	counter("go_memstats_alloc_bytes_total", "Bytes allocated on the heap since the start.", v(allocBytes))
	counter("go_memstats_mallocs_total", "Heap objects allocated since the start.", v(allocObjects))
	counter("go_memstats_frees_total", "Heap objects freed since the start.", v(freeObjects))
	counter("go_gc_cycles_total", "Garbage collections completed since the start.", v(gcCycles))
	gauge("go_gc_gogc_percent", "The garbage collector's GOGC (heap growth between collections, in percent; -1: off).", v(gogc))
	gauge("go_gc_gomemlimit_bytes", "The Go runtime's soft memory limit (GOMEMLIMIT).", v(memLimit))
	gauge("go_sched_gomaxprocs_threads", "GOMAXPROCS: the threads that may run Go code at once.", v(maxprocs))
	process(w)
}
