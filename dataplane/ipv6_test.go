package dataplane_test

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/skein-net/skein/dataplane"
	"github.com/skein-net/skein/dataplane/nat"
	"github.com/skein-net/skein/dataplane/packet"
	pt "github.com/skein-net/skein/dataplane/packet/packettest"
)

// dualStackConfig is baseConfig with IPv6 pod CIDRs beside the IPv4 ones: the peer's pods
// fd00:244::/56 (the same CIDR as here) are seen here as fd71::/56.
func dualStackConfig() dataplane.Config {
	cfg := baseConfig()
	cfg.NAT = append(cfg.NAT, nat.Pair{From: pfx("fd71::/56"), To: pfx("fd00:244::/56")})
	cfg.Nodes[0].PodCIDRs = append(cfg.Nodes[0].PodCIDRs, pfx("fd00:244:0:1::/64"))
	cfg.Nodes[1].PodCIDRs = append(cfg.Nodes[1].PodCIDRs, pfx("fd00:244:0:2::/64"))
	cfg.Nodes[1].Pods = append(cfg.Nodes[1].Pods, addr("fd00:244:0:1::77"))
	return cfg
}

func ip6(b []byte) string { return netip.AddrFrom16([16]byte(b)).String() }

func syn6(s, d string, hopLimit uint8) []byte {
	return pt.IPv6{Src: s, Dst: d, Next: 6, HopLimit: hopLimit,
		Payload: pt.TCP(s, d, 40000, 80, packet.TCPFlagSYN, pt.MSSOption(1440), nil)}.Build()
}

func TestToTunnel6(t *testing.T) {
	dp, c := newDP(t, dualStackConfig())
	syn := syn6("fd00:244:0:1::5", "fd71:0:0:2::7", 64)
	c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv6, syn), from1)
	pkts := readPackets(t, dp)
	if len(pkts) != 1 {
		t.Fatalf("got %d packets, want 1", len(pkts))
	}
	p := pkts[0]
	if s, d := ip6(p[8:24]), ip6(p[24:40]); s != "fd00:244:0:1::5" || d != "fd00:244:0:2::7" {
		t.Errorf("into the tunnel %s -> %s, want fd00:244:0:1::5 -> fd00:244:0:2::7", s, d)
	}
	if p[7] != 63 {
		t.Errorf("hop limit %d, want 63", p[7])
	}
	if mss, _ := packet.TCP(p[40:]).MSS(); int(mss) != dataplane.DefaultTunnelMTU-60 {
		t.Errorf("MSS %d, want %d", mss, dataplane.DefaultTunnelMTU-60)
	}
	if pr := pt.Problem6(p); pr != "" {
		t.Error(pr)
	}
	cn := dp.Counters()
	if cn.Get(dataplane.ToTunnel, dataplane.Forwarded) != 1 || cn.Get(dataplane.ToTunnel, dataplane.NATTranslated) != 1 ||
		cn.Get(dataplane.ToTunnel, dataplane.MSSClamped) != 1 || cn.Drops(dataplane.ToTunnel) != 0 {
		t.Errorf("counters %v", cn[dataplane.ToTunnel])
	}
}

