package dataplane

import (
	"encoding/binary"

	"github.com/skein-net/skein/dataplane/packet"
)

// A node whose overlay device keeps TX offload on hands the gateway TCP "superpackets": one
// datagram carrying a TCP segment of up to 64 KiB that the kernel would have cut into MTU-sized
// segments on a real NIC (TSO), with the checksum only started. The gateway cuts it itself,
// as a NIC would: same headers in every segment, sequence numbers advanced, IP IDs
// incremented, FIN and PSH only on the last segment, CWR only on the first, and every
// checksum computed in full. This keeps the node's cost per 64 KiB instead of per packet.

// split describes how a superpacket is cut; n == 0 means it is not one.
type split struct {
	hdrLen int // IP and TCP headers, repeated in every segment
	mss    int // payload bytes per segment
	n      int // number of segments
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

// writeSegment writes segment k (k >= 1) of superpacket ip into dst and returns its length.
// ip must still hold its original headers.
func writeSegment(dst []byte, ip packet.IPv4, s split, k int) int {
	start := k * s.mss
	end := min(start+s.mss, len(ip)-s.hdrLen)
	copy(dst, ip[:s.hdrLen])
	n := s.hdrLen + copy(dst[s.hdrLen:], ip[s.hdrLen+start:s.hdrLen+end])
	fixSegment(packet.IPv4(dst[:n]), s, k)
	return n
}

// cutFirst turns superpacket ip into its first segment in place and returns its length. Call
// it after writing the other segments, which copy ip's original headers.
func cutFirst(ip packet.IPv4, s split) int {
	n := min(s.hdrLen+s.mss, len(ip))
	fixSegment(ip[:n], s, 0)
	return n
}

// segmentInPlace turns superpacket ip into its segment k in place (the payload moved up
// behind the headers) and returns its length. Call it after every other segment is written.
func segmentInPlace(ip packet.IPv4, s split, k int) int {
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

// fixSegment makes segment k of n (headers copied from the superpacket) consistent: IP total
// length, ID and checksum; TCP sequence number, flags and checksum.
func fixSegment(seg packet.IPv4, s split, k int) {
	binary.BigEndian.PutUint16(seg[2:], uint16(len(seg)))
	binary.BigEndian.PutUint16(seg[4:], binary.BigEndian.Uint16(seg[4:])+uint16(k))
	seg.ComputeChecksum()
	tcp := seg[seg.HeaderLen():]
	binary.BigEndian.PutUint32(tcp[4:], binary.BigEndian.Uint32(tcp[4:])+uint32(k*s.mss))
	if k < s.n-1 {
		tcp[13] &^= packet.TCPFlagFIN | tcpFlagPSH
	}
	if k > 0 {
		tcp[13] &^= tcpFlagCWR
	}
	tcp[16], tcp[17] = 0, 0
	binary.BigEndian.PutUint16(tcp[16:], packet.TransportChecksum(seg, tcp))
}
