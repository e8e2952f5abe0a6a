// Package dataplane is skein's packet path, in pure Go: typed packet views, stateless prefix NAT
// with incremental checksums, VXLAN and Geneve encapsulation, route lookup, MSS clamping and ICMP
// errors. Towards wireguard-go it is a tun.Device (batched, offset-aware Read and Write); towards
// the nodes it reads and writes an OverlayConn, its own batched socket interface whose messages
// are scattered over a header slot and a body so the inner packet lands where wireguard-go wants
// it (dataplane/udp is the real one, dataplane/overlaytest the in-memory one). Window and
// PacedBind bound what wireguard-go holds. The files follow the packet: totunnel.go (Read, the
// overlay into the tunnel), fromtunnel.go (Write, the tunnel to the nodes), inject.go (packets the
// gateway originates and the queue into the tunnel), batch.go (one batch's state, carried through
// each direction). Subpackages hold one concept each (packet, nat, route, overlay, udp) and the
// kernel programming the node agent uses (kernel: links, FDB, neighbours, routes and rules of
// table 18952) behind an interface small enough to fake.
//
// Rules: no k8s.io and no gvisor.dev imports (a layout test enforces it); no per-packet
// allocation on the hot path.
package dataplane
