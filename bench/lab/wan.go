package lab

import (
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// The WAN between the clusters is the router's routing between their underlay bridges: traffic
// inside a cluster is switched by its bridge and never routed, traffic between two clusters is
// routed by the router from one bridge to the other. NarrowWAN narrows that routing alone:
//
//	ip rule add iif br-c0 lookup 142 priority 142          # traffic coming from cluster 0 (one per cluster)
//	ip route add 192.168.11.0/24 dev br-c1 mtu lock 1380 table 142   # to cluster 1, at most 1380 bytes
//
// The router forwards a larger packet only in fragments, or answers it "fragmentation needed"
// (IPv6: Packet Too Big) when it may not be fragmented, as a router before a narrower link does.
// With dropICMP an nftables table drops those answers on their way into a cluster:
//
//	table inet <prefix>-wan { chain out { type filter hook output priority 0;
//	  oifname "br-c*" icmp type destination-unreachable icmp code frag-needed drop
//	  oifname "br-c*" icmpv6 type packet-too-big drop } }
//
// a path MTU black hole. The workstation's traffic to the clusters, the router's own (the
// registry) and every cluster's own traffic keep the full MTU and their ICMP.

// wanTable is the router's routing table (and rule priority) of the narrowed WAN.
const wanTable = "142"

// wanNFTable is the router's nftables table that drops the WAN's ICMP.
func wanNFTable(prefix string) string { return prefix + "-wan" }

// WANMinMTU and WANMaxMTU bound NarrowWAN's mtu: IPv6's minimum link MTU, and the underlay's.
const (
	WANMinMTU = 1280
	WANMaxMTU = 1500
)

// NarrowWAN narrows the path between every two clusters to mtu bytes (0: the full underlay
// MTU) and, with dropICMP, drops the router's fragmentation-needed and Packet Too Big on their
// way into the clusters. It replaces what an earlier call set: NarrowWAN(0, false) restores the
// WAN. The lab's family decides which: IPv6 in a lab with IPv6Only, else IPv4 (a DualStack
// lab's IPv6 stays inside each cluster).
func (t *Topology) NarrowWAN(mtu int, dropICMP bool) error {
	if mtu != 0 && (mtu < WANMinMTU || mtu > WANMaxMTU) {
		return fmt.Errorf("lab: WAN MTU %d: want %d-%d, or 0 for the full MTU", mtu, WANMinMTU, WANMaxMTU)
	}
	if len(t.Clusters) == 0 {
		return errors.New("lab: no clusters, no WAN")
	}
	ip := []string{"ip"}
	if t.Clusters[0].Underlay.Addr().Is6() {
		ip = []string{"ip", "-6"}
	}
	r := t.Router.Name
	cmd := func(args ...string) []string { return append(append([]string{}, ip...), args...) }
	// Undo: the rules (as many as there are), the table's routes, the ICMP table.
	for _, c := range t.Clusters {
		for In(r, cmd("rule", "del", "iif", "br-"+c.Name, "lookup", wanTable)...) == nil {
		}
	}
	if err := In(r, cmd("route", "flush", "table", wanTable)...); err != nil && !strings.Contains(err.Error(), "FIB table does not exist") {
		return fmt.Errorf("lab: restore the WAN: %w", err)
	}
	if err := In(r, "nft", "list", "table", "inet", wanNFTable(t.Prefix)); err == nil {
		if err := In(r, "nft", "delete", "table", "inet", wanNFTable(t.Prefix)); err != nil {
			return fmt.Errorf("lab: restore the WAN's ICMP: %w", err)
		}
	}
	if mtu != 0 {
		for _, c := range t.Clusters {
			if err := In(r, cmd("route", "add", c.Underlay.Masked().String(), "dev", "br-"+c.Name, "mtu", "lock", strconv.Itoa(mtu), "table", wanTable)...); err != nil {
				return fmt.Errorf("lab: narrow the WAN: %w", err)
			}
		}
		for _, c := range t.Clusters {
			if err := In(r, cmd("rule", "add", "iif", "br-"+c.Name, "lookup", wanTable, "priority", wanTable)...); err != nil {
				return fmt.Errorf("lab: narrow the WAN: %w", err)
			}
		}
	}
	if dropICMP {
		rules := fmt.Sprintf(`add table inet %[1]s
add chain inet %[1]s out { type filter hook output priority 0; }
add rule inet %[1]s out oifname "br-c*" icmp type destination-unreachable icmp code frag-needed counter drop
add rule inet %[1]s out oifname "br-c*" icmpv6 type packet-too-big counter drop
`, wanNFTable(t.Prefix))
		if err := In(r, "nft", rules); err != nil {
			return fmt.Errorf("lab: drop the WAN's ICMP: %w", err)
		}
	}
	return nil
}

// WANState is what the router's WAN is: its MTU (0: full) and whether its ICMP is dropped.
type WANState struct {
	MTU      int
	DropICMP bool
}

// WAN reads the router's WAN back from the kernel.
func (t *Topology) WAN() (WANState, error) {
	var s WANState
	if len(t.Clusters) == 0 {
		return s, nil
	}
	args := []string{"ip", "netns", "exec", t.Router.Name, "ip"}
	if t.Clusters[0].Underlay.Addr().Is6() {
		args = append(args, "-6")
	}
	out, err := output(append(args, "route", "show", "table", "all")...)
	if err != nil {
		return s, err
	}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if !strings.Contains(l, "table "+wanTable) {
			continue
		}
		for i := range f {
			if f[i] == "mtu" && i+2 < len(f) && f[i+1] == "lock" {
				s.MTU, _ = strconv.Atoi(f[i+2])
			}
		}
	}
	_, err = output("ip", "netns", "exec", t.Router.Name, "nft", "list", "table", "inet", wanNFTable(t.Prefix))
	s.DropICMP = err == nil
	return s, nil
}

// output runs a command and returns its standard output; a failure carries its output.
func output(args ...string) (string, error) {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
