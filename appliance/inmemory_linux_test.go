package appliance_test

import (
	"context"
	"flag"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
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
	"github.com/skein-net/skein/internal/apitest"
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

// TestGoodbyeForgeries: only the peer gateway's own, fresh goodbye makes a client reconnect.
// A node of A's cluster sends one over the overlay from the server's tunnel address: dropped
// as a link-local source. Through the tunnel, from the server's tunnel address, one keyed
// wrongly and one two minutes old: delivered, but refused. The genuine one: a reconnect; the
// same bytes again (a replay): nothing more.
func TestGoodbyeForgeries(t *testing.T) {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	binds := bindtest.NewChannelBinds()
	a, b := newMemSite(1), newMemSite(2)
	clientPlan := a.plan(t, false, b.key, "10.71.0.0/16", 1, time.Minute)
	client := a.start(t, clientPlan, binds[0], log)
	serverPlan := b.plan(t, true, a.key, "10.72.0.0/16", 2, 100*time.Millisecond)
	server := b.start(t, serverPlan, binds[1], log)
	waitAnswered(t, server, time.Now(), 10*time.Second)

	from, to := serverPlan.TunnelIP.As4(), clientPlan.TunnelIP.As4()
	goodbye := func(key *packet.GoodbyeKey, at time.Time) []byte {
		pkt := make([]byte, packet.GoodbyeLen)
		return pkt[:packet.PutGoodbye(pkt, from, to, key, at.UnixNano(), [8]byte{7})]
	}
	key, err := appliance.GoodbyeKey(b.key, a.key.Public())
	if err != nil {
		t.Fatal(err)
	}
	if k2, _ := appliance.GoodbyeKey(a.key, b.key.Public()); *k2 != *key {
		t.Fatal("the two sides derive different goodbye keys")
	}
	counter := func(d dataplane.Direction, k dataplane.Counter) uint64 { return client.Dataplane().Counters()[d][k] }
	settle := func(what string, local uint64) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for counter(dataplane.FromTunnel, dataplane.Local) <= local {
			if time.Now().After(deadline) {
				t.Fatalf("%s never reached the client", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(300 * time.Millisecond) // a reconnect would have started by now
		if n := client.Reconnects(); n != 0 {
			t.Fatalf("%s made the client reconnect", what)
		}
	}

	a.send(pt.IPv4{Src: "169.254.100.1", Dst: "169.254.100.2", Proto: packet.ProtoICMP, TTL: 64,
		Payload: pt.ICMP(packet.ICMPEcho, 0, [4]byte{}, packet.GoodbyeMagic)}.Build())
	deadline := time.Now().Add(5 * time.Second)
	for counter(dataplane.ToTunnel, dataplane.DropLinkLocalSource) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("a goodbye from a node over the overlay was not dropped as a link-local source")
		}
		time.Sleep(10 * time.Millisecond)
	}

	wrong := packet.GoodbyeKey{1}
	local := counter(dataplane.FromTunnel, dataplane.Local)
	apitest.Must(t, server.Dataplane().Inject(goodbye(&wrong, time.Now())))
	settle("a goodbye with the wrong key", local)
	local = counter(dataplane.FromTunnel, dataplane.Local)
	apitest.Must(t, server.Dataplane().Inject(goodbye(key, time.Now().Add(-2*time.Minute))))
	settle("a goodbye two minutes old", local)

	// Through the tunnel from a source outside what the client allows the server: wireguard-go
	// drops it, and the drop is counted.
	apitest.Must(t, server.Dataplane().Inject(echo(packet.ICMPEcho, "10.9.9.9", clientPlan.TunnelIP.String())))
	deadline = time.Now().Add(5 * time.Second)
	for client.WireGuardDrops("disallowed_source") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("wireguard-go's drop of a disallowed source was not counted")
		}
		time.Sleep(10 * time.Millisecond)
	}

	genuine := goodbye(key, time.Now())
	apitest.Must(t, server.Dataplane().Inject(genuine))
	deadline = time.Now().Add(5 * time.Second)
	for client.Reconnects() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the genuine goodbye did not make the client reconnect")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(time.Second) // the reconnect ends when a ping is answered
	apitest.Must(t, server.Dataplane().Inject(genuine))
	time.Sleep(500 * time.Millisecond)
	if n := client.Reconnects(); n != 1 {
		t.Errorf("a replayed goodbye: %d reconnects, want 1", n)
	}
}

