package kernel_test

import (
	"encoding/binary"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/skein-net/skein/dataplane/kernel"
	"github.com/skein-net/skein/dataplane/packet"
	pt "github.com/skein-net/skein/dataplane/packet/packettest"
	"github.com/skein-net/skein/internal/netnstest"
)

// vxlanFrame is a VXLAN datagram's payload: the header naming vni, Ethernet from gwMAC to
// dst, and an IPv4/UDP datagram src -> dst:7777.
func vxlanFrame(vni uint32, dstMAC packet.MAC, src, dst string) []byte {
	b := make([]byte, 8, 128)
	b[0] = 0x08 // the I flag: the VNI is valid
	binary.BigEndian.PutUint32(b[4:], vni<<8)
	b = append(b, dstMAC[:]...)
	b = append(b, gwMAC[:]...)
	b = append(b, 0x08, 0x00)
	udp := pt.UDP(src, dst, 5353, 7777, []byte("overlay"), false)
	return append(b, pt.IPv4{Src: src, Dst: dst, Proto: 17, Payload: udp}.Build()...)
}

// sendUDP sends payload three times from namespace ns to to:port.
func sendUDP(t *testing.T, ns *netnstest.NS, to string, port int, payload []byte) {
	t.Helper()
	if err := ns.Do(func() error {
		c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.ParseIP(to), Port: port})
		if err != nil {
			return err
		}
		defer c.Close()
		for range 3 {
			if _, err := c.Write(payload); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("send from %s to %s:%d: %v", ns.Name, to, port, err)
	}
}

// listenUDP binds addr:port in ns; received reports whether a datagram arrived within a
// second.
func listenUDP(t *testing.T, ns *netnstest.NS, addr string, port int) (received func() bool) {
	t.Helper()
	var conn *net.UDPConn
	if err := ns.Do(func() (err error) {
		conn, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(addr), Port: port})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return func() bool {
		_ = conn.SetReadDeadline(time.Now().Add(time.Second))
		buf := make([]byte, 2048)
		got := false
		for {
			if _, _, err := conn.ReadFromUDP(buf); err != nil {
				return got
			}
			got = true
			_ = conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond)) // drain the other copies
		}
	}
}

