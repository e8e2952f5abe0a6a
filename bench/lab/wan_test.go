package lab_test

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skein-net/skein/bench/lab"
)

// ping sends one ICMP echo of size bytes (IP packet) from namespace ns to addr, with Don't
// Fragment (df) or without, and returns whether it was answered and what ping printed.
func ping(t *testing.T, ns, addr string, size int, df bool) (bool, string) {
	t.Helper()
	mode := "dont"
	if df {
		mode = "do"
	}
	headers := 28 // IPv4 and ICMP
	if strings.Contains(addr, ":") {
		headers = 48
	}
	// Twice: the first may only teach the kernel the path MTU (a frag-needed answered).
	out, err := exec.Command("ip", "netns", "exec", ns, "ping", "-n", "-c", "2", "-i", "0.2", "-W", "1", "-M", mode, "-s", strconv.Itoa(size-headers), addr).CombinedOutput()
	return err == nil, string(out) // ping exits 0 when any echo was answered
}

// TestNarrowWAN: the lab's WAN option narrows the path between the clusters, and only it: a
// packet of the WAN MTU crosses with Don't Fragment and one byte more does not (answered
// "fragmentation needed" with the MTU, or silently dropped with WANDropICMP), larger packets
// without DF cross in fragments, a cluster's own nodes and the workstation keep 1500; the WAN
// reads back from the kernel, changes on the running lab and is restored by NarrowWAN(0, false).
// The same over IPv6 (IPv6Only), where routers never fragment and Packet Too Big is the answer.
func TestNarrowWAN(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("needs nft (Debian package nftables)")
	}
	t.Run("IPv4", func(t *testing.T) { testNarrowWAN(t, false) })
	t.Run("IPv6", func(t *testing.T) { testNarrowWAN(t, true) })
}

func testNarrowWAN(t *testing.T, v6 bool) {
	prefix := fmt.Sprintf("skw%d", os.Getpid()%100000)
	if v6 {
		prefix = fmt.Sprintf("skx%d", os.Getpid()%100000)
	}
	topo, err := lab.Up(lab.Options{Prefix: prefix, Clusters: 2, Nodes: 2, WANMTU: 1380, WANDropICMP: true, IPv6Only: v6})
	t.Cleanup(func() { lab.Down(prefix) })
	if err != nil {
		t.Fatal(err)
	}
	c0, c1 := topo.Clusters[0], topo.Clusters[1]
	n0, n1, far := c0.Nodes[0].Name, c0.Nodes[1].Addr.String(), c1.Nodes[0].Addr.String()
	want := func(ns, addr string, size int, df, answered bool, also string) {
		t.Helper()
		ok, out := ping(t, ns, addr, size, df)
		if ok != answered || !strings.Contains(out, also) {
			t.Errorf("ping from %s to %s, %d bytes, DF %v: answered %v, want %v (and %q):\n%s", ns, addr, size, df, ok, answered, also, out)
		}
	}
	// Right after Up, the first packets may wait on neighbour discovery: a small one first.
	for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
		if ok, out := ping(t, n0, far, 100, true); ok {
			break
		} else if time.Since(start) > 10*time.Second {
			t.Fatalf("%s does not reach %s after 10 s:\n%s", n0, far, out)
		}
	}
	if s, err := topo.WAN(); err != nil || s != (lab.WANState{MTU: 1380, DropICMP: true}) {
		t.Errorf("WAN() = %+v, %v; want 1380 with ICMP dropped", s, err)
	}
	// A black hole between the clusters.
	want(n0, far, 1380, true, true, "")
	want(n0, far, 1381, true, false, "")
	if _, out := ping(t, n0, far, 1381, true); strings.Contains(out, "mtu") {
		t.Errorf("the frag-needed reached the node with ICMP dropped:\n%s", out)
	}
	want(c1.Nodes[1].Name, c0.Nodes[0].Addr.String(), 1381, true, false, "") // both ways
	if !v6 {
		want(n0, far, 1500, false, true, "") // fragmented by the router
	}
	// Inside a cluster and from the workstation: the full MTU.
	want(n0, n1, 1500, true, true, "")
	want(topo.Workstation.Name, c1.ControlPlane.Addr.String(), 1500, true, true, "")

	// ICMP delivered: the node learns the path MTU.
	if err := topo.NarrowWAN(1380, false); err != nil {
		t.Fatal(err)
	}
	if s, err := topo.WAN(); err != nil || s != (lab.WANState{MTU: 1380}) {
		t.Errorf("WAN() = %+v, %v; want 1380 with ICMP delivered", s, err)
	}
	want(c0.Nodes[1].Name, far, 1400, true, false, "1380")

	// Restored.
	if err := topo.NarrowWAN(0, false); err != nil {
		t.Fatal(err)
	}
	if s, err := topo.WAN(); err != nil || s != (lab.WANState{}) {
		t.Errorf("WAN() = %+v, %v; want the full MTU", s, err)
	}
	want(c1.Nodes[1].Name, c0.Nodes[1].Addr.String(), 1500, true, true, "")
	if err := topo.NarrowWAN(1000, false); err == nil {
		t.Error("a WAN MTU of 1000 accepted")
	}
}
