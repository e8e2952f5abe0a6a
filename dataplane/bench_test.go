package dataplane_test

import (
	"net/netip"
	"testing"

	"github.com/skein-net/skein/dataplane"
	"github.com/skein-net/skein/dataplane/nat"
	"github.com/skein-net/skein/dataplane/overlay"
	"github.com/skein-net/skein/dataplane/packet"
	pt "github.com/skein-net/skein/dataplane/packet/packettest"
)

const benchBatch = 64

// restoreLen covers every byte the path rewrites in a TCP packet without options (IP and TCP
// headers), which replayConn puts back before each batch.
const restoreLen = 64

// fullSizeTCP is a 1400-byte IPv4 TCP segment (an ACK with data; a SYN is clamped, which
// changes its MSS for good, so the clamp check runs but finds nothing to do).
func fullSizeTCP(src, dst string) []byte {
	return pt.IPv4{Src: src, Dst: dst, Proto: 6, DF: true,
		Payload: pt.TCP(src, dst, 40000, 80, packet.TCPFlagACK, nil, make([]byte, 1400-40))}.Build()
}

// fullSizeTCP6 is fullSizeTCP for IPv6.
func fullSizeTCP6(src, dst string) []byte {
	return pt.IPv6{Src: src, Dst: dst, Next: 6, Payload: pt.TCP(src, dst, 40000, 80, packet.TCPFlagACK, nil, make([]byte, 1400-60))}.Build()
}

// pathPackets are the path tests' packets for the family of dst (the address out of the
// tunnel): a packet into the tunnel, from node1's pod to the peer's remapped pod, and one out
// of the tunnel to dst.
func pathPackets(dst string) (in, out []byte, etherType uint16) {
	if netip.MustParseAddr(dst).Is6() {
		return fullSizeTCP6("fd00:244:0:1::5", "fd71:0:0:2::7"), fullSizeTCP6("fd00:244:0:2::7", dst), packet.EtherTypeIPv6
	}
	return fullSizeTCP("10.244.1.5", "10.71.2.7"), fullSizeTCP("10.244.2.7", dst), packet.EtherTypeIPv4
}

// benchConfig fits 1400-byte packets: wireguard-go's default MTU of 1420 on both sides.
func benchConfig() dataplane.Config {
	cfg := baseConfig()
	cfg.TunnelMTU, cfg.OverlayMTU = 1420, 1420
	return cfg
}

// benchLocalNAT is benchConfig with this site's pods also presented to the peer as
// 10.99.0.0/16 (a standalone gateway's local remap): both addresses translated each way.
func benchLocalNAT() dataplane.Config {
	cfg := benchConfig()
	cfg.LocalNAT = []nat.Pair{{From: pfx("10.244.0.0/16"), To: pfx("10.99.0.0/16")}}
	return cfg
}

// pathCases are the configurations the path's allocation test and benchmarks run: the peer's
// pods remapped, and that plus a local remap; dst is where a packet out of the tunnel goes.
var pathCases = []struct {
	name string
	cfg  func() dataplane.Config
	dst  string
}{
	{"remap", benchConfig, "10.244.1.5"},
	{"remap+local", benchLocalNAT, "10.99.1.5"},
	{"remap-ipv6", benchDualStack, "fd00:244:0:1::5"},
}

// benchDualStack is benchConfig with dualStackConfig's IPv6 networks.
func benchDualStack() dataplane.Config {
	cfg := dualStackConfig()
	cfg.TunnelMTU, cfg.OverlayMTU = 1420, 1420
	return cfg
}

// toTunnelSetup builds a dataplane on a replayConn that delivers a batch of full-size VXLAN
// datagrams, and wireguard-go-shaped buffers already holding their bodies.
func toTunnelSetup(tb testing.TB, cfg dataplane.Config, dst string) (*dataplane.Dataplane, [][]byte, []int) {
	ip, _, et := pathPackets(dst)
	d := vxlanFrame(gwMAC, et, ip)
	c := &replayConn{head: d[:overlay.HeaderLen], inner: ip[:restoreLen], n: len(d), addr: from1, batch: benchBatch}
	dp, err := dataplane.New(cfg, c)
	if err != nil {
		tb.Fatal(err)
	}
	bufs := make([][]byte, benchBatch)
	for i := range bufs {
		bufs[i] = make([]byte, 65535)
		copy(bufs[i][offset:], ip)
	}
	return dp, bufs, make([]int, benchBatch)
}

func fromTunnelSetup(tb testing.TB, cfg dataplane.Config, dst string) (*dataplane.Dataplane, [][]byte, []byte) {
	_, ip, _ := pathPackets(dst)
	dp, err := dataplane.New(cfg, &replayConn{batch: benchBatch})
	if err != nil {
		tb.Fatal(err)
	}
	bufs := make([][]byte, benchBatch)
	for i := range bufs {
		bufs[i] = append(make([]byte, offset, 65535), ip...)
	}
	return dp, bufs, ip[:restoreLen]
}

