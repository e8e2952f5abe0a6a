package packet_test

import (
	"bytes"
	"testing"

	"github.com/skein-net/skein/dataplane/packet"
	pt "github.com/skein-net/skein/dataplane/packet/packettest"
)

// TestCompleteTransportChecksum: a packet whose TCP or UDP checksum holds only the pseudo-
// header's sum (as checksum offload leaves it) or garbage gets the full checksum back, the one
// packettest computed independently; what must stay as it is does.
func TestCompleteTransportChecksum(t *testing.T) {
	tcp := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: packet.ProtoTCP, TTL: 64,
		Payload: pt.TCP("10.244.1.5", "10.71.2.7", 40000, 80, packet.TCPFlagSYN, pt.MSSOption(1460), []byte("data"))}.Build()
	udp := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: packet.ProtoUDP, TTL: 64,
		Payload: pt.UDP("10.244.1.5", "10.71.2.7", 5000, 53, []byte("query"), false)}.Build()
	for _, tc := range []struct {
		name string
		pkt  []byte
		off  int
	}{{"tcp", tcp, packet.TCPChecksumOffset}, {"udp", udp, packet.UDPChecksumOffset}} {
		want := bytes.Clone(tc.pkt)
		for _, garbage := range [][2]byte{{0x12, 0x34}, {0xff, 0xff}} {
			got := bytes.Clone(tc.pkt)
			ip, _ := packet.ParseIPv4(got)
			copy(ip.Payload()[tc.off:], garbage[:])
			packet.CompleteTransportChecksum(ip)
			if !bytes.Equal(got, want) {
				t.Errorf("%s with checksum %x: completed to %x, want %x", tc.name, garbage, got, want)
			}
		}
	}

	noSum := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: packet.ProtoUDP, TTL: 64,
		Payload: pt.UDP("10.244.1.5", "10.71.2.7", 5000, 53, []byte("query"), true)}.Build()
	frag := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: packet.ProtoTCP, TTL: 64, MF: true,
		Payload: pt.TCP("10.244.1.5", "10.71.2.7", 40000, 80, packet.TCPFlagACK, nil, []byte("first fragment"))}.Build()
	short := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: packet.ProtoTCP, TTL: 64, Payload: []byte{1, 2, 3}}.Build()
	for name, pkt := range map[string][]byte{"udp without checksum": noSum, "fragment": frag, "truncated tcp": short} {
		got := bytes.Clone(pkt)
		ip, _ := packet.ParseIPv4(got)
		packet.CompleteTransportChecksum(ip)
		if !bytes.Equal(got, pkt) {
			t.Errorf("%s changed: %x -> %x", name, pkt, got)
		}
	}
}

// TestCompleteTransportChecksum6: the same for IPv6, past extension headers; fragments and
// packets with Routing segments left stay as they are.
func TestCompleteTransportChecksum6(t *testing.T) {
	const s, d = "fd00:244:0:1::5", "fd71:0:0:2::7"
	tcp := pt.IPv6{Src: s, Dst: d, Next: packet.ProtoTCP, Payload: pt.TCP(s, d, 40000, 80, packet.TCPFlagSYN, pt.MSSOption(1440), []byte("data"))}.Build()
	udp := pt.IPv6{Src: s, Dst: d, Next: packet.ProtoUDP, Payload: pt.UDP(s, d, 5000, 53, []byte("query"), false)}.Build()
	hbh := pt.IPv6{Src: s, Dst: d, Ext: [][]byte{pt.ExtHeader(packet.ProtoHopByHop, 8), pt.ExtHeader(packet.ProtoDestOpts, 16)}, Proto: packet.ProtoTCP,
		Payload: pt.TCP(s, d, 40000, 80, packet.TCPFlagACK, nil, []byte("behind extension headers"))}.Build()
	for _, tc := range []struct {
		name string
		pkt  []byte
		off  int
	}{{"tcp", tcp, 40 + packet.TCPChecksumOffset}, {"udp", udp, 40 + packet.UDPChecksumOffset}, {"tcp after options", hbh, 40 + 24 + packet.TCPChecksumOffset}} {
		if p := pt.Problem6(tc.pkt); p != "" {
			t.Fatalf("%s: the test's packet: %s", tc.name, p)
		}
		for _, garbage := range [][2]byte{{0x12, 0x34}, {0xff, 0xff}, {0, 0}} {
			got := bytes.Clone(tc.pkt)
			copy(got[tc.off:], garbage[:])
			packet.CompleteTransportChecksum6(packet.IPv6(got))
			if !bytes.Equal(got, tc.pkt) {
				t.Errorf("%s with checksum %x: completed to %x, want %x", tc.name, garbage, got[tc.off:tc.off+2], tc.pkt[tc.off:tc.off+2])
			}
		}
	}
	frag := pt.IPv6{Src: s, Dst: d, Ext: [][]byte{pt.FragmentHeader(0, true, 7)}, Proto: packet.ProtoTCP,
		Payload: pt.TCP(s, d, 40000, 80, packet.TCPFlagACK, nil, []byte("first fragment"))}.Build()
	routed := pt.IPv6{Src: s, Dst: d, Ext: [][]byte{pt.RoutingHeader(1, "fd00:9::1")}, Proto: packet.ProtoTCP,
		Payload: pt.TCP(s, "fd00:9::1", 40000, 80, packet.TCPFlagACK, nil, []byte("source routed"))}.Build()
	short := pt.IPv6{Src: s, Dst: d, Next: packet.ProtoTCP, Payload: []byte{1, 2, 3}}.Build()
	icmp := pt.IPv6{Src: s, Dst: d, Next: packet.ProtoICMPv6, Payload: pt.ICMPv6(s, d, 128, 0, [4]byte{}, []byte("echo"))}.Build()
	for name, pkt := range map[string][]byte{"fragment": frag, "routing segments left": routed, "truncated tcp": short, "icmpv6": icmp} {
		got := bytes.Clone(pkt)
		copy(got[len(got)-2:], []byte{0xde, 0xad}) // whatever the last bytes are, nothing recomputes them
		want := bytes.Clone(got)
		packet.CompleteTransportChecksum6(packet.IPv6(got))
		if !bytes.Equal(got, want) {
			t.Errorf("%s changed: %x -> %x", name, want, got)
		}
	}
}
