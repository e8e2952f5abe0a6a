// Package netstack is the gVisor glue of the gateway: a userspace TCP/IP stack that owns only
// the gateway's own addresses (its tunnel-internal and overlay IPs), answers ICMP echo, runs the
// connection prober and serves metrics through the tunnel, connected to the dataplane by a link
// endpoint.
//
// It is the only package of skein that imports gvisor.dev, so that the rest of the code base
// (and its build) does not depend on gVisor's internals.
package netstack
