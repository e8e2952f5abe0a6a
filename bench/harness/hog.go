package harness

import (
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The contention rungs: production gateways share their node with other work, so the ladder is
// measured again with a CPU hog beside it. The hog is one thread of the harness pinned to CPU 0
// that spins for share of every 10 ms and sleeps the rest: a fixed share of one core, taken
// whatever the rung does. The rung's processes are not pinned; the kernel moves them away from
// the hog or shares the core with it, as it would on a busy node. The hog's CPU time is the
// harness's own and is not charged to the rung's CPU per GB.

// hogPeriod is the hog's duty cycle.
const hogPeriod = 10 * time.Millisecond

// startHog starts the hog and returns the function that stops it (and waits until it has).
// share is clamped to [0, 1]; 0 starts nothing.
func startHog(share float64) (stop func()) {
	share = min(max(share, 0), 1)
	if share == 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		// The thread is pinned for the hog and unpinned after, then handed back to the
		// scheduler: it must not exit with the goroutine, as the rungs' processes die with
		// the thread that started them (Pdeathsig), and this thread may have been that one.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var was, set unix.CPUSet
		if err := unix.SchedGetaffinity(0, &was); err != nil {
			return
		}
		defer func() { _ = unix.SchedSetaffinity(0, &was) }()
		set.Set(0)
		_ = unix.SchedSetaffinity(0, &set) // 0: this thread
		busy := time.Duration(share * float64(hogPeriod))
		for {
			select {
			case <-done:
				return
			default:
			}
			for start := time.Now(); time.Since(start) < busy; {
			}
			if idle := hogPeriod - busy; idle > 0 {
				time.Sleep(idle)
			}
		}
	})
	return func() { close(done); wg.Wait() }
}
