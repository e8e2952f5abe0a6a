package dataplane

import (
	"encoding/binary"

	"github.com/skein-net/skein/dataplane/packet"
)

// A node whose overlay device keeps TX offload on hands the gateway TCP "superpackets": one
// datagram carrying a TCP segment of up to 64 KiB that the kernel would have cut into MTU-sized
// segments on a real NIC (TSO), with the checksum only started. The gateway cuts it itself,
// as a NIC would: same headers in every segment, sequence numbers advanced, IP IDs
// incremented (IPv4), FIN and PSH only on the last segment, CWR only on the first, and every
// checksum computed in full. This keeps the node's cost per 64 KiB instead of per packet.
// IPv6 superpackets are cut the same way when the TCP header follows the fixed header (the
// kernel's GSO sends no extension headers); the functions below cut bytes and take either.

// split describes how a superpacket is cut; n == 0 means it is not one.
type split struct {
	hdrLen int  // IP and TCP headers, repeated in every segment
	mss    int  // payload bytes per segment
	n      int  // number of segments
	v6     bool // an IPv6 superpacket: a payload length to set, no header checksum or ID
}

// planSplit returns how to cut a TCP packet longer than mtu into segments that fit, or a zero
// split when it cannot be cut (not TCP, a fragment, headers that leave no room, no payload).
func planSplit(ip packet.IPv4, mtu int) split {
	if ip.Protocol() != packet.ProtoTCP || ip.IsFragment() {
		return split{}
	}
	seg, err := packet.ParseTCP(ip.Payload())
	if err != nil {
		return split{}
	}
	hdr := ip.HeaderLen() + seg.DataOffset()
	payload := len(ip) - hdr
	if hdr >= mtu || payload <= 0 || seg.Flags()&(packet.TCPFlagSYN|packet.TCPFlagRST) != 0 {
		return split{}
	}
	mss := mtu - hdr
	return split{hdrLen: hdr, mss: mss, n: (payload + mss - 1) / mss}
}

// planSplit6 is planSplit for IPv6: a TCP header right after the fixed header.
func planSplit6(ip packet.IPv6, mtu int) split {
	if ip.NextHeader() != packet.ProtoTCP {
		return split{}
	}
	seg, err := packet.ParseTCP(ip[packet.IPv6HeaderLen:])
	if err != nil {
		return split{}
	}
	hdr := packet.IPv6HeaderLen + seg.DataOffset()
	payload := len(ip) - hdr
	if hdr >= mtu || payload <= 0 || seg.Flags()&(packet.TCPFlagSYN|packet.TCPFlagRST) != 0 {
		return split{}
	}
	mss := mtu - hdr
	return split{hdrLen: hdr, mss: mss, n: (payload + mss - 1) / mss, v6: true}
}

// writeSegment writes segment k (k >= 1) of superpacket ip into dst and returns its length.
// ip must still hold its original headers.
func writeSegment(dst []byte, ip []byte, s split, k int) int {
	start := k * s.mss
	end := min(start+s.mss, len(ip)-s.hdrLen)
	copy(dst, ip[:s.hdrLen])
	n := s.hdrLen + copy(dst[s.hdrLen:], ip[s.hdrLen+start:s.hdrLen+end])
	fixSegment(dst[:n], s, k)
	return n
}

// cutFirst turns superpacket ip into its first segment in place and returns its length. Call
// it after writing the other segments, which copy ip's original headers.
func cutFirst(ip []byte, s split) int {
	n := min(s.hdrLen+s.mss, len(ip))
	fixSegment(ip[:n], s, 0)
	return n
}

// segmentInPlace turns superpacket ip into its segment k in place (the payload moved up
// behind the headers) and returns its length. Call it after every other segment is written.
func segmentInPlace(ip []byte, s split, k int) int {
	if s.n == 0 {
		return len(ip)
	}
	if k == 0 {
		return cutFirst(ip, s)
	}
	start := s.hdrLen + k*s.mss
	end := min(start+s.mss, len(ip))
	n := s.hdrLen + copy(ip[s.hdrLen:], ip[start:end])
	fixSegment(ip[:n], s, k)
	return n
}

const (
	tcpFlagPSH = 0x08
	tcpFlagCWR = 0x80
)

// fixSegment makes segment k of n (headers copied from the superpacket) consistent: IPv4 total
// length, ID and checksum, or IPv6 payload length; TCP sequence number, flags and checksum.
func fixSegment(seg []byte, s split, k int) {
	var tcp []byte
	if s.v6 {
		binary.BigEndian.PutUint16(seg[4:], uint16(len(seg)-packet.IPv6HeaderLen))
		tcp = seg[packet.IPv6HeaderLen:]
	} else {
		ip := packet.IPv4(seg)
		binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)))
		binary.BigEndian.PutUint16(ip[4:], binary.BigEndian.Uint16(ip[4:])+uint16(k))
		ip.ComputeChecksum()
		tcp = ip[ip.HeaderLen():]
	}
	binary.BigEndian.PutUint32(tcp[4:], binary.BigEndian.Uint32(tcp[4:])+uint32(k*s.mss))
	if k < s.n-1 {
		tcp[13] &^= packet.TCPFlagFIN | tcpFlagPSH
	}
	if k > 0 {
		tcp[13] &^= tcpFlagCWR
	}
	tcp[16], tcp[17] = 0, 0
	var sum uint16
	if s.v6 {
		ip := packet.IPv6(seg)
		sum = ^packet.Fold(packet.Sum(tcp, packet.PseudoSum6(ip.Src(), ip.Dst(), packet.ProtoTCP, len(tcp))))
	} else {
		sum = packet.TransportChecksum(packet.IPv4(seg), tcp)
	}
	binary.BigEndian.PutUint16(tcp[16:], sum)
}