// cuttableBind counts the handshake initiations a gateway sends and can cut the link.
type cuttableBind struct {
	conn.Bind
	cut   atomic.Bool
	inits atomic.Int64
}

func (c *cuttableBind) Send(bufs [][]byte, ep conn.Endpoint) error {
	for _, b := range bufs {
		if len(b) == 148 && b[0] == 1 { // a WireGuard handshake initiation
			c.inits.Add(1)
		}
	}
	if c.cut.Load() {
		// What a send to a peer whose network is gone returns.
		return &net.OpError{Op: "write", Net: "udp", Err: syscall.EHOSTUNREACH}
	}
	return c.Bind.Send(bufs, ep)
}

// outageLength is TestOutageHandshakePace's cut; longer ones measure what an operator would
// see (go test ./appliance -run TestOutageHandshakePace -v -args -outage 60s).
var outageLength = flag.Duration("outage", 20*time.Second, "TestOutageHandshakePace: how long the path is cut")

// countingHandler counts the records at each level that pass to the handler under it.
type countingHandler struct {
	slog.Handler
	warn, errs *atomic.Int64
}

func (h countingHandler) Handle(ctx context.Context, r slog.Record) error {
	switch {
	case r.Level >= slog.LevelError:
		h.errs.Add(1)
	case r.Level >= slog.LevelWarn:
		h.warn.Add(1)
	}
	return h.Handler.Handle(ctx, r)
}

func (h countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return countingHandler{h.Handler.WithAttrs(as), h.warn, h.errs}
}

func (h countingHandler) WithGroup(g string) slog.Handler {
	return countingHandler{h.Handler.WithGroup(g), h.warn, h.errs}
}

// TestOutageHandshakePace: while the path to the server is cut, the client's reconnects
// (which reset wireguard-go's own limit of one handshake per 5 s) keep to that pace after a
// burst of resetBurst, instead of a handshake per lost probe, and the client's log stays a
// few lines (wireguard-go's errors at most once per kind per 10 s); after the cut the
// connection comes back.
func TestOutageHandshakePace(t *testing.T) {
	var warns, errs atomic.Int64
	log := slog.New(countingHandler{slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}), &warns, &errs})
	binds := bindtest.NewChannelBinds()
	a, b := newMemSite(1), newMemSite(2)
	cb := &cuttableBind{Bind: binds[0]}
	sb := &cuttableBind{Bind: binds[1]}
	client := a.start(t, a.plan(t, false, b.key, "10.71.0.0/16", 1, 100*time.Millisecond), cb, log)
	server := b.start(t, b.plan(t, true, a.key, "10.72.0.0/16", 2, 100*time.Millisecond), sb, log)
	waitAnswered(t, server, time.Now(), 10*time.Second)

	outage := *outageLength
	cb.cut.Store(true)
	sb.cut.Store(true)
	before := cb.inits.Load()
	warns0, errs0 := warns.Load(), errs.Load()
	time.Sleep(outage)
	sent := cb.inits.Load() - before
	warned, errored := warns.Load()-warns0, errs.Load()-errs0
	cb.cut.Store(false)
	sb.cut.Store(false)
	// wireguard-go alone: one per 5 s; the reconnects may add their burst and as many again.
	limit := int64(5 + 2*outage/(5*time.Second) + 2)
	t.Logf("%v cut: the client sent %d handshake initiations (%d reconnects); wireguard-go's own pace is %d", outage, sent, client.Reconnects(), outage/(5*time.Second))
	if sent > limit {
		t.Errorf("%d handshake initiations in %v, want at most %d", sent, outage, limit)
	}
	// Both gateways log to log. Each kind of wireguard-go error once per 10 s per gateway (two
	// kinds at most on each side during a cut: the failed send and the retried handshake),
	// and the reconnects' own warnings.
	logLimit := int64(2 * 2 * (outage/(10*time.Second) + 1))
	t.Logf("%v cut: %d error and %d warning lines logged by both gateways", outage, errored, warned)
	if errored > logLimit || warned > logLimit {
		t.Errorf("%v cut: %d error and %d warning lines, want at most %d of each", outage, errored, warned, logLimit)
	}
	waitAnswered(t, client, time.Now(), 20*time.Second)
}
