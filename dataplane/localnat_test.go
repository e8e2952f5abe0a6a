package dataplane_test

import (
	"testing"

	"github.com/skein-net/skein/dataplane"
	"github.com/skein-net/skein/dataplane/nat"
	"github.com/skein-net/skein/dataplane/packet"
	pt "github.com/skein-net/skein/dataplane/packet/packettest"
)

// localNATConfig is cluster A's gateway presenting its own pods (10.244.0.0/16) to the peer as
// 10.99.0.0/16, while it still sees the peer's pods (10.244.0.0/16 over there too) as
// 10.71.0.0/16: the peer needs no NAT of its own, as a stock WireGuard peer on the same subnet.
func localNATConfig() dataplane.Config {
	cfg := baseConfig()
	cfg.LocalNAT = []nat.Pair{{From: pfx("10.244.0.0/16"), To: pfx("10.99.0.0/16")}}
	return cfg
}

func addrs(p []byte) (src, dst string) { return ip4(p[12:16]), ip4(p[16:20]) }

func TestLocalNAT(t *testing.T) {
	t.Run("into the tunnel: source presented, destination remapped", func(t *testing.T) {
		dp, c := newDP(t, localNATConfig())
		syn := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 6, DF: true, TTL: 64,
			Payload: pt.TCP("10.244.1.5", "10.71.2.7", 40000, 80, packet.TCPFlagSYN, pt.MSSOption(1460), nil)}.Build()
		c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv4, syn), from1)
		pkts := readPackets(t, dp)
		if len(pkts) != 1 {
			t.Fatalf("got %d packets, want 1", len(pkts))
		}
		if s, d := addrs(pkts[0]); s != "10.99.1.5" || d != "10.244.2.7" {
			t.Errorf("into the tunnel %s -> %s, want 10.99.1.5 -> 10.244.2.7", s, d)
		}
		checkSums(t, "packet into the tunnel", pkts[0])
		cn := dp.Counters()
		if cn.Get(dataplane.ToTunnel, dataplane.NATTranslated) != 1 || cn.Get(dataplane.ToTunnel, dataplane.Forwarded) != 1 {
			t.Errorf("counters %v", cn[dataplane.ToTunnel])
		}
	})

	t.Run("out of the tunnel: presented destinations routed to their nodes", func(t *testing.T) {
		dp, c := newDP(t, localNATConfig())
		toNode1 := pt.IPv4{Src: "10.244.2.7", Dst: "10.99.1.5", Proto: 17, Payload: pt.UDP("10.244.2.7", "10.99.1.5", 1, 2, []byte("x"), true)}.Build()
		toPodOnNode2 := pt.IPv4{Src: "10.244.2.7", Dst: "10.99.1.77", Proto: 17, Payload: pt.UDP("10.244.2.7", "10.99.1.77", 1, 2, []byte("y"), true)}.Build()
		write(t, dp, toNode1, toPodOnNode2)
		sent := c.TakeSent()
		if len(sent) != 2 {
			t.Fatalf("sent %d datagrams, want 2", len(sent))
		}
		p := decapSent(t, sent[0], node1, node1MAC)
		if s, d := addrs(p); s != "10.71.2.7" || d != "10.244.1.5" {
			t.Errorf("to node1 %s -> %s, want 10.71.2.7 -> 10.244.1.5", s, d)
		}
		checkSums(t, "packet to node1", p)
		q := decapSent(t, sent[1], node2, node2MAC)
		if _, d := addrs(q); d != "10.244.1.77" {
			t.Errorf("to node2: destination %s, want 10.244.1.77", d)
		}
		checkSums(t, "packet to node2", q)
		if cn := dp.Counters(); cn.Get(dataplane.FromTunnel, dataplane.NATTranslated) != 2 {
			t.Errorf("counters %v", cn[dataplane.FromTunnel])
		}
	})

	t.Run("out of the tunnel: real local addresses are not reachable", func(t *testing.T) {
		dp, c := newDP(t, localNATConfig())
		direct := pt.IPv4{Src: "10.244.2.7", Dst: "10.244.1.5", Proto: 17, Payload: pt.UDP("10.244.2.7", "10.244.1.5", 1, 2, nil, false)}.Build()
		// The gateway's own tunnel address is not presented under another prefix: it still
		// answers (the probes).
		h := &handler{}
		dp.SetLocalHandler(h)
		probe := pt.IPv4{Src: "169.254.100.2", Dst: "169.254.100.1", Proto: 1, Payload: pt.ICMP(8, 0, [4]byte{0, 1, 0, 1}, nil)}.Build()
		write(t, dp, direct, probe)
		if sent := c.TakeSent(); len(sent) != 0 {
			t.Fatalf("a packet to a real local address was sent to a node")
		}
		cn := dp.Counters()
		if cn.Get(dataplane.FromTunnel, dataplane.DropNoRoute) != 1 || cn.Get(dataplane.FromTunnel, dataplane.Local) != 1 {
			t.Errorf("counters %v", cn[dataplane.FromTunnel])
		}
	})

	t.Run("ICMP errors: quotes translated both ways", func(t *testing.T) {
		dp, c := newDP(t, localNATConfig())
		// The peer's pod answers a UDP packet A's pod sent (as the peer saw it: 10.99.1.5 ->
		// 10.244.2.7) with port unreachable.
		quotedIn := pt.IPv4{Src: "10.99.1.5", Dst: "10.244.2.7", Proto: 17, TTL: 63, Payload: pt.UDP("10.99.1.5", "10.244.2.7", 5000, 53, []byte("q"), true)}.Build()
		errIn := pt.IPv4{Src: "10.244.2.7", Dst: "10.99.1.5", Proto: 1, Payload: pt.ICMP(3, 3, [4]byte{}, quotedIn)}.Build()
		write(t, dp, errIn)
		sent := c.TakeSent()
		if len(sent) != 1 {
			t.Fatalf("sent %d datagrams, want the ICMP error", len(sent))
		}
		p := decapSent(t, sent[0], node1, node1MAC)
		if s, d := addrs(p); s != "10.71.2.7" || d != "10.244.1.5" {
			t.Errorf("ICMP error %s -> %s, want 10.71.2.7 -> 10.244.1.5", s, d)
		}
		quote := packet.ICMPv4(packet.IPv4(p).Payload()).Payload()
		if s, d := addrs(quote); s != "10.244.1.5" || d != "10.71.2.7" {
			t.Errorf("quoted %s -> %s, want 10.244.1.5 -> 10.71.2.7 (the packet as A's pod sent it)", s, d)
		}
		checkSums(t, "ICMP error to the pod", p)

		// A's pod answers a packet from the peer (10.71.2.7 -> 10.244.1.5 here) with port
		// unreachable; the peer must see it about 10.244.2.7 -> 10.99.1.5.
		quotedOut := pt.IPv4{Src: "10.71.2.7", Dst: "10.244.1.5", Proto: 17, TTL: 62, Payload: pt.UDP("10.71.2.7", "10.244.1.5", 53, 5000, []byte("r"), true)}.Build()
		errOut := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 1, TTL: 64, Payload: pt.ICMP(3, 3, [4]byte{}, quotedOut)}.Build()
		c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv4, errOut), from1)
		pkts := readPackets(t, dp)
		if len(pkts) != 1 {
			t.Fatalf("got %d packets into the tunnel, want 1", len(pkts))
		}
		if s, d := addrs(pkts[0]); s != "10.99.1.5" || d != "10.244.2.7" {
			t.Errorf("ICMP error into the tunnel %s -> %s, want 10.99.1.5 -> 10.244.2.7", s, d)
		}
		quote = packet.ICMPv4(packet.IPv4(pkts[0]).Payload()).Payload()
		if s, d := addrs(quote); s != "10.244.2.7" || d != "10.99.1.5" {
			t.Errorf("quoted %s -> %s, want 10.244.2.7 -> 10.99.1.5 (the packet as the peer sent it)", s, d)
		}
		checkSums(t, "ICMP error into the tunnel", pkts[0])
	})

	t.Run("a local source outside every pair never crosses", func(t *testing.T) {
		cfg := localNATConfig()
		cfg.Nodes[0].PodCIDRs = append(cfg.Nodes[0].PodCIDRs, pfx("10.250.0.0/24"))
		dp, c := newDP(t, cfg)
		stray := pt.IPv4{Src: "10.250.0.9", Dst: "10.71.2.7", Proto: 17, Payload: pt.UDP("10.250.0.9", "10.71.2.7", 1, 2, nil, false)}.Build()
		good := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 17, Payload: pt.UDP("10.244.1.5", "10.71.2.7", 1, 2, nil, false)}.Build()
		c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv4, stray), from1)
		c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv4, good), from1)
		pkts := readPackets(t, dp)
		if len(pkts) != 1 {
			t.Fatalf("got %d packets into the tunnel, want only the one from 10.244.1.5", len(pkts))
		}
		if s, _ := addrs(pkts[0]); s != "10.99.1.5" {
			t.Errorf("source %s, want 10.99.1.5", s)
		}
		cn := dp.Counters()
		if cn.Get(dataplane.ToTunnel, dataplane.DropNATUnmatched) != 1 || cn.Get(dataplane.ToTunnel, dataplane.NATUnmatched) != 1 {
			t.Errorf("counters %v", cn[dataplane.ToTunnel])
		}
	})

	t.Run("overlapping local pairs are refused", func(t *testing.T) {
		cfg := localNATConfig()
		cfg.LocalNAT = append(cfg.LocalNAT, nat.Pair{From: pfx("10.244.1.0/24"), To: pfx("10.98.1.0/24")})
		if err := dataplane.Validate(cfg); err == nil {
			t.Error("Validate accepted overlapping local NAT pairs")
		}
	})
}