func TestFromTunnel6(t *testing.T) {
	dp, c := newDP(t, dualStackConfig())
	reply := pt.IPv6{Src: "fd00:244:0:2::7", Dst: "fd00:244:0:1::5", Next: 17,
		Payload: pt.UDP("fd00:244:0:2::7", "fd00:244:0:1::5", 53, 5353, []byte("answer"), false)}.Build()
	toPodOnNode2 := pt.IPv6{Src: "fd00:244:0:9::9", Dst: "fd00:244:0:1::77", Next: 58,
		Payload: pt.ICMPv6("fd00:244:0:9::9", "fd00:244:0:1::77", packet.ICMPv6EchoRequest, 0, [4]byte{0, 1, 0, 1}, []byte("ping"))}.Build()
	write(t, dp, reply, toPodOnNode2)
	sent := c.TakeSent()
	if len(sent) != 2 {
		t.Fatalf("sent %d datagrams, want 2", len(sent))
	}
	p := decapSent(t, sent[0], node1, node1MAC)
	if s, d := ip6(p[8:24]), ip6(p[24:40]); s != "fd71:0:0:2::7" || d != "fd00:244:0:1::5" {
		t.Errorf("out of the tunnel %s -> %s, want fd71:0:0:2::7 -> fd00:244:0:1::5", s, d)
	}
	if pr := pt.Problem6(p); pr != "" {
		t.Error(pr)
	}
	// The Ethernet type says IPv6, or the node's kernel would read it as IPv4.
	vx, _ := packet.ParseVXLAN(sent[0].B)
	if et := packet.Ethernet(vx.Payload()).EtherType(); et != packet.EtherTypeIPv6 {
		t.Errorf("EtherType %#04x, want %#04x", et, packet.EtherTypeIPv6)
	}
	q := decapSent(t, sent[1], node2, node2MAC) // a pod /128 wins over its node's CIDR
	if s := ip6(q[8:24]); s != "fd71:0:0:9::9" {
		t.Errorf("source %s, want fd71:0:0:9::9", s)
	}
	if pr := pt.Problem6(q); pr != "" {
		t.Error(pr)
	}
	if cn := dp.Counters(); cn.Get(dataplane.FromTunnel, dataplane.Forwarded) != 2 || cn.Drops(dataplane.FromTunnel) != 0 {
		t.Errorf("counters %v", cn[dataplane.FromTunnel])
	}
}

// TestDrops6: what the IPv6 path refuses, each counted where it is refused.
func TestDrops6(t *testing.T) {
	big := pt.IPv6{Src: "fd00:244:0:1::5", Dst: "fd71:0:0:2::7", Next: 17,
		Payload: pt.UDP("fd00:244:0:1::5", "fd71:0:0:2::7", 1, 2, make([]byte, dataplane.DefaultTunnelMTU), false)}.Build()
	routed := pt.IPv6{Src: "fd00:244:0:1::5", Dst: "fd71:0:0:2::7", Next: packet.ProtoRouting, Proto: 17,
		Ext: [][]byte{pt.RoutingHeader(1, "fd71:0:0:2::8")}, Payload: pt.UDP("fd00:244:0:1::5", "fd71:0:0:2::8", 1, 2, nil, false)}.Build()
	for _, tc := range []struct {
		name string
		pkt  []byte
		want dataplane.Counter
	}{
		{"spoofed source (node2's pods, sent by node1)", syn6("fd00:244:0:2::5", "fd71:0:0:2::7", 64), dataplane.DropSpoofedSource},
		{"link-local source", syn6("fe80::1", "fd71:0:0:2::7", 64), dataplane.DropLinkLocalSource},
		{"no route", syn6("fd00:244:0:1::5", "2001:db8::1", 64), dataplane.DropNoRoute},
		{"hop limit 1", syn6("fd00:244:0:1::5", "fd71:0:0:2::7", 1), dataplane.DropTTL},
		{"larger than the tunnel MTU", big, dataplane.DropTooBig},
		{"routing header with segments left", routed, dataplane.DropNATUnsupported},
		{"payload length past the packet", syn6("fd00:244:0:1::5", "fd71:0:0:2::7", 64)[:60], dataplane.DropMalformedIP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dp, c := newDP(t, dualStackConfig())
			c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv6, tc.pkt), from1)
			// One IPv4 packet after it, so that Read returns.
			c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv4, pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 17,
				Payload: pt.UDP("10.244.1.5", "10.71.2.7", 1, 2, nil, false)}.Build()), from1)
			if pkts := readPackets(t, dp); len(pkts) != 1 || pkts[0][0]>>4 != 4 {
				t.Fatalf("got %d packets into the tunnel, want only the IPv4 one", len(pkts))
			}
			cn := dp.Counters()
			if cn.Get(dataplane.ToTunnel, tc.want) != 1 || cn.Drops(dataplane.ToTunnel) != 1 {
				t.Errorf("counters %v, want one %v", cn[dataplane.ToTunnel], tc.want)
			}
		})
	}
	t.Run("out of the tunnel: hop limit, too big, no route", func(t *testing.T) {
		dp, _ := newDP(t, dualStackConfig())
		write(t, dp,
			syn6("fd00:244:0:2::7", "fd00:244:0:1::5", 1),
			pt.IPv6{Src: "fd00:244:0:2::7", Dst: "fd00:244:0:1::5", Next: 17,
				Payload: pt.UDP("fd00:244:0:2::7", "fd00:244:0:1::5", 1, 2, make([]byte, dataplane.DefaultOverlayMTU), false)}.Build(),
			syn6("fd00:244:0:2::7", "fd00:244:0:7::1", 64))
		cn := dp.Counters()
		if cn.Get(dataplane.FromTunnel, dataplane.DropTTL) != 1 || cn.Get(dataplane.FromTunnel, dataplane.DropTooBig) != 1 ||
			cn.Get(dataplane.FromTunnel, dataplane.DropNoRoute) != 1 || cn.Get(dataplane.FromTunnel, dataplane.Forwarded) != 0 {
			t.Errorf("counters %v", cn[dataplane.FromTunnel])
		}
	})
}

