package harness

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The CPU breakdown: where a rung's CPU per GB goes. During one extra single-stream TCP test
// (not one of the measured runs: sampling costs a little), perf samples every CPU (the software
// cpu-clock event, which works in virtual machines without hardware counters) with call
// chains; each sample of the rung's processes, or of the kernel working for them in softirq, is
// put in one category by its stack. Categories are tried in the order of breakdownOrder, so
// that a copy inside a system call counts as a copy, and the sum over categories is the rung's
// whole CPU per GB as perf saw it.

// Breakdown is CPU seconds per GB by category.
type Breakdown struct {
	// PerGB maps a category key (breakdownOrder) to CPU seconds per GB received.
	PerGB map[string]float64 `json:"perGB"`
	// GB is what the profiled test received.
	GB float64 `json:"gb"`
	// Samples counted (idle and foreign processes excluded).
	Samples int `json:"samples"`
	// Seconds the profiled test ran and the machine's CPUs: the rung's CPU seconds over
	// Seconds is how many of the CPUs it kept busy. A single stream that keeps every CPU busy
	// is bound by its CPU per GB; one that leaves some idle, by its longest serial chain.
	Seconds float64 `json:"seconds,omitempty"`
	CPUs    int     `json:"cpus,omitempty"`
}

// CoresBusy is the CPUs the rung kept busy during the profiled test (0 when unknown).
func (b *Breakdown) CoresBusy() float64 {
	if b.Seconds <= 0 {
		return 0
	}
	var perGB float64
	for _, v := range b.PerGB {
		perGB += v
	}
	return perGB * b.GB / b.Seconds
}

// The categories, in the order they are tried and reported.
var breakdownOrder = []struct{ key, title string }{
	{"crypto", "crypto (ChaCha20-Poly1305, BLAKE2s)"},
	{"copy", "copies (memmove, copy to/from user, skb copies)"},
	{"checksum", "checksums"},
	{"gc", "Go GC (mark, sweep, assists)"},
	{"softirq", "kernel softirq (network receive, veth/VXLAN/TUN forwarding)"},
	{"scheduler", "scheduling, wake-ups, futex, epoll"},
	{"syscall", "kernel, system calls (socket, TUN I/O)"},
	{"kernel-other", "kernel, other"},
	{"gateway", "gateway user space, other (wireguard-go, dataplane, runtime)"},
	{"iperf3", "iperf3 user space"},
}

var (
	cryptoSym  = regexp.MustCompile(`(?i)chacha|poly1305|blake2s|curve25519`)
	copySym    = regexp.MustCompile(`(?i)memmove|memcpy|memset|memclr|copy_user|rep_movs|rep_stos|copy_to_iter|copy_from_iter|copyin|copyout|skb_copy|copy_page|clear_page`)
	csumSym    = regexp.MustCompile(`(?i)csum|checksum`)
	gcSym      = regexp.MustCompile(`^runtime\.(gcBgMarkWorker|gcDrain|scanobject|scanblock|greyobject|markroot|gcAssistAlloc|bgsweep|bgscavenge|sweepone|scanstack|wbBufFlush|gcWriteBarrier)`)
	softSym    = regexp.MustCompile(`^(handle_softirqs|__do_softirq|net_rx_action|do_softirq|__napi_poll|run_ksoftirqd)`)
	schedSym   = regexp.MustCompile(`^(runtime\.(schedule|findRunnable|park_m|mcall|futex|netpoll|notesleep|notewakeup|wakep|startm|stopm|gopark|goready|ready|runqgrab|stealWork|usleep|osyield|semasleep|semawakeup)$|__schedule|schedule$|futex|try_to_wake_up|ep_poll|pick_next|finish_task_switch|__switch_to)`)
	netSoftSym = regexp.MustCompile(`net_rx_action|__napi_poll|process_backlog|netif_receive|veth_|vxlan|ip_rcv|ip_forward|tcp_v4_rcv|udp_rcv|tun_`)
	sysSym     = regexp.MustCompile(`^(entry_SYSCALL|do_syscall_64)`)
	idleSym    = regexp.MustCompile(`(?i)idle|safe_halt|mwait|cpu_startup_entry`)
)

type frame struct{ sym, dso string }

// categorize puts one sample in a category, or returns "" for samples that are not the rung's
// work (the idle loop, processes outside the rung).
func categorize(comm string, frames []frame, rungComms map[string]bool) string {
	has := func(re *regexp.Regexp) bool {
		for _, f := range frames {
			if re.MatchString(f.sym) {
				return true
			}
		}
		return false
	}
	soft := has(softSym)
	if !rungComms[comm] && !(soft && has(netSoftSym)) {
		// Another process, a kernel thread or the idle loop; but the kernel's network
		// receive work counts wherever it ran (the softirq of a packet of the rung runs on
		// whichever task the interrupt or the wake-up found).
		return ""
	}
	if len(frames) == 0 {
		return ""
	}
	leaf := frames[0]
	if !soft && idleSym.MatchString(leaf.sym) && !strings.HasPrefix(leaf.sym, "runtime.") {
		return ""
	}
	kernel := strings.Contains(leaf.dso, "kernel")
	switch {
	case cryptoSym.MatchString(leaf.sym):
		return "crypto"
	case copySym.MatchString(leaf.sym):
		return "copy"
	case csumSym.MatchString(leaf.sym):
		return "checksum"
	case has(gcSym):
		return "gc"
	case soft:
		return "softirq"
	case has(schedSym):
		return "scheduler"
	case kernel && has(sysSym):
		return "syscall"
	case kernel:
		return "kernel-other"
	case comm == "iperf3":
		return "iperf3"
	default:
		return "gateway"
	}
}