// TestNATTranslatedCounts checks that translations are counted where they happen, per packet
// as it leaves: none at all without a remap, however the packets arrive (superpackets
// included), and one per segment with one.
func TestNATTranslatedCounts(t *testing.T) {
	data := make([]byte, 30000)
	nseg := uint64((len(data) + 1299) / 1300)
	noRemap := func() dataplane.Config {
		cfg := baseConfig()
		cfg.NAT = nil
		cfg.Remote = append(cfg.Remote, pfx("10.71.0.0/16"))
		return cfg
	}
	identity := func() dataplane.Config {
		cfg := baseConfig()
		cfg.NAT = []nat.Pair{{From: pfx("10.71.0.0/16"), To: pfx("10.71.0.0/16")}}
		return cfg
	}
	for _, tc := range []struct {
		name       string
		cfg        func() dataplane.Config
		translated bool
	}{
		{"no remap", noRemap, false},
		{"a peer network mapped onto itself", identity, false},
		{"remap", baseConfig, true},
		{"local remap alone", func() dataplane.Config {
			cfg := noRemap()
			cfg.LocalNAT = localNATConfig().LocalNAT
			return cfg
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dp, c := newDP(t, tc.cfg())
			small := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 17, Payload: pt.UDP("10.244.1.5", "10.71.2.7", 1, 2, []byte("x"), false)}.Build()
			c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv4, superpacket(data)), from1)
			c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv4, small), from1)
			var got uint64
			for got < nseg+1 {
				got += uint64(len(readPackets(t, dp)))
			}
			dst := "10.244.1.5"
			if tc.cfg().LocalNAT != nil {
				dst = "10.99.1.5"
			}
			back := pt.IPv4{Src: "10.71.2.7", Dst: dst, Proto: 17, Payload: pt.UDP("10.71.2.7", dst, 2, 1, []byte("y"), false)}.Build()
			if tc.translated && tc.cfg().NAT != nil {
				back = pt.IPv4{Src: "10.244.2.7", Dst: dst, Proto: 17, Payload: pt.UDP("10.244.2.7", dst, 2, 1, []byte("y"), false)}.Build()
			}
			write(t, dp, back, back)
			cn := dp.Counters()
			fwd, trans := cn.Get(dataplane.ToTunnel, dataplane.Forwarded), cn.Get(dataplane.ToTunnel, dataplane.NATTranslated)
			if fwd != nseg+1 || cn.Get(dataplane.ToTunnel, dataplane.Segmented) != 1 {
				t.Fatalf("to the tunnel: forwarded %d (want %d segments and 1 packet), counters %v", fwd, nseg+1, cn[dataplane.ToTunnel])
			}
			fwdBack, transBack := cn.Get(dataplane.FromTunnel, dataplane.Forwarded), cn.Get(dataplane.FromTunnel, dataplane.NATTranslated)
			if fwdBack != 2 {
				t.Fatalf("from the tunnel: forwarded %d, want 2; counters %v", fwdBack, cn[dataplane.FromTunnel])
			}
			want, wantBack := uint64(0), uint64(0)
			if tc.translated {
				want, wantBack = fwd, fwdBack
			}
			if trans != want || transBack != wantBack {
				t.Errorf("translated %d to the tunnel and %d from it, want %d and %d", trans, transBack, want, wantBack)
			}
			if tc.cfg().NAT == nil && tc.cfg().LocalNAT == nil {
				if u := cn.Get(dataplane.ToTunnel, dataplane.NATUnmatched); u != fwd {
					t.Errorf("nat-unmatched %d to the tunnel, want one per packet forwarded (%d)", u, fwd)
				}
			}
		})
	}
}

