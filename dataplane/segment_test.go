package dataplane_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/skein-net/skein/dataplane"
	"github.com/skein-net/skein/dataplane/overlaytest"
	"github.com/skein-net/skein/dataplane/packet"
	pt "github.com/skein-net/skein/dataplane/packet/packettest"
)

// superpacket is what a node with TSO sends: one TCP segment of len(data) bytes with FIN|PSH
// set and the checksum only started (the pseudo-header sum, as CHECKSUM_PARTIAL leaves it).
func superpacket(data []byte) []byte {
	seg := pt.TCP("10.244.1.5", "10.71.2.7", 40000, 80, packet.TCPFlagACK|packet.TCPFlagFIN|0x08|0x80, nil, data)
	ip := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 6, DF: true, ID: 0xfff0, Payload: seg}.Build()
	partial := packet.Fold(packet.PseudoSum4([4]byte{10, 244, 1, 5}, [4]byte{10, 71, 2, 7}, 6, len(seg)))
	binary.BigEndian.PutUint16(ip[20+16:], partial)
	return ip
}

func checkSegments(t *testing.T, segs [][]byte, data []byte) {
	t.Helper()
	var got []byte
	seq := uint32(0x01020304)
	for i, s := range segs {
		if len(s) > dataplane.DefaultTunnelMTU {
			t.Errorf("segment %d is %d bytes, over the tunnel MTU", i, len(s))
		}
		if p := pt.Problem(s); p != "" {
			t.Errorf("segment %d: %s", i, p)
		}
		if id := binary.BigEndian.Uint16(s[4:]); id != 0xfff0+uint16(i) {
			t.Errorf("segment %d: IP ID %#x", i, id)
		}
		tcp := s[20:]
		if sn := binary.BigEndian.Uint32(tcp[4:]); sn != seq+uint32(len(got)) {
			t.Errorf("segment %d: seq %#x, want %#x", i, sn, seq+uint32(len(got)))
		}
		flags := tcp[13]
		last := i == len(segs)-1
		if (flags&0x01 != 0) != last || (flags&0x08 != 0) != last || (flags&0x80 != 0) != (i == 0) || flags&0x10 == 0 {
			t.Errorf("segment %d of %d: flags %#x", i, len(segs), flags)
		}
		if ip4(s[16:20]) != "10.244.2.7" || s[8] != 63 {
			t.Errorf("segment %d: dst %s TTL %d", i, ip4(s[16:20]), s[8])
		}
		got = append(got, tcp[20:]...)
	}
	if !bytes.Equal(got, data) {
		t.Errorf("segments carry %d bytes that differ from the %d sent", len(got), len(data))
	}
}

func TestSuperpacketSplit(t *testing.T) {
	data := make([]byte, 30000)
	for i := range data {
		data[i] = byte(i * 7)
	}
	// 1300 payload bytes fit in a 1340-byte segment with 40 bytes of headers.
	nseg := (len(data) + 1299) / 1300
	small := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.9.9", Proto: 17, Payload: pt.UDP("10.244.1.5", "10.71.9.9", 1, 2, []byte("after"), false)}.Build()

	t.Run("last in its batch: free slots", func(t *testing.T) {
		dp, c := newDP(t, baseConfig())
		c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv4, superpacket(data)), from1)
		var segs [][]byte
		for len(segs) < nseg {
			segs = append(segs, readPackets(t, dp)...)
		}
		checkSegments(t, segs, data)
		if cn := dp.Counters(); cn.Get(dataplane.ToTunnel, dataplane.Segmented) != 1 || cn.Get(dataplane.ToTunnel, dataplane.Forwarded) != uint64(len(segs)) {
			t.Errorf("counters %v", cn[dataplane.ToTunnel])
		}
	})
	t.Run("mid-batch: queued in order", func(t *testing.T) {
		dp, c := newDP(t, baseConfig())
		c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv4, superpacket(data)), from1)
		c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv4, small), from1)
		var pkts [][]byte
		for len(pkts) < nseg+1 {
			pkts = append(pkts, readPackets(t, dp)...)
		}
		if ip4(pkts[nseg][16:20]) != "10.244.9.9" {
			t.Fatalf("the datagram after the superpacket was not last")
		}
		checkSegments(t, pkts[:nseg], data)
	})
	t.Run("udp over the MTU still gets fragmentation needed", func(t *testing.T) {
		dp, c := newDP(t, baseConfig())
		big := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 17, DF: true, Payload: pt.UDP("10.244.1.5", "10.71.2.7", 5, 6, make([]byte, 1400), false)}.Build()
		c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv4, big), from1)
		c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv4, small), from1)
		readPackets(t, dp)
		if cn := dp.Counters(); cn.Get(dataplane.ToTunnel, dataplane.DropTooBig) != 1 {
			t.Errorf("counters %v", cn[dataplane.ToTunnel])
		}
	})
}