// parsePerfScript reads `perf script -F comm,period,ip,sym,dso` output (a header line per
// sample, then its call chain indented, leaf first, then a blank line) and sums the periods
// (nanoseconds of cpu-clock) by category.
func parsePerfScript(r io.Reader, rungComms map[string]bool) (ns map[string]float64, samples int, err error) {
	return parsePerfSamples(r, func(comm string, frames []frame) string { return categorize(comm, frames, rungComms) })
}

// parsePerfSamples is parsePerfScript with the category of a sample given by classify ("" to
// leave the sample out).
func parsePerfSamples(r io.Reader, classify func(comm string, frames []frame) string) (ns map[string]float64, samples int, err error) {
	ns = map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var comm string
	var period float64
	var frames []frame
	in := false
	flush := func() {
		if in {
			if c := classify(comm, frames); c != "" {
				ns[c] += period
				samples++
			}
		}
		in, frames = false, frames[:0]
	}
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			flush()
			continue
		}
		if line[0] != ' ' && line[0] != '\t' {
			flush()
			// "comm  period" where comm may hold spaces: the period is the last field.
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			p, perr := strconv.ParseFloat(strings.TrimSuffix(f[len(f)-1], ":"), 64)
			if perr != nil {
				continue
			}
			comm, period, in = strings.Join(f[:len(f)-1], " "), p, true
			continue
		}
		// "\t    ffffffff81234567 symbol name (dso)"
		t := strings.TrimSpace(line)
		addr, rest, _ := strings.Cut(t, " ")
		if _, perr := strconv.ParseUint(addr, 16, 64); perr != nil {
			continue
		}
		sym, dso := rest, ""
		if i := strings.LastIndex(rest, " ("); i >= 0 && strings.HasSuffix(rest, ")") {
			sym, dso = rest[:i], rest[i+2:len(rest)-1]
		}
		if i := strings.LastIndex(sym, "+0x"); i > 0 {
			sym = sym[:i]
		}
		frames = append(frames, frame{strings.TrimSpace(sym), dso})
	}
	flush()
	return ns, samples, sc.Err()
}

// perfAvailable says whether perf can sample every CPU here, or why not.
func perfAvailable() error {
	if _, err := exec.LookPath("perf"); err != nil {
		return fmt.Errorf("perf not installed (Debian package linux-perf)")
	}
	return nil
}

// profileBreakdown runs one single-stream TCP test under perf and returns the breakdown.
func profileBreakdown(ctx context.Context, e *Env, p *Path, o Options) (*Breakdown, error) {
	if err := perfAvailable(); err != nil {
		return nil, err
	}
	srv, err := p.Server.start(e.Log, "iperf3", "-s", "-p", "5201")
	if err != nil {
		return nil, err
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	time.Sleep(300 * time.Millisecond)
	data := filepath.Join(e.Work, "perf.data")
	defer os.Remove(data)
	secs := max(1, int(o.Duration.Seconds()))
	// -F 999 per CPU; the recording outlasts the test by a little and is cut by SIGINT.
	rec := exec.CommandContext(ctx, "perf", "record", "-q", "-e", "cpu-clock", "-F", "999", "-a", "-g", "-o", data)
	rec.Stdout, rec.Stderr = e.Log, e.Log
	rec.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := rec.Start(); err != nil {
		return nil, fmt.Errorf("perf record: %w", err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			_ = rec.Process.Signal(os.Interrupt)
			_ = rec.Wait()
		}
	}
	defer stop()
	time.Sleep(500 * time.Millisecond) // perf is sampling
	r, _, err := iperf(ctx, p, "-t", strconv.Itoa(secs))
	stop()
	if err != nil {
		return nil, err
	}
	gb := r.End.SumReceived.Bytes / 1e9
	if gb <= 0 {
		return nil, fmt.Errorf("the profiled test received nothing")
	}
	script := exec.CommandContext(ctx, "perf", "script", "-i", data, "-F", "comm,period,ip,sym,dso")
	script.Stderr = e.Log
	out, err := script.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := script.Start(); err != nil {
		return nil, fmt.Errorf("perf script: %w", err)
	}
	comms := map[string]bool{"iperf3": true, "wireguard-go": true, "skein-gateway": true}
	ns, samples, perr := parsePerfScript(out, comms)
	if err := script.Wait(); err != nil || perr != nil {
		return nil, fmt.Errorf("perf script: %v %v", err, perr)
	}
	b := &Breakdown{PerGB: map[string]float64{}, GB: gb, Samples: samples, Seconds: r.End.SumReceived.Seconds, CPUs: runtime.NumCPU()}
	for k, v := range ns {
		b.PerGB[k] = v / 1e9 / gb
	}
	return b, nil
}
