package kernel_test

import (
	"net"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/skein-net/skein/dataplane/kernel"
	"github.com/skein-net/skein/dataplane/packet"
	pt "github.com/skein-net/skein/dataplane/packet/packettest"
	"github.com/skein-net/skein/internal/netnstest"
)

// sendRawUDP sends, from namespace ns, an IPv4/UDP datagram with the outer source address
// src (any address: a raw socket with IP_HDRINCL, which a pod has with CAP_NET_RAW, in the
// default capability set of containerd and CRI-O, and the Pod Security "baseline" level) to
// dst:port, three times.
func sendRawUDP(t *testing.T, ns *netnstest.NS, src, dst string, port uint16, payload []byte) {
	t.Helper()
	pkt := pt.IPv4{Src: src, Dst: dst, Proto: 17, Payload: pt.UDP(src, dst, 40000, port, payload, false)}.Build()
	to := &unix.SockaddrInet4{}
	copy(to.Addr[:], net.ParseIP(dst).To4())
	if err := ns.Do(func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW) // IP_HDRINCL implied
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		for range 3 {
			if err := unix.Sendto(fd, pkt, 0, to); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("raw send from %s (%s -> %s:%d): %v", ns.Name, src, dst, port, err)
	}
}

// guardSite is TestOverlayGuard's node with the guard on: a victim pod (10.244.1.5), a
// gateway on the underlay (192.168.77.2), another node (192.168.77.3), a host of the
// underlay that is no node (192.168.77.66), and an attacker pod on the node (10.244.3.5,
// behind its own veth, whose node side has the loose rp_filter distributions default to).
type guardSite struct {
	s        *site
	atkHost  *netnstest.NS
	atkPod   *netnstest.NS
	gw, n2   *netnstest.NS
	nodeMAC  packet.MAC
	atVictim func() bool
}

func newGuardSite(t *testing.T) *guardSite {
	requireNFTNAT(t)
	s := newSite(t)
	if _, err := kernel.Reconcile(s.k, siteDesired("192.168.77.2")); err != nil {
		t.Fatal(err)
	}
	gw := s.gateway(t, "ggw", "192.168.77.2")
	gw.Run(t, "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.vx.rp_filter=0")
	a := &guardSite{s: s, gw: gw}
	a.atkHost = s.underlayHost(t, "gatk", "192.168.77.66")
	n2 := s.underlayHost(t, "gn2", "192.168.77.3")
	a.n2 = n2
	s.node.Run(t, "ip", "route", "add", "10.244.2.0/24", "via", "192.168.77.3") // n2's pods
	n2.Run(t, "ip", "route", "add", "10.244.1.0/24", "via", "192.168.77.1")
	// The attacker pod: an ordinary pod of this node (its own veth, as most CNIs give).
	a.atkPod = netnstest.New(t, "gpod")
	netnstest.Veth(t, s.node, a.atkPod, "pod1", "10.244.3.1/24", "10.244.3.5/24")
	a.atkPod.Run(t, "ip", "route", "add", "default", "via", "10.244.3.1")
	// Loose reverse-path filtering, systemd's default (50-default.conf: rp_filter=2), on the
	// pod's veth; 0 (the kernel's default) lets even more through.
	s.node.Run(t, "sysctl", "-qw", "net.ipv4.conf.pod1.rp_filter=2")

	l, err := s.k.Link("liqo.vxlan")
	if err != nil || l == nil {
		t.Fatalf("liqo.vxlan: %v", err)
	}
	a.nodeMAC = l.MAC
	a.atVictim = listenUDP(t, s.pod, "10.244.1.5", 7777)

	guard := &kernel.OverlayGuard{Device: "liqo.vxlan", Port: 4789, VNI: 18952,
		Nodes:    []netip.Addr{netip.MustParseAddr("192.168.77.1"), netip.MustParseAddr("192.168.77.3")},
		Gateways: []netip.Addr{netip.MustParseAddr("192.168.77.2")}}
	hs := kernel.HostSNAT{ExternalIP: extIP, PodCIDRs: []netip.Prefix{podCIDR}, Remote: []netip.Prefix{netip.MustParsePrefix("10.71.0.0/16")},
		Relay: "liqo.vxlan", Guard: guard}
	if err := kernel.EnsureHostSNAT(nsFd(t, s.node), hs); err != nil {
		t.Fatal(err)
	}
	return a
}