func TestCompleteChecksums(t *testing.T) {
	cfg := baseConfig()
	cfg.CompleteChecksums = true
	dp, c := newDP(t, cfg)
	p := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 17, Payload: pt.UDP("10.244.1.5", "10.71.2.7", 1, 2, []byte("partial"), false)}.Build()
	binary.BigEndian.PutUint16(p[26:], 0x1234) // an unfinished checksum
	c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv4, p), from1)
	got := readPackets(t, dp)
	if len(got) != 1 || pt.Problem(got[0]) != "" {
		t.Fatalf("checksum not completed: %v", pt.Problem(got[0]))
	}

	// IPv6, TCP and UDP, translated on the way (fd71::/56 -> fd00:244::/56): the checksum
	// is completed before the translation updates it.
	dp6, c6 := newDP(t, func() dataplane.Config { cfg := dualStackConfig(); cfg.CompleteChecksums = true; return cfg }())
	const s, d = "fd00:244:0:1::5", "fd71:0:0:2::7"
	for _, p := range [][]byte{
		pt.IPv6{Src: s, Dst: d, Next: 6, Payload: pt.TCP(s, d, 40000, 80, packet.TCPFlagACK, nil, []byte("partial"))}.Build(),
		pt.IPv6{Src: s, Dst: d, Next: 17, Payload: pt.UDP(s, d, 1, 2, []byte("partial"), false)}.Build(),
	} {
		off := 40 + 16 // TCP's checksum
		if p[6] == 17 {
			off = 40 + 6
		}
		binary.BigEndian.PutUint16(p[off:], 0x1234) // an unfinished checksum
		c6.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv6, p), from1)
		got := readPackets(t, dp6)
		if len(got) != 1 || pt.Problem6(got[0]) != "" {
			t.Fatalf("IPv6 checksum not completed: %v", pt.Problem6(got[0]))
		}
	}
}

// TestSuperpacketBursts feeds bursts of superpackets of several sizes, with small packets
// between them, through a socket batch as large as wireguard-go's: every segment and packet
// must come out once, in order, none dropped, whether the burst arrives before the dataplane
// has seen superpackets (one batch holds them all and spills into the queue) or after (it
// takes as many datagrams as fit).
func TestSuperpacketBursts(t *testing.T) {
	c := overlaytest.New(128)
	dp, err := dataplane.New(baseConfig(), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dp.Close() })
	sizes := []int{64000, 1301, 30000, 65000 - 40, 2600, 13000}
	type want struct {
		data  []byte // a superpacket's payload, or nil for a small packet
		small byte
	}
	for burst := range 3 {
		var wants []want
		for j := range 60 {
			data := make([]byte, sizes[j%len(sizes)])
			for i := range data {
				data[i] = byte(i*13 + j + burst)
			}
			c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv4, superpacket(data)), from1)
			wants = append(wants, want{data: data})
			if j%3 == 2 {
				small := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.9.9", Proto: 17, Payload: pt.UDP("10.244.1.5", "10.71.9.9", 1, 2, []byte{byte(j)}, false)}.Build()
				c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv4, small), from1)
				wants = append(wants, want{small: byte(j)})
			}
		}
		total := 0
		for _, w := range wants {
			total++
			if w.data != nil {
				total += (len(w.data)+1299)/1300 - 1
			}
		}
		var got [][]byte
		for len(got) < total {
			got = append(got, readPackets(t, dp)...)
		}
		if len(got) != total {
			t.Fatalf("burst %d: %d packets out, want %d", burst, len(got), total)
		}
		for _, w := range wants {
			if w.data == nil {
				if p := got[0]; ip4(p[16:20]) != "10.244.9.9" || p[len(p)-1] != w.small {
					t.Fatalf("burst %d: small packet %d out of order", burst, w.small)
				}
				got = got[1:]
				continue
			}
			n := (len(w.data) + 1299) / 1300
			checkSegments(t, got[:n], w.data)
			got = got[n:]
		}
		if cn := dp.Counters(); cn.Get(dataplane.ToTunnel, dataplane.DropQueueFull) != 0 {
			t.Fatalf("burst %d: queue drops %v", burst, cn[dataplane.ToTunnel])
		}
	}
}