// TestFromTunnelToTheGateway: from the tunnel only the peer gateway reaches this gateway's own
// addresses, from its tunnel address to this one's (the probes); a host behind the peer, which
// may carry a local pod's address when the sites overlap, would have the netstack answer a
// local pod. And the peer's tunnel address reaches no node, which could not answer it.
func TestFromTunnelToTheGateway(t *testing.T) {
	for _, cfg := range []dataplane.Config{baseConfig(), localNATConfig()} {
		dp, c := newDP(t, cfg)
		h := &handler{}
		dp.SetLocalHandler(h)
		icmp := func(src, dst string) []byte {
			return pt.IPv4{Src: src, Dst: dst, Proto: 1, TTL: 64, Payload: pt.ICMP(8, 0, [4]byte{0, 7, 0, 1}, nil)}.Build()
		}
		podDst := "10.244.1.5"
		if cfg.LocalNAT != nil {
			podDst = "10.99.1.5"
		}
		write(t, dp,
			icmp("10.244.1.5", "169.254.100.1"),    // a host behind the peer, numbered like a local pod
			icmp("10.244.1.5", "10.80.0.1"),        // ... to the gateway's overlay address
			icmp("169.254.100.2", "10.80.0.1"),     // the peer gateway to the overlay address
			icmp("169.254.100.2", podDst),          // the peer gateway (or a stock peer host) to a pod
			icmp("169.254.100.2", "169.254.100.1"), // the probe: delivered
		)
		if sent := c.TakeSent(); len(sent) != 0 {
			t.Errorf("LocalNAT %v: %d packets reached a node", cfg.LocalNAT != nil, len(sent))
		}
		h.mu.Lock()
		got := len(h.got)
		h.mu.Unlock()
		cn := dp.Counters()
		if got != 1 || cn.Get(dataplane.FromTunnel, dataplane.Local) != 1 ||
			cn.Get(dataplane.FromTunnel, dataplane.DropNoRoute) != 3 || cn.Get(dataplane.FromTunnel, dataplane.DropLinkLocalSource) != 1 {
			t.Errorf("LocalNAT %v: %d delivered to the netstack (want the probe alone); counters %v", cfg.LocalNAT != nil, got, cn[dataplane.FromTunnel])
		}
	}
}