// TestOverlayGuardForgedNodeAddress (the fourth attack review: high): a pod may write any
// source address (a raw socket; CAP_NET_RAW is a default capability), so the guard cannot
// take a frame's outer source on trust. A pod of the node sends the overlay's frame to its own
// node as another node (192.168.77.3) and as the gateway (192.168.77.2), its inner packet
// claiming a peer's pod: the guard's strict reverse-path check on the overlay's frames drops
// both (a node's or a gateway's address is not routed back through the pod's interface), and
// the frame with the pod's own address is dropped as no node's.
func TestOverlayGuardForgedNodeAddress(t *testing.T) {
	a := newGuardSite(t)
	frame := vxlanFrame(18952, a.nodeMAC, "10.71.2.7", "10.244.1.5")
	// The guard holds against the pod's own address (the test sees the guard at work) ...
	sendRawUDP(t, a.atkPod, "10.244.3.5", "192.168.77.1", 4789, frame)
	if a.atVictim() {
		t.Fatal("the pod's frame with its own address reached the victim: the guard is not on, the test proves nothing")
	}
	// ... but not against another node's.
	sendRawUDP(t, a.atkPod, "192.168.77.3", "192.168.77.1", 4789, frame)
	if a.atVictim() {
		t.Error("a pod's overlay frame with another node's address (192.168.77.3) as outer source passed its own node's guard: " +
			"its inner packet, claiming the peer's pod 10.71.2.7, reached the node's pod 10.244.1.5")
	}
	// The gateway's address works the same.
	sendRawUDP(t, a.atkPod, "192.168.77.2", "192.168.77.1", 4789, frame)
	if a.atVictim() {
		t.Error("a pod's overlay frame with the gateway's address (192.168.77.2) as outer source passed its own node's guard")
	}
}

