package packet_test

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip/checksum"

	"github.com/skein-net/skein/dataplane/packet"
	"github.com/skein-net/skein/dataplane/packet/packettest"
)

func TestChecksumMatchesGvisor(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 300; n++ {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		if got, want := packet.Checksum(b), ^checksum.Checksum(b, 0); got != want {
			t.Fatalf("len %d: Checksum = %#04x, gVisor says %#04x", n, got, want)
		}
	}
	// All-ones data stresses the carries.
	b := bytes.Repeat([]byte{0xff}, 4096)
	if got, want := packet.Checksum(b), ^checksum.Checksum(b, 0); got != want {
		t.Fatalf("all ones: %#04x, gVisor %#04x", got, want)
	}
}

// TestIncrementalEqualsRecompute rewrites addresses and TTL of random valid headers and checks
// the incrementally updated checksum equals a full recomputation bit for bit.
func TestIncrementalEqualsRecompute(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 20000; i++ {
		h := make([]byte, 20)
		for j := range h {
			h[j] = byte(r.Uint32())
		}
		h[0] = 0x45
		binary.BigEndian.PutUint16(h[2:], 20)
		h[8] |= 2 // TTL >= 2
		p := packet.IPv4(h)
		p.ComputeChecksum()
		var a [4]byte
		binary.BigEndian.PutUint32(a[:], r.Uint32())
		switch i % 3 {
		case 0:
			p.SetSrc(a)
		case 1:
			p.SetDst(a)
		case 2:
			p.DecTTL()
		}
		got := p.Checksum()
		p.ComputeChecksum()
		if want := p.Checksum(); got != want {
			t.Fatalf("case %d: incremental %#04x, recomputed %#04x (header % x)", i%3, got, want, h)
		}
	}
}

func TestParseIPv4(t *testing.T) {
	good := packettest.IPv4{Src: "10.0.0.1", Dst: "10.0.0.2", Proto: packet.ProtoUDP, Payload: make([]byte, 12)}.Build()
	withOpts := packettest.IPv4{Src: "10.0.0.1", Dst: "10.0.0.2", Proto: packet.ProtoUDP, Options: []byte{7, 7, 4, 0, 0, 0, 0}, Payload: make([]byte, 8)}.Build()
	mut := func(b []byte, f func([]byte)) []byte {
		c := append([]byte(nil), b...)
		f(c)
		return c
	}
	cases := []struct {
		name    string
		b       []byte
		want    error
		wantLen int
	}{
		{"good", good, nil, 32},
		{"link padding trimmed", append(append([]byte(nil), good...), 0, 0, 0, 0), nil, 32},
		{"options", withOpts, nil, 36},
		{"empty", nil, packet.ErrTruncated, 0},
		{"short", good[:19], packet.ErrTruncated, 0},
		{"version 6", mut(good, func(b []byte) { b[0] = 0x65 }), packet.ErrVersion, 0},
		{"ihl 4", mut(good, func(b []byte) { b[0] = 0x44 }), packet.ErrHeaderLength, 0},
		{"ihl beyond total", mut(good, func(b []byte) { binary.BigEndian.PutUint16(b[2:], 19) }), packet.ErrHeaderLength, 0},
		{"total beyond buffer", mut(good, func(b []byte) { binary.BigEndian.PutUint16(b[2:], 33) }), packet.ErrTruncated, 0},
		{"bad checksum", mut(good, func(b []byte) { b[10] ^= 1 }), packet.ErrChecksum, 0},
	}
	for _, tc := range cases {
		p, err := packet.ParseIPv4(tc.b)
		if err != tc.want {
			t.Errorf("%s: err %v, want %v", tc.name, err, tc.want)
			continue
		}
		if err == nil && len(p) != tc.wantLen {
			t.Errorf("%s: view of %d bytes, want %d", tc.name, len(p), tc.wantLen)
		}
	}
	p, _ := packet.ParseIPv4(withOpts)
	if p.HeaderLen() != 28 || len(p.Payload()) != 8 || p.SrcAddr().String() != "10.0.0.1" || p.DstAddr().String() != "10.0.0.2" {
		t.Errorf("options packet: header %d payload %d src %s dst %s", p.HeaderLen(), len(p.Payload()), p.SrcAddr(), p.DstAddr())
	}
	frag, _ := packet.ParseIPv4(packettest.IPv4{Src: "10.0.0.1", Dst: "10.0.0.2", Proto: 17, MF: true, FragOff: 1480, DF: false, Payload: make([]byte, 8)}.Build())
	if !frag.IsFragment() || !frag.MoreFragments() || frag.FragmentOffset() != 1480 || frag.DontFragment() {
		t.Errorf("fragment fields: frag %v mf %v off %d df %v", frag.IsFragment(), frag.MoreFragments(), frag.FragmentOffset(), frag.DontFragment())
	}
}

