package packet

import "encoding/binary"

// Transport header sizes and offsets.
const (
	TCPMinHeaderLen = 20
	UDPHeaderLen    = 8
	ICMPHeaderLen   = 8

	// TCPChecksumOffset and UDPChecksumOffset locate the checksum fields.
	TCPChecksumOffset = 16
	UDPChecksumOffset = 6
)

// TCP flag bits.
const (
	TCPFlagFIN = 0x01
	TCPFlagSYN = 0x02
	TCPFlagRST = 0x04
	TCPFlagACK = 0x10
)

// TCP option kinds used by the dataplane.
const (
	tcpOptEnd = 0
	tcpOptNOP = 1
	tcpOptMSS = 2
)

// TCP is a view of a TCP segment. ParseTCP checks the fixed header and the data offset.
type TCP []byte

// ParseTCP validates b as a TCP segment: at least 20 bytes, data offset of 20-60 bytes within b.
func ParseTCP(b []byte) (TCP, error) {
	if len(b) < TCPMinHeaderLen {
		return nil, ErrTruncated
	}
	off := int(b[12]>>4) * 4
	if off < TCPMinHeaderLen {
		return nil, ErrHeaderLength
	}
	if off > len(b) {
		return nil, ErrTruncated
	}
	return TCP(b), nil
}

// SrcPort is the source port.
func (t TCP) SrcPort() uint16 { return binary.BigEndian.Uint16(t[0:]) }

// DstPort is the destination port.
func (t TCP) DstPort() uint16 { return binary.BigEndian.Uint16(t[2:]) }

// DataOffset is the header length in bytes, options included.
func (t TCP) DataOffset() int { return int(t[12]>>4) * 4 }

// Flags is the flags byte (FIN, SYN, RST, PSH, ACK, URG, ECE, CWR).
func (t TCP) Flags() uint8 { return t[13] }

// Checksum is the checksum field.
func (t TCP) Checksum() uint16 { return binary.BigEndian.Uint16(t[TCPChecksumOffset:]) }

// SetChecksum writes the checksum field.
func (t TCP) SetChecksum(c uint16) { binary.BigEndian.PutUint16(t[TCPChecksumOffset:], c) }

// Options is the option bytes between the fixed header and the data.
func (t TCP) Options() []byte { return t[TCPMinHeaderLen:t.DataOffset()] }

// ClampMSS lowers the MSS option of a SYN to max when it is larger, updating the checksum
// incrementally, and reports whether it changed anything. Malformed options end the scan
// without a change. A SYN without an MSS option is left alone (its peer assumes 536).
func (t TCP) ClampMSS(max uint16) bool {
	if t.Flags()&TCPFlagSYN == 0 {
		return false
	}
	opts := t.Options()
	for i := 0; i < len(opts); {
		switch opts[i] {
		case tcpOptEnd:
			return false
		case tcpOptNOP:
			i++
			continue
		}
		if i+1 >= len(opts) {
			return false
		}
		n := int(opts[i+1])
		if n < 2 || i+n > len(opts) {
			return false
		}
		if opts[i] == tcpOptMSS && n == 4 {
			mss := binary.BigEndian.Uint16(opts[i+2:])
			if mss <= max {
				return false
			}
			// The option sits at an offset of unknown parity: update the checksum with the
			// 16-bit words that actually cover the two changed bytes.
			at := TCPMinHeaderLen + i + 2
			if at%2 == 0 {
				binary.BigEndian.PutUint16(t[at:], max)
				t.SetChecksum(UpdateChecksum2(t.Checksum(), mss, max))
				return true
			}
			oldW := t.oddWordsAt(at)
			binary.BigEndian.PutUint16(t[at:], max)
			newW := t.oddWordsAt(at)
			c := UpdateChecksum2(t.Checksum(), oldW[0], newW[0])
			c = UpdateChecksum2(c, oldW[1], newW[1])
			t.SetChecksum(c)
			return true
		}
		i += n
	}
	return false
}

// oddWordsAt returns the two aligned 16-bit words covering bytes at and at+1 when at is odd.
// A segment of odd length ending at at+1 is summed as if padded with a zero byte.
func (t TCP) oddWordsAt(at int) [2]uint16 {
	w0 := binary.BigEndian.Uint16(t[at-1:])
	w1 := uint16(t[at+1]) << 8
	if at+2 < len(t) {
		w1 |= uint16(t[at+2])
	}
	return [2]uint16{w0, w1}
}

// MSS returns the MSS option of the segment, if it has one.
func (t TCP) MSS() (uint16, bool) {
	opts := t.Options()
	for i := 0; i < len(opts); {
		switch opts[i] {
		case tcpOptEnd:
			return 0, false
		case tcpOptNOP:
			i++
			continue
		}
		if i+1 >= len(opts) {
			return 0, false
		}
		n := int(opts[i+1])
		if n < 2 || i+n > len(opts) {
			return 0, false
		}
		if opts[i] == tcpOptMSS && n == 4 {
			return binary.BigEndian.Uint16(opts[i+2:]), true
		}
		i += n
	}
	return 0, false
}

// UDP is a view of a UDP datagram. ParseUDP checks the header and the length field.
type UDP []byte

// ParseUDP validates b as a UDP datagram: an 8-byte header whose length field is at least 8 and
// within b. It returns the view trimmed to the length field.
func ParseUDP(b []byte) (UDP, error) {
	if len(b) < UDPHeaderLen {
		return nil, ErrTruncated
	}
	n := int(binary.BigEndian.Uint16(b[4:]))
	if n < UDPHeaderLen {
		return nil, ErrHeaderLength
	}
	if n > len(b) {
		return nil, ErrTruncated
	}
	return UDP(b[:n]), nil
}

