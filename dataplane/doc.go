// Package dataplane is skein's packet path, in pure Go: typed packet views, stateless prefix NAT
// with incremental checksums, VXLAN and Geneve encapsulation, route lookup, MSS clamping and ICMP
// errors, behind the batched, offset-aware interfaces wireguard-go uses (tun.Device on the inner
// side, conn.Bind-shaped sockets on the wire side). It also holds the kernel programming the node
// agent uses (links, FDB, neighbours, routes, rules of table 18952) behind an interface small
// enough to fake.
//
// Rules: no k8s.io and no gvisor.dev imports (a layout test enforces it); no per-packet
// allocation on the hot path.
package dataplane
