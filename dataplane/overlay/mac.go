package overlay

import (
	"crypto/sha256"
	"net/netip"

	"github.com/skein-net/skein/dataplane/packet"
)

// GatewayMAC and NodeMAC derive the overlay MAC of a gateway (from its overlay IP) and of a
// node's overlay device (from its underlay IP): locally administered unicast addresses, stable
// across restarts, in two ranges (02:5b and 02:5a) so that a gateway and a node never share one.
func GatewayMAC(overlayIP netip.Addr) packet.MAC { return deriveMAC(0x5b, overlayIP) }

// NodeMAC: see GatewayMAC.
func NodeMAC(underlayIP netip.Addr) packet.MAC { return deriveMAC(0x5a, underlayIP) }

func deriveMAC(kind byte, ip netip.Addr) packet.MAC {
	h := sha256.Sum256(ip.AsSlice())
	return packet.MAC{0x02, kind, h[0], h[1], h[2], h[3]}
}
