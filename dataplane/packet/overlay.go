package packet

import "encoding/binary"

// Overlay header constants.
const (
	VXLANHeaderLen     = 8
	GeneveMinHeaderLen = 8

	// VXLANPort and GenevePort are the IANA UDP ports.
	VXLANPort  = 4789
	GenevePort = 6081

	vxlanFlagVNI = 0x08 // the I flag: VNI is valid

	// GeneveProtoEthernet is Geneve's protocol type for an inner Ethernet frame
	// (Transparent Ethernet Bridging).
	GeneveProtoEthernet = 0x6558

	// MaxVNI is the largest 24-bit virtual network identifier.
	MaxVNI = 1<<24 - 1
)

// VXLAN is a view of a VXLAN header (RFC 7348) and the inner Ethernet frame after it.
type VXLAN []byte

// ParseVXLAN validates b as a VXLAN header with the I flag set, followed by at least an
// Ethernet header.
func ParseVXLAN(b []byte) (VXLAN, error) {
	if len(b) < VXLANHeaderLen+EthernetHeaderLen {
		return nil, ErrTruncated
	}
	if b[0]&vxlanFlagVNI == 0 {
		return nil, ErrFlags
	}
	return VXLAN(b), nil
}

// VNI is the virtual network identifier.
func (v VXLAN) VNI() uint32 { return binary.BigEndian.Uint32(v[4:]) >> 8 }

// Payload is the inner Ethernet frame.
func (v VXLAN) Payload() []byte { return v[VXLANHeaderLen:] }

// PutVXLAN writes an 8-byte VXLAN header with the I flag and vni into b.
func PutVXLAN(b []byte, vni uint32) {
	_ = b[VXLANHeaderLen-1]
	binary.BigEndian.PutUint32(b[0:], uint32(vxlanFlagVNI)<<24)
	binary.BigEndian.PutUint32(b[4:], vni<<8)
}

// Geneve is a view of a Geneve header (RFC 8926), its options, and the payload after them.
type Geneve []byte

// ParseGeneve validates b as a version-0 Geneve header whose options lie within b.
func ParseGeneve(b []byte) (Geneve, error) {
	if len(b) < GeneveMinHeaderLen {
		return nil, ErrTruncated
	}
	if b[0]>>6 != 0 {
		return nil, ErrVersion
	}
	if GeneveMinHeaderLen+int(b[0]&0x3f)*4 > len(b) {
		return nil, ErrTruncated
	}
	return Geneve(b), nil
}

// HeaderLen is the header length with options.
func (g Geneve) HeaderLen() int { return GeneveMinHeaderLen + int(g[0]&0x3f)*4 }

// OAM reports the O bit: a control packet, not to be forwarded as data.
func (g Geneve) OAM() bool { return g[1]&0x80 != 0 }

// Critical reports the C bit: critical options are present, which a receiver that does not
// understand them must drop.
func (g Geneve) Critical() bool { return g[1]&0x40 != 0 }

// Protocol is the payload's protocol type (an EtherType).
func (g Geneve) Protocol() uint16 { return binary.BigEndian.Uint16(g[2:]) }

// VNI is the virtual network identifier.
func (g Geneve) VNI() uint32 { return binary.BigEndian.Uint32(g[4:]) >> 8 }

// Options is the option bytes.
func (g Geneve) Options() []byte { return g[GeneveMinHeaderLen:g.HeaderLen()] }

// Payload is what follows the header and options.
func (g Geneve) Payload() []byte { return g[g.HeaderLen():] }

// PutGeneve writes an 8-byte Geneve header (no options) for protocol and vni into b.
func PutGeneve(b []byte, protocol uint16, vni uint32) {
	_ = b[GeneveMinHeaderLen-1]
	b[0], b[1] = 0, 0
	binary.BigEndian.PutUint16(b[2:], protocol)
	binary.BigEndian.PutUint32(b[4:], vni<<8)
}
