package packet_test

import (
	"bytes"
	"testing"

	"github.com/skein-net/skein/dataplane/packet"
)

var (
	goodbyeSrc = [4]byte{169, 254, 100, 1}
	goodbyeDst = [4]byte{169, 254, 100, 2}
	goodbyeKey = packet.GoodbyeKey{1, 2, 3}
)

func TestGoodbye(t *testing.T) {
	b := make([]byte, packet.GoodbyeLen)
	n := packet.PutGoodbye(b, goodbyeSrc, goodbyeDst, &goodbyeKey, 1_795_000_000_123_456_789, [8]byte{9, 9})
	ip, err := packet.ParseIPv4(b[:n])
	if err != nil {
		t.Fatal(err)
	}
	if ip.Src() != goodbyeSrc || ip.Dst() != goodbyeDst || ip.Protocol() != packet.ProtoICMP || packet.Checksum(ip.Payload()) != 0 {
		t.Errorf("goodbye %x: bad header or ICMP checksum", b[:n])
	}
	if at, ok := packet.ParseGoodbye(b[:n], goodbyeSrc, &goodbyeKey); !ok || at != 1_795_000_000_123_456_789 {
		t.Errorf("a goodbye is not recognised (%v) or its time is wrong (%d)", ok, at)
	}
	if _, ok := packet.ParseGoodbye(b[:n], goodbyeDst, &goodbyeKey); ok {
		t.Error("a goodbye from another address is recognised")
	}
	other := packet.GoodbyeKey{1, 2, 4}
	if _, ok := packet.ParseGoodbye(b[:n], goodbyeSrc, &other); ok {
		t.Error("a goodbye under another key is recognised")
	}
	reply := bytes.Clone(b[:n])
	reply[packet.IPv4MinHeaderLen] = 0 // an echo reply with the same payload
	if _, ok := packet.ParseGoodbye(reply, goodbyeSrc, &goodbyeKey); ok {
		t.Error("an echo reply is recognised as a goodbye")
	}
	if _, ok := packet.ParseGoodbye(b[:n-1], goodbyeSrc, &goodbyeKey); ok {
		t.Error("a truncated goodbye is recognised")
	}
	// The magic alone, as the unauthenticated goodbye was: refused.
	forged := bytes.Clone(b[:n])
	forged[n-1] ^= 1
	if _, ok := packet.ParseGoodbye(forged, goodbyeSrc, &goodbyeKey); ok {
		t.Error("a goodbye with a wrong MAC is recognised")
	}
	moved := bytes.Clone(b[:n])
	moved[packet.IPv4MinHeaderLen+8+len(packet.GoodbyeMagic)] ^= 1 // its time
	if _, ok := packet.ParseGoodbye(moved, goodbyeSrc, &goodbyeKey); ok {
		t.Error("a goodbye whose time was changed is recognised")
	}
}

// FuzzParseGoodbye: whatever arrives, ParseGoodbye does not panic, and what it accepts is an
// IPv4 ICMP echo request from the given source carrying the magic.
func FuzzParseGoodbye(f *testing.F) {
	b := make([]byte, packet.GoodbyeLen)
	f.Add(b[:packet.PutGoodbye(b, goodbyeSrc, goodbyeDst, &goodbyeKey, 1, [8]byte{})])
	f.Add([]byte{0x45})
	f.Fuzz(func(t *testing.T, pkt []byte) {
		if _, ok := packet.ParseGoodbye(pkt, goodbyeSrc, &goodbyeKey); !ok {
			return
		}
		ip, err := packet.ParseIPv4(pkt)
		if err != nil || ip.Src() != goodbyeSrc || ip.Protocol() != packet.ProtoICMP || !bytes.Contains(ip.Payload(), packet.GoodbyeMagic) {
			t.Fatalf("accepted %x", pkt)
		}
	})
}
