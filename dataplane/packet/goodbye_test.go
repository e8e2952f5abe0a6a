package packet_test

import (
	"bytes"
	"testing"

	"github.com/skein-net/skein/dataplane/packet"
)

var (
	goodbyeSrc = [4]byte{169, 254, 100, 1}
	goodbyeDst = [4]byte{169, 254, 100, 2}
)

func TestGoodbye(t *testing.T) {
	b := make([]byte, packet.GoodbyeLen)
	n := packet.PutGoodbye(b, goodbyeSrc, goodbyeDst)
	ip, err := packet.ParseIPv4(b[:n])
	if err != nil {
		t.Fatal(err)
	}
	if ip.Src() != goodbyeSrc || ip.Dst() != goodbyeDst || ip.Protocol() != packet.ProtoICMP || packet.Checksum(ip.Payload()) != 0 {
		t.Errorf("goodbye %x: bad header or ICMP checksum", b[:n])
	}
	if !packet.IsGoodbye(b[:n], goodbyeSrc) {
		t.Error("a goodbye is not recognised")
	}
	if packet.IsGoodbye(b[:n], goodbyeDst) {
		t.Error("a goodbye from another address is recognised")
	}
	reply := bytes.Clone(b[:n])
	reply[packet.IPv4MinHeaderLen] = 0 // an echo reply with the same payload
	if packet.IsGoodbye(reply, goodbyeSrc) {
		t.Error("an echo reply is recognised as a goodbye")
	}
	if packet.IsGoodbye(b[:n-1], goodbyeSrc) {
		t.Error("a truncated goodbye is recognised")
	}
}

// FuzzIsGoodbye: whatever arrives, IsGoodbye does not panic, and what it accepts is an IPv4
// ICMP echo request from the given source carrying the magic.
func FuzzIsGoodbye(f *testing.F) {
	b := make([]byte, packet.GoodbyeLen)
	f.Add(b[:packet.PutGoodbye(b, goodbyeSrc, goodbyeDst)])
	f.Add([]byte{0x45})
	f.Fuzz(func(t *testing.T, pkt []byte) {
		if !packet.IsGoodbye(pkt, goodbyeSrc) {
			return
		}
		ip, err := packet.ParseIPv4(pkt)
		if err != nil || ip.Src() != goodbyeSrc || ip.Protocol() != packet.ProtoICMP || !bytes.Contains(ip.Payload(), packet.GoodbyeMagic) {
			t.Fatalf("accepted %x", pkt)
		}
	})
}
