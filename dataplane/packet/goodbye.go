package packet

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
)

// The goodbye is skein's one message between gateways of its own: an ICMP echo request from a
// gateway's tunnel address to its peer's, through the tunnel, whose payload is GoodbyeMagic,
// the time it was sent, a random nonce and a MAC over all of it (and the addresses) keyed by
// a secret only the two gateways hold (appliance derives it from their static WireGuard keys).
// An active replica that stops gracefully sends it so that its peer reconnects to the
// successor at once (appliance/reconnect.go); a node of either cluster can send the echo but
// cannot make the MAC. It is an echo request so that a peer that does not know it (a stock
// WireGuard host) simply answers it.

// GoodbyeMagic starts the payload of a goodbye.
var GoodbyeMagic = []byte("skein: goodbye, reconnect")

const (
	icmpEchoHeaderLen = 8
	goodbyeTimeLen    = 8 // unix nanoseconds, big-endian
	goodbyeNonceLen   = 8
	goodbyeMACLen     = 16 // HMAC-SHA256, truncated
)

// GoodbyeLen is the length of a goodbye packet.
var GoodbyeLen = IPv4MinHeaderLen + icmpEchoHeaderLen + len(GoodbyeMagic) + goodbyeTimeLen + goodbyeNonceLen + goodbyeMACLen

// GoodbyeKey is the secret a goodbye's MAC is keyed with.
type GoodbyeKey [32]byte

// PutGoodbye writes a goodbye from src to dst, sent at unixNano with nonce and keyed with key,
// into b, which must hold GoodbyeLen bytes, and returns its length.
func PutGoodbye(b []byte, src, dst [4]byte, key *GoodbyeKey, unixNano int64, nonce [8]byte) int {
	n := GoodbyeLen
	PutIPv4(b, IPv4Fields{TTL: 64, Protocol: ProtoICMP, Src: src, Dst: dst}, n)
	icmp := b[IPv4MinHeaderLen:n]
	clear(icmp[:icmpEchoHeaderLen])
	icmp[0] = ICMPEcho
	body := icmp[icmpEchoHeaderLen:]
	copy(body, GoodbyeMagic)
	binary.BigEndian.PutUint64(body[len(GoodbyeMagic):], uint64(unixNano))
	copy(body[len(GoodbyeMagic)+goodbyeTimeLen:], nonce[:])
	signed := len(GoodbyeMagic) + goodbyeTimeLen + goodbyeNonceLen
	copy(body[signed:], goodbyeMAC(key, src, dst, body[:signed]))
	c := Checksum(icmp)
	icmp[2], icmp[3] = byte(c>>8), byte(c)
	return n
}

// ParseGoodbye reports whether pkt, an IPv4 packet, is a goodbye from `from` whose MAC holds
// under key, and when it says it was sent (unix nanoseconds). Telling a replay from a fresh
// goodbye by that time is the caller's part.
func ParseGoodbye(pkt []byte, from [4]byte, key *GoodbyeKey) (unixNano int64, ok bool) {
	ip, err := ParseIPv4(pkt)
	if err != nil || ip.Protocol() != ProtoICMP || ip.Src() != from {
		return 0, false
	}
	l4 := ip.Payload()
	signed := len(GoodbyeMagic) + goodbyeTimeLen + goodbyeNonceLen
	if len(l4) < icmpEchoHeaderLen+signed+goodbyeMACLen || l4[0] != ICMPEcho || l4[1] != 0 {
		return 0, false
	}
	body := l4[icmpEchoHeaderLen:]
	if !bytes.Equal(body[:len(GoodbyeMagic)], GoodbyeMagic) {
		return 0, false
	}
	if !hmac.Equal(body[signed:signed+goodbyeMACLen], goodbyeMAC(key, from, ip.Dst(), body[:signed])) {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(body[len(GoodbyeMagic):])), true
}

func goodbyeMAC(key *GoodbyeKey, src, dst [4]byte, signed []byte) []byte {
	m := hmac.New(sha256.New, key[:])
	m.Write(src[:])
	m.Write(dst[:])
	m.Write(signed)
	return m.Sum(nil)[:goodbyeMACLen]
}
