package appliance_test

import (
	"log/slog"
	"net/netip"
	"os"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/conn/bindtest"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/gateway/config"
	"github.com/skein-net/skein/dataplane/overlaytest"
	"github.com/skein-net/skein/dataplane/packet"
	pt "github.com/skein-net/skein/dataplane/packet/packettest"
)

// dualPlan is memSite.plan for dual-stack clusters: both number their pods in 10.244.0.0/16
// and fd00:244::/48 (node n: 10.244.n.0/24 and fd00:244:0:n::/64); the peer's IPv6 pods are
// seen as seenPeer6.
func (s *memSite) dualPlan(t *testing.T, server bool, peer config.Key, seenPeer, seenPeer6 string, podOctet byte) *config.Gateway {
	t.Helper()
	g := s.plan(t, server, peer, seenPeer, podOctet, 100*time.Millisecond)
	// The same, with the IPv6 networks added.
	sp := config.Spec{Server: server, PrivateKey: s.key, PeerPublicKey: peer.Public(), HTTPListen: "off",
		ProbeInterval: 100 * time.Millisecond, ProbeFail: 3, PeerEndpoint: g.PeerEndpoint, ListenPort: g.ListenPort,
		Remote: []config.Remote{
			{Field: "pod", Real: netip.MustParsePrefix("10.244.0.0/16"), Seen: netip.MustParsePrefix(seenPeer)},
			{Field: "additionalPods[0]", Real: netip.MustParsePrefix("fd00:244::/48"), Seen: netip.MustParsePrefix(seenPeer6)},
		},
		Overlay: config.Overlay{Listen: netip.MustParseAddr("192.0.2.1"), IP: netip.MustParseAddr("10.80.0.1")},
		Nodes:   g.Dataplane.Nodes,
	}
	sp.Nodes[0].PodCIDRs = append(sp.Nodes[0].PodCIDRs, netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 0, 2, 0x44, 0, 0, 0, podOctet}), 64))
	out, err := config.Build(sp)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// send6 has the site's node send an IPv6 packet to its gateway over the overlay.
func (s *memSite) send6(pkt []byte) {
	s.overlay.Push(overlaytest.Frame(netv1alpha1.DefaultVNI, s.gwMAC, s.nodeMAC, packet.EtherTypeIPv6, pkt), s.nodeVTEP)
}

// receive6 waits for the IPv6 packet the site's gateway delivers to its node.
func (s *memSite) receive6(t *testing.T) packet.IPv6 {
	t.Helper()
	d, err := s.overlay.Receive(10 * time.Second)
	if err != nil {
		t.Fatalf("nothing reached the node: %v", err)
	}
	_, dst, _, inner, err := overlaytest.Decap(d.B)
	if err != nil || dst != s.nodeMAC || d.Addr != s.nodeVTEP {
		t.Fatalf("frame to %v (%v): %v; want the node's VTEP and MAC", d.Addr, dst, err)
	}
	if p := pt.Problem6(inner); p != "" {
		t.Errorf("packet at the node: %s", p)
	}
	ip, err := packet.ParseIPv6(inner)
	if err != nil {
		t.Fatal(err)
	}
	return ip
}

func echo6(typ uint8, src, dst string, hops uint8) []byte {
	return pt.IPv6{Src: src, Dst: dst, Next: packet.ProtoICMPv6, HopLimit: hops,
		Payload: pt.ICMPv6(src, dst, typ, 0, [4]byte{0, 7, 0, 1}, []byte("in memory, IPv6"))}.Build()
}

func wantAddrs6(t *testing.T, ip packet.IPv6, src, dst string, icmpType uint8) {
	t.Helper()
	s, d := netip.AddrFrom16(ip.Src()).String(), netip.AddrFrom16(ip.Dst()).String()
	if s != src || d != dst {
		t.Errorf("the node received %s -> %s, want %s -> %s", s, d, src, dst)
	}
	if b := []byte(ip); len(b) < 41 || b[6] != packet.ProtoICMPv6 || b[40] != icmpType {
		t.Errorf("the node received % x, want ICMPv6 type %d", b[:min(len(b), 48)], icmpType)
	}
}

