// Package kernel is the node agent's kernel programming: the overlay device, its FDB and
// neighbour entries, the routes and rules of table 18952, loose reverse-path filtering, and its
// own nftables table for host-network SNAT, behind the small Kernel interface (a Fake records
// what would be done as iproute2 commands). The real implementation is Linux-only (netlink,
// nftables, ethtool ioctls) and needs CAP_NET_ADMIN in the namespace it works on; the desired
// state and the Fake build everywhere.
package kernel