// SrcPort is the source port.
func (u UDP) SrcPort() uint16 { return binary.BigEndian.Uint16(u[0:]) }

// DstPort is the destination port.
func (u UDP) DstPort() uint16 { return binary.BigEndian.Uint16(u[2:]) }

// Length is the length field (header and payload).
func (u UDP) Length() int { return int(binary.BigEndian.Uint16(u[4:])) }

// Checksum is the checksum field; 0 means "no checksum" over IPv4.
func (u UDP) Checksum() uint16 { return binary.BigEndian.Uint16(u[UDPChecksumOffset:]) }

// SetChecksum writes the checksum field.
func (u UDP) SetChecksum(c uint16) { binary.BigEndian.PutUint16(u[UDPChecksumOffset:], c) }

// Payload is the data after the header.
func (u UDP) Payload() []byte { return u[UDPHeaderLen:] }

// PutUDP writes an 8-byte UDP header for a datagram of total length n (header included) with a
// zero checksum, as VXLAN and Geneve senders may over IPv4 (RFC 7348 section 5).
func PutUDP(b []byte, src, dst uint16, n int) UDP {
	_ = b[UDPHeaderLen-1]
	binary.BigEndian.PutUint16(b[0:], src)
	binary.BigEndian.PutUint16(b[2:], dst)
	binary.BigEndian.PutUint16(b[4:], uint16(n))
	binary.BigEndian.PutUint16(b[6:], 0)
	return UDP(b[:UDPHeaderLen])
}

// ICMPv4 message types the dataplane handles.
const (
	ICMPEchoReply      = 0
	ICMPDestUnreach    = 3
	ICMPEcho           = 8
	ICMPTimeExceeded   = 11
	ICMPParamProblem   = 12
	ICMPCodeFragNeeded = 4 // with ICMPDestUnreach
)

// ICMPv4 is a view of an ICMPv4 message.
type ICMPv4 []byte

// ParseICMPv4 validates b as an ICMPv4 message of at least 8 bytes.
func ParseICMPv4(b []byte) (ICMPv4, error) {
	if len(b) < ICMPHeaderLen {
		return nil, ErrTruncated
	}
	return ICMPv4(b), nil
}

// Type is the message type.
func (m ICMPv4) Type() uint8 { return m[0] }

// Code is the message code.
func (m ICMPv4) Code() uint8 { return m[1] }

// Checksum is the checksum field (over the whole message, no pseudo-header).
func (m ICMPv4) Checksum() uint16 { return binary.BigEndian.Uint16(m[2:]) }

// SetChecksum writes the checksum field.
func (m ICMPv4) SetChecksum(c uint16) { binary.BigEndian.PutUint16(m[2:], c) }

// MTU is the next-hop MTU of a "fragmentation needed" message (RFC 1191).
func (m ICMPv4) MTU() uint16 { return binary.BigEndian.Uint16(m[6:]) }

// IsError reports whether the message is an error that quotes the offending packet
// (destination unreachable, time exceeded, parameter problem).
func (m ICMPv4) IsError() bool {
	t := m.Type()
	return t == ICMPDestUnreach || t == ICMPTimeExceeded || t == ICMPParamProblem
}

// Payload is what follows the 8-byte header: for errors, the quoted packet.
func (m ICMPv4) Payload() []byte { return m[ICMPHeaderLen:] }

// ICMPv6 message types the dataplane handles (RFC 4443).
const (
	ICMPv6DestUnreach    = 1
	ICMPv6PacketTooBig   = 2
	ICMPv6TimeExceeded   = 3
	ICMPv6ParamProblem   = 4
	ICMPv6EchoRequest    = 128
	ICMPv6EchoReply      = 129
	ICMPv6ChecksumOffset = 2
)

// ICMPv6 is a view of an ICMPv6 message. Unlike ICMPv4's, its checksum covers the IPv6
// pseudo-header, so it changes with the packet's addresses.
type ICMPv6 []byte

// ParseICMPv6 validates b as an ICMPv6 message of at least 8 bytes (the header of every type the
// dataplane reads).
func ParseICMPv6(b []byte) (ICMPv6, error) {
	if len(b) < ICMPHeaderLen {
		return nil, ErrTruncated
	}
	return ICMPv6(b), nil
}

// Type is the message type.
func (m ICMPv6) Type() uint8 { return m[0] }

// Code is the message code.
func (m ICMPv6) Code() uint8 { return m[1] }

// Checksum is the checksum field (over the pseudo-header and the whole message).
func (m ICMPv6) Checksum() uint16 { return binary.BigEndian.Uint16(m[ICMPv6ChecksumOffset:]) }

// SetChecksum writes the checksum field.
func (m ICMPv6) SetChecksum(c uint16) { binary.BigEndian.PutUint16(m[ICMPv6ChecksumOffset:], c) }

// MTU is the MTU of a Packet Too Big message.
func (m ICMPv6) MTU() uint32 { return binary.BigEndian.Uint32(m[4:]) }

// IsError reports whether the message is an error that quotes the offending packet: the types
// below 128 (RFC 4443 section 2.1), of which 1-4 are defined.
func (m ICMPv6) IsError() bool { return m.Type() < 128 }

// Payload is what follows the 8-byte header: for errors, the quoted packet.
func (m ICMPv6) Payload() []byte { return m[ICMPHeaderLen:] }
