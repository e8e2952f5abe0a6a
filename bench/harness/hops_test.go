package harness

import (
	"strings"
	"testing"
)

// TestHopProfile: each sample is put under who ran it and the innermost hop of its chain; the
// idle loop is left out; a copy inside a VXLAN transmit counts for VXLAN.
func TestHopProfile(t *testing.T) {
	script := `skein-gateway 1000000:
	ffffffff81000001 memcpy_orig+0x1 ([kernel.kallsyms])
	ffffffff81000002 vxlan_xmit_one+0x2 ([kernel.kallsyms])
	ffffffff81000003 __dev_queue_xmit+0x3 ([kernel.kallsyms])

skein-gateway 2000000:
	0000000000401000 golang.org/x/crypto/chacha20poly1305.chacha20Poly1305Seal+0x10 (/skein-gateway)

ksoftirqd/1 3000000:
	ffffffff81000004 ip_defrag+0x4 ([kernel.kallsyms])
	ffffffff81000005 ip_rcv+0x5 ([kernel.kallsyms])
	ffffffff81000006 __do_softirq+0x6 ([kernel.kallsyms])

kube-apiserver 4000000:
	ffffffff81000007 nf_conntrack_in+0x7 ([kernel.kallsyms])
	ffffffff81000008 net_rx_action+0x8 ([kernel.kallsyms])

swapper 5000000:
	ffffffff81000009 default_idle+0x9 ([kernel.kallsyms])
	ffffffff8100000a cpu_startup_entry+0xa ([kernel.kallsyms])

skein-probe 6000000:
	ffffffff8100000b tcp_sendmsg_locked+0xb ([kernel.kallsyms])
	ffffffff8100000c entry_SYSCALL_64+0xc ([kernel.kallsyms])
`
	p, err := ParseHopProfile(strings.NewReader(script), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"gateway/vxlan": 0.001, "gateway/crypto": 0.002, "ksoftirqd/fragment": 0.003, "lab/netfilter": 0.004, "probe/tcp": 0.006}
	if p.Samples != 5 || len(p.Seconds) != len(want) {
		t.Fatalf("got %d samples %v, want 5 (the idle one left out): %v", p.Samples, p.Seconds, want)
	}
	for k, v := range want {
		if p.Seconds[k] != v {
			t.Errorf("%s = %v, want %v", k, p.Seconds[k], v)
		}
	}
	md := p.Markdown(0.001)
	for _, s := range []string{"| IP fragmentation and reassembly | 0.00 | 0.00 | 3.00 | 0.00 | 3.00 | 0.00 |", "| **total** | 3.00 | 6.00 | 3.00 | 4.00 | 16.00 | 0.00 |"} {
		if !strings.Contains(md, s) {
			t.Errorf("markdown lacks %q:\n%s", s, md)
		}
	}
}

// TestHopProfileOutsideTheLab: with pids, a process outside the lab is counted apart (and not
// in the lab's total), except for the network softirq it happened to run.
func TestHopProfileOutsideTheLab(t *testing.T) {
	script := `kube-apiserver 100 1000000:
	ffffffff81000001 memcpy_orig+0x1 ([kernel.kallsyms])
	ffffffff81000002 entry_SYSCALL_64+0x2 ([kernel.kallsyms])

kube-apiserver 200 2000000:
	ffffffff81000001 memcpy_orig+0x1 ([kernel.kallsyms])
	ffffffff81000002 entry_SYSCALL_64+0x2 ([kernel.kallsyms])

compile 300 3000000:
	ffffffff81000003 vxlan_rcv+0x3 ([kernel.kallsyms])
	ffffffff81000004 net_rx_action+0x4 ([kernel.kallsyms])
	ffffffff81000005 __do_softirq+0x5 ([kernel.kallsyms])
`
	p, err := ParseHopProfile(strings.NewReader(script), func(pid int) bool { return pid == 100 })
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"lab/syscall": 0.001, "outside/syscall": 0.002, "lab/vxlan": 0.003}
	for k, v := range want {
		if p.Seconds[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, p.Seconds[k], v, p.Seconds)
		}
	}
	if md := p.Markdown(0.001); !strings.Contains(md, "| **total** | 0.00 | 0.00 | 0.00 | 4.00 | 4.00 | 2.00 |") {
		t.Errorf("the lab's total counts what ran outside it:\n%s", md)
	}
}