// icmp6Config is dualStackConfig with the gateway's IPv6 addresses, the sources of its ICMPv6
// errors: fd80::1 on the overlay, fd99::1 in the tunnel.
func icmp6Config() dataplane.Config {
	cfg := dualStackConfig()
	cfg.OverlayIP6, cfg.TunnelIP6 = addr("fd80::1"), addr("fd99::1")
	return cfg
}

// checkICMPv6Error checks an ICMPv6 error the gateway built: addresses, hop limit, checksum,
// type and code, and the quote (orig cut to fit 1280 bytes). It returns the message.
func checkICMPv6Error(t *testing.T, pkt []byte, src, dst string, typ, code uint8, orig []byte) packet.ICMPv6 {
	t.Helper()
	if pr := pt.Problem6(pkt); pr != "" {
		t.Errorf("ICMPv6 error: %s", pr)
	}
	ip := packet.IPv6(pkt)
	if ip.SrcAddr().String() != src || ip.DstAddr().String() != dst || ip.NextHeader() != packet.ProtoICMPv6 || ip.HopLimit() != 64 {
		t.Fatalf("ICMPv6 error %s -> %s next header %d hop limit %d, want %s -> %s ICMPv6, 64", ip.SrcAddr(), ip.DstAddr(), ip.NextHeader(), ip.HopLimit(), src, dst)
	}
	if len(pkt) > 1280 {
		t.Errorf("ICMPv6 error of %d bytes, more than the IPv6 minimum MTU", len(pkt))
	}
	m := packet.ICMPv6(ip.Payload())
	if m.Type() != typ || m.Code() != code {
		t.Errorf("ICMPv6 type %d code %d, want %d/%d", m.Type(), m.Code(), typ, code)
	}
	// gVisor's header package, an implementation independent of ours, computes the same
	// checksum.
	if want := header.ICMPv6Checksum(header.ICMPv6ChecksumParams{Header: header.ICMPv6(m[:header.ICMPv6MinimumSize]),
		Src: tcpip.AddrFrom16(ip.Src()), Dst: tcpip.AddrFrom16(ip.Dst()),
		PayloadCsum: checksum.Checksum(m[header.ICMPv6MinimumSize:], 0), PayloadLen: len(m) - header.ICMPv6MinimumSize}); m.Checksum() != want {
		t.Errorf("ICMPv6 checksum %#04x, gVisor computes %#04x", m.Checksum(), want)
	}
	if q := m.Payload(); !bytes.Equal(q, orig[:min(len(orig), 1280-48)]) {
		t.Errorf("quote of %d bytes differs from the original packet (%d bytes)", len(q), len(orig))
	}
	return m
}

