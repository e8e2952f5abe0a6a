package dataplane_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/tun"

	"github.com/skein-net/skein/dataplane"
	"github.com/skein-net/skein/dataplane/nat"
	"github.com/skein-net/skein/dataplane/overlay"
	"github.com/skein-net/skein/dataplane/overlaytest"
	"github.com/skein-net/skein/dataplane/packet"
	pt "github.com/skein-net/skein/dataplane/packet/packettest"
)

var (
	gwMAC    = packet.MAC{0x02, 0x5e, 0, 0, 0, 0x01}
	node1MAC = packet.MAC{0x02, 0x5e, 0, 0, 0, 0x11}
	node2MAC = packet.MAC{0x02, 0x5e, 0, 0, 0, 0x12}
	node1    = netip.MustParseAddr("192.168.10.11")
	node2    = netip.MustParseAddr("192.168.10.12")
	from1    = netip.AddrPortFrom(node1, 40001) // the kernel picks a hashed source port
)

const (
	vni    = 200
	offset = 16 // wireguard-go's MessageTransportHeaderSize
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func addr(s string) netip.Addr  { return netip.MustParseAddr(s) }
func ip4(b []byte) string       { return netip.AddrFrom4([4]byte(b)).String() }
func tcpMSS(ip []byte) (uint16, bool) {
	return packet.TCP(packet.IPv4(ip).Payload()).MSS()
}

// baseConfig: cluster A's gateway. The peer's pods (10.244.0.0/16 over there) are seen here as
// 10.71.0.0/16; local pods live on node1 (10.244.1.0/24) and node2 (10.244.2.0/24, plus one pod
// that kept its address from node1's range).
func baseConfig() dataplane.Config {
	return dataplane.Config{
		Overlay:  overlay.Config{Kind: overlay.VXLAN, VNI: vni, MAC: gwMAC, IP: addr("10.80.0.1")},
		TunnelIP: addr("169.254.100.1"),
		Remote:   []netip.Prefix{pfx("169.254.100.2/32")},
		NAT:      []nat.Pair{{From: pfx("10.71.0.0/16"), To: pfx("10.244.0.0/16")}},
		Nodes: []dataplane.Node{
			{Name: "node1", VTEP: node1, MAC: node1MAC, PodCIDRs: []netip.Prefix{pfx("10.244.1.0/24")}},
			{Name: "node2", VTEP: node2, MAC: node2MAC, PodCIDRs: []netip.Prefix{pfx("10.244.2.0/24")}, Pods: []netip.Addr{addr("10.244.1.77")}},
		},
		Local:     []netip.Addr{addr("10.80.0.1"), addr("169.254.100.1")},
		ICMPBurst: 1000,
	}
}

func newDP(t *testing.T, cfg dataplane.Config) (*dataplane.Dataplane, *overlaytest.Conn) {
	t.Helper()
	c := overlaytest.New(0)
	dp, err := dataplane.New(cfg, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dp.Close() })
	select {
	case ev := <-dp.Events():
		t.Fatalf("event %v at start; the device must stay down until brought up", ev)
	default:
	}
	return dp, c
}

// vxlanFrame is what a node's kernel VXLAN device sends: VXLAN, Ethernet to the gateway, ip.
func vxlanFrame(dst packet.MAC, etherType uint16, payload []byte) []byte {
	return overlaytest.Frame(vni, dst, node1MAC, etherType, payload)
}

// readPackets runs one dp.Read with wireguard-go's buffer layout and returns the packets.
func readPackets(t *testing.T, dp *dataplane.Dataplane) [][]byte {
	t.Helper()
	type result struct {
		pkts [][]byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		bufs := make([][]byte, dp.BatchSize())
		for i := range bufs {
			bufs[i] = make([]byte, 65535)
		}
		sizes := make([]int, len(bufs))
		n, err := dp.Read(bufs, sizes, offset)
		var pkts [][]byte
		for i := range n {
			if sizes[i] > 0 {
				pkts = append(pkts, bufs[i][offset:offset+sizes[i]])
			}
		}
		done <- result{pkts, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("Read: %v", r.err)
		}
		return r.pkts
	case <-time.After(5 * time.Second):
		t.Fatal("Read returned nothing within 5s")
		return nil
	}
}

func write(t *testing.T, dp *dataplane.Dataplane, pkts ...[]byte) {
	t.Helper()
	bufs := make([][]byte, len(pkts))
	for i, p := range pkts {
		bufs[i] = append(make([]byte, offset, 65535), p...)
	}
	if n, err := dp.Write(bufs, offset); err != nil || n != len(pkts) {
		t.Fatalf("Write = %d, %v", n, err)
	}
}

