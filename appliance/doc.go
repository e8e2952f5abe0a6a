// Package appliance assembles the skein gateway: a wireguard-go device whose inner side is the
// userspace dataplane (not a kernel TUN), the gVisor netstack for the gateway's own addresses,
// and the watchers that turn API objects or a static config file into dataplane configuration.
//
// It is the one package allowed to depend on everything (dataplane, netstack, control); in
// exchange, nothing but cmd may import it. Keep logic out of here: it wires parts together and
// owns their lifetimes.
package appliance
