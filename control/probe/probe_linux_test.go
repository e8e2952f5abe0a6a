package probe_test

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skein-net/skein/control/probe"
	"github.com/skein-net/skein/internal/netnstest"
)

// path is client -- router -- server, the router's link to the server narrower (mtu) than the
// client's, as a pod's path into a tunnel is; a skein-probe server runs in the server
// namespace.
type path struct {
	client, router, server *netnstest.NS
	serverIP               netip.Addr
}

func newPath(t *testing.T, mtu int) *path {
	netnstest.RequireRoot(t)
	p := &path{client: netnstest.New(t, "pc"), router: netnstest.New(t, "pr"), server: netnstest.New(t, "ps"),
		serverIP: netip.MustParseAddr("10.99.2.2")}
	netnstest.Veth(t, p.client, p.router, "eth-c", "10.99.1.1/24", "10.99.1.2/24")
	netnstest.Veth(t, p.router, p.server, "eth-s", "10.99.2.1/24", "10.99.2.2/24")
	for _, ns := range []*netnstest.NS{p.router, p.server} {
		ns.Run(t, "ip", "link", "set", "eth-s", "mtu", itoa(mtu))
	}
	p.router.Run(t, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	p.client.Run(t, "ip", "route", "add", "default", "via", "10.99.1.2")
	p.server.Run(t, "ip", "route", "add", "default", "via", "10.99.2.1")
	p.serve(t, "4")
	return p
}

// serve runs a skein-probe server in the server namespace on TCP 7070 and UDP 7071 of family
// ("4" or "6").
func (p *path) serve(t *testing.T, family string) {
	var ln net.Listener
	var pc net.PacketConn
	if err := p.server.Do(func() (err error) {
		if ln, err = net.Listen("tcp"+family, ":7070"); err != nil {
			return err
		}
		pc, err = net.ListenPacket("udp"+family, ":7071")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	go func() { _ = probe.Serve("server-pod", ln, pc) }()
	t.Cleanup(func() { ln.Close() })
}

func itoa(n int) string { return strconv.Itoa(n) }

// check runs probe.Check from the client namespace.
func (p *path) check(t *testing.T, o probe.Options) probe.Cell {
	t.Helper()
	var c probe.Cell
	if err := p.client.Do(func() error {
		c = probe.Check(context.Background(), p.serverIP, o)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCheckThroughARouter(t *testing.T) {
	p := newPath(t, 1340)
	c := p.check(t, probe.Options{MTU: 1340, Route: true, Timeout: time.Second})
	for name, r := range map[string]*probe.Result{"tcp": c.TCP, "udp": c.UDP, "icmp": c.ICMP, "pmtu": c.PMTU} {
		if r == nil || !r.OK {
			t.Errorf("%s: %+v, want OK", name, r)
		}
	}
	if c.TCP.Seen != "10.99.1.1" || c.UDP.Seen != "10.99.1.1" || c.TCP.Server != "server-pod" {
		t.Errorf("answers %+v %+v: want server-pod seeing 10.99.1.1", c.TCP, c.UDP)
	}
	if c.ICMP.Detail != "3/3 replies" {
		t.Errorf("icmp: %+v", c.ICMP)
	}
	if !strings.Contains(c.PMTU.Detail, "path MTU 1340") {
		t.Errorf("pmtu: %+v, want the path MTU learned as 1340", c.PMTU)
	}
	if c.Route == nil || c.Route.Device != "eth-c" || c.Route.Table != "main" {
		t.Errorf("route: %+v, want eth-c in main", c.Route)
	}

	// A tunnel MTU set below the path's: the bigger packet gets through, which says the MTU
	// is wrong on one side.
	c = p.check(t, probe.Options{MTU: 1300, Pings: -1, Timeout: time.Second})
	if c.PMTU.OK || !strings.Contains(c.PMTU.Error, "got through") || c.ICMP != nil {
		t.Errorf("mtu 1300 on a 1340 path: %+v (icmp %+v)", c.PMTU, c.ICMP)
	}
}

// TestCheckNarrowerPath: a path narrower than the tunnel MTU (a gateway that lowered its
// tunnel MTU to a narrow WAN answers frag-needed with it) fails the check with the path MTU
// learned, so skeinctl can name it.
func TestCheckNarrowerPath(t *testing.T) {
	p := newPath(t, 1312)
	c := p.check(t, probe.Options{MTU: 1340, Pings: -1, Timeout: time.Second})
	if c.PMTU == nil || c.PMTU.OK || c.PMTU.PathMTU != 1312 || !strings.Contains(c.PMTU.Error, "got frag-needed: the path carries 1312 bytes") {
		t.Errorf("mtu 1340 on a 1312 path: %+v, want a failure with PathMTU 1312", c.PMTU)
	}
	if c.PMTU = p.check(t, probe.Options{MTU: 1312, Pings: -1, Timeout: time.Second}).PMTU; c.PMTU == nil || !c.PMTU.OK || c.PMTU.PathMTU != 0 {
		t.Errorf("mtu 1312 on a 1312 path: %+v, want OK", c.PMTU)
	}
}

func TestCheckBlackHole(t *testing.T) {
	p := newPath(t, 1340)
	// The router drops its frag-needed errors and every ICMP echo: a path MTU black hole
	// and a firewall.
	p.router.Run(t, "nft", "add table ip t; add chain ip t out { type filter hook output priority 0; }; add rule ip t out icmp type destination-unreachable drop; add chain ip t pass { type filter hook forward priority 0; }; add rule ip t pass icmp type echo-request drop")
	c := p.check(t, probe.Options{MTU: 1340, Timeout: 500 * time.Millisecond})
	if !c.TCP.OK || !c.UDP.OK {
		t.Fatalf("tcp %+v udp %+v: want OK", c.TCP, c.UDP)
	}
	if c.PMTU.OK || !strings.Contains(c.PMTU.Error, "black hole") {
		t.Errorf("pmtu: %+v, want a black hole", c.PMTU)
	}
	if c.ICMP.OK || c.ICMP.Detail != "0/3 replies" {
		t.Errorf("icmp: %+v, want no reply", c.ICMP)
	}
}

func TestCheckNothingThere(t *testing.T) {
	p := newPath(t, 1500)
	// An address on the server's link with no host: every check fails, quickly, with a reason.
	var miss probe.Cell
	start := time.Now()
	if err := p.client.Do(func() error {
		miss = probe.Check(context.Background(), netip.MustParseAddr("10.99.2.77"), probe.Options{Timeout: 300 * time.Millisecond, Pings: 1, MTU: 1400})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]*probe.Result{"tcp": miss.TCP, "udp": miss.UDP, "icmp": miss.ICMP, "pmtu": miss.PMTU} {
		if r.OK || r.Error == "" {
			t.Errorf("%s: %+v, want a failure with a reason", name, r)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %s with 300 ms timeouts", d)
	}
}

func TestParseAnswer(t *testing.T) {
	for s, want := range map[string]string{
		"pod-a saw 10.1.2.3:4567":                 "pod-a 10.1.2.3",
		"pod-a saw 10.1.2.3:4567 call":            "pod-a 10.1.2.3",
		"pod-a saw [::ffff:10.1.2.3]:4567 pmtu\n": "pod-a 10.1.2.3",
		"pod-a said 10.1.2.3:4567":                "",
		"pod-a saw 10.1.2.3":                      "",
		"":                                        "",
	} {
		host, seen, ok := probe.ParseAnswer(s)
		got := ""
		if ok {
			got = host + " " + seen.String()
		}
		if got != want {
			t.Errorf("ParseAnswer(%q) = %q, want %q", s, got, want)
		}
	}
	if got := probe.EchoText(append([]byte("pmtu"), make([]byte, 2000)...)); got != "pmtu" {
		t.Errorf("EchoText of a path-MTU datagram: %q", got)
	}
	if got := probe.EchoText([]byte(strings.Repeat("x", 100))); len(got) != 64 {
		t.Errorf("EchoText kept %d bytes, want 64", len(got))
	}
}

// newPath6 is newPath over IPv6 (addresses without duplicate address detection, usable at once).
func newPath6(t *testing.T, mtu int) *path {
	netnstest.RequireRoot(t)
	p := &path{client: netnstest.New(t, "pc"), router: netnstest.New(t, "pr"), server: netnstest.New(t, "ps"),
		serverIP: netip.MustParseAddr("fd00:99:2::2")}
	link := func(a, b *netnstest.NS, name, addrA, addrB string) {
		a.Run(t, "ip", "link", "add", name, "type", "veth", "peer", "name", name, "netns", b.Name)
		for _, side := range []struct {
			ns   *netnstest.NS
			addr string
		}{{a, addrA}, {b, addrB}} {
			side.ns.Run(t, "sysctl", "-qw", "net.ipv6.conf."+name+".accept_dad=0")
			side.ns.Run(t, "ip", "addr", "add", side.addr, "dev", name, "nodad")
			side.ns.Run(t, "ip", "link", "set", name, "up")
		}
	}
	link(p.client, p.router, "eth-c", "fd00:99:1::1/64", "fd00:99:1::2/64")
	link(p.router, p.server, "eth-s", "fd00:99:2::1/64", "fd00:99:2::2/64")
	for _, ns := range []*netnstest.NS{p.router, p.server} {
		ns.Run(t, "ip", "link", "set", "eth-s", "mtu", itoa(mtu))
	}
	p.router.Run(t, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
	p.client.Run(t, "ip", "-6", "route", "add", "default", "via", "fd00:99:1::2")
	p.server.Run(t, "ip", "-6", "route", "add", "default", "via", "fd00:99:2::1")
	// Neighbour discovery first (the link-local addresses and the router's entries): until
	// it settles the first SYN can be lost, and a check with a 1 s timeout with it.
	for try := 0; ; try++ {
		if _, err := p.client.Try("ping", "-6", "-c", "1", "-W", "1", p.serverIP.String()); err == nil {
			break
		} else if try == 4 {
			t.Fatalf("the server does not answer ping over IPv6: %v", err)
		}
	}
	p.serve(t, "6")
	return p
}

// TestCheckThroughARouter6: every check over IPv6: ICMPv6 echo, and the path MTU learned from
// the router's Packet Too Big.
func TestCheckThroughARouter6(t *testing.T) {
	p := newPath6(t, 1340)
	c := p.check(t, probe.Options{MTU: 1340, Route: true, Timeout: time.Second})
	for name, r := range map[string]*probe.Result{"tcp": c.TCP, "udp": c.UDP, "icmp": c.ICMP, "pmtu": c.PMTU} {
		if r == nil || !r.OK {
			t.Errorf("%s: %+v, want OK", name, r)
		}
	}
	if c.TCP.Seen != "fd00:99:1::1" || c.UDP.Seen != "fd00:99:1::1" {
		t.Errorf("answers %+v %+v: want server-pod seeing fd00:99:1::1", c.TCP, c.UDP)
	}
	if c.ICMP.Detail != "3/3 replies" {
		t.Errorf("icmpv6: %+v", c.ICMP)
	}
	if !strings.Contains(c.PMTU.Detail, "path MTU 1340") {
		t.Errorf("pmtu: %+v, want the path MTU learned as 1340", c.PMTU)
	}
	if c.Route == nil || c.Route.Device != "eth-c" {
		t.Errorf("route: %+v, want eth-c", c.Route)
	}
	c = p.check(t, probe.Options{MTU: 1300, Pings: -1, Timeout: time.Second})
	if c.PMTU.OK || !strings.Contains(c.PMTU.Error, "got through") {
		t.Errorf("mtu 1300 on a 1340 path: %+v", c.PMTU)
	}
	// Below IPv6's minimum MTU there is nothing to check.
	c = p.check(t, probe.Options{MTU: 1200, Pings: -1, Timeout: time.Second})
	if c.PMTU.OK || !strings.Contains(c.PMTU.Error, "out of range") {
		t.Errorf("mtu 1200 over IPv6: %+v, want refused", c.PMTU)
	}
}

// TestCheckBlackHole6: a router that drops its Packet Too Big and forwards no echo request.
func TestCheckBlackHole6(t *testing.T) {
	p := newPath6(t, 1340)
	p.router.Run(t, "nft", "add table ip6 t; add chain ip6 t out { type filter hook output priority 0; }; add rule ip6 t out icmpv6 type packet-too-big drop; add chain ip6 t pass { type filter hook forward priority 0; }; add rule ip6 t pass icmpv6 type echo-request drop")
	c := p.check(t, probe.Options{MTU: 1340, Timeout: 500 * time.Millisecond})
	if !c.TCP.OK || !c.UDP.OK {
		t.Fatalf("tcp %+v udp %+v: want OK", c.TCP, c.UDP)
	}
	if c.PMTU.OK || !strings.Contains(c.PMTU.Error, "black hole") {
		t.Errorf("pmtu: %+v, want a black hole", c.PMTU)
	}
	if c.ICMP.OK || c.ICMP.Detail != "0/3 replies" {
		t.Errorf("icmpv6: %+v, want no reply", c.ICMP)
	}
}