// TestICMPv6Errors: a packet whose hop limit runs out, or too big for the next link, is answered
// with an ICMPv6 Time Exceeded or Packet Too Big (RFC 4443), in both directions: to the local
// pod over the overlay from the gateway's overlay address, back into the tunnel from its tunnel
// address.
func TestICMPv6Errors(t *testing.T) {
	dp, c := newDP(t, icmp6Config())
	expiring := syn6("fd00:244:0:1::5", "fd71:0:0:2::7", 1)
	big := pt.IPv6{Src: "fd00:244:0:1::5", Dst: "fd71:0:0:2::7", Next: 17,
		Payload: pt.UDP("fd00:244:0:1::5", "fd71:0:0:2::7", 5, 6, make([]byte, 1400), false)}.Build()
	for _, p := range [][]byte{expiring, big} {
		c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv6, p), from1)
	}
	c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv4, pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 17,
		Payload: pt.UDP("10.244.1.5", "10.71.2.7", 1, 2, nil, false)}.Build()), from1)
	if got := readPackets(t, dp); len(got) != 1 || got[0][0]>>4 != 4 {
		t.Fatalf("into the tunnel %d packets, want only the IPv4 one", len(got))
	}
	sent := c.TakeSent()
	if len(sent) != 2 {
		t.Fatalf("sent %d ICMPv6 errors to the overlay, want 2", len(sent))
	}
	for _, d := range sent {
		vx, _ := packet.ParseVXLAN(d.B)
		if et := packet.Ethernet(vx.Payload()).EtherType(); et != packet.EtherTypeIPv6 {
			t.Errorf("ICMPv6 error sent with EtherType %#04x", et)
		}
	}
	checkICMPv6Error(t, decapSent(t, sent[0], node1, node1MAC), "fd80::1", "fd00:244:0:1::5", packet.ICMPv6TimeExceeded, 0, expiring)
	m := checkICMPv6Error(t, decapSent(t, sent[1], node1, node1MAC), "fd80::1", "fd00:244:0:1::5", packet.ICMPv6PacketTooBig, 0, big)
	if m.MTU() != dataplane.DefaultTunnelMTU {
		t.Errorf("packet too big with MTU %d, want the tunnel's %d", m.MTU(), dataplane.DefaultTunnelMTU)
	}
	cn := dp.Counters()
	if cn.Get(dataplane.ToTunnel, dataplane.DropTTL) != 1 || cn.Get(dataplane.ToTunnel, dataplane.DropTooBig) != 1 || cn.Get(dataplane.ToTunnel, dataplane.ICMPSent) != 2 {
		t.Errorf("counters %v", cn[dataplane.ToTunnel])
	}

	// Out of the tunnel: the errors go back into the tunnel, from the tunnel address, to the
	// peer's source as it sent it (before the source is translated).
	expiringIn := syn6("fd00:244:0:2::7", "fd00:244:0:1::5", 1)
	bigIn := pt.IPv6{Src: "fd00:244:0:2::7", Dst: "fd00:244:0:1::5", Next: 17,
		Payload: pt.UDP("fd00:244:0:2::7", "fd00:244:0:1::5", 5, 6, make([]byte, dataplane.DefaultOverlayMTU), false)}.Build()
	write(t, dp, expiringIn, bigIn)
	var back [][]byte
	for len(back) < 2 {
		back = append(back, readPackets(t, dp)...)
	}
	checkICMPv6Error(t, back[0], "fd99::1", "fd00:244:0:2::7", packet.ICMPv6TimeExceeded, 0, expiringIn)
	m = checkICMPv6Error(t, back[1], "fd99::1", "fd00:244:0:2::7", packet.ICMPv6PacketTooBig, 0, bigIn)
	if m.MTU() != dataplane.DefaultOverlayMTU {
		t.Errorf("packet too big with MTU %d, want the overlay's %d", m.MTU(), dataplane.DefaultOverlayMTU)
	}
	if len(c.TakeSent()) != 0 {
		t.Errorf("a dropped packet reached the overlay")
	}
	if cn := dp.Counters(); cn.Get(dataplane.FromTunnel, dataplane.ICMPSent) != 2 {
		t.Errorf("counters %v", cn[dataplane.FromTunnel])
	}
}

