package dataplane_test

import (
	"net/netip"
	"testing"

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
