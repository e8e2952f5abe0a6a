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

// icmpBufLen is the size of a buffer that holds any error the gateway builds, with room for
// the overlay header in front.
const icmpBufLen = 64 + icmpErrorMaxTotal

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
