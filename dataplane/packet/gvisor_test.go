package packet_test

import (
	"math/rand/v2"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/skein-net/skein/dataplane/packet"
)

// gvisorTCPValid asks gVisor's header package, an implementation independent of ours, whether
// the TCP checksum of ip verifies.
func gvisorTCPValid(ip packet.IPv4) bool {
	seg := header.TCP(ip.Payload())
	src, dst := ip.Src(), ip.Dst()
	payload := ip.Payload()[seg.DataOffset():]
	return seg.IsChecksumValid(tcpip.AddrFrom4(src), tcpip.AddrFrom4(dst), checksum.Checksum(payload, 0), uint16(len(payload)))
}

// TestSumAgainstGvisor compares Sum with gVisor's checksum package on every length up to 300
// and random contents, chained and from a non-zero start.
func TestSumAgainstGvisor(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n <= 300; n++ {
		for range 20 {
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(r.Uint32())
			}
			if n > 0 && r.IntN(4) == 0 {
				for i := range b {
					b[i] = 0xff // long runs of carries
				}
			}
			init := uint16(r.Uint32())
			want := checksum.Checksum(b, init)
			if got := packet.Fold(packet.Sum(b, uint64(init))); got != want {
				t.Fatalf("len %d init %#x: Sum folds to %#x, gVisor says %#x", n, init, got, want)
			}
			if n%2 == 0 && n >= 2 {
				h := n / 2 &^ 1
				if got := packet.Fold(packet.Sum(b[h:], packet.Sum(b[:h], uint64(init)))); got != want {
					t.Fatalf("len %d chained at %d: %#x, want %#x", n, h, got, want)
				}
			}
		}
	}
}