func TestTransportParsers(t *testing.T) {
	seg := packettest.TCP("10.0.0.1", "10.0.0.2", 1000, 80, packet.TCPFlagSYN, packettest.MSSOption(1460), []byte("hi"))
	tcp, err := packet.ParseTCP(seg)
	if err != nil || tcp.SrcPort() != 1000 || tcp.DstPort() != 80 || tcp.DataOffset() != 24 || len(tcp.Options()) != 4 {
		t.Errorf("TCP: err %v", err)
	}
	if mss, ok := tcp.MSS(); !ok || mss != 1460 {
		t.Errorf("MSS = %d %v", mss, ok)
	}
	bad := append([]byte(nil), seg...)
	bad[12] = 0x40 // data offset 16
	if _, err := packet.ParseTCP(bad); err != packet.ErrHeaderLength {
		t.Errorf("TCP data offset 16: %v", err)
	}
	bad[12] = 0xf0 // data offset 60 > 26 bytes
	if _, err := packet.ParseTCP(bad); err != packet.ErrTruncated {
		t.Errorf("TCP data offset beyond segment: %v", err)
	}
	dg := packettest.UDP("10.0.0.1", "10.0.0.2", 53, 5353, []byte("abc"), false)
	udp, err := packet.ParseUDP(append(dg, 0, 0))
	if err != nil || len(udp) != 11 || udp.Length() != 11 || string(udp.Payload()) != "abc" {
		t.Errorf("UDP: err %v len %d", err, len(udp))
	}
	binary.BigEndian.PutUint16(dg[4:], 7)
	if _, err := packet.ParseUDP(dg); err != packet.ErrHeaderLength {
		t.Errorf("UDP length 7: %v", err)
	}
	binary.BigEndian.PutUint16(dg[4:], 12)
	if _, err := packet.ParseUDP(dg); err != packet.ErrTruncated {
		t.Errorf("UDP length beyond: %v", err)
	}
	msg, err := packet.ParseICMPv4(packettest.ICMP(packet.ICMPDestUnreach, packet.ICMPCodeFragNeeded, [4]byte{0, 0, 0x05, 0x3c}, make([]byte, 28)))
	if err != nil || !msg.IsError() || msg.MTU() != 1340 || len(msg.Payload()) != 28 {
		t.Errorf("ICMP: err %v", err)
	}
	if _, err := packet.ParseICMPv4(make([]byte, 7)); err != packet.ErrTruncated {
		t.Errorf("ICMP 7 bytes: %v", err)
	}
}