// TestICMPv6ErrorsNotSent: no error about an ICMPv6 error or a redirect, from the unspecified
// address, or without the address to send it from; echo requests are answered (they are not
// errors); the rate limit holds.
func TestICMPv6ErrorsNotSent(t *testing.T) {
	const peer, pod = "fd00:244:0:2::7", "fd00:244:0:1::5"
	icmp6 := func(src string, typ uint8) []byte {
		return pt.IPv6{Src: src, Dst: pod, Next: 58, HopLimit: 1,
			Payload: pt.ICMPv6(src, pod, typ, 0, [4]byte{}, make([]byte, 48))}.Build()
	}
	for _, tc := range []struct {
		name string
		mut  func(*dataplane.Config)
		pkt  []byte
		want uint64 // errors sent
	}{
		{"about an echo request", nil, icmp6(peer, packet.ICMPv6EchoRequest), 1},
		{"about a destination unreachable", nil, icmp6(peer, packet.ICMPv6DestUnreach), 0},
		{"about a packet too big", nil, icmp6(peer, packet.ICMPv6PacketTooBig), 0},
		{"about a redirect", nil, icmp6(peer, 137), 0},
		{"from the unspecified address", nil, syn6("::", pod, 1), 0},
		{"from a multicast address", nil, syn6("ff02::1", pod, 1), 0},
		{"without a tunnel address", func(c *dataplane.Config) { c.TunnelIP6 = netip.Addr{} }, syn6(peer, pod, 1), 0},
		{"rate limited to none", func(c *dataplane.Config) { c.ICMPRate = -1 }, syn6(peer, pod, 1), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := icmp6Config()
			if tc.mut != nil {
				tc.mut(&cfg)
			}
			dp, _ := newDP(t, cfg)
			write(t, dp, tc.pkt) // Write returns once the packet is handled
			cn := dp.Counters()
			if cn.Get(dataplane.FromTunnel, dataplane.DropTTL) != 1 || cn.Get(dataplane.FromTunnel, dataplane.ICMPSent) != tc.want {
				t.Errorf("counters %v, want 1 hop-limit drop and %d errors sent", cn[dataplane.FromTunnel], tc.want)
			}
			if tc.want > 0 {
				if back := readPackets(t, dp); len(back) != 1 {
					t.Errorf("%d packets into the tunnel, want the error", len(back))
				}
			}
		})
	}
	t.Run("rate limit", func(t *testing.T) {
		cfg := icmp6Config()
		cfg.ICMPRate, cfg.ICMPBurst = 1, 2
		dp, _ := newDP(t, cfg)
		for range 5 {
			write(t, dp, syn6(peer, pod, 1))
		}
		cn := dp.Counters()
		if s, l := cn.Get(dataplane.FromTunnel, dataplane.ICMPSent), cn.Get(dataplane.FromTunnel, dataplane.ICMPRateLimited); s != 2 || l != 3 {
			t.Errorf("ICMPv6 errors sent %d, rate-limited %d; want 2 and 3 (burst 2)", s, l)
		}
	})
}

