package dataplane

import (
	"encoding/binary"
	"sync"
	"time"

	"github.com/skein-net/skein/dataplane/packet"
)

// ICMP error types and codes the gateway sends.
const (
	icmpDestUnreach   = 3
	icmpFragNeeded    = 4 // code of icmpDestUnreach
	icmpTimeExceeded  = 11
	icmpTTLInTransit  = 0 // code of icmpTimeExceeded
	icmpErrorMaxTotal = 576
)

// ICMPv6 error codes the gateway sends (the types are packet.ICMPv6TimeExceeded and
// packet.ICMPv6PacketTooBig), and the size its errors stay within: the IPv6 minimum MTU
// (RFC 4443 section 2.4 (c)).
const (
	icmp6HopLimitInTransit = 0 // code of packet.ICMPv6TimeExceeded
	icmp6ErrorMaxTotal     = 1280
)

// icmpBufLen is the size of a buffer that holds any error the gateway builds, with room for
// the overlay header in front.
const icmpBufLen = 64 + max(icmpErrorMaxTotal, icmp6ErrorMaxTotal)

// mayAnswer reports whether an ICMP error may be sent about orig (RFC 1122 3.2.2 and RFC 1812
// 4.3.2.7): not about ICMP errors, not about non-first fragments, not to broadcast, multicast,
// unspecified or loopback sources.
func mayAnswer(orig packet.IPv4) bool {
	if orig.FragmentOffset() != 0 {
		return false
	}
	src := orig.Src()
	if src[0] == 0 || src[0] == 127 || src[0] >= 224 {
		return false
	}
	if orig.Protocol() == packet.ProtoICMP {
		l4 := orig.Payload()
		if len(l4) < packet.ICMPHeaderLen || packet.ICMPv4(l4).IsError() {
			return false
		}
	}
	return true
}

// buildICMPError writes an ICMP error about orig into out (at least icmpErrorMaxTotal bytes),
// from src to orig's source, quoting as much of orig as fits in 576 bytes (as Linux does), and
// returns its length. rest is the 4 bytes after the checksum (next-hop MTU for
// fragmentation needed, in the low 16 bits).
func buildICMPError(out []byte, src [4]byte, typ, code uint8, rest uint32, orig packet.IPv4) int {
	quote := min(len(orig), icmpErrorMaxTotal-packet.IPv4MinHeaderLen-packet.ICMPHeaderLen)
	total := packet.IPv4MinHeaderLen + packet.ICMPHeaderLen + quote
	packet.PutIPv4(out, packet.IPv4Fields{
		TTL:      64,
		Protocol: packet.ProtoICMP,
		Src:      src,
		Dst:      orig.Src(),
	}, total)
	m := out[packet.IPv4MinHeaderLen:total]
	m[0], m[1] = typ, code
	m[2], m[3] = 0, 0
	binary.BigEndian.PutUint32(m[4:], rest)
	copy(m[packet.ICMPHeaderLen:], orig[:quote])
	packet.ICMPv4(m).SetChecksum(packet.Checksum(m))
	return total
}

// mayAnswer6 reports whether an ICMPv6 error may be sent about orig (RFC 4443 section 2.4
// (e)): not about an ICMPv6 error or a redirect (nor a packet whose headers cannot be walked
// to tell), not from an unspecified, loopback, multicast or link-local source, and not about
// a packet to a multicast address unless the error is a Packet Too Big.
func mayAnswer6(orig packet.IPv6, tooBig bool) bool {
	src, dst := orig.Src(), orig.Dst()
	if src[0] == 0xff || isLinkLocal6(src) || dst[0] == 0xff && !tooBig {
		return false
	}
	if src == ([16]byte{}) || src == ([16]byte{15: 1}) {
		return false
	}
	up, err := orig.Upper()
	if err != nil {
		return false
	}
	if up.Proto == packet.ProtoICMPv6 && !(up.Fragmented && up.FragmentOffset != 0) {
		if len(orig) < up.Offset+1 {
			return false
		}
		if typ := orig[up.Offset]; typ < 128 || typ == icmp6Redirect {
			return false
		}
	}
	return true
}

// icmp6Redirect is the type of an ICMPv6 redirect (RFC 4861), never answered with an error.
const icmp6Redirect = 137

// buildICMPv6Error writes an ICMPv6 error about orig into out (at least icmp6ErrorMaxTotal
// bytes), from src to orig's source, quoting as much of orig as fits in 1280 bytes, and returns
// its length. rest is the 4 bytes after the checksum (the MTU of a Packet Too Big).
func buildICMPv6Error(out []byte, src [16]byte, typ, code uint8, rest uint32, orig packet.IPv6) int {
	quote := min(len(orig), icmp6ErrorMaxTotal-packet.IPv6HeaderLen-packet.ICMPHeaderLen)
	payload := packet.ICMPHeaderLen + quote
	h := out[:packet.IPv6HeaderLen]
	h[0], h[1], h[2], h[3] = 0x60, 0, 0, 0
	binary.BigEndian.PutUint16(h[4:], uint16(payload))
	h[6], h[7] = packet.ProtoICMPv6, 64
	dst := orig.Src()
	copy(h[packet.IPv6SrcOffset:], src[:])
	copy(h[packet.IPv6DstOffset:], dst[:])
	m := out[packet.IPv6HeaderLen : packet.IPv6HeaderLen+payload]
	m[0], m[1] = typ, code
	m[2], m[3] = 0, 0
	binary.BigEndian.PutUint32(m[4:], rest)
	copy(m[packet.ICMPHeaderLen:], orig[:quote])
	packet.ICMPv6(m).SetChecksum(^packet.Fold(packet.Sum(m, packet.PseudoSum6(src, dst, packet.ProtoICMPv6, payload))))
	return packet.IPv6HeaderLen + payload
}

// limiter is a token bucket for ICMP errors.
type limiter struct {
	mu     sync.Mutex
	tokens float64
	last   time.Time
}

// allow takes a token if one is available at rate per second with the given burst.
func (l *limiter) allow(now time.Time, rate, burst int) bool {
	if rate < 0 {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last.IsZero() {
		l.tokens = float64(burst)
	} else {
		l.tokens = min(float64(burst), l.tokens+now.Sub(l.last).Seconds()*float64(rate))
	}
	l.last = now
	if l.tokens < 1 {
		return false
	}
	l.tokens--
	return true
}