func checkSums(t *testing.T, what string, pkt []byte) {
	t.Helper()
	if p := pt.Problem(pkt); p != "" {
		t.Errorf("%s: %s", what, p)
	}
}

// decapSent checks a datagram the gateway sent to a node and returns its inner packet.
func decapSent(t *testing.T, d overlaytest.Datagram, wantNode netip.Addr, wantMAC packet.MAC) []byte {
	t.Helper()
	if d.Addr != netip.AddrPortFrom(wantNode, packet.VXLANPort) {
		t.Errorf("sent to %v, want %v:%d", d.Addr, wantNode, packet.VXLANPort)
	}
	vx, err := packet.ParseVXLAN(d.B)
	if err != nil || vx.VNI() != vni {
		t.Fatalf("not VXLAN with VNI %d: %v", vni, err)
	}
	eth := packet.Ethernet(vx.Payload())
	if eth.Dst() != wantMAC || eth.Src() != gwMAC {
		t.Errorf("Ethernet %s -> %s, want %s -> %s", overlay.MACString(eth.Src()), overlay.MACString(eth.Dst()), overlay.MACString(gwMAC), overlay.MACString(wantMAC))
	}
	return eth.Payload()
}

func TestToTunnel(t *testing.T) {
	dp, c := newDP(t, baseConfig())
	syn := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 6, DF: true, TTL: 64,
		Payload: pt.TCP("10.244.1.5", "10.71.2.7", 40000, 80, packet.TCPFlagSYN, pt.MSSOption(1460), nil)}.Build()
	c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv4, syn), from1)
	pkts := readPackets(t, dp)
	if len(pkts) != 1 {
		t.Fatalf("got %d packets, want 1", len(pkts))
	}
	p := pkts[0]
	if s, d := ip4(p[12:16]), ip4(p[16:20]); s != "10.244.1.5" || d != "10.244.2.7" {
		t.Errorf("into the tunnel %s -> %s, want 10.244.1.5 -> 10.244.2.7", s, d)
	}
	if p[8] != 63 {
		t.Errorf("TTL %d, want 63", p[8])
	}
	if mss, _ := tcpMSS(p); mss != dataplane.DefaultTunnelMTU-40 {
		t.Errorf("MSS %d, want %d", mss, dataplane.DefaultTunnelMTU-40)
	}
	checkSums(t, "packet into the tunnel", p)
	cn := dp.Counters()
	if cn.Get(dataplane.ToTunnel, dataplane.Forwarded) != 1 || cn.Get(dataplane.ToTunnel, dataplane.MSSClamped) != 1 ||
		cn.Get(dataplane.ToTunnel, dataplane.Bytes) != uint64(len(syn)) || cn.Drops(dataplane.ToTunnel) != 0 {
		t.Errorf("counters %v", cn[dataplane.ToTunnel])
	}
}

func TestFromTunnel(t *testing.T) {
	dp, c := newDP(t, baseConfig())
	synack := pt.IPv4{Src: "10.244.2.7", Dst: "10.244.1.5", Proto: 6, DF: true, TTL: 64,
		Payload: pt.TCP("10.244.2.7", "10.244.1.5", 80, 40000, packet.TCPFlagSYN|packet.TCPFlagACK, pt.MSSOption(8960), nil)}.Build()
	toPodOnNode2 := pt.IPv4{Src: "10.244.9.9", Dst: "10.244.1.77", Proto: 17, Payload: pt.UDP("10.244.9.9", "10.244.1.77", 1, 2, []byte("x"), false)}.Build()
	write(t, dp, synack, toPodOnNode2)
	sent := c.TakeSent()
	if len(sent) != 2 {
		t.Fatalf("sent %d datagrams, want 2", len(sent))
	}
	p := decapSent(t, sent[0], node1, node1MAC)
	if s, d := ip4(p[12:16]), ip4(p[16:20]); s != "10.71.2.7" || d != "10.244.1.5" {
		t.Errorf("out of the tunnel %s -> %s, want 10.71.2.7 -> 10.244.1.5", s, d)
	}
	if p[8] != 63 {
		t.Errorf("TTL %d, want 63", p[8])
	}
	if mss, _ := tcpMSS(p); mss != dataplane.DefaultTunnelMTU-40 {
		t.Errorf("MSS %d, want clamped to %d", mss, dataplane.DefaultTunnelMTU-40)
	}
	checkSums(t, "packet to node1", p)
	// A pod /32 wins over its node CIDR: 10.244.1.77 lives on node2.
	q := decapSent(t, sent[1], node2, node2MAC)
	if s := ip4(q[12:16]); s != "10.71.9.9" {
		t.Errorf("source %s, want 10.71.9.9", s)
	}
	checkSums(t, "packet to node2", q)
	if cn := dp.Counters(); cn.Get(dataplane.FromTunnel, dataplane.Forwarded) != 2 || cn.Drops(dataplane.FromTunnel) != 0 {
		t.Errorf("counters %v", cn[dataplane.FromTunnel])
	}
}

