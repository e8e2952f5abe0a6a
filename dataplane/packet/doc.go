// Package packet holds zero-copy typed views over the wire headers the dataplane touches
// (Ethernet, ARP, IPv4, IPv6, TCP, UDP, ICMPv4, VXLAN, Geneve) and the Internet checksum
// (RFC 1071) with its incremental update (RFC 1624).
//
// A view is a byte slice with accessors, in the manner of gVisor's header package. Parse
// functions validate a view once (lengths, version, header length) and return it trimmed to its
// real extent; after that, every accessor of the view's fixed header is in range. Views never
// copy and never allocate: they alias the caller's buffer, and writes through a view change the
// packet in place. The caller owns the buffer and must not use a view after handing the buffer on.
//
// Errors are values of type Error, a small integer that converts to the error interface without
// allocating and indexes drop counters directly.
//
// Addresses cross the API as netip.Addr where convenience matters and as fixed arrays on the
// per-packet path; nothing here assumes IPv4 only.
package packet