// sendRaw6 sends IPv6 packets (whole, with their fixed header) from namespace ns to dst.
func sendRaw6(t *testing.T, ns *netnstest.NS, dst string, pkts ...[]byte) {
	t.Helper()
	to := &unix.SockaddrInet6{Addr: netip.MustParseAddr(dst).As16()}
	if err := ns.Do(func() error {
		fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_RAW, unix.IPPROTO_RAW) // IPV6_HDRINCL implied
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		for _, p := range pkts {
			if err := unix.Sendto(fd, p, 0, to); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("raw send from %s to %s: %v", ns.Name, dst, err)
	}
}

// TestOverlayGuardIPv6Fragments (the fourth attack review: medium): over an IPv6 underlay,
// IPv6 is reassembled after the input hook unless conntrack is used in the namespace. A host
// that is no node sends the overlay's frame in two fragments, the first holding the UDP header
// alone, so the VNI cannot be read from it: the guard's ip6 table uses conntrack (a ct
// expression), the kernel reassembles before the chains, and the frame is dropped as it is
// when sent whole.
func TestOverlayGuardIPv6Fragments(t *testing.T) {
	requireNFTNAT(t)
	s := newSite(t)
	atk := netnstest.New(t, "gatk6")
	s.node.Run(t, "ip", "link", "add", "v-gatk6", "type", "veth", "peer", "name", "eth0", "netns", atk.Name)
	s.node.Run(t, "ip", "addr", "add", "fd00:77::1/64", "dev", "v-gatk6", "nodad")
	s.node.Run(t, "ip", "link", "set", "v-gatk6", "up")
	atk.Run(t, "ip", "addr", "add", "fd00:77::66/64", "dev", "eth0", "nodad")
	atk.Run(t, "ip", "link", "set", "eth0", "up")
	d := siteDesired("fd00:77::2")
	d.Overlay.Local = netip.MustParseAddr("fd00:77::1")
	d.Overlay.MTU = 1430
	if _, err := kernel.Reconcile(s.k, d); err != nil {
		t.Fatal(err)
	}
	l, err := s.k.Link("liqo.vxlan")
	if err != nil || l == nil {
		t.Fatalf("liqo.vxlan: %v", err)
	}
	atPod := listenUDP(t, s.pod, "10.244.1.5", 7777)
	guard := &kernel.OverlayGuard{Device: "liqo.vxlan", Port: 4789, VNI: 18952,
		Nodes: []netip.Addr{netip.MustParseAddr("fd00:77::1")}, Gateways: []netip.Addr{netip.MustParseAddr("fd00:77::2")}}
	hs := kernel.HostSNAT{ExternalIP: extIP, PodCIDRs: []netip.Prefix{podCIDR}, Remote: []netip.Prefix{netip.MustParsePrefix("10.71.0.0/16")},
		Relay: "liqo.vxlan", Guard: guard}
	if err := kernel.EnsureHostSNAT(nsFd(t, s.node), hs); err != nil {
		t.Fatal(err)
	}

	udp := pt.UDP("fd00:77::66", "fd00:77::1", 40000, 4789, vxlanFrame(18952, l.MAC, "10.71.2.7", "10.244.1.5"), false)
	whole := pt.IPv6{Src: "fd00:77::66", Dst: "fd00:77::1", Next: 17, Payload: udp}.Build()
	for range 3 {
		sendRaw6(t, atk, "fd00:77::1", whole)
	}
	if atPod() {
		t.Fatal("the whole frame from fd00:77::66 (no node) reached the pod: the guard is not on, the test proves nothing")
	}
	for id := range uint32(3) {
		first := pt.IPv6{Src: "fd00:77::66", Dst: "fd00:77::1", Ext: [][]byte{pt.FragmentHeader(0, true, 0x5eed0+id)}, Proto: 17, Payload: udp[:8]}.Build()
		rest := pt.IPv6{Src: "fd00:77::66", Dst: "fd00:77::1", Ext: [][]byte{pt.FragmentHeader(8, false, 0x5eed0+id)}, Proto: 17, Payload: udp[8:]}.Build()
		sendRaw6(t, atk, "fd00:77::1", first, rest)
	}
	if atPod() {
		t.Error("the same frame from fd00:77::66 in two fragments (the first holding the UDP header alone) passed the guard: " +
			"its inner packet, claiming the peer's pod 10.71.2.7, reached the node's pod 10.244.1.5")
	}
}

// TestOverlayGuardBroadcast (the fourth attack review: low): the IPv4 reverse-path filter
// exempts what is routed back out of liqo.vxlan (relayed frames on their way to the gateway);
// the overlay subnet's broadcast address (10.80.255.255) is routed on liqo.vxlan too, and a
// packet to it, delivered to the node's own sockets claiming a local pod's address, must not
// be exempt: only unicast is.
func TestOverlayGuardBroadcast(t *testing.T) {
	a := newGuardSite(t)
	received := listenUDP(t, a.s.node, "", 7778) // a host-network service
	frame := func(dstMAC packet.MAC, dst string) []byte {
		b := vxlanFrame(18952, dstMAC, "10.244.1.6", dst)
		// vxlanFrame's datagram goes to port 7777: make it 7778 (UDP checksum 0: none).
		udp := b[8+14+20:]
		udp[2], udp[3] = 7778>>8, 7778&0xff
		udp[6], udp[7] = 0, 0
		return b
	}
	// Unicast to the node's overlay address: the filter drops the local pod's address.
	sendUDP(t, a.gw, "192.168.77.1", 4789, frame(a.nodeMAC, "10.80.0.11"))
	if received() {
		t.Fatal("the gateway's frame claiming a local pod reached the node's socket by unicast: the filter is not on, the test proves nothing")
	}
	sendUDP(t, a.gw, "192.168.77.1", 4789, frame(packet.MAC{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, "10.80.255.255"))
	if received() {
		t.Error("a frame to the overlay's broadcast address 10.80.255.255 claiming the local pod 10.244.1.6 passed the reverse-path filter and reached the node's socket")
	}
}