func TestARP(t *testing.T) {
	dp, c := newDP(t, baseConfig())
	req := make([]byte, packet.ARPLen)
	packet.PutARP(req, packet.ARPRequest, node1MAC, addr("10.80.0.11").As4(), packet.MAC{}, addr("10.80.0.1").As4())
	c.Push(vxlanFrame(packet.Broadcast, packet.EtherTypeARP, req), from1)
	// Follow with a packet so that Read returns.
	ping := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 1, Payload: pt.ICMP(8, 0, [4]byte{}, nil)}.Build()
	c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv4, ping), from1)
	for len(readPackets(t, dp)) == 0 {
	}
	sent := c.TakeSent()
	if len(sent) != 1 {
		t.Fatalf("sent %d datagrams, want the ARP reply", len(sent))
	}
	vx, _ := packet.ParseVXLAN(sent[0].B)
	eth := packet.Ethernet(vx.Payload())
	a, err := packet.ParseARP(eth.Payload())
	if err != nil || a.Op() != packet.ARPReply || a.SenderMAC() != gwMAC || a.TargetMAC() != node1MAC || ip4(a[14:18]) != "10.80.0.1" {
		t.Errorf("ARP reply % x (%v)", eth.Payload(), err)
	}
	if sent[0].Addr != netip.AddrPortFrom(node1, packet.VXLANPort) {
		t.Errorf("ARP reply sent to %v, want node1's overlay port", sent[0].Addr)
	}
	if cn := dp.Counters(); cn.Get(dataplane.ToTunnel, dataplane.ARPReplied) != 1 {
		t.Errorf("counters %v", cn[dataplane.ToTunnel])
	}
}

// icmpSent returns the ICMP error of a sent datagram, checking the outer addresses.
func checkICMPError(t *testing.T, pkt []byte, src, dst string, typ, code uint8, quoted []byte) packet.ICMPv4 {
	t.Helper()
	checkSums(t, "ICMP error", pkt)
	if s, d := ip4(pkt[12:16]), ip4(pkt[16:20]); s != src || d != dst || pkt[9] != 1 {
		t.Fatalf("ICMP error %s -> %s proto %d, want %s -> %s ICMP", s, d, pkt[9], src, dst)
	}
	m := packet.ICMPv4(packet.IPv4(pkt).Payload())
	if m.Type() != typ || m.Code() != code {
		t.Errorf("ICMP type %d code %d, want %d/%d", m.Type(), m.Code(), typ, code)
	}
	if q := m.Payload(); !bytes.Equal(q, quoted[:min(len(quoted), 548)]) {
		t.Errorf("quote differs from the original packet")
	}
	return m
}

