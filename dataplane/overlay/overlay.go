// Package overlay is the gateway's userspace VTEP: VXLAN (RFC 7348) or Geneve (RFC 8926)
// encapsulation with an inner Ethernet frame, towards and from the kernel overlay devices of
// the cluster's nodes (liqo.vxlan).
//
// The gateway has one overlay MAC and one overlay IP. It answers ARP for that IP, accepts
// frames only from known node VTEPs, with its VNI, addressed to its MAC, and carrying IPv4 (or
// ARP), and encapsulates IPv4 packets towards a node VTEP (node IP, node overlay MAC).
//
// Both header kinds put HeaderLen bytes (overlay header and Ethernet header) in front of the
// inner IPv4 packet, so the per-packet path works on a fixed split: the first HeaderLen bytes
// of a datagram (head) and the rest (body, which starts with the inner IPv4 packet). The gateway
// receives with a scatter read into exactly that split, so the inner packet lands where
// wireguard-go wants it without a copy, and sends with a gather write of a header and the packet.
// Geneve options, which the kernel does not send by default, are supported on a slower path
// that moves the inner packet into place.
//
// A VTEP is immutable after New and safe for concurrent use; its methods allocate nothing.
package overlay

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/skein-net/skein/dataplane/packet"
	"github.com/skein-net/skein/dataplane/route"
)

// Kind is the encapsulation.
type Kind uint8

const (
	// VXLAN is RFC 7348 encapsulation (UDP port 4789 by default).
	VXLAN Kind = iota + 1
	// Geneve is RFC 8926 encapsulation (UDP port 6081 by default).
	Geneve
)

// ParseKind parses "vxlan" or "geneve" (any case).
func ParseKind(s string) (Kind, error) {
	switch strings.ToLower(s) {
	case "vxlan":
		return VXLAN, nil
	case "geneve":
		return Geneve, nil
	}
	return 0, fmt.Errorf("overlay kind %q: want vxlan or geneve", s)
}