// superpacket6 is superpacket for IPv6: fd00:244:0:1::5 to fd71:0:0:2::7 (fd00:244:0:2::7 once
// translated by dualStackConfig's NAT).
func superpacket6(data []byte) []byte {
	const s, d = "fd00:244:0:1::5", "fd71:0:0:2::7"
	seg := pt.TCP(s, d, 40000, 80, packet.TCPFlagACK|packet.TCPFlagFIN|0x08|0x80, nil, data)
	ip := pt.IPv6{Src: s, Dst: d, Next: 6, Payload: seg}.Build()
	partial := packet.Fold(packet.PseudoSum6([16]byte(ip[8:24]), [16]byte(ip[24:40]), 6, len(seg)))
	binary.BigEndian.PutUint16(ip[40+16:], partial)
	return ip
}

// TestSuperpacketSplit6: an IPv6 TCP superpacket from a node with TSO is cut like an IPv4 one,
// each segment with its payload length, sequence number, flags and full checksum, translated;
// one the gateway cannot cut (extension headers) gets a Packet Too Big.
func TestSuperpacketSplit6(t *testing.T) {
	data := make([]byte, 30000)
	for i := range data {
		data[i] = byte(i * 7)
	}
	// 1280 payload bytes fit in a 1340-byte segment with 60 bytes of headers.
	nseg := (len(data) + 1279) / 1280
	cfg := icmp6Config()
	cfg.CompleteChecksums = true
	dp, c := newDP(t, cfg)
	c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv6, superpacket6(data)), from1)
	var segs [][]byte
	for len(segs) < nseg {
		segs = append(segs, readPackets(t, dp)...)
	}
	var got []byte
	for i, s := range segs {
		if len(s) > dataplane.DefaultTunnelMTU {
			t.Errorf("segment %d is %d bytes, over the tunnel MTU", i, len(s))
		}
		if p := pt.Problem6(s); p != "" {
			t.Errorf("segment %d: %s", i, p)
		}
		if d := ip6(s[24:40]); d != "fd00:244:0:2::7" || s[7] != 63 {
			t.Errorf("segment %d: dst %s hop limit %d", i, d, s[7])
		}
		tcp := s[40:]
		if sn := binary.BigEndian.Uint32(tcp[4:]); sn != 0x01020304+uint32(len(got)) {
			t.Errorf("segment %d: seq %#x", i, sn)
		}
		last := i == len(segs)-1
		if flags := tcp[13]; (flags&0x01 != 0) != last || (flags&0x08 != 0) != last || (flags&0x80 != 0) != (i == 0) {
			t.Errorf("segment %d of %d: flags %#x", i, len(segs), flags)
		}
		got = append(got, tcp[20:]...)
	}
	if !bytes.Equal(got, data) {
		t.Errorf("segments carry %d bytes that differ from the %d sent", len(got), len(data))
	}
	if cn := dp.Counters(); cn.Get(dataplane.ToTunnel, dataplane.Segmented) != 1 || cn.Get(dataplane.ToTunnel, dataplane.Forwarded) != uint64(nseg) {
		t.Errorf("counters %v", cn[dataplane.ToTunnel])
	}

	// Behind a Destination Options header it is not cut: Packet Too Big to the pod.
	const s, d = "fd00:244:0:1::5", "fd71:0:0:2::7"
	opts := pt.IPv6{Src: s, Dst: d, Ext: [][]byte{pt.ExtHeader(packet.ProtoDestOpts, 8)}, Proto: 6,
		Payload: pt.TCP(s, d, 40000, 80, packet.TCPFlagACK, nil, data[:3000])}.Build()
	c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv6, opts), from1)
	readPackets(t, dp)
	if cn := dp.Counters(); cn.Get(dataplane.ToTunnel, dataplane.DropTooBig) != 1 {
		t.Errorf("counters %v", cn[dataplane.ToTunnel])
	}
}
