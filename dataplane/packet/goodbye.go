package packet

import "bytes"

// The goodbye is skein's one message between gateways of its own: an ICMP echo request from a
// gateway's tunnel address to its peer's, through the tunnel, whose payload starts with
// GoodbyeMagic. An active replica that stops gracefully sends it so that its peer reconnects
// to the successor at once (appliance/reconnect.go). It is an echo request so that a peer that
// does not know it (a stock WireGuard host) simply answers it.

// GoodbyeMagic starts the payload of a goodbye.
var GoodbyeMagic = []byte("skein: goodbye, reconnect")

const icmpEchoHeaderLen = 8

// GoodbyeLen is the length of a goodbye packet.
var GoodbyeLen = IPv4MinHeaderLen + icmpEchoHeaderLen + len(GoodbyeMagic)

// PutGoodbye writes a goodbye from src to dst into b, which must hold GoodbyeLen bytes, and
// returns its length.
func PutGoodbye(b []byte, src, dst [4]byte) int {
	n := GoodbyeLen
	PutIPv4(b, IPv4Fields{TTL: 64, Protocol: ProtoICMP, Src: src, Dst: dst}, n)
	icmp := b[IPv4MinHeaderLen:n]
	clear(icmp[:icmpEchoHeaderLen])
	icmp[0] = ICMPEcho
	copy(icmp[icmpEchoHeaderLen:], GoodbyeMagic)
	c := Checksum(icmp)
	icmp[2], icmp[3] = byte(c>>8), byte(c)
	return n
}

// IsGoodbye reports whether pkt, an IPv4 packet, is a goodbye sent from from.
func IsGoodbye(pkt []byte, from [4]byte) bool {
	ip, err := ParseIPv4(pkt)
	if err != nil || ip.Protocol() != ProtoICMP || ip.Src() != from {
		return false
	}
	l4 := ip.Payload()
	return len(l4) >= icmpEchoHeaderLen+len(GoodbyeMagic) && l4[0] == ICMPEcho && l4[1] == 0 &&
		bytes.Equal(l4[icmpEchoHeaderLen:icmpEchoHeaderLen+len(GoodbyeMagic)], GoodbyeMagic)
}
