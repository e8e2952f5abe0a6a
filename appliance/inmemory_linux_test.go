package appliance_test

import (
	"log/slog"
	"net/netip"
	"os"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/conn/bindtest"

	"github.com/skein-net/skein/appliance"
	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/gateway/config"
	"github.com/skein-net/skein/dataplane"
	"github.com/skein-net/skein/dataplane/overlay"
	"github.com/skein-net/skein/dataplane/overlaytest"
	"github.com/skein-net/skein/dataplane/packet"
	pt "github.com/skein-net/skein/dataplane/packet/packettest"
)

// memSite is one cluster of the in-memory test: its gateway's keys and overlay socket, and one
// node whose pods are 10.244.<n>.0/24 (both clusters number their pods in 10.244.0.0/16).
type memSite struct {
	key      config.Key
	overlay  *overlaytest.Conn
	nodeVTEP netip.AddrPort
	nodeMAC  packet.MAC
	gwMAC    packet.MAC
}

func newMemSite(n byte) *memSite {
	k, _ := config.GenerateKey()
	return &memSite{key: k, overlay: overlaytest.New(0), nodeVTEP: netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, 10 + n}), 4789),
		nodeMAC: packet.MAC{2, 0, 0, 0, n, 1}, gwMAC: overlay.GatewayMAC(netip.MustParseAddr("10.80.0.1"))}
}

