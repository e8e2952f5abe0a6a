package dataplane_test

import (
	"bytes"
	"testing"

	"github.com/skein-net/skein/dataplane"
	"github.com/skein-net/skein/dataplane/overlay"
	"github.com/skein-net/skein/dataplane/overlaytest"
	"github.com/skein-net/skein/dataplane/packet"
	pt "github.com/skein-net/skein/dataplane/packet/packettest"
)

// terminal sums the counters every packet ends in exactly once.
func terminal(c dataplane.Counts, d dataplane.Direction) uint64 {
	return c.Get(d, dataplane.Forwarded) + c.Get(d, dataplane.Local) + c.Get(d, dataplane.ARPReplied) + c.Drops(d)
}

// FuzzPath feeds an arbitrary overlay datagram (its IPv4 header checksum fixed when it has
// one, to get deeper) through Read and an arbitrary packet through Write: nothing panics,
// every packet is counted exactly once, and whatever leaves has valid checksums.
func FuzzPath(f *testing.F) {
	syn := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 6, DF: true, Payload: pt.TCP("10.244.1.5", "10.71.2.7", 1, 2, packet.TCPFlagSYN, pt.MSSOption(1460), nil)}.Build()
	back := pt.IPv4{Src: "10.244.2.7", Dst: "10.244.1.5", Proto: 17, Payload: pt.UDP("10.244.2.7", "10.244.1.5", 1, 2, []byte("x"), false)}.Build()
	errQuote := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 1, Payload: pt.ICMP(3, 4, [4]byte{0, 0, 5, 0}, back)}.Build()
	f.Add(vxlanFrame(gwMAC, packet.EtherTypeIPv4, syn), back)
	f.Add(vxlanFrame(gwMAC, packet.EtherTypeIPv4, errQuote), syn)
	f.Add(vxlanFrame(packet.Broadcast, packet.EtherTypeARP, make([]byte, 28)), []byte{0x45})
	f.Add(vxlanFrame(gwMAC, packet.EtherTypeIPv4, pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 17, TTL: 1, Payload: make([]byte, 8)}.Build()), []byte{})
	// IPv6: hop limits running out both ways (ICMPv6 errors), and one too big for the tunnel.
	f.Add(vxlanFrame(gwMAC, packet.EtherTypeIPv6, syn6("fd00:244:0:1::5", "fd71:0:0:2::7", 1)), syn6("fd00:244:0:2::7", "fd00:244:0:1::5", 1))
	f.Add(vxlanFrame(gwMAC, packet.EtherTypeIPv6, pt.IPv6{Src: "fd00:244:0:1::5", Dst: "fd71:0:0:2::7", Next: 17,
		Payload: pt.UDP("fd00:244:0:1::5", "fd71:0:0:2::7", 5, 6, make([]byte, 1400), false)}.Build()), syn6("fd00:244:0:2::7", "fd00:244:0:1::5", 64))

	// The same inputs through three gateways: the peer's pods remapped, that plus this site's
	// pods presented under another prefix (LocalNAT), and a dual-stack one that sends ICMPv6
	// errors.
	type path struct {
		dp *dataplane.Dataplane
		c  *overlaytest.Conn
	}
	var paths []path
	for _, cfg := range []dataplane.Config{baseConfig(), localNATConfig(), icmp6Config()} {
		cfg.ICMPRate, cfg.ICMPBurst = 1000000, 1000000
		c := overlaytest.New(0)
		dp, err := dataplane.New(cfg, c)
		if err != nil {
			f.Fatal(err)
		}
		dp.SetLocalHandler(&handler{})
		paths = append(paths, path{dp, c})
	}
	sentinel := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.9.9", Proto: 17, ID: 0x5e17, Payload: pt.UDP("10.244.1.5", "10.71.9.9", 9, 9, nil, false)}.Build()
	bufs := make([][]byte, paths[0].dp.BatchSize())
	for i := range bufs {
		bufs[i] = make([]byte, 65535)
	}
	sizes := make([]int, len(bufs))

	f.Fuzz(func(t *testing.T, d0, fromTunnel0 []byte) {
		for _, pa := range paths {
			dp, c := pa.dp, pa.c
			d, fromTunnel := bytes.Clone(d0), bytes.Clone(fromTunnel0)
			fixIPv4(d, overlay.HeaderLen)
			fixIPv4(fromTunnel, 0)
			before := dp.Counters()
			// Reads until the sentinel comes through, checking what goes into the tunnel:
			// valid unless the input it came from (or quotes) was not.
			readAll := func(input []byte) {
				c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv4, sentinel), from1)
				for done := false; !done; {
					n, err := dp.Read(bufs, sizes, offset)
					if err != nil {
						t.Fatal(err)
					}
					for i := range n {
						p := bufs[i][offset : offset+sizes[i]]
						if sizes[i] == 0 {
							continue
						}
						if len(p) == len(sentinel) && bytes.Equal(p[4:6], sentinel[4:6]) && bytes.Equal(p[16:20], []byte{10, 244, 9, 9}) {
							done = true
							continue
						}
						problem := pt.Problem
						if p[0]>>4 == 6 {
							problem = pt.Problem6
						}
						if prob := problem(p); prob != "" && problem(input) == "" {
							t.Fatalf("into the tunnel: %s", prob)
						}
					}
				}
			}
			c.Push(d, from1)
			readAll(d[min(len(d), overlay.HeaderLen):])
			write(t, dp, fromTunnel)
			// The ICMP errors about it went into the tunnel's queue: read them now.
			readAll(fromTunnel)
			for _, s := range c.TakeSent() {
				if _, err := packet.ParseVXLAN(s.B); err != nil {
					t.Fatalf("sent a datagram that is not VXLAN: %v", err)
				}
			}
			after := dp.Counters()
			if got := terminal(after, dataplane.ToTunnel) - terminal(before, dataplane.ToTunnel); got != 3 {
				t.Fatalf("to the tunnel: 3 datagrams (the input and two sentinels) counted %d times: %v", got, after[dataplane.ToTunnel])
			}
			if got := terminal(after, dataplane.FromTunnel) - terminal(before, dataplane.FromTunnel); got != 1 {
				t.Fatalf("from the tunnel: 1 packet counted %d times: %v", got, after[dataplane.FromTunnel])
			}
		}
	})
}

// fixIPv4 recomputes the header checksum of an IPv4 header at b[at:], if there is one.
func fixIPv4(b []byte, at int) {
	if len(b) < at+20 || b[at]>>4 != 4 {
		return
	}
	hl := int(b[at]&0x0f) * 4
	if hl < 20 || at+hl > len(b) {
		return
	}
	packet.IPv4(b[at:]).ComputeChecksum()
}
