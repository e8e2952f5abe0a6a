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