func TestTTLAndTooBig(t *testing.T) {
	dp, c := newDP(t, baseConfig())
	expiring := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 17, TTL: 1, Payload: pt.UDP("10.244.1.5", "10.71.2.7", 33434, 33434, nil, false)}.Build()
	big := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 17, DF: true, Payload: pt.UDP("10.244.1.5", "10.71.2.7", 5, 6, make([]byte, 1400), false)}.Build()
	bigNoDF := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 17, Payload: pt.UDP("10.244.1.5", "10.71.2.7", 5, 6, make([]byte, 1400), false)}.Build()
	for _, p := range [][]byte{expiring, big, bigNoDF} {
		c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv4, p), from1)
	}
	var got [][]byte
	for len(got) == 0 {
		got = readPackets(t, dp)
	}
	if len(got) != 1 || len(got[0]) != len(bigNoDF) {
		t.Fatalf("into the tunnel %d packets, want only the one without DF (the tunnel's UDP is fragmented instead)", len(got))
	}
	sent := c.TakeSent()
	if len(sent) != 2 {
		t.Fatalf("sent %d ICMP errors to the overlay, want 2", len(sent))
	}
	checkICMPError(t, decapSent(t, sent[0], node1, node1MAC), "10.80.0.1", "10.244.1.5", 11, 0, expiring)
	m := checkICMPError(t, decapSent(t, sent[1], node1, node1MAC), "10.80.0.1", "10.244.1.5", 3, 4, big)
	if m.MTU() != dataplane.DefaultTunnelMTU {
		t.Errorf("fragmentation needed with next-hop MTU %d, want %d", m.MTU(), dataplane.DefaultTunnelMTU)
	}
	cn := dp.Counters()
	if cn.Get(dataplane.ToTunnel, dataplane.DropTTL) != 1 || cn.Get(dataplane.ToTunnel, dataplane.DropTooBig) != 1 || cn.Get(dataplane.ToTunnel, dataplane.ICMPSent) != 2 {
		t.Errorf("counters %v", cn[dataplane.ToTunnel])
	}

	// Out of the tunnel: the error goes back into the tunnel from the tunnel address.
	expiringIn := pt.IPv4{Src: "10.244.2.7", Dst: "10.244.1.5", Proto: 17, TTL: 1, Payload: pt.UDP("10.244.2.7", "10.244.1.5", 1, 2, nil, false)}.Build()
	write(t, dp, expiringIn)
	back := readPackets(t, dp)
	if len(back) != 1 {
		t.Fatalf("%d packets back into the tunnel, want the time exceeded", len(back))
	}
	checkICMPError(t, back[0], "169.254.100.1", "10.244.2.7", 11, 0, expiringIn)
	if len(c.TakeSent()) != 0 {
		t.Errorf("an expired packet reached the overlay")
	}
}

func TestICMPRateLimit(t *testing.T) {
	cfg := baseConfig()
	cfg.ICMPRate, cfg.ICMPBurst = 1, 2
	dp, c := newDP(t, cfg)
	expiring := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 17, TTL: 1, Payload: pt.UDP("10.244.1.5", "10.71.2.7", 1, 2, nil, false)}.Build()
	ok := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 17, Payload: pt.UDP("10.244.1.5", "10.71.2.7", 1, 2, nil, false)}.Build()
	for range 5 {
		c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv4, expiring), from1)
	}
	c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv4, ok), from1)
	for n := 0; n < 1; n += len(readPackets(t, dp)) {
	}
	cn := dp.Counters()
	if s, l := cn.Get(dataplane.ToTunnel, dataplane.ICMPSent), cn.Get(dataplane.ToTunnel, dataplane.ICMPRateLimited); s != 2 || l != 3 {
		t.Errorf("ICMP sent %d, rate-limited %d; want 2 and 3 (burst 2)", s, l)
	}
	if n := len(c.TakeSent()); n != 2 {
		t.Errorf("%d errors on the wire, want 2", n)
	}
}