// TestClampMSS checks clamping on SYNs, with the MSS option at even and odd offsets, and that
// the checksum verifies after (with the independent sum and with gVisor).
func TestClampMSS(t *testing.T) {
	cases := []struct {
		name    string
		flags   uint8
		opts    []byte
		max     uint16
		changed bool
		wantMSS uint16
	}{
		{"SYN 1460 to 1300", packet.TCPFlagSYN, packettest.MSSOption(1460), 1300, true, 1300},
		{"SYN-ACK 1460 to 1300", packet.TCPFlagSYN | packet.TCPFlagACK, packettest.MSSOption(1460), 1300, true, 1300},
		{"odd offset", packet.TCPFlagSYN, append([]byte{1}, append(packettest.MSSOption(8960), 1, 1, 1)...), 1300, true, 1300},
		{"after window scale and SACK-permitted", packet.TCPFlagSYN, append([]byte{3, 3, 7, 4, 2}, packettest.MSSOption(1460)...), 1240, true, 1240},
		{"already small", packet.TCPFlagSYN, packettest.MSSOption(536), 1300, false, 536},
		{"not a SYN", packet.TCPFlagACK, packettest.MSSOption(1460), 1300, false, 1460},
		{"no MSS option", packet.TCPFlagSYN, []byte{1, 1, 1, 1}, 1300, false, 0},
		{"end of options first", packet.TCPFlagSYN, append([]byte{0, 0, 0, 0}, packettest.MSSOption(1460)...), 1300, false, 0},
		{"zero-length option", packet.TCPFlagSYN, append([]byte{5, 0, 1, 1}, packettest.MSSOption(1460)...), 1300, false, 0},
	}
	for _, tc := range cases {
		seg := packettest.TCP("10.244.1.5", "10.244.2.7", 40000, 443, tc.flags, tc.opts, []byte("x"))
		pkt := packettest.IPv4{Src: "10.244.1.5", Dst: "10.244.2.7", Proto: packet.ProtoTCP, Payload: seg}.Build()
		ip, err := packet.ParseIPv4(pkt)
		if err != nil {
			t.Fatal(err)
		}
		tcp, err := packet.ParseTCP(ip.Payload())
		if err != nil {
			t.Fatal(err)
		}
		if got := tcp.ClampMSS(tc.max); got != tc.changed {
			t.Errorf("%s: changed %v, want %v", tc.name, got, tc.changed)
		}
		if mss, _ := tcp.MSS(); mss != tc.wantMSS {
			t.Errorf("%s: MSS %d, want %d", tc.name, mss, tc.wantMSS)
		}
		if p := packettest.Problem(pkt); p != "" {
			t.Errorf("%s: %s", tc.name, p)
		}
		if !gvisorTCPValid(ip) {
			t.Errorf("%s: gVisor says the TCP checksum is wrong", tc.name)
		}
	}
}

func TestLinkAndOverlay(t *testing.T) {
	frame := make([]byte, packet.EthernetHeaderLen+packet.ARPLen)
	src := packet.MAC{0x02, 0, 0, 0, 0, 1}
	packet.PutEthernet(frame, packet.Broadcast, src, packet.EtherTypeARP)
	packet.PutARP(frame[packet.EthernetHeaderLen:], packet.ARPRequest, src, [4]byte{10, 80, 0, 2}, packet.MAC{}, [4]byte{10, 80, 0, 1})
	eth, err := packet.ParseEthernet(frame)
	if err != nil || eth.Dst() != packet.Broadcast || eth.Src() != src || eth.EtherType() != packet.EtherTypeARP {
		t.Fatalf("Ethernet: %v", err)
	}
	arp, err := packet.ParseARP(eth.Payload())
	if err != nil || arp.Op() != packet.ARPRequest || arp.SenderMAC() != src || arp.TargetAddr().String() != "10.80.0.1" || arp.SenderIP() != [4]byte{10, 80, 0, 2} {
		t.Fatalf("ARP: %v", err)
	}
	frame[packet.EthernetHeaderLen+5] = 16 // IPv6 protocol address length
	if _, err := packet.ParseARP(eth.Payload()); err != packet.ErrUnsupported {
		t.Errorf("ARP with plen 16: %v", err)
	}

	inner := make([]byte, 60)
	packet.PutEthernet(inner, packet.Broadcast, src, packet.EtherTypeIPv4)
	vx := append(make([]byte, packet.VXLANHeaderLen), inner...)
	packet.PutVXLAN(vx, 0xabcdef)
	v, err := packet.ParseVXLAN(vx)
	if err != nil || v.VNI() != 0xabcdef || !bytes.Equal(v.Payload(), inner) {
		t.Fatalf("VXLAN: %v vni %#x", err, v.VNI())
	}
	vx[0] = 0
	if _, err := packet.ParseVXLAN(vx); err != packet.ErrFlags {
		t.Errorf("VXLAN without I flag: %v", err)
	}
	if _, err := packet.ParseVXLAN(vx[:packet.VXLANHeaderLen+13]); err != packet.ErrTruncated {
		t.Errorf("VXLAN with short inner frame: %v", err)
	}

	gn := append(make([]byte, packet.GeneveMinHeaderLen), inner...)
	packet.PutGeneve(gn, packet.GeneveProtoEthernet, 77)
	g, err := packet.ParseGeneve(gn)
	if err != nil || g.VNI() != 77 || g.Protocol() != packet.GeneveProtoEthernet || g.OAM() || g.Critical() || !bytes.Equal(g.Payload(), inner) {
		t.Fatalf("Geneve: %v", err)
	}
	gn[0] = 0x02 // 8 bytes of options
	g, err = packet.ParseGeneve(gn)
	if err != nil || g.HeaderLen() != 16 || len(g.Options()) != 8 {
		t.Errorf("Geneve with options: %v", err)
	}
	gn[0] = 0x3f // 252 bytes of options, beyond the buffer
	if _, err := packet.ParseGeneve(gn); err != packet.ErrTruncated {
		t.Errorf("Geneve options beyond buffer: %v", err)
	}
	gn[0] = 0x40 // version 1
	if _, err := packet.ParseGeneve(gn); err != packet.ErrVersion {
		t.Errorf("Geneve version 1: %v", err)
	}
}

