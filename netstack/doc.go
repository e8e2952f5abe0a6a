// Package netstack is the gVisor glue of the gateway: a userspace TCP/IP stack that owns only
// the gateway's own addresses (its tunnel-internal and overlay IPs), answers ICMP echo and runs
// the connection prober and the reconnect pings, connected to the dataplane by a link endpoint.
// (The gateway's /metrics is served by the appliance on an ordinary TCP listener, not here.)
//
// It is the only package of skein that imports gvisor.dev, so that the rest of the code base
// (and its build) does not depend on gVisor's internals.
package netstack
