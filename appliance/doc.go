// Package appliance assembles the skein gateway: a wireguard-go device whose inner side is the
// userspace dataplane (not a kernel TUN), the gVisor netstack for the gateway's own addresses,
// and the watchers that turn API objects or a static config file into dataplane configuration.
//
// It is the one package allowed to depend on everything (dataplane, netstack, control); in
// exchange, nothing but cmd may import it. Besides wiring the parts together and owning their
// lifetimes (gateway.go, incluster.go), it holds the behaviour that needs several of them at
// once: the failover protocol between gateways (reconnect.go: the goodbye a stopping replica
// sends, the client's reconnect) and the metrics that read the dataplane, the windows,
// wireguard-go and the prober together (metrics.go).
//
// Its edges to the world (the overlay socket, WireGuard's bind, the logger) are Options whose
// nil values mean the real ones, so tests assemble whole gateways in memory.
package appliance