// TestDualStackInMemory: two dual-stack clusters on the same IPv4 and IPv6 pod CIDRs, each
// gateway built by config.Build from both families. A's pod reaches B's over IPv6 through
// both prefix translations and back; the gateway answers ICMPv6 echo on its overlay IPv6
// address; a packet whose hop limit runs out at the
// gateway gets a Time Exceeded from the gateway's overlay IPv6 address, and one whose hop
// limit runs out at the peer's gateway a Time Exceeded from the peer's tunnel address, its
// quote translated back through both NATs; IPv4 still works.
func TestDualStackInMemory(t *testing.T) {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	binds := bindtest.NewChannelBinds()
	a, b := newMemSite(1), newMemSite(2)
	clientPlan := a.dualPlan(t, false, b.key, "10.71.0.0/16", "fd71::/48", 1)
	a.start(t, clientPlan, binds[0], log)
	server := b.start(t, b.dualPlan(t, true, a.key, "10.72.0.0/16", "fd72::/48", 2), binds[1], log)
	waitAnswered(t, server, time.Now(), 10*time.Second)

	// A's pod fd00:244:0:1::5 pings B's pod fd00:244:0:2::7 (fd71:0:0:2::7 to A).
	a.send6(echo6(packet.ICMPv6EchoRequest, "fd00:244:0:1::5", "fd71:0:0:2::7", 64))
	wantAddrs6(t, b.receive6(t), "fd72:0:0:1::5", "fd00:244:0:2::7", packet.ICMPv6EchoRequest)
	b.send6(echo6(packet.ICMPv6EchoReply, "fd00:244:0:2::7", "fd72:0:0:1::5", 64))
	wantAddrs6(t, a.receive6(t), "fd71:0:0:2::7", "fd00:244:0:1::5", packet.ICMPv6EchoReply)

	// The gateway's own overlay IPv6 address answers echo.
	own := clientPlan.Dataplane.OverlayIP6.String()
	a.send6(echo6(packet.ICMPv6EchoRequest, "fd00:244:0:1::5", own, 64))
	wantAddrs6(t, a.receive6(t), own, "fd00:244:0:1::5", packet.ICMPv6EchoReply)

	// Hop limit 1: the gateway would forward it with 0; Time Exceeded from its overlay address.
	a.send6(echo6(packet.ICMPv6EchoRequest, "fd00:244:0:1::5", "fd71:0:0:2::7", 1))
	wantAddrs6(t, a.receive6(t), own, "fd00:244:0:1::5", 3)

	// Hop limit 2: it runs out at B's gateway, whose Time Exceeded comes back through the
	// tunnel from B's tunnel IPv6 address, its quote translated by A's gateway back to what
	// A's pod sent (fd71:0:0:2::7), so that the pod's socket matches it.
	sent := echo6(packet.ICMPv6EchoRequest, "fd00:244:0:1::5", "fd71:0:0:2::7", 2)
	a.send6(sent)
	te := a.receive6(t)
	wantAddrs6(t, te, clientPlan.PeerTunnelIP6.String(), "fd00:244:0:1::5", 3)
	quote := []byte(te)[48:]
	if len(quote) < 40 || netip.AddrFrom16([16]byte(quote[8:24])).String() != "fd00:244:0:1::5" || netip.AddrFrom16([16]byte(quote[24:40])).String() != "fd71:0:0:2::7" {
		t.Errorf("Time Exceeded quotes % x, want the packet as A's pod sent it (fd00:244:0:1::5 -> fd71:0:0:2::7)", quote[:min(len(quote), 40)])
	}

	// IPv4 beside it.
	a.send(echo(packet.ICMPEcho, "10.244.1.5", "10.71.2.7"))
	wantAddrs(t, b.receive(t), "10.72.1.5", "10.244.2.7")
}