func TestErrorsDoNotAllocate(t *testing.T) {
	var sink error
	if n := testing.AllocsPerRun(100, func() { sink = packet.ErrTruncated }); n != 0 {
		t.Errorf("converting an Error to error allocates %v times", n)
	}
	if sink.Error() != "packet: truncated" {
		t.Errorf("text %q", sink.Error())
	}
}

func TestHotPathDoesNotAllocate(t *testing.T) {
	seg := packettest.TCP("10.244.1.5", "10.244.2.7", 40000, 443, packet.TCPFlagSYN, packettest.MSSOption(1460), make([]byte, 1000))
	pkt := packettest.IPv4{Src: "10.244.1.5", Dst: "10.244.2.7", Proto: packet.ProtoTCP, Payload: seg}.Build()
	n := testing.AllocsPerRun(1000, func() {
		ip, err := packet.ParseIPv4(pkt)
		if err != nil {
			panic(err)
		}
		ip.SetDst(ip.Src())
		ip.DecTTL()
		tcp, _ := packet.ParseTCP(ip.Payload())
		tcp.ClampMSS(1300)
		pkt[8] = 64
		ip.ComputeChecksum()
	})
	if n != 0 {
		t.Errorf("parse and rewrite allocate %v times per packet", n)
	}
}

func BenchmarkParseIPv4(b *testing.B) {
	pkt := packettest.IPv4{Src: "10.244.1.5", Dst: "10.244.2.7", Proto: packet.ProtoUDP, Payload: make([]byte, 1380)}.Build()
	b.SetBytes(int64(len(pkt)))
	for b.Loop() {
		if _, err := packet.ParseIPv4(pkt); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkChecksum1400(b *testing.B) {
	buf := make([]byte, 1400)
	b.SetBytes(1400)
	for b.Loop() {
		packet.Checksum(buf)
	}
}

// TestIPv6Upper walks extension headers to the upper layer and refuses what it cannot walk.
func TestIPv6Upper(t *testing.T) {
	s, d := "2001:db8::1", "2001:db8::2"
	udp := packettest.UDP(s, d, 1, 2, []byte("x"), false)
	hbh, dopt := packettest.ExtHeader(packet.ProtoHopByHop, 8), packettest.ExtHeader(packet.ProtoDestOpts, 16)
	ah := make([]byte, 16)
	ah[0], ah[1] = packet.ProtoAH, 2 // (2+2)*4 = 16 bytes
	for _, tc := range []struct {
		name string
		pkt  packettest.IPv6
		want packet.IPv6Upper
		err  error
	}{
		{"no extension headers", packettest.IPv6{Next: 17, Payload: udp}, packet.IPv6Upper{Proto: 17, Offset: 40}, nil},
		{"hop-by-hop and destination options", packettest.IPv6{Next: 0, Proto: 17, Ext: [][]byte{hbh, dopt}, Payload: udp}, packet.IPv6Upper{Proto: 17, Offset: 64}, nil},
		{"authentication header", packettest.IPv6{Next: packet.ProtoAH, Proto: 17, Ext: [][]byte{ah}, Payload: udp}, packet.IPv6Upper{Proto: 17, Offset: 56}, nil},
		{"first fragment", packettest.IPv6{Next: 44, Proto: 6, Ext: [][]byte{packettest.FragmentHeader(0, true, 1)}, Payload: udp},
			packet.IPv6Upper{Proto: 6, Offset: 48, Fragmented: true}, nil},
		{"later fragment", packettest.IPv6{Next: 44, Proto: 6, Ext: [][]byte{packettest.FragmentHeader(1232, false, 1)}, Payload: udp},
			packet.IPv6Upper{Proto: 6, Offset: 48, Fragmented: true, FragmentOffset: 1232}, nil},
		{"routing header", packettest.IPv6{Next: 43, Proto: 17, Ext: [][]byte{packettest.RoutingHeader(2, d, s)}, Payload: udp},
			packet.IPv6Upper{Proto: 17, Offset: 80, SegmentsLeft: 2}, nil},
		{"no next header", packettest.IPv6{Next: packet.ProtoNoNext}, packet.IPv6Upper{Proto: packet.ProtoNoNext, Offset: 40}, nil},
		{"header past the end", packettest.IPv6{Next: 0, Payload: []byte{17, 1, 0, 0, 0, 0, 0, 0}}, packet.IPv6Upper{}, packet.ErrTruncated},
	} {
		tc.pkt.Src, tc.pkt.Dst = s, d
		b := tc.pkt.Build()
		ip, err := packet.ParseIPv6(b)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got, err := ip.Upper()
		if err != tc.err || (err == nil && got != tc.want) {
			t.Errorf("%s: %+v %v, want %+v %v", tc.name, got, err, tc.want, tc.err)
		}
	}
	// A chain longer than MaxIPv6ExtHeaders is refused, not walked.
	var chain [][]byte
	for range packet.MaxIPv6ExtHeaders + 1 {
		chain = append(chain, packettest.ExtHeader(packet.ProtoDestOpts, 8))
	}
	ip, _ := packet.ParseIPv6(packettest.IPv6{Src: s, Dst: d, Next: packet.ProtoDestOpts, Proto: 17, Ext: chain, Payload: udp}.Build())
	if _, err := ip.Upper(); err != packet.ErrUnsupported {
		t.Errorf("%d extension headers: %v, want ErrUnsupported", len(chain), err)
	}
	// Jumbograms are not supported; a payload length past the buffer is truncated.
	jumbo := packettest.IPv6{Src: s, Dst: d, Next: 0, Proto: 17, Ext: [][]byte{hbh}, Payload: udp}.Build()
	jumbo[4], jumbo[5] = 0, 0
	if _, err := packet.ParseIPv6(jumbo); err != packet.ErrUnsupported {
		t.Errorf("jumbogram: %v, want ErrUnsupported", err)
	}
	if _, err := packet.ParseIPv6(jumbo[:39]); err != packet.ErrTruncated {
		t.Errorf("39 bytes: %v, want ErrTruncated", err)
	}
}

// FuzzIPv6Upper: the walk never panics, and what it returns lies within the packet.
func FuzzIPv6Upper(f *testing.F) {
	f.Add(packettest.IPv6{Src: "2001:db8::1", Dst: "2001:db8::2", Next: 0, Proto: 17, Ext: [][]byte{packettest.ExtHeader(packet.ProtoHopByHop, 8)}, Payload: []byte("12345678")}.Build())
	f.Add(packettest.IPv6{Src: "2001:db8::1", Dst: "2001:db8::2", Next: 44, Proto: 6, Ext: [][]byte{packettest.FragmentHeader(8, true, 3)}}.Build())
	f.Fuzz(func(t *testing.T, b []byte) {
		ip, err := packet.ParseIPv6(b)
		if err != nil {
			return
		}
		u, err := ip.Upper()
		if err == nil && (u.Offset < packet.IPv6HeaderLen || u.Offset > len(ip)) {
			t.Fatalf("upper layer at %d of a %d-byte packet", u.Offset, len(ip))
		}
		if u.FragmentOffset%8 != 0 {
			t.Fatalf("fragment offset %d", u.FragmentOffset)
		}
	})
}