func TestPathAllocs(t *testing.T) {
	for _, pc := range pathCases {
		t.Run(pc.name, func(t *testing.T) {
			dp, bufs, sizes := toTunnelSetup(t, pc.cfg(), pc.dst)
			if n := testing.AllocsPerRun(100, func() {
				if k, err := dp.Read(bufs, sizes, offset); err != nil || k != benchBatch {
					t.Fatalf("Read = %d, %v", k, err)
				}
			}); n != 0 {
				t.Errorf("Read: %v allocations per batch of %d, want 0", n, benchBatch)
			}
			if c := dp.Counters(); c.Get(dataplane.ToTunnel, dataplane.Forwarded) == 0 || c.Drops(dataplane.ToTunnel) != 0 ||
				c.Get(dataplane.ToTunnel, dataplane.NATTranslated) != c.Get(dataplane.ToTunnel, dataplane.Forwarded) {
				t.Fatalf("the batch was not forwarded and translated: %v", c[dataplane.ToTunnel])
			}

			dp2, wbufs, pristine := fromTunnelSetup(t, pc.cfg(), pc.dst)
			if n := testing.AllocsPerRun(100, func() {
				for _, b := range wbufs {
					copy(b[offset:], pristine)
				}
				if _, err := dp2.Write(wbufs, offset); err != nil {
					t.Fatal(err)
				}
			}); n != 0 {
				t.Errorf("Write: %v allocations per batch of %d, want 0", n, benchBatch)
			}
			if c := dp2.Counters(); c.Get(dataplane.FromTunnel, dataplane.Forwarded) == 0 || c.Drops(dataplane.FromTunnel) != 0 ||
				c.Get(dataplane.FromTunnel, dataplane.NATTranslated) != c.Get(dataplane.FromTunnel, dataplane.Forwarded) {
				t.Fatalf("the batch was not forwarded and translated: %v", c[dataplane.FromTunnel])
			}
		})
	}
}

// BenchmarkPathToTunnel is the whole per-packet path from the overlay into the tunnel:
// decapsulation and VTEP checks, IPv4 validation, route lookup, TTL, NAT, MSS clamp check,
// the packet left in place for wireguard-go. Reported per packet; the socket is not included.
func BenchmarkPathToTunnel(b *testing.B) {
	for _, pc := range append(pathCases, limitCases...) {
		b.Run(pc.name, func(b *testing.B) {
			dp, bufs, sizes := toTunnelSetup(b, pc.cfg(), pc.dst)
			b.ReportAllocs()
			b.SetBytes(1400 * benchBatch)
			n := 0
			for b.Loop() {
				k, err := dp.Read(bufs, sizes, offset)
				if err != nil || k != benchBatch {
					b.Fatalf("Read = %d, %v", k, err)
				}
				n += k
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/packet")
			if c := dp.Counters(); c.Drops(dataplane.ToTunnel) != 0 {
				b.Fatalf("drops: %v", c[dataplane.ToTunnel])
			}
		})
	}
}

// BenchmarkPathFromTunnel is the whole path out of the tunnel: IPv4 validation, route lookup
// to the node, TTL, NAT, MSS clamp check, overlay header written for a gather send. Restoring
// the rewritten header bytes (64 per packet) is included.
func BenchmarkPathFromTunnel(b *testing.B) {
	for _, pc := range append(pathCases, limitCases...) {
		b.Run(pc.name, func(b *testing.B) {
			dp, bufs, pristine := fromTunnelSetup(b, pc.cfg(), pc.dst)
			b.ReportAllocs()
			b.SetBytes(1400 * benchBatch)
			n := 0
			for b.Loop() {
				for _, buf := range bufs {
					copy(buf[offset:], pristine)
				}
				if _, err := dp.Write(bufs, offset); err != nil {
					b.Fatal(err)
				}
				n += len(bufs)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/packet")
			if c := dp.Counters(); c.Drops(dataplane.FromTunnel) != 0 {
				b.Fatalf("drops: %v", c[dataplane.FromTunnel])
			}
		})
	}
}

// replayConn returns the same batch of datagrams on every ReadBatch without copying the
// bodies: the benchmark lays the datagram into the buffers once, and ReadBatch only restores
// the headers the dataplane rewrote (overlay head, and the first bytes of the inner packet:
// TTL, addresses, checksums, MSS). It allocates nothing and discards what is written.
type replayConn struct {
	head    []byte
	inner   []byte // pristine first bytes of the inner packet
	n       int
	addr    netip.AddrPort
	batch   int
	written int
}

func (c *replayConn) ReadBatch(msgs []dataplane.Message) (int, error) {
	k := min(len(msgs), c.batch)
	for i := range k {
		copy(msgs[i].Head, c.head)
		copy(msgs[i].Body, c.inner)
		msgs[i].N = c.n
		msgs[i].Addr = c.addr
	}
	return k, nil
}

func (c *replayConn) WriteBatch(msgs []dataplane.Message) (int, error) {
	c.written += len(msgs)
	return len(msgs), nil
}

func (c *replayConn) Wake()          {}
func (c *replayConn) BatchSize() int { return c.batch }
func (c *replayConn) Close() error   { return nil }