func TestDrops(t *testing.T) {
	good := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 17, Payload: pt.UDP("10.244.1.5", "10.71.2.7", 1, 2, nil, false)}.Build()
	badSum := append([]byte(nil), good...)
	badSum[10] ^= 0xff
	wrongVNI := vxlanFrame(gwMAC, packet.EtherTypeIPv4, good)
	packet.PutVXLAN(wrongVNI, vni+1)
	cases := []struct {
		name string
		d    overlaytest.Datagram
		want dataplane.Counter
	}{
		{"unknown vtep", overlaytest.Datagram{B: vxlanFrame(gwMAC, packet.EtherTypeIPv4, good), Addr: netip.MustParseAddrPort("192.168.10.99:4789")}, dataplane.DropUnknownVTEP},
		{"wrong vni", overlaytest.Datagram{B: wrongVNI, Addr: from1}, dataplane.DropWrongVNI},
		{"short datagram", overlaytest.Datagram{B: wrongVNI[:10], Addr: from1}, dataplane.DropMalformedOverlay},
		{"other mac", overlaytest.Datagram{B: vxlanFrame(node2MAC, packet.EtherTypeIPv4, good), Addr: from1}, dataplane.DropNotForUs},
		{"another ethertype", overlaytest.Datagram{B: vxlanFrame(gwMAC, 0x88cc, make([]byte, 40)), Addr: from1}, dataplane.DropEtherType},
		{"ipv6 ethertype, not ipv6", overlaytest.Datagram{B: vxlanFrame(gwMAC, packet.EtherTypeIPv6, good), Addr: from1}, dataplane.DropMalformedIP},
		{"ipv4 ethertype, ipv6 inside", overlaytest.Datagram{B: vxlanFrame(gwMAC, packet.EtherTypeIPv4, syn6("fd00:244:0:1::5", "fd71:0:0:2::7", 64)), Addr: from1}, dataplane.DropMalformedIP},
		{"bad ip checksum", overlaytest.Datagram{B: vxlanFrame(gwMAC, packet.EtherTypeIPv4, badSum), Addr: from1}, dataplane.DropMalformedIP},
		{"garbage ip", overlaytest.Datagram{B: vxlanFrame(gwMAC, packet.EtherTypeIPv4, []byte{0x45, 1, 2}), Addr: from1}, dataplane.DropMalformedIP},
		{"no route", overlaytest.Datagram{B: vxlanFrame(gwMAC, packet.EtherTypeIPv4, pt.IPv4{Src: "10.244.1.5", Dst: "10.99.0.1", Proto: 17, Payload: make([]byte, 8)}.Build()), Addr: from1}, dataplane.DropNoRoute},
		{"loop to a local pod", overlaytest.Datagram{B: vxlanFrame(gwMAC, packet.EtherTypeIPv4, pt.IPv4{Src: "10.244.1.5", Dst: "10.244.2.1", Proto: 17, Payload: make([]byte, 8)}.Build()), Addr: from1}, dataplane.DropLoop},
		{"truncated tcp", overlaytest.Datagram{B: vxlanFrame(gwMAC, packet.EtherTypeIPv4, pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 6, Payload: make([]byte, 6)}.Build()), Addr: from1}, dataplane.DropNATTruncated},
		// Node 1 speaks for node 2's pods (its CIDR, and node 2's pod /32 inside node 1's CIDR),
		// for an address no node has, and with a link-local source (the tunnel's range).
		{"another node's pod", overlaytest.Datagram{B: vxlanFrame(gwMAC, packet.EtherTypeIPv4, pt.IPv4{Src: "10.244.2.9", Dst: "10.71.2.7", Proto: 17, Payload: make([]byte, 8)}.Build()), Addr: from1}, dataplane.DropSpoofedSource},
		{"another node's pod /32", overlaytest.Datagram{B: vxlanFrame(gwMAC, packet.EtherTypeIPv4, pt.IPv4{Src: "10.244.1.77", Dst: "10.71.2.7", Proto: 17, Payload: make([]byte, 8)}.Build()), Addr: from1}, dataplane.DropSpoofedSource},
		{"no node's address", overlaytest.Datagram{B: vxlanFrame(gwMAC, packet.EtherTypeIPv4, pt.IPv4{Src: "10.9.9.9", Dst: "10.71.2.7", Proto: 17, Payload: make([]byte, 8)}.Build()), Addr: from1}, dataplane.DropSpoofedSource},
		{"link-local source", overlaytest.Datagram{B: vxlanFrame(gwMAC, packet.EtherTypeIPv4, pt.IPv4{Src: "169.254.100.1", Dst: "10.80.0.1", Proto: 1, Payload: pt.ICMP(8, 0, [4]byte{}, nil)}.Build()), Addr: from1}, dataplane.DropLinkLocalSource},
		{"no local handler", overlaytest.Datagram{B: vxlanFrame(gwMAC, packet.EtherTypeIPv4, pt.IPv4{Src: "10.244.1.5", Dst: "10.80.0.1", Proto: 1, Payload: pt.ICMP(8, 0, [4]byte{}, nil)}.Build()), Addr: from1}, dataplane.DropLocalUnavailable},
	}
	dp, c := newDP(t, baseConfig())
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := dp.Counters()
			c.Push(tc.d.B, tc.d.Addr)
			c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv4, good), from1)
			if got := readPackets(t, dp); len(got) != 1 || !bytes.Equal(got[0][12:16], good[12:16]) {
				t.Fatalf("the dropped datagram was forwarded, or the good one was not: %d packets", len(got))
			}
			after := dp.Counters()
			if d := after.Get(dataplane.ToTunnel, tc.want) - before.Get(dataplane.ToTunnel, tc.want); d != 1 {
				t.Errorf("%v went up by %d, want 1", tc.want, d)
			}
			if d := after.Drops(dataplane.ToTunnel) - before.Drops(dataplane.ToTunnel); d != 1 {
				t.Errorf("drops went up by %d, want 1", d)
			}
		})
	}
	if len(c.TakeSent()) != 0 {
		t.Errorf("drops caused datagrams to be sent")
	}

	// Out of the tunnel.
	before := dp.Counters()
	write(t, dp,
		[]byte{0x60, 0, 0, 0}, // IPv6 (not forwarded yet)
		pt.IPv4{Src: "10.244.2.7", Dst: "10.71.1.1", Proto: 17, Payload: make([]byte, 8)}.Build(), // back into the tunnel
		pt.IPv4{Src: "10.244.2.7", Dst: "10.9.9.9", Proto: 17, Payload: make([]byte, 8)}.Build(),  // nowhere
	)
	after := dp.Counters()
	for _, k := range []dataplane.Counter{dataplane.DropMalformedIP, dataplane.DropLoop, dataplane.DropNoRoute} {
		if d := after.Get(dataplane.FromTunnel, k) - before.Get(dataplane.FromTunnel, k); d != 1 {
			t.Errorf("from the tunnel: %v went up by %d, want 1", k, d)
		}
	}
}

