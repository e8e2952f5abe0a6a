package harness

import (
	"strings"
	"testing"
)

// perfScript is `perf script -F comm,period,ip,sym,dso` output as perf 6.1 prints it, one
// sample of each kind the breakdown must tell apart.
const perfScript = `skein-gateway    1001001 
	           4f2a1 golang.org/x/crypto/chacha20poly1305.chacha20Poly1305Seal (/tmp/bin/skein-gateway)
	           4e001 golang.org/x/crypto/chacha20poly1305.(*chacha20poly1305).seal (/tmp/bin/skein-gateway)

skein-gateway    1001001 
	           9f222 runtime.memmove (/tmp/bin/skein-gateway)
	          224095 github.com/skein-net/skein/dataplane.(*Dataplane).Read (/tmp/bin/skein-gateway)

skein-gateway    2002002 
	ffffffff81234567 rep_movs_alternative ([kernel.kallsyms])
	ffffffff81234000 _copy_from_iter ([kernel.kallsyms])
	ffffffff81000100 do_syscall_64 ([kernel.kallsyms])
	ffffffff81000000 entry_SYSCALL_64_after_hwframe ([kernel.kallsyms])

skein-gateway    1001001 
	           11111 runtime.scanobject (/tmp/bin/skein-gateway)
	           11000 runtime.gcDrain (/tmp/bin/skein-gateway)
	           10000 runtime.gcBgMarkWorker (/tmp/bin/skein-gateway)

skein-gateway    1001001 
	ffffffff81300000 udp_sendmsg ([kernel.kallsyms])
	ffffffff81000100 do_syscall_64 ([kernel.kallsyms])
	ffffffff81000000 entry_SYSCALL_64 ([kernel.kallsyms])

skein-gateway    1001001 
	ffffffff81400000 __schedule ([kernel.kallsyms])
	ffffffff81400100 futex_wait ([kernel.kallsyms])
	ffffffff81000100 do_syscall_64 ([kernel.kallsyms])
	           22222 runtime.futex (/tmp/bin/skein-gateway)

skein-gateway    1001001 
	           33333 github.com/skein-net/skein/dataplane/nat.(*PrefixMap).RewriteDst (/tmp/bin/skein-gateway)

swapper    1001001 
	ffffffff81500000 vxlan_rcv ([kernel.kallsyms])
	ffffffff81500100 __napi_poll ([kernel.kallsyms])
	ffffffff81500200 net_rx_action ([kernel.kallsyms])
	ffffffff81500300 handle_softirqs ([kernel.kallsyms])
	ffffffff821f4dab pv_native_safe_halt ([kernel.kallsyms])

swapper    1001001 
	ffffffff821f4dab pv_native_safe_halt ([kernel.kallsyms])
	ffffffff821f68b5 default_idle ([kernel.kallsyms])
	ffffffff813c59a6 do_idle ([kernel.kallsyms])

iperf3    1001001 
	ffffffff81600000 csum_partial ([kernel.kallsyms])
	ffffffff81600100 tcp_sendmsg ([kernel.kallsyms])

iperf3    1001001 
	           44444 iperf_send (/usr/lib/x86_64-linux-gnu/libiperf.so.0)

compile    1001001 
	           9f222 runtime.memmove (/usr/local/go/pkg/tool/linux_amd64/compile)

compile    1001001 
	ffffffff8140a37e rcu_core ([kernel.kallsyms])
	ffffffff8136213d handle_softirqs ([kernel.kallsyms])

kworker/0:1    1001001 
	ffffffff81700000 process_one_work ([kernel.kallsyms])
`

func TestParsePerfScript(t *testing.T) {
	ns, samples, err := parsePerfScript(strings.NewReader(perfScript), map[string]bool{"iperf3": true, "skein-gateway": true})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"crypto":    1001001,
		"copy":      1001001 + 2002002,
		"gc":        1001001,
		"syscall":   1001001,
		"scheduler": 1001001,
		"gateway":   1001001,
		"softirq":   1001001, // under swapper: network receive work counts wherever it ran
		"checksum":  1001001,
		"iperf3":    1001001,
	}
	if samples != 10 {
		t.Errorf("%d samples counted, want 10 (idle, another process's work and a kworker left out)", samples)
	}
	for k, v := range want {
		if ns[k] != v {
			t.Errorf("%s: %v ns, want %v", k, ns[k], v)
		}
	}
	for k := range ns {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected category %s: %v", k, ns[k])
		}
	}
	for _, c := range breakdownOrder {
		delete(want, c.key)
	}
	if len(want) != 0 {
		t.Errorf("categories missing from the report order: %v", want)
	}
}

// TestCoresBusy: CPU seconds per GB times GB over the test's seconds, and the report's row.
func TestCoresBusy(t *testing.T) {
	b := &Breakdown{PerGB: map[string]float64{"crypto": 2, "softirq": 4}, GB: 1.2, Samples: 7200, Seconds: 4, CPUs: 2}
	if got := b.CoresBusy(); got < 1.7999 || got > 1.8001 {
		t.Errorf("CoresBusy = %v, want 1.8", got)
	}
	old := &Breakdown{PerGB: map[string]float64{"crypto": 2}, GB: 1}
	if got := old.CoresBusy(); got != 0 {
		t.Errorf("a report without seconds: CoresBusy = %v, want 0 (unknown)", got)
	}
	r := &Result{Rungs: []RungResult{{Name: "skein", Breakdown: b}, {Name: "old", Breakdown: old}}}
	md := r.breakdownMarkdown()
	if !strings.Contains(md, "| CPUs kept busy (rung CPU seconds / test seconds) | 1.80 of 2 | - |") {
		t.Errorf("no busy row in:\n%s", md)
	}
}
