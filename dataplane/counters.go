package dataplane

import (
	"fmt"
	"sync/atomic"
)

// Direction is which way a packet travels through the gateway.
type Direction uint8

const (
	// ToTunnel: from the overlay (a local pod) into the WireGuard tunnel.
	ToTunnel Direction = iota
	// FromTunnel: out of the tunnel, to the overlay (a local pod).
	FromTunnel
	// NumDirections sizes arrays indexed by Direction.
	NumDirections
)

func (d Direction) String() string {
	switch d {
	case ToTunnel:
		return "to-tunnel"
	case FromTunnel:
		return "from-tunnel"
	}
	return fmt.Sprintf("Direction(%d)", uint8(d))
}

// Counter names what a packet counter counts. Every packet a direction sees ends in exactly
// one of Forwarded, Local, ARPReplied or a Drop counter; the rest (NATUnmatched, NATTranslated,
// MSSClamped, Segmented, ICMPSent, ICMPRateLimited, Bytes) count events along the way.
type Counter uint8

const (
	// Forwarded packets left the gateway on the far side.
	Forwarded Counter = iota
	// Bytes of forwarded inner packets.
	Bytes
	// Local packets went to the gateway's own addresses (the netstack).
	Local
	// ARPReplied requests for the gateway's overlay IP were answered.
	ARPReplied

	// DropOverlay* mirror overlay.Result drops (ToTunnel only).
	DropUnknownVTEP
	DropMalformedOverlay
	DropWrongVNI
	DropGeneveControl
	DropNotForUs
	DropEtherType
	DropARP
	// DropLinkLocalSource: an inner packet from the overlay claims a link-local source
	// (169.254.0.0/16, where the tunnel's own addresses are): no pod or node sends one
	// through the overlay, so it is spoofed (a forged goodbye, say). From the tunnel: a
	// packet from the peer's tunnel address for a node (nothing routes the answer back).
	DropLinkLocalSource
	// DropSpoofedSource: an inner packet from the overlay, for the tunnel, whose source is
	// not an address of the node that sent it (its pod CIDRs, its pods, its external address).
	DropSpoofedSource

	// DropMalformedIP: the inner packet is not a valid IPv4 or IPv6 packet (bad header,
	// checksum, lengths, an IPv6 jumbogram).
	DropMalformedIP
	// DropNoRoute: no route for the destination on the far side. From the tunnel also: a
	// local address the peer is not given (a real one under LocalNAT, the gateway's overlay
	// address, the tunnel address from anything but the peer gateway's).
	DropNoRoute
	// DropLoop: the destination routes back the way the packet came.
	DropLoop
	// DropTTL: TTL expired (a time exceeded error is sent when allowed).
	DropTTL
	// DropTooBig: larger than the far side's MTU with DF set (fragmentation needed is sent
	// when allowed).
	DropTooBig
	// DropNATUnmatched: matched no NAT pair and DropUnmatched is set.
	DropNATUnmatched
	// DropNATTruncated: a transport header too short to fix its checksum.
	DropNATTruncated
	// DropNATBadQuote: an ICMP error quoting a malformed packet.
	DropNATBadQuote
	// DropNATUnsupported: an IPv6 packet the NAT does not translate (a routing header with
	// segments left, too many extension headers).
	DropNATUnsupported
	// DropLocalUnavailable: for a local address, but no handler is attached or it refused.
	DropLocalUnavailable
	// DropQueueFull: an injected packet found the queue into the tunnel full.
	DropQueueFull
	// DropSend: the socket refused the datagram.
	DropSend

	// NATUnmatched packets matched no NAT pair (passed, or dropped and also counted above).
	// Like Forwarded, a superpacket counts as the segments it is cut into.
	NATUnmatched
	// NATTranslated packets had an address changed by NAT (a remapped peer network, or this
	// site's own pods presented under another prefix); a superpacket counts as its segments.
	NATTranslated
	// MSSClamped SYNs had their MSS lowered.
	MSSClamped
	// Segmented TCP superpackets (from nodes with TSO) were cut to fit the tunnel MTU.
	Segmented
	// ICMPSent errors were generated (time exceeded, fragmentation needed).
	ICMPSent
	// ICMPRateLimited errors were not sent because of the rate limit.
	ICMPRateLimited

	// NumCounters sizes counter arrays.
	NumCounters
)

var counterNames = [NumCounters]string{
	Forwarded:            "forwarded",
	Bytes:                "bytes",
	Local:                "local",
	ARPReplied:           "arp-replied",
	DropUnknownVTEP:      "drop-unknown-vtep",
	DropMalformedOverlay: "drop-malformed-overlay",
	DropWrongVNI:         "drop-wrong-vni",
	DropGeneveControl:    "drop-geneve-control",
	DropNotForUs:         "drop-not-for-us",
	DropEtherType:        "drop-unsupported-ethertype",
	DropARP:              "drop-arp",
	DropLinkLocalSource:  "drop-link-local-source",
	DropSpoofedSource:    "drop-spoofed-source",
	DropMalformedIP:      "drop-malformed-ip",
	DropNoRoute:          "drop-no-route",
	DropLoop:             "drop-loop",
	DropTTL:              "drop-ttl-exceeded",
	DropTooBig:           "drop-too-big",
	DropNATUnmatched:     "drop-nat-unmatched",
	DropNATTruncated:     "drop-nat-truncated",
	DropNATBadQuote:      "drop-nat-bad-icmp-quote",
	DropNATUnsupported:   "drop-nat-unsupported",
	DropLocalUnavailable: "drop-local-unavailable",
	DropQueueFull:        "drop-queue-full",
	DropSend:             "drop-send-failed",
	NATUnmatched:         "nat-unmatched",
	NATTranslated:        "nat-translated",
	MSSClamped:           "mss-clamped",
	Segmented:            "tso-segmented",
	ICMPSent:             "icmp-sent",
	ICMPRateLimited:      "icmp-rate-limited",
}

func (c Counter) String() string {
	if c < NumCounters {
		return counterNames[c]
	}
	return fmt.Sprintf("Counter(%d)", uint8(c))
}

// IsDrop reports whether c counts dropped packets.
func (c Counter) IsDrop() bool { return c >= DropUnknownVTEP && c <= DropSend }

// Counts is a snapshot of the counters.
type Counts [NumDirections][NumCounters]uint64

// Get returns one counter.
func (c *Counts) Get(d Direction, k Counter) uint64 { return c[d][k] }

// Drops returns the sum of the drop counters of direction d.
func (c *Counts) Drops(d Direction) uint64 {
	var n uint64
	for k := range NumCounters {
		if k.IsDrop() {
			n += c[d][k]
		}
	}
	return n
}

// counters is the live set. Each batch counts into a local tally and adds it once, so the
// per-packet cost is a plain increment and the shared cache lines are touched once per batch.
type counters [NumDirections][NumCounters]atomic.Uint64

type tally [NumCounters]uint64

func (c *counters) add(d Direction, t *tally) {
	for k, v := range t {
		if v != 0 {
			c[d][k].Add(v)
			t[k] = 0
		}
	}
}

func (c *counters) inc(d Direction, k Counter) { c[d][k].Add(1) }

func (c *counters) snapshot() Counts {
	var s Counts
	for d := range c {
		for k := range c[d] {
			s[d][k] = c[d][k].Load()
		}
	}
	return s
}