func TestUnmatchedPolicy(t *testing.T) {
	// 10.244.9.9 (remote, NAT-less route) matches no NAT pair.
	for _, drop := range []bool{false, true} {
		cfg := baseConfig()
		cfg.Remote = append(cfg.Remote, pfx("10.99.0.0/16"))
		cfg.DropUnmatched = drop
		dp, c := newDP(t, cfg)
		p := pt.IPv4{Src: "10.244.1.5", Dst: "10.99.0.1", Proto: 17, Payload: pt.UDP("10.244.1.5", "10.99.0.1", 1, 2, nil, false)}.Build()
		good := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.0.1", Proto: 17, Payload: pt.UDP("10.244.1.5", "10.71.0.1", 1, 2, nil, false)}.Build()
		c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv4, p), from1)
		c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv4, good), from1)
		n := 0
		for n < 1 {
			n += len(readPackets(t, dp))
		}
		cn := dp.Counters()
		want := 2
		if drop {
			want = 1
			if cn.Get(dataplane.ToTunnel, dataplane.DropNATUnmatched) != 1 {
				t.Errorf("drop=true: not counted as a drop")
			}
		}
		if f := cn.Get(dataplane.ToTunnel, dataplane.Forwarded); int(f) != want || cn.Get(dataplane.ToTunnel, dataplane.NATUnmatched) != 1 {
			t.Errorf("drop=%v: forwarded %d (want %d), unmatched %d (want 1)", drop, f, want, cn.Get(dataplane.ToTunnel, dataplane.NATUnmatched))
		}
	}
}

type handler struct {
	mu   sync.Mutex
	got  [][]byte
	fail bool
}

func (h *handler) DeliverLocal(p []byte) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.got = append(h.got, append([]byte(nil), p...))
	return !h.fail
}

func TestLocalAndInject(t *testing.T) {
	dp, c := newDP(t, baseConfig())
	h := &handler{}
	dp.SetLocalHandler(h)
	ping := pt.IPv4{Src: "10.244.1.5", Dst: "10.80.0.1", Proto: 1, Payload: pt.ICMP(8, 0, [4]byte{0, 1, 0, 1}, []byte("hi"))}.Build()
	probe := pt.IPv4{Src: "169.254.100.2", Dst: "169.254.100.1", Proto: 1, Payload: pt.ICMP(8, 0, [4]byte{0, 2, 0, 1}, nil)}.Build()
	c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv4, ping), from1)
	good := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.0.1", Proto: 17, Payload: pt.UDP("10.244.1.5", "10.71.0.1", 1, 2, nil, false)}.Build()
	c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv4, good), from1)
	if got := readPackets(t, dp); len(got) != 1 {
		t.Fatalf("%d packets into the tunnel, want 1 (the ping is local)", len(got))
	}
	write(t, dp, probe)

	// The reply to the probe goes into the tunnel; the reply to the ping to node1.
	reply := pt.IPv4{Src: "169.254.100.1", Dst: "169.254.100.2", Proto: 1, Payload: pt.ICMP(0, 0, [4]byte{0, 2, 0, 1}, nil)}.Build()
	if err := dp.Inject(reply); err != nil {
		t.Fatal(err)
	}
	got := readPackets(t, dp)
	if len(got) != 1 || !bytes.Equal(got[0], reply) {
		t.Fatalf("injected packet not read back into the tunnel unchanged: %d packets", len(got))
	}
	pong := pt.IPv4{Src: "10.80.0.1", Dst: "10.244.1.5", Proto: 1, Payload: pt.ICMP(0, 0, [4]byte{0, 1, 0, 1}, []byte("hi"))}.Build()
	if err := dp.Inject(pong); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.mu.Lock()
		n := len(h.got)
		h.mu.Unlock()
		if n == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	h.mu.Lock()
	if len(h.got) != 2 || !bytes.Equal(h.got[0], probe) && !bytes.Equal(h.got[1], probe) {
		t.Errorf("local handler got %d packets, want the ping and the probe", len(h.got))
	}
	h.mu.Unlock()
	sent := c.TakeSent()
	if len(sent) != 1 || !bytes.Equal(decapSent(t, sent[0], node1, node1MAC), pong) {
		t.Errorf("injected reply to a local pod not sent to node1")
	}
	for _, bad := range []struct {
		pkt  []byte
		want string
	}{
		{[]byte{1, 2, 3}, "inject"},
		{pt.IPv4{Src: "10.80.0.1", Dst: "10.9.9.9", Proto: 1, Payload: make([]byte, 8)}.Build(), "no route"},
		{pt.IPv4{Src: "10.80.0.1", Dst: "169.254.100.1", Proto: 1, Payload: make([]byte, 8)}.Build(), "own address"},
		{pt.IPv4{Src: "169.254.100.1", Dst: "169.254.100.2", Proto: 17, Payload: make([]byte, 2000)}.Build(), "tunnel MTU"},
	} {
		if err := dp.Inject(bad.pkt); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Inject: %v, want an error containing %q", err, bad.want)
		}
	}
}