// TestLocalAndInject6: the gateway's own IPv6 addresses. From the overlay, a pod's echo to the
// overlay IPv6 address goes to the local handler. From the tunnel, only the peer gateway's
// tunnel address (routed back into the tunnel) reaches this gateway's tunnel address: a
// source as the peer's pods number themselves (this site's pods' own addresses, when the
// sites overlap) and the overlay address are not delivered, or the netstack's reply would go
// to a local pod. The netstack's IPv6 replies are injected into the tunnel or to the node.
func TestLocalAndInject6(t *testing.T) {
	cfg := icmp6Config()
	cfg.Local = append(cfg.Local, cfg.OverlayIP6, cfg.TunnelIP6)
	cfg.Remote = append(cfg.Remote, pfx("fd99::2/128"))
	dp, c := newDP(t, cfg)
	h := &handler{}
	dp.SetLocalHandler(h)
	ping := pt.IPv6{Src: "fd00:244:0:1::5", Dst: "fd80::1", Next: 58, Payload: pt.ICMPv6("fd00:244:0:1::5", "fd80::1", 128, 0, [4]byte{0, 1, 0, 1}, []byte("hi"))}.Build()
	c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv6, ping), from1)
	good := syn6("fd00:244:0:1::5", "fd71:0:0:2::7", 64)
	c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv6, good), from1)
	if got := readPackets(t, dp); len(got) != 1 {
		t.Fatalf("%d packets into the tunnel, want 1 (the ping is local)", len(got))
	}
	probe := pt.IPv6{Src: "fd99::2", Dst: "fd99::1", Next: 58, Payload: pt.ICMPv6("fd99::2", "fd99::1", 128, 0, [4]byte{0, 2, 0, 1}, nil)}.Build()
	fromPeerPod := pt.IPv6{Src: "fd00:244:0:2::7", Dst: "fd99::1", Next: 58, Payload: pt.ICMPv6("fd00:244:0:2::7", "fd99::1", 128, 0, [4]byte{0, 3, 0, 1}, nil)}.Build()
	toOverlayAddr := pt.IPv6{Src: "fd99::2", Dst: "fd80::1", Next: 58, Payload: pt.ICMPv6("fd99::2", "fd80::1", 128, 0, [4]byte{0, 4, 0, 1}, nil)}.Build()
	write(t, dp, probe, fromPeerPod, toOverlayAddr)
	h.mu.Lock()
	got := h.got
	h.mu.Unlock()
	if len(got) != 2 || !bytes.Equal(got[0], ping) || !bytes.Equal(got[1], probe) {
		t.Errorf("local handler got %d packets, want the pod's ping and the peer gateway's probe", len(got))
	}
	if cn := dp.Counters(); cn.Get(dataplane.FromTunnel, dataplane.DropNoRoute) != 2 {
		n := cn.Get(dataplane.FromTunnel, dataplane.DropNoRoute)
		t.Errorf("%d dropped from the tunnel as unroutable, want 2", n)
	}

	reply := pt.IPv6{Src: "fd99::1", Dst: "fd99::2", Next: 58, Payload: pt.ICMPv6("fd99::1", "fd99::2", 129, 0, [4]byte{0, 2, 0, 1}, nil)}.Build()
	if err := dp.Inject(reply); err != nil {
		t.Fatal(err)
	}
	if got := readPackets(t, dp); len(got) != 1 || !bytes.Equal(got[0], reply) {
		t.Fatalf("injected IPv6 packet not read back into the tunnel unchanged: %d packets", len(got))
	}
	pong := pt.IPv6{Src: "fd80::1", Dst: "fd00:244:0:1::5", Next: 58, Payload: pt.ICMPv6("fd80::1", "fd00:244:0:1::5", 129, 0, [4]byte{0, 1, 0, 1}, []byte("hi"))}.Build()
	if err := dp.Inject(pong); err != nil {
		t.Fatal(err)
	}
	sent := c.TakeSent()
	if len(sent) != 1 || !bytes.Equal(decapSent(t, sent[0], node1, node1MAC), pong) {
		t.Fatal("injected IPv6 reply to a local pod not sent to node1")
	}
	if vx, _ := packet.ParseVXLAN(sent[0].B); packet.Ethernet(vx.Payload()).EtherType() != packet.EtherTypeIPv6 {
		t.Error("injected IPv6 reply sent with another EtherType")
	}
	for _, bad := range []struct {
		pkt  []byte
		want string
	}{
		{[]byte{0x60, 2, 3}, "inject"},
		{pt.IPv6{Src: "fd80::1", Dst: "fd09::9", Next: 58, Payload: make([]byte, 8)}.Build(), "no route"},
		{pt.IPv6{Src: "fd80::1", Dst: "fd99::1", Next: 58, Payload: make([]byte, 8)}.Build(), "own address"},
		{pt.IPv6{Src: "fd99::1", Dst: "fd99::2", Next: 17, Payload: make([]byte, 2000)}.Build(), "tunnel MTU"},
	} {
		if err := dp.Inject(bad.pkt); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Inject: %v, want an error containing %q", err, bad.want)
		}
	}
}