// plan builds a gateway's configuration with config.Build, as the front-ends do: the server
// (cluster B) sees A's pods as seenPeer, the client (cluster A) sees B's as seenPeer.
func (s *memSite) plan(t *testing.T, server bool, peer config.Key, seenPeer string, podOctet byte, probe time.Duration) *config.Gateway {
	t.Helper()
	spec := config.Spec{Server: server, PrivateKey: s.key, PeerPublicKey: peer.Public(), HTTPListen: "off",
		ProbeInterval: probe, ProbeFail: 3,
		Remote:  []config.Remote{{Field: "pod", Real: netip.MustParsePrefix("10.244.0.0/16"), Seen: netip.MustParsePrefix(seenPeer)}},
		Overlay: config.Overlay{Listen: netip.MustParseAddr("192.0.2.1"), IP: netip.MustParseAddr("10.80.0.1")},
		Nodes: []dataplane.Node{{Name: "node", VTEP: s.nodeVTEP.Addr(), MAC: s.nodeMAC,
			PodCIDRs: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, podOctet, 0}), 24)}}}}
	if server {
		spec.ListenPort = netv1alpha1.DefaultPort
	} else {
		// wireguard-go's channel binds: the client reaches the server at port 1.
		spec.PeerEndpoint = netip.MustParseAddrPort("127.0.0.1:1")
	}
	g, err := config.Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func (s *memSite) start(t *testing.T, plan *config.Gateway, bind conn.Bind, log *slog.Logger) *appliance.Gateway {
	t.Helper()
	g, err := appliance.New(plan, appliance.Options{Log: log, Bind: bind,
		Overlay: func(netip.AddrPort) (dataplane.OverlayConn, error) { return s.overlay, nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return g
}

// send has the site's node send pkt to its gateway over the overlay.
func (s *memSite) send(pkt []byte) {
	s.overlay.Push(overlaytest.Frame(netv1alpha1.DefaultVNI, s.gwMAC, s.nodeMAC, packet.EtherTypeIPv4, pkt), s.nodeVTEP)
}

// receive waits for what the site's gateway delivers to its node and checks the frame.
func (s *memSite) receive(t *testing.T) packet.IPv4 {
	t.Helper()
	d, err := s.overlay.Receive(10 * time.Second)
	if err != nil {
		t.Fatalf("nothing reached the node: %v", err)
	}
	vni, dst, src, inner, err := overlaytest.Decap(d.B)
	if err != nil || vni != netv1alpha1.DefaultVNI || dst != s.nodeMAC || src != s.gwMAC || d.Addr != s.nodeVTEP {
		t.Fatalf("frame to %v (VNI %d, %v -> %v): %v; want the node's VTEP and MAC", d.Addr, vni, src, dst, err)
	}
	if p := pt.Problem(inner); p != "" {
		t.Errorf("packet at the node: %s", p)
	}
	ip, err := packet.ParseIPv4(inner)
	if err != nil {
		t.Fatal(err)
	}
	return ip
}

func echo(typ uint8, src, dst string) []byte {
	return pt.IPv4{Src: src, Dst: dst, Proto: packet.ProtoICMP, TTL: 64,
		Payload: pt.ICMP(typ, 0, [4]byte{0, 7, 0, 1}, []byte("in memory"))}.Build()
}

func wantAddrs(t *testing.T, ip packet.IPv4, src, dst string) {
	t.Helper()
	if s, d := netip.AddrFrom4(ip.Src()).String(), netip.AddrFrom4(ip.Dst()).String(); s != src || d != dst {
		t.Errorf("the node received %s -> %s, want %s -> %s", s, d, src, dst)
	}
}

// TestTwoGatewaysInMemory assembles two whole gateways in one process, on in-memory overlay
// sockets and wireguard-go's channel binds: no root, no ports. Both clusters use
// 10.244.0.0/16; A sees B's pods as 10.71.0.0/16, B sees A's as 10.72.0.0/16. A pod of each
// reaches the other, B is reconfigured live to see A as 10.73.0.0/16, then B's replica stops
// gracefully (its goodbye makes A reconnect at once) and a successor takes over.
func TestTwoGatewaysInMemory(t *testing.T) {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	binds := bindtest.NewChannelBinds()
	a, b := newMemSite(1), newMemSite(2)
	client := a.start(t, a.plan(t, false, b.key, "10.71.0.0/16", 1, time.Minute), binds[0], log)
	server := b.start(t, b.plan(t, true, a.key, "10.72.0.0/16", 2, 100*time.Millisecond), binds[1], log)
	waitAnswered(t, server, time.Now(), 10*time.Second)

	// A's pod 10.244.1.5 pings B's pod 10.244.2.7 (10.71.2.7 to A), and B's pod answers.
	a.send(echo(packet.ICMPEcho, "10.244.1.5", "10.71.2.7"))
	wantAddrs(t, b.receive(t), "10.72.1.5", "10.244.2.7")
	b.send(echo(packet.ICMPEchoReply, "10.244.2.7", "10.72.1.5"))
	wantAddrs(t, a.receive(t), "10.71.2.7", "10.244.1.5")

	// Reconfiguration: B now sees A's pods as 10.73.0.0/16; the session survives.
	if err := server.Apply(b.plan(t, true, a.key, "10.73.0.0/16", 2, 100*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	a.send(echo(packet.ICMPEcho, "10.244.1.5", "10.71.2.7"))
	wantAddrs(t, b.receive(t), "10.73.1.5", "10.244.2.7")
	if n := client.Reconnects(); n != 0 {
		t.Errorf("client reconnected %d times before any failover", n)
	}

	// Failover: the server replica stops gracefully and says goodbye; its successor (same key,
	// same address) takes over, and the client reconnects at once instead of waiting out
	// wireguard-go's 15 s. The client probes once a minute, so only the goodbye can explain a
	// prompt reconnect.
	server.Close()
	b.overlay = overlaytest.New(0)
	successorStart := time.Now()
	successor := b.start(t, b.plan(t, true, a.key, "10.73.0.0/16", 2, 100*time.Millisecond), binds[1], log)
	waitAnswered(t, successor, successorStart, 10*time.Second)
	if n := client.Reconnects(); n != 1 {
		t.Errorf("client reconnects %d, want 1 (after the goodbye)", n)
	}
	a.send(echo(packet.ICMPEcho, "10.244.1.5", "10.71.2.7"))
	wantAddrs(t, b.receive(t), "10.73.1.5", "10.244.2.7")
}
