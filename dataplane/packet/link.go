package packet

import (
	"encoding/binary"
	"net/netip"
)

// Ethernet and ARP constants.
const (
	EthernetHeaderLen = 14
	ARPLen            = 28 // ARP for IPv4 over Ethernet

	EtherTypeIPv4 = 0x0800
	EtherTypeARP  = 0x0806
	EtherTypeIPv6 = 0x86dd

	ARPRequest = 1
	ARPReply   = 2
)

// MAC is an Ethernet address.
type MAC [6]byte

// Broadcast is the Ethernet broadcast address.
var Broadcast = MAC{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// Ethernet is a view of an Ethernet II frame (no 802.1Q tag).
type Ethernet []byte

// ParseEthernet validates b as an Ethernet frame of at least the 14-byte header.
func ParseEthernet(b []byte) (Ethernet, error) {
	if len(b) < EthernetHeaderLen {
		return nil, ErrTruncated
	}
	return Ethernet(b), nil
}

// Dst is the destination address.
func (e Ethernet) Dst() MAC { return MAC(e[0:6]) }

// Src is the source address.
func (e Ethernet) Src() MAC { return MAC(e[6:12]) }

// EtherType is the type of the payload.
func (e Ethernet) EtherType() uint16 { return binary.BigEndian.Uint16(e[12:]) }

// Payload is the frame's payload.
func (e Ethernet) Payload() []byte { return e[EthernetHeaderLen:] }

// PutEthernet writes a 14-byte Ethernet header into b.
func PutEthernet(b []byte, dst, src MAC, etherType uint16) {
	_ = b[EthernetHeaderLen-1]
	copy(b[0:6], dst[:])
	copy(b[6:12], src[:])
	binary.BigEndian.PutUint16(b[12:], etherType)
}

// ARP is a view of an ARP packet for IPv4 over Ethernet.
type ARP []byte

// ParseARP validates b as ARP for IPv4 over Ethernet (hardware type 1, protocol 0x0800,
// address lengths 6 and 4). Other ARP flavours are ErrUnsupported.
func ParseARP(b []byte) (ARP, error) {
	if len(b) < ARPLen {
		return nil, ErrTruncated
	}
	if binary.BigEndian.Uint16(b[0:]) != 1 || binary.BigEndian.Uint16(b[2:]) != EtherTypeIPv4 || b[4] != 6 || b[5] != 4 {
		return nil, ErrUnsupported
	}
	return ARP(b[:ARPLen]), nil
}

// Op is the operation: ARPRequest or ARPReply.
func (a ARP) Op() uint16 { return binary.BigEndian.Uint16(a[6:]) }

// SenderMAC is the sender hardware address.
func (a ARP) SenderMAC() MAC { return MAC(a[8:14]) }

// SenderIP is the sender protocol address.
func (a ARP) SenderIP() [4]byte { return [4]byte(a[14:18]) }

// TargetMAC is the target hardware address.
func (a ARP) TargetMAC() MAC { return MAC(a[18:24]) }

// TargetIP is the target protocol address.
func (a ARP) TargetIP() [4]byte { return [4]byte(a[24:28]) }

// TargetAddr is the target protocol address as a netip.Addr.
func (a ARP) TargetAddr() netip.Addr { return netip.AddrFrom4(a.TargetIP()) }

// PutARP writes a 28-byte ARP packet for IPv4 over Ethernet into b.
func PutARP(b []byte, op uint16, senderMAC MAC, senderIP [4]byte, targetMAC MAC, targetIP [4]byte) ARP {
	_ = b[ARPLen-1]
	binary.BigEndian.PutUint16(b[0:], 1)
	binary.BigEndian.PutUint16(b[2:], EtherTypeIPv4)
	b[4], b[5] = 6, 4
	binary.BigEndian.PutUint16(b[6:], op)
	copy(b[8:14], senderMAC[:])
	copy(b[14:18], senderIP[:])
	copy(b[18:24], targetMAC[:])
	copy(b[24:28], targetIP[:])
	return ARP(b[:ARPLen])
}