// TestLocalNATOuterSource: under LocalNAT a packet into the tunnel crosses only when its own
// source is presented; an ICMP error from outside every pair whose quote matches one does not.
// A dropped superpacket counts once, as it came.
func TestLocalNATOuterSource(t *testing.T) {
	cfg := localNATConfig()
	cfg.Nodes[0].PodCIDRs = append(cfg.Nodes[0].PodCIDRs, pfx("10.250.0.0/24"))
	dp, c := newDP(t, cfg)
	quoted := pt.IPv4{Src: "10.71.2.7", Dst: "10.244.1.5", Proto: 17, TTL: 62, Payload: pt.UDP("10.71.2.7", "10.244.1.5", 53, 5000, []byte("r"), true)}.Build()
	errOut := pt.IPv4{Src: "10.250.0.9", Dst: "10.71.2.7", Proto: 1, TTL: 64, Payload: pt.ICMP(3, 3, [4]byte{}, quoted)}.Build()
	stray := superpacket(make([]byte, 30000))
	copy(stray[12:16], []byte{10, 250, 0, 9})
	packet.IPv4(stray).ComputeChecksum()
	good := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 17, Payload: pt.UDP("10.244.1.5", "10.71.2.7", 1, 2, nil, false)}.Build()
	for _, p := range [][]byte{errOut, stray, good} {
		c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv4, p), from1)
	}
	pkts := readPackets(t, dp)
	if len(pkts) != 1 {
		t.Fatalf("%d packets into the tunnel, want only the one from 10.244.1.5", len(pkts))
	}
	if s, _ := addrs(pkts[0]); s != "10.99.1.5" {
		t.Errorf("source %s, want 10.99.1.5", s)
	}
	cn := dp.Counters()
	if d := cn.Get(dataplane.ToTunnel, dataplane.DropNATUnmatched); d != 2 {
		t.Errorf("%d NAT-unmatched drops, want 2 (the error and the superpacket, once each); counters %v", d, cn[dataplane.ToTunnel])
	}
}