func TestReconfig(t *testing.T) {
	dp, c := newDP(t, baseConfig())
	if err := dp.Reconfig(baseConfig()); err != nil {
		t.Fatal(err)
	}
	if err := dp.Reconfig(dp.Config()); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-dp.Events():
		t.Fatalf("an unchanged config sent event %v", ev)
	default:
	}
	bad := baseConfig()
	bad.TunnelMTU = 100
	bad.Nodes[0].VTEP = netip.Addr{}
	err := dp.Reconfig(bad)
	if err == nil || !strings.Contains(err.Error(), "tunnel MTU 100") || !strings.Contains(err.Error(), `node "node1"`) {
		t.Fatalf("Reconfig(bad) = %v, want both problems named", err)
	}
	if dp.Config().TunnelMTU != dataplane.DefaultTunnelMTU {
		t.Fatalf("a refused config was applied")
	}

	// Swap the NAT while traffic flows; each packet is translated by one config or the other,
	// never dropped.
	next := baseConfig()
	next.NAT = []nat.Pair{{From: pfx("10.71.0.0/16"), To: pfx("10.250.0.0/16")}}
	next.TunnelMTU = 1400
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			cfg := baseConfig()
			if i%2 == 1 {
				cfg = next
			}
			if err := dp.Reconfig(cfg); err != nil {
				t.Error(err)
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Microsecond):
			}
		}
	}()
	p := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 17, Payload: pt.UDP("10.244.1.5", "10.71.2.7", 1, 2, []byte("x"), false)}.Build()
	seen := map[string]int{}
	// Send until both configurations were seen several times (the swapper runs on its own
	// schedule), at most 20000 packets.
	sent := 0
	for ; sent < 20000 && (seen["10.244.2.7"] < 20 || seen["10.250.2.7"] < 20); sent++ {
		c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv4, p), from1)
		for _, q := range readPackets(t, dp) {
			seen[ip4(q[16:20])]++
			checkSums(t, "packet during reconfig", q)
		}
	}
	close(stop)
	wg.Wait()
	if seen["10.244.2.7"]+seen["10.250.2.7"] != sent || len(seen) != 2 {
		t.Errorf("destinations of %d packets during swaps: %v", sent, seen)
	}
	if err := dp.Reconfig(next); err != nil {
		t.Fatal(err)
	}
	if mtu, _ := dp.MTU(); mtu != 1400 {
		t.Errorf("MTU %d after reconfig, want 1400", mtu)
	}
	sawUpdate := false
	for len(dp.Events()) > 0 {
		if <-dp.Events() == tun.EventMTUUpdate {
			sawUpdate = true
		}
	}
	if !sawUpdate {
		t.Errorf("no EventMTUUpdate after the MTU changed")
	}
}

