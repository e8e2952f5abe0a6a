package packet_test

import (
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
