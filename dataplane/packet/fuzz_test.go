package packet_test

import (
	"testing"

	"github.com/skein-net/skein/dataplane/packet"
	"github.com/skein-net/skein/dataplane/packet/packettest"
)

// sameSum reports whether two folded one's complement sums are equal, treating +0 and -0
// (0x0000 and 0xffff) as the same number.
func sameSum(a, b uint16) bool {
	if a == 0 {
		a = 0xffff
	}
	if b == 0 {
		b = 0xffff
	}
	return a == b
}

func seedPackets(f *testing.F) {
	f.Add(packettest.IPv4{Src: "10.0.0.1", Dst: "10.0.0.2", Proto: packet.ProtoTCP,
		Payload: packettest.TCP("10.0.0.1", "10.0.0.2", 1, 2, packet.TCPFlagSYN, packettest.MSSOption(1460), nil)}.Build())
	f.Add(packettest.IPv4{Src: "10.0.0.1", Dst: "10.0.0.2", Proto: packet.ProtoUDP, Options: []byte{1, 1, 1, 0},
		Payload: packettest.UDP("10.0.0.1", "10.0.0.2", 1, 2, []byte("data"), false)}.Build())
	f.Add(packettest.IPv4{Src: "10.0.0.1", Dst: "10.0.0.2", Proto: packet.ProtoICMP,
		Payload: packettest.ICMP(packet.ICMPEcho, 0, [4]byte{0, 1, 0, 1}, []byte("ping"))}.Build())
	f.Add([]byte{0x45, 0, 0, 20})
	f.Add([]byte{0x08, 0, 0, 0, 0, 0, 1, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 1, 8, 0})
	f.Add([]byte{0x01, 0, 0x65, 0x58, 0, 0, 7, 0, 1, 2, 3, 4})
}

// FuzzParse feeds arbitrary bytes to every parser and checks that a view, when returned, is
// within the input and consistent with its own length fields, and that no accessor panics.
func FuzzParse(f *testing.F) {
	seedPackets(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		if ip, err := packet.ParseIPv4(b); err == nil {
			if len(ip) > len(b) || len(ip) != ip.TotalLen() || ip.HeaderLen() < 20 || ip.HeaderLen() > len(ip) {
				t.Fatalf("IPv4 view %d bytes, total %d, header %d, input %d", len(ip), ip.TotalLen(), ip.HeaderLen(), len(b))
			}
			if packet.Fold(packet.Sum(ip.Header(), 0)) != 0xffff {
				t.Fatal("accepted a header whose checksum does not verify")
			}
			_, _, _, _ = ip.SrcAddr(), ip.DstAddr(), ip.FragmentOffset(), ip.Protocol()
			if len(ip.Payload()) != ip.TotalLen()-ip.HeaderLen() {
				t.Fatal("payload length")
			}
		}
		if ip, err := packet.ParseIPv4Header(b); err == nil && ip.HeaderLen() > len(b) {
			t.Fatal("IPv4 header beyond input")
		}
		if ip6, err := packet.ParseIPv6(b); err == nil {
			if len(ip6) > len(b) || len(ip6) < packet.IPv6HeaderLen {
				t.Fatal("IPv6 view")
			}
			_, _ = ip6.SrcAddr(), ip6.DstAddr()
		}
		if tcp, err := packet.ParseTCP(b); err == nil {
			if tcp.DataOffset() > len(tcp) || len(tcp.Options()) != tcp.DataOffset()-20 {
				t.Fatal("TCP options beyond segment")
			}
			tcp.MSS()
		}
		if udp, err := packet.ParseUDP(b); err == nil && (len(udp) != udp.Length() || len(udp) > len(b)) {
			t.Fatal("UDP view length")
		}
		if m, err := packet.ParseICMPv4(b); err == nil {
			_, _, _ = m.IsError(), m.MTU(), m.Payload()
		}
		if e, err := packet.ParseEthernet(b); err == nil {
			_, _, _ = e.Dst(), e.Src(), e.EtherType()
		}
		if a, err := packet.ParseARP(b); err == nil {
			_, _, _, _ = a.Op(), a.SenderMAC(), a.TargetAddr(), a.TargetMAC()
		}
		if v, err := packet.ParseVXLAN(b); err == nil && len(v.Payload()) < packet.EthernetHeaderLen {
			t.Fatal("VXLAN inner frame shorter than an Ethernet header")
		}
		if g, err := packet.ParseGeneve(b); err == nil {
			if g.HeaderLen() > len(g) {
				t.Fatal("Geneve options beyond input")
			}
			_, _, _ = g.Options(), g.Payload(), g.VNI()
		}
	})
}

// FuzzClampMSS clamps arbitrary TCP segments and checks that the one's complement sum over the
// segment (checksum field included) is unchanged, which is what keeps a valid checksum valid,
// and that a changed MSS is exactly the maximum.
func FuzzClampMSS(f *testing.F) {
	f.Add(packettest.TCP("10.0.0.1", "10.0.0.2", 1, 2, packet.TCPFlagSYN, packettest.MSSOption(1460), nil), uint16(1300))
	f.Add(packettest.TCP("10.0.0.1", "10.0.0.2", 1, 2, packet.TCPFlagSYN, append([]byte{1}, packettest.MSSOption(9000)...), []byte{1}), uint16(1240))
	f.Add(packettest.TCP("10.0.0.1", "10.0.0.2", 1, 2, packet.TCPFlagSYN, []byte{1, 1, 2, 4, 0xff, 0xff, 1}, nil), uint16(0))
	f.Fuzz(func(t *testing.T, b []byte, max uint16) {
		tcp, err := packet.ParseTCP(b)
		if err != nil {
			return
		}
		before := packet.Fold(packet.Sum(tcp, 0))
		changed := tcp.ClampMSS(max)
		if after := packet.Fold(packet.Sum(tcp, 0)); !sameSum(before, after) {
			t.Fatalf("segment sum %#04x became %#04x (changed %v)", before, after, changed)
		}
		if changed {
			if mss, ok := tcp.MSS(); !ok || mss != max {
				t.Fatalf("clamped MSS %d (%v), want %d", mss, ok, max)
			}
		}
	})
}
