// Package route is the gateway's longest-prefix-match route table: for every packet the
// dataplane maps the destination address to an opaque next-hop ID, which the caller uses as an
// index into its own slice of next hops (tunnels, peers, interfaces).
//
// It exists because that lookup sits on the per-packet path: IPv4 lookups must take a few
// nanoseconds, allocate nothing and take no locks, with tens of thousands of routes (a /32 per
// remote pod, a /24 per remote node, a few cluster and default routes).
//
// # Concurrency
//
// A Builder collects routes and is not safe for concurrent use. Builder.Build returns a Table
// that is immutable: nothing changes it afterwards, so any number of goroutines may look up in
// it at once without synchronisation. To reconfigure, build a new Table and swap it in whole
// (for example through an atomic.Pointer[Table]); a reader that still holds the old Table keeps
// a consistent view of it.
//
// # Design
//
// IPv4 uses a DIR-16-8-8 layout: a directly indexed array of 65,536 entries for the top 16 bits
// of the address, and 256-entry chunks for the third and fourth bytes where longer prefixes
// need them. Build expands every prefix into the entries it covers, shortest first, so a lookup
// is at most three dependent array reads. IPv6 keeps one open-addressing hash table per prefix length
// present and probes them from the longest length down, dst masked to each: a gateway's IPv6
// routes come in few lengths (pod /128s, node /64s, cluster /56s or /48s), so a lookup is a
// few probes of one cache line each, allocation-free.
package route
