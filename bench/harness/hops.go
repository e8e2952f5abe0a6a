package harness

import (
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The hop account: where the machine's CPU goes while one stream crosses the lab, by who ran
// (the gateways, the probes that send and receive, the lab's other processes, the kernel's
// softirq threads) and by the hop of the path the kernel was working on (the veths and
// bridges of the pod networks, the VXLAN devices, netfilter and conntrack, fragmentation and
// reassembly, segmentation, the TCP and UDP stacks). perf samples every CPU with call chains
// (`perf record -a -g -e cpu-clock`); a sample's hop is the innermost frame of its chain that
// names one, so the copy or checksum a VXLAN transmit does counts for VXLAN, while the
// gateway's own work (crypto, its dataplane) counts under the gateway's user space.

// hopOrder lists the hops in the order they are reported.
var hopOrder = []struct {
	key, title string
	re         *regexp.Regexp
}{
	{"fragment", "IP fragmentation and reassembly", regexp.MustCompile(`^(ip_fragment|ip_do_fragment|ip_frag_|ip_defrag|ip_expire|inet_frag|ip6_fragment|ipv6_frag|ip6_frag)`)},
	{"netfilter", "netfilter (nftables, conntrack, NAT)", regexp.MustCompile(`^(nf_|nft_|__nf_|ipt_|ip6t_|nf_conntrack|__nft|nf_nat)`)},
	{"vxlan", "VXLAN devices (encap, decap)", regexp.MustCompile(`^(vxlan_|udp_tunnel|iptunnel_|__iptunnel|skb_udp_tunnel_segment|udp_tunnel_xmit)`)},
	{"segment", "GSO segmentation and GRO", regexp.MustCompile(`^(skb_segment|__skb_gso_segment|skb_mac_gso_segment|tcp_gso_segment|tcp4_gso_segment|udp4_ufo_fragment|__udp_gso_segment|udp_gso_segment|inet_gso_segment|napi_gro|dev_gro|gro_|inet_gro|tcp_gro|tcp4_gro|udp_gro|udp4_gro|skb_gro)`)},
	{"veth", "veths and bridges (pod networks)", regexp.MustCompile(`^(veth_|br_|__br_)`)},
	{"tcp", "TCP stack", regexp.MustCompile(`^(tcp_|__tcp_|tcp_v4|tcp_v6)`)},
	{"udp", "UDP stack (sockets)", regexp.MustCompile(`^(udp_|__udp|udpv6_|udp4_|udp6_)`)},
	{"ip", "IP routing and forwarding", regexp.MustCompile(`^(ip_|ip6_|fib_|ipv6_|__ip_|__ip6_|dst_|rt_)`)},
	{"device", "device queues and softirq", regexp.MustCompile(`^(__dev_|dev_|netif_|__netif|net_rx_action|__napi_poll|process_backlog|sch_direct|__qdisc|qdisc_|validate_xmit)`)},
	{"syscall", "system calls, other", sysSym},
	{"scheduler", "scheduling, wake-ups, futex, epoll", schedSym},
}

// Who ran a sample.
const (
	ranGateway    = "gateway"
	ranProbe      = "probe"
	ranSoftirq    = "ksoftirqd"
	ranBackground = "lab"
	ranOutside    = "outside"
)

// hopOf is a sample's "who/hop" key, or "" for the idle loop. comm is perf's "COMM PID" when
// the script has pids (-F comm,pid,...): a process inLab does not hold is "outside" the lab
// (another program on the machine), unless the sample is the kernel's network softirq, which
// runs for the path on whichever task it interrupted.
func hopOf(comm string, frames []frame, inLab func(pid int) bool) string {
	if len(frames) == 0 {
		return ""
	}
	leaf := frames[0]
	soft := false
	for _, f := range frames {
		if softSym.MatchString(f.sym) {
			soft = true
			break
		}
	}
	if !soft && idleSym.MatchString(leaf.sym) && !strings.HasPrefix(leaf.sym, "runtime.") {
		return ""
	}
	pid := -1
	if i := strings.LastIndexByte(comm, ' '); i > 0 {
		if n, err := strconv.Atoi(comm[i+1:]); err == nil {
			comm, pid = strings.TrimSpace(comm[:i]), n
		}
	}
	who := ranBackground
	switch {
	case inLab != nil && pid >= 0 && !inLab(pid) && !strings.HasPrefix(comm, "ksoftirqd") && !(soft && hasNetSoftirq(frames)):
		who = ranOutside
	case comm == "skein-gateway" || strings.HasPrefix(comm, "skein-gatewa"):
		who = ranGateway
	case comm == "skein-probe" || comm == "iperf3":
		who = ranProbe
	case strings.HasPrefix(comm, "ksoftirqd"):
		who = ranSoftirq
	}
	for _, f := range frames {
		if !strings.Contains(f.dso, "kernel") {
			continue
		}
		for _, h := range hopOrder {
			if h.re.MatchString(f.sym) {
				return who + "/" + h.key
			}
		}
	}
	switch {
	case strings.Contains(leaf.dso, "kernel"):
		return who + "/kernel-other"
	case cryptoSym.MatchString(leaf.sym):
		return who + "/crypto"
	case gcSym.MatchString(leaf.sym):
		return who + "/gc"
	default:
		return who + "/user"
	}
}

func hasNetSoftirq(frames []frame) bool {
	for _, f := range frames {
		if netSoftSym.MatchString(f.sym) {
			return true
		}
	}
	return false
}

// HopProfile is CPU seconds by who ran and by hop, from `perf script -F comm,pid,period,ip,sym,dso`
// (or without pid, when every process counts as the lab's).
type HopProfile struct {
	// Seconds maps "who/hop" (who: gateway, probe, ksoftirqd, lab, outside; hop: a key of hopOrder,
	// kernel-other, crypto, gc or user) to CPU seconds.
	Seconds map[string]float64 `json:"seconds"`
	Samples int                `json:"samples"`
}

// ParseHopProfile reads perf script output into a HopProfile; inLab (nil: every process)
// tells the lab's processes from the machine's others.
func ParseHopProfile(r io.Reader, inLab func(pid int) bool) (*HopProfile, error) {
	ns, samples, err := parsePerfSamples(r, func(comm string, frames []frame) string { return hopOf(comm, frames, inLab) })
	if err != nil {
		return nil, err
	}
	p := &HopProfile{Seconds: map[string]float64{}, Samples: samples}
	for k, v := range ns {
		p.Seconds[k] = v / 1e9
	}
	return p, nil
}

// Markdown is the profile as a table of seconds per GB (gb: what the profiled transfer
// carried), a row per hop, a column per runner, hops by total, largest first. The total is
// the lab's: what ran outside it (other programs on the machine) is a column of its own.
func (p *HopProfile) Markdown(gb float64) string {
	whos := []string{ranGateway, ranProbe, ranSoftirq, ranBackground}
	rows := map[string]map[string]float64{}
	total := map[string]float64{}
	for k, v := range p.Seconds {
		who, hop, _ := strings.Cut(k, "/")
		if rows[hop] == nil {
			rows[hop] = map[string]float64{}
		}
		rows[hop][who] += v
		if who != ranOutside {
			total[hop] += v
		}
	}
	hops := make([]string, 0, len(rows))
	for h := range rows {
		hops = append(hops, h)
	}
	slices.SortFunc(hops, func(a, b string) int {
		if total[a] != total[b] {
			if total[a] > total[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	var b strings.Builder
	fmt.Fprintf(&b, "| hop (s/GB) | gateways | probes | ksoftirqd | lab's other processes | the lab | outside the lab |\n|---|---|---|---|---|---|---|\n")
	sum := map[string]float64{}
	var all float64
	for _, h := range hops {
		fmt.Fprintf(&b, "| %s |", hopTitle(h))
		for _, w := range whos {
			fmt.Fprintf(&b, " %.2f |", rows[h][w]/gb)
			sum[w] += rows[h][w]
		}
		fmt.Fprintf(&b, " %.2f | %.2f |\n", total[h]/gb, rows[h][ranOutside]/gb)
		all += total[h]
		sum[ranOutside] += rows[h][ranOutside]
	}
	fmt.Fprintf(&b, "| **total** |")
	for _, w := range whos {
		fmt.Fprintf(&b, " %.2f |", sum[w]/gb)
	}
	fmt.Fprintf(&b, " %.2f | %.2f |\n", all/gb, sum[ranOutside]/gb)
	return b.String()
}

func hopTitle(key string) string {
	for _, h := range hopOrder {
		if h.key == key {
			return h.title
		}
	}
	switch key {
	case "kernel-other":
		return "kernel, other"
	case "crypto":
		return "crypto (user space)"
	case "gc":
		return "Go GC"
	case "user":
		return "user space, other"
	}
	return key
}