// TestOverlayGuard: a node as skein-agent programs it (kernel.Reconcile, then the host SNAT
// tables with the overlay guard), attacked by a host of its underlay that is no node and no
// gateway (the attack review's TestAttack5OverlayIPv4Spoofing: before the guard, its forged
// frames reached the node's pods), by a gateway claiming a local pod's address, and by a pod
// sending the overlay's frames to another node; beside them what must pass: the gateway's
// replies, another node's frames relayed to the gateway, and another VNI on the same port.
func TestOverlayGuard(t *testing.T) {
	requireNFTNAT(t)
	s := newSite(t)
	if _, err := kernel.Reconcile(s.k, siteDesired("192.168.77.2")); err != nil {
		t.Fatal(err)
	}
	gw := s.gateway(t, "ggw", "192.168.77.2")
	atk := s.underlayHost(t, "gatk", "192.168.77.66") // on the underlay, no node and no gateway
	n2 := s.underlayHost(t, "gn2", "192.168.77.3")    // another node
	n2.Run(t, "ip", "route", "add", "10.244.1.0/24", "via", "192.168.77.1")
	s.node.Run(t, "ip", "route", "add", "10.244.2.0/24", "via", "192.168.77.3") // n2's pods, as the pod network routes them
	gw.Run(t, "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.vx.rp_filter=0")
	fd := nsFd(t, s.node)
	l, err := s.k.Link("liqo.vxlan")
	if err != nil || l == nil {
		t.Fatalf("liqo.vxlan: %v", err)
	}
	nodeMAC := l.MAC
	atPod := listenUDP(t, s.pod, "10.244.1.5", 7777)
	atGateway := listenUDP(t, gw, "10.71.2.7", 7777)
	atN2 := listenUDP(t, n2, "192.168.77.3", 4789)

	// arrives is for what must pass: sent again while it does not (the first datagrams may
	// wait for neighbour resolution on a loaded machine).
	arrives := func(send func(), received func() bool) bool {
		for range 3 {
			send()
			if received() {
				return true
			}
		}
		return false
	}
	// Without the guard the attack works: the test can fail.
	if !arrives(func() { sendUDP(t, atk, "192.168.77.1", 4789, vxlanFrame(18952, nodeMAC, "10.244.1.6", "10.244.1.5")) }, atPod) {
		t.Fatal("without the guard a forged frame did not reach the pod: the test proves nothing")
	}

	guard := &kernel.OverlayGuard{Device: "liqo.vxlan", Port: 4789, VNI: 18952,
		Nodes:    []netip.Addr{netip.MustParseAddr("192.168.77.1"), netip.MustParseAddr("192.168.77.3")},
		Gateways: []netip.Addr{netip.MustParseAddr("192.168.77.2")}}
	hs := kernel.HostSNAT{ExternalIP: extIP, PodCIDRs: []netip.Prefix{podCIDR}, Remote: []netip.Prefix{netip.MustParsePrefix("10.71.0.0/16")},
		Relay: "liqo.vxlan", Guard: guard}
	if err := kernel.EnsureHostSNAT(fd, hs); err != nil {
		t.Fatal(err)
	}
	counter := func(family, name string) string {
		out := s.node.Run(t, "nft", "list", "counter", family, kernel.NFTable, name)
		if i := strings.Index(out, "packets "); i >= 0 {
			return strings.Fields(out[i:])[1]
		}
		return out
	}

	t.Run("a host that is no node claiming a local pod", func(t *testing.T) {
		sendUDP(t, atk, "192.168.77.1", 4789, vxlanFrame(18952, nodeMAC, "10.244.1.6", "10.244.1.5"))
		if atPod() {
			t.Error("a frame from 192.168.77.66 (no node, no gateway) claiming a local pod reached the pod")
		}
	})
	t.Run("a host that is no node claiming a peer's pod", func(t *testing.T) {
		sendUDP(t, atk, "192.168.77.1", 4789, vxlanFrame(18952, nodeMAC, "10.71.2.7", "10.244.1.5"))
		if atPod() {
			t.Error("a frame from 192.168.77.66 claiming a peer's pod reached the pod")
		}
	})
	if got := counter("ip", "overlay-dropped"); got != "6" {
		t.Errorf("counter overlay-dropped %s, want 6 (the attacker's frames)", got)
	}
	t.Run("the gateway's frames", func(t *testing.T) {
		if !ping(t, s.pod) {
			t.Error("no echo reply from 10.71.2.7 through the gateway")
		}
		if !arrives(func() { sendUDP(t, gw, "192.168.77.1", 4789, vxlanFrame(18952, nodeMAC, "10.71.2.7", "10.244.1.5")) }, atPod) {
			t.Error("the gateway's frame from a peer's pod did not reach the pod")
		}
	})
	t.Run("the gateway claiming a local pod", func(t *testing.T) {
		before := counter("ip", "rpfilter-dropped")
		sendUDP(t, gw, "192.168.77.1", 4789, vxlanFrame(18952, nodeMAC, "10.244.1.6", "10.244.1.5"))
		if atPod() {
			t.Error("a frame claiming a local pod (not routed back through liqo.vxlan) reached the pod")
		}
		if after := counter("ip", "rpfilter-dropped"); after == before {
			t.Errorf("counter rpfilter-dropped still %s", after)
		}
	})
	t.Run("another node's frame relayed to the gateway", func(t *testing.T) {
		if !arrives(func() { sendUDP(t, n2, "192.168.77.1", 4789, vxlanFrame(18952, nodeMAC, "10.244.2.9", "10.71.2.7")) }, atGateway) {
			t.Error("another node's pod's packet to a peer, sent through this node's liqo.vxlan, did not reach the gateway")
		}
	})
	t.Run("a pod sending the overlay's frames to another node", func(t *testing.T) {
		sendUDP(t, s.pod, "192.168.77.3", 4789, vxlanFrame(18952, nodeMAC, "10.71.2.7", "10.244.2.9"))
		if atN2() {
			t.Error("a pod's frame of the overlay's VNI, forwarded by its node, reached another node")
		}
		// Another VNI on the same port is not skein's (Calico's and Cilium's VXLAN use 4789).
		if !arrives(func() { sendUDP(t, s.pod, "192.168.77.3", 4789, vxlanFrame(1, nodeMAC, "10.244.1.5", "10.244.2.9")) }, atN2) {
			t.Error("a pod's frame of another VNI did not reach the other node")
		}
	})

	if sender, source, guarded, err := kernel.GuardDrops(fd); err != nil || !guarded || sender != 9 || source < 1 {
		t.Errorf("GuardDrops: %d from senders, %d by source, %v; want 9 (the attacker's 6, the pod's 3) and at least 1", sender, source, err)
	}
	// Idempotent: the chains and sets read back as written.
	gen := rulesetGeneration(t, fd)
	if err := kernel.EnsureHostSNAT(fd, hs); err != nil {
		t.Fatal(err)
	}
	if g := rulesetGeneration(t, fd); g != gen {
		t.Errorf("the same guard again committed %d transactions (the table does not read back as written):\n%s", g-gen,
			s.node.Run(t, "nft", "list", "table", "ip", kernel.NFTable))
	}
	// A guard alone (a node without an external address yet) still guards.
	if err := kernel.EnsureHostSNAT(fd, kernel.HostSNAT{Guard: guard}); err != nil {
		t.Fatal(err)
	}
	sendUDP(t, atk, "192.168.77.1", 4789, vxlanFrame(18952, nodeMAC, "10.244.1.6", "10.244.1.5"))
	if atPod() {
		t.Error("with the guard alone, a forged frame reached the pod")
	}

	for _, bad := range []kernel.OverlayGuard{
		{Device: "liqo.vxlan", Port: 4789, VNI: 18952},
		{Device: "liqo.vxlan", Port: 0, VNI: 18952, Nodes: guard.Nodes},
		{Device: "liqo.vxlan", Port: 4789, VNI: 1 << 24, Nodes: guard.Nodes},
		{Device: "", Port: 4789, VNI: 18952, Nodes: guard.Nodes},
		{Device: "a-name-longer-than-15", Port: 4789, VNI: 18952, Nodes: guard.Nodes},
		{Device: "liqo.vxlan", Port: 4789, VNI: 18952, Nodes: guard.Nodes, Gateways: []netip.Addr{netip.MustParseAddr("fd00::1")}},
		{Device: "liqo.vxlan", Port: 4789, VNI: 18952, Nodes: []netip.Addr{{}}},
	} {
		if err := kernel.EnsureHostSNAT(fd, kernel.HostSNAT{Guard: &bad}); err == nil {
			t.Errorf("guard %+v accepted", bad)
		}
	}
}