func (k Kind) String() string {
	switch k {
	case VXLAN:
		return "vxlan"
	case Geneve:
		return "geneve"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// DefaultPort is the IANA UDP port of the kind.
func (k Kind) DefaultPort() uint16 {
	if k == Geneve {
		return packet.GenevePort
	}
	return packet.VXLANPort
}

// HeaderLen is the number of bytes in front of an inner IPv4 packet: an 8-byte VXLAN or
// option-less Geneve header and a 14-byte Ethernet header.
const HeaderLen = 8 + packet.EthernetHeaderLen

// Overhead is what encapsulation adds to an inner packet on the underlay: outer IPv4 (20), UDP
// (8) and HeaderLen. The overlay MTU is the underlay MTU minus Overhead.
const Overhead = 20 + 8 + HeaderLen

// Overhead6 is Overhead over an IPv6 underlay (an outer IPv6 header of 40 bytes).
const Overhead6 = 40 + 8 + HeaderLen

// Config describes the gateway's side of the overlay.
type Config struct {
	Kind Kind
	// VNI is the virtual network identifier (24 bits) shared with the nodes' devices.
	VNI uint32
	// MAC and IP are the gateway's overlay addresses; IP is answered in ARP.
	MAC packet.MAC
	IP  netip.Addr
	// Peers are the node VTEPs frames are accepted from, by underlay IP.
	Peers []netip.Addr
}

// VTEP encapsulates and decapsulates for one Config.
type VTEP struct {
	kind  Kind
	vni   uint32
	mac   packet.MAC
	ip    [4]byte
	peers *route.Table
}

// New validates cfg and builds a VTEP.
func New(cfg Config) (*VTEP, error) {
	if cfg.Kind != VXLAN && cfg.Kind != Geneve {
		return nil, fmt.Errorf("overlay: kind %v: want vxlan or geneve", cfg.Kind)
	}
	if cfg.VNI > packet.MaxVNI {
		return nil, fmt.Errorf("overlay: VNI %d does not fit in 24 bits (max %d)", cfg.VNI, packet.MaxVNI)
	}
	if !cfg.IP.Is4() {
		return nil, fmt.Errorf("overlay: gateway overlay IP %v must be an IPv4 address", cfg.IP)
	}
	if cfg.MAC == (packet.MAC{}) || cfg.MAC[0]&1 != 0 {
		return nil, fmt.Errorf("overlay: gateway overlay MAC %s must be a non-zero unicast address", MACString(cfg.MAC))
	}
	var b route.Builder
	for i, p := range cfg.Peers {
		if !p.IsValid() || p.Zone() != "" {
			return nil, fmt.Errorf("overlay: peer VTEP address %v is not a plain IP address", p)
		}
		p = p.Unmap()
		if err := b.Add(netip.PrefixFrom(p, p.BitLen()), uint32(i)); err != nil {
			return nil, fmt.Errorf("overlay: peer VTEP %v: %w", p, err)
		}
	}
	return &VTEP{kind: cfg.Kind, vni: cfg.VNI, mac: cfg.MAC, ip: cfg.IP.As4(), peers: b.Build()}, nil
}

// Kind is the VTEP's encapsulation.
func (v *VTEP) Kind() Kind { return v.kind }

// MAC is the gateway's overlay MAC.
func (v *VTEP) MAC() packet.MAC { return v.mac }

// KnownPeer reports whether ip is a node VTEP frames are accepted from.
func (v *VTEP) KnownPeer(ip netip.Addr) bool {
	_, ok := v.peers.Lookup(ip)
	return ok
}

// PutHeader writes the HeaderLen bytes that go in front of a packet of etherType sent to the
// node whose overlay MAC is dst: the overlay header with the VNI, then Ethernet from the
// gateway's MAC.
func (v *VTEP) PutHeader(head []byte, dst packet.MAC, etherType uint16) {
	_ = head[HeaderLen-1]
	if v.kind == Geneve {
		packet.PutGeneve(head, packet.GeneveProtoEthernet, v.vni)
	} else {
		packet.PutVXLAN(head, v.vni)
	}
	packet.PutEthernet(head[8:], dst, v.mac, etherType)
}

// Result is what Decap found.
type Result uint8

const (
	// Deliver: the datagram carries an inner IPv4 packet for the gateway to route; it is the
	// returned slice.
	Deliver Result = iota
	// Reply: the datagram was an ARP request for the gateway's IP; the reply has been written
	// in place (head and the returned slice) and goes back to the sender VTEP.
	Reply

	// The rest are drops, one per reason.

	// DropUnknownPeer: the sender is not a known node VTEP.
	DropUnknownPeer
	// DropMalformed: truncated, or the overlay header's flags or version are wrong.
	DropMalformed
	// DropVNI: the VNI is not the gateway's.
	DropVNI
	// DropGeneveControl: a Geneve OAM packet, or one with critical options (not understood).
	DropGeneveControl
	// DropNotForUs: the inner frame is addressed to another MAC, or is ARP for another IP.
	DropNotForUs
	// DropEtherType: the inner frame is neither IPv4, IPv6 nor ARP. (Neighbour discovery is
	// not answered: the agents program the gateway's overlay MAC as a permanent neighbour.)
	DropEtherType
	// DropARP: ARP that needs no answer (replies, other hardware types, malformed).
	DropARP

	// NumResults sizes counter arrays indexed by Result.
	NumResults
)

var resultNames = [NumResults]string{
	Deliver:           "deliver",
	Reply:             "arp-reply",
	DropUnknownPeer:   "unknown-vtep",
	DropMalformed:     "malformed-overlay",
	DropVNI:           "wrong-vni",
	DropGeneveControl: "geneve-control",
	DropNotForUs:      "not-for-us",
	DropEtherType:     "unsupported-ethertype",
	DropARP:           "arp-ignored",
}

func (r Result) String() string {
	if r < NumResults {
		return resultNames[r]
	}
	return fmt.Sprintf("Result(%d)", uint8(r))
}

// Decap checks a datagram received from src, given as head (its first HeaderLen bytes) and
// body (the rest; body may be shorter than the datagram's buffer, never longer). For Deliver
// it returns the inner IPv4 packet, which is body itself unless Geneve options had to be moved
// out of the way. For Reply it returns the ARP reply written over body, with head rewritten to
// match. Drops leave the datagram as it was, except that a Geneve datagram with options may
// have had its body moved.
func (v *VTEP) Decap(src netip.Addr, head, body []byte) ([]byte, Result) {
	inner, res, _ := v.DecapPeer(src, head, body)
	return inner, res
}

// DecapPeer is Decap that also says which peer sent the datagram: its index in Config.Peers.
func (v *VTEP) DecapPeer(src netip.Addr, head, body []byte) ([]byte, Result, int) {
	if len(head) < HeaderLen {
		return nil, DropMalformed, -1
	}
	peer, ok := v.peers.Lookup(src)
	if !ok {
		return nil, DropUnknownPeer, -1
	}
	inner, res := v.decap(head, body)
	return inner, res, int(peer)
}

// InnerEtherType is the EtherType of the inner Ethernet header of a datagram's head after
// Decap delivered it (Decap leaves that header there for Geneve with options too).
func InnerEtherType(head []byte) uint16 {
	return binary.BigEndian.Uint16(head[8+12:])
}

// decap is Decap after the sender is known.
func (v *VTEP) decap(head, body []byte) ([]byte, Result) {
	var eth [packet.EthernetHeaderLen]byte
	if v.kind == Geneve {
		g := head[:8]
		if g[0]>>6 != 0 {
			return nil, DropMalformed
		}
		if g[1]&0xc0 != 0 { // O (OAM) or C (critical options)
			return nil, DropGeneveControl
		}
		if binary.BigEndian.Uint16(g[2:]) != packet.GeneveProtoEthernet {
			return nil, DropEtherType
		}
		if binary.BigEndian.Uint32(g[4:])>>8 != v.vni {
			return nil, DropVNI
		}
		if opt := int(g[0]&0x3f) * 4; opt > 0 {
			return v.decapGeneveOptions(head, body, opt)
		}
	} else {
		if head[0]&0x08 == 0 {
			return nil, DropMalformed
		}
		if binary.BigEndian.Uint32(head[4:])>>8 != v.vni {
			return nil, DropVNI
		}
	}
	copy(eth[:], head[8:HeaderLen])
	return v.inner(eth, head, body)
}

// decapGeneveOptions handles a Geneve header with opt bytes of options: the inner Ethernet
// header straddles head and body, and the inner packet starts opt bytes into body. It moves
// the inner packet to the start of body.
func (v *VTEP) decapGeneveOptions(head, body []byte, opt int) ([]byte, Result) {
	if len(body) < opt {
		return nil, DropMalformed
	}
	// The datagram from byte 8 on: head[8:], then body. Ethernet is at [opt, opt+14) of it.
	var eth [packet.EthernetHeaderLen]byte
	n := copy(eth[:], head[min(8+opt, HeaderLen):HeaderLen])
	copy(eth[n:], body[max(opt-(HeaderLen-8), 0):opt])
	inner := body[:copy(body, body[opt:])]
	// From here on the datagram reads as option-less Geneve: write head to match, so a reply
	// built in place is well formed.
	head[0] &^= 0x3f
	copy(head[8:], eth[:])
	return v.inner(eth, head, inner)
}

// inner checks the inner Ethernet header eth and dispatches on its type; body is the payload.
func (v *VTEP) inner(eth [packet.EthernetHeaderLen]byte, head, body []byte) ([]byte, Result) {
	e := packet.Ethernet(eth[:])
	switch e.EtherType() {
	case packet.EtherTypeIPv4, packet.EtherTypeIPv6:
		if e.Dst() != v.mac {
			return nil, DropNotForUs
		}
		return body, Deliver
	case packet.EtherTypeARP:
		if d := e.Dst(); d != v.mac && d != packet.Broadcast {
			return nil, DropNotForUs
		}
		return v.arp(e.Src(), head, body)
	}
	return nil, DropEtherType
}

// arp answers a request for the gateway's IP, writing the reply over the request.
func (v *VTEP) arp(from packet.MAC, head, body []byte) ([]byte, Result) {
	a, err := packet.ParseARP(body)
	if err != nil || a.Op() != packet.ARPRequest {
		return nil, DropARP
	}
	if a.TargetIP() != v.ip {
		return nil, DropNotForUs
	}
	senderMAC, senderIP := a.SenderMAC(), a.SenderIP()
	reply := packet.PutARP(body, packet.ARPReply, v.mac, v.ip, senderMAC, senderIP)
	packet.PutEthernet(head[8:], from, v.mac, packet.EtherTypeARP)
	return reply, Reply
}

// MACString formats m as six colon-separated hex bytes.
func MACString(m packet.MAC) string { return net.HardwareAddr(m[:]).String() }

// ParseMAC parses an Ethernet (48-bit) MAC address such as 02:42:ac:11:00:02.
func ParseMAC(s string) (packet.MAC, error) {
	hw, err := net.ParseMAC(s)
	if err != nil {
		return packet.MAC{}, fmt.Errorf("MAC address %q: want six colon-separated hex bytes", s)
	}
	if len(hw) != 6 {
		return packet.MAC{}, fmt.Errorf("MAC address %q: want a 48-bit Ethernet address, not %d bytes", s, len(hw))
	}
	return packet.MAC(hw), nil
}