func TestClose(t *testing.T) {
	dp, _ := newDP(t, baseConfig())
	done := make(chan error, 1)
	go func() {
		bufs, sizes := [][]byte{make([]byte, 2000)}, []int{0}
		_, err := dp.Read(bufs, sizes, offset)
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	dp.Close()
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrClosed) {
			t.Errorf("Read after Close: %v, want os.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Read did not return after Close")
	}
	if _, err := dp.Write([][]byte{make([]byte, 100)}, offset); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Write after Close: %v", err)
	}
	if err := dp.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		mut  func(*dataplane.Config)
		want string
	}{
		{func(c *dataplane.Config) { c.OverlayMTU = 10000 }, "overlay MTU 10000 is outside 576-9000"},
		{func(c *dataplane.Config) { c.Overlay.Kind = 0 }, "vxlan or geneve"},
		{func(c *dataplane.Config) { c.Nodes[1].MAC = packet.MAC{} }, `node "node2": overlay MAC`},
		{func(c *dataplane.Config) {
			c.Nodes[0].Pods = []netip.Addr{addr("10.244.1.5")}
			c.Nodes[1].Pods = []netip.Addr{addr("10.244.1.5")}
		}, "two nodes"},
		{func(c *dataplane.Config) { c.Nodes[1].PodCIDRs = []netip.Prefix{pfx("10.71.0.0/16")} }, "10.71.0.0/16"},
		{func(c *dataplane.Config) {
			c.NAT = append(c.NAT, nat.Pair{From: pfx("10.71.0.0/24"), To: pfx("10.1.0.0/24")})
		}, "overlap"},
		{func(c *dataplane.Config) { c.TunnelIP = addr("fd00::1") }, "tunnel IP"},
		{func(c *dataplane.Config) { c.TunnelIP6 = addr("fe80::1") }, "tunnel IPv6 address fe80::1 must be a unicast IPv6 address"},
		{func(c *dataplane.Config) { c.OverlayIP6 = addr("10.80.0.1") }, "overlay IPv6 address 10.80.0.1 must be"},
		{func(c *dataplane.Config) { c.OverlayIP6 = addr("ff02::1") }, "overlay IPv6 address ff02::1 must be"},
		{func(c *dataplane.Config) {
			c.Remote = append(c.Remote, pfx("fd72::/64"))
			c.TunnelMTU = 1200
		}, "IPv6 needs links of at least 1280 bytes: tunnel MTU 1200"},
	}
	for _, tc := range cases {
		cfg := baseConfig()
		tc.mut(&cfg)
		_, err := dataplane.New(cfg, overlaytest.New(0))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New: %v, want an error containing %q", err, tc.want)
		}
	}
}

// TestRelayNode: with RelayNode set, frames from that node's VTEP may carry any node's pods
// (it forwards the other nodes' frames to the gateway), and nothing that is no node's; every
// other node still speaks only for its own pods. Without RelayNode the same frames are spoofed.
func TestRelayNode(t *testing.T) {
	from2 := netip.AddrPortFrom(node2, 40002)
	frame := func(src string) []byte {
		return vxlanFrame(gwMAC, packet.EtherTypeIPv4, pt.IPv4{Src: src, Dst: "10.71.2.7", Proto: 17, Payload: pt.UDP(src, "10.71.2.7", 1, 2, nil, false)}.Build())
	}
	cases := []struct {
		relay   string
		src     string
		from    netip.AddrPort
		forward bool
	}{
		{"node1", "10.244.2.9", from1, true},  // node 2's pod, relayed by node 1
		{"node1", "10.244.1.77", from1, true}, // node 2's pod /32 inside node 1's CIDR
		{"node1", "10.244.1.5", from1, true},  // node 1's own pod
		{"node1", "10.9.9.9", from1, false},   // no node's address
		{"node1", "10.244.1.5", from2, false}, // node 2 is no relay: node 1's pod
		{"node1", "10.244.2.9", from2, true},  // node 2's own pod
		{"", "10.244.2.9", from1, false},      // no relay node
		{"node9", "10.244.2.9", from1, false}, // a relay node that is not one of Nodes
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("relay %q, %s from %v", tc.relay, tc.src, tc.from), func(t *testing.T) {
			cfg := baseConfig()
			cfg.RelayNode = tc.relay
			dp, c := newDP(t, cfg)
			c.Push(frame(tc.src), tc.from)
			c.Push(frame("10.244.1.5"), from1) // a good one behind it, so that the read returns
			got := readPackets(t, dp)
			want := 1
			if tc.forward {
				want = 2
			}
			for len(got) < want {
				got = append(got, readPackets(t, dp)...)
			}
			cn := dp.Counters()
			spoofed := cn.Get(dataplane.ToTunnel, dataplane.DropSpoofedSource)
			if tc.forward && (len(got) != 2 || spoofed != 0) || !tc.forward && (len(got) != 1 || spoofed != 1) {
				t.Errorf("%d packets forwarded, %d dropped as spoofed; want forwarded %v", len(got), spoofed, tc.forward)
			}
		})
	}
}
