package appliance

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync"
	"time"

	"github.com/skein-net/skein/control/buildinfo"
	"github.com/skein-net/skein/control/connlimit"
	"github.com/skein-net/skein/control/promtext"
	"github.com/skein-net/skein/dataplane"
	"github.com/skein-net/skein/netstack"
)

// serveHTTP serves /metrics, /healthz, /readyz (and /debug/pprof when asked) on addr.
func (g *Gateway) serveHTTP(addr string) error {
	c := &collector{g: g}
	mux := http.NewServeMux()
	// Uncompressed: a scrape is some 30 KiB on a local network, and each gzip writer would
	// hold 700 KiB of the gateway's memory.
	mux.Handle("/metrics", promtext.Handler(c.write))
	if g.plan.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		// Ready once the sockets are open and serving: traffic can flow as soon as the peer
		// handshakes, so the connection state is reported, not gated on.
		fmt.Fprintf(w, "ok: connection %s\n", g.prober.Status().State)
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("httpListen %s: %w", addr, err)
	}
	g.httpLn = ln
	g.http = boundedHTTPServer(mux)
	go func() {
		if err := g.http.Serve(connlimit.Wrap(ln, httpMaxConns, httpMaxConnsPerSource)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			g.log.Error("http server", "err", err)
		}
	}()
	return nil
}

// The gateway's HTTP port (health, readiness, metrics) is reachable by any pod: connections
// are bounded in number (in all, and per source) and in time, so idle ones cannot exhaust the
// gateway's memory (each costs a goroutine and about 20 KB; 13,000 filled 256 Mi).
const (
	httpMaxConns          = 64
	httpMaxConnsPerSource = 16
)

// boundedHTTPServer serves h with deadlines on every phase of a connection, and closes each
// connection after its answer: a scrape every few seconds gains nothing from keep-alive, and
// clients that open a connection per request (and never close it) would hold the places.
func boundedHTTPServer(h http.Handler) *http.Server {
	s := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 2 * time.Minute, IdleTimeout: 5 * time.Second, MaxHeaderBytes: 16 << 10}
	s.SetKeepAlivesEnabled(false)
	return s
}

// collector writes the dataplane's counters, WireGuard's peer state and the prober's view at
// scrape time. It keeps what makes its counters monotonic and its timestamps survive a
// WireGuard peer reset (a reconnect replaces the peer, zeroing its handshake time and bytes).
type collector struct {
	g *Gateway

	mu             sync.Mutex
	lastHS         time.Time // the latest handshake seen
	wgLast, wgBase [2]int64  // WireGuard bytes: last read and sum before resets (tx, rx)
}

// deprecated marks a metric kept one release for dashboards built on it (see docs/metrics.md).
func deprecated(use string) string {
	return "Deprecated, removed in the release after v0.2: use " + use + "."
}

// skein_gateway_configured is 0 while an in-cluster gateway waits for its configuration
// (incluster.go) and 1 once it runs.
const (
	configuredName = "skein_gateway_configured"
	configuredHelp = "1 once the gateway runs with its configuration; 0 while an in-cluster gateway waits for it (a server waits for its client's PublicKey), when only the build and this are exported."
)

// family is a metric family's name, help and type.
type family struct {
	name, help string
	typ        promtext.Type
}

var (
	famConfigured   = family{configuredName, configuredHelp, promtext.Gauge}
	famHandled      = family{"skein_gateway_packets_handled_total", "Packets by direction and how they ended: forwarded, local (to the gateway's own addresses), arp_replied or dropped (the reason in skein_gateway_packets_dropped_total).", promtext.Counter}
	famDropped      = family{"skein_gateway_packets_dropped_total", "Dropped packets by direction and reason.", promtext.Counter}
	famEvents       = family{"skein_gateway_packet_events_total", "Things done to packets on their way, by direction: nat_unmatched (no NAT pair), mss_clamped, tso_segmented, icmp_sent (time exceeded, fragmentation needed), icmp_rate_limited.", promtext.Counter}
	famBytes        = family{"skein_gateway_bytes_total", "Bytes of forwarded inner packets by direction.", promtext.Counter}
	famNAT          = family{"skein_gateway_nat_translated_total", "Packets whose addresses were translated (a remapped peer network, or this site's pods presented under another prefix), by direction; a TCP superpacket cut to the tunnel MTU counts as its segments, as in skein_gateway_packets_handled_total.", promtext.Counter}
	famWGDrops      = family{"skein_gateway_wireguard_drops_total", "Packets wireguard-go dropped, by reason: disallowed_source (from the peer, with a source outside its allowed IPs), invalid_ip_version, invalid_mac1, invalid_handshake, invalid_cookie. (Packets that fail to decrypt are dropped without a report.)", promtext.Counter}
	famSendErrs     = family{"skein_gateway_wireguard_send_errors_total", "Errors of the WireGuard socket's sends to the peer, by kind: message_too_long (a batch or datagram larger than the path allows; a refused batch is sent again one datagram at a time), no_buffer_space, connection_refused, unreachable, not_permitted (a firewall on the host), gso_unsupported (the device cannot offload UDP segmentation; sent again without it), other.", promtext.Counter}
	famResent       = family{"skein_gateway_wireguard_datagrams_resent_total", "WireGuard datagrams whose batch the socket refused as too big (a path MTU below the tunnel's packets) and that were sent again one at a time.", promtext.Counter}
	famUnbatched    = family{"skein_gateway_wireguard_datagrams_unbatched_total", "WireGuard datagrams sent one at a time without UDP GSO because a batch of datagrams that large was refused as too big in the last 10 s.", promtext.Counter}
	famTunnelMTU    = family{"skein_gateway_tunnel_mtu_bytes", "The tunnel MTU: configured, and effective (lowered to what the gateway's path MTU discovery found the WAN carries; the MSS clamp and fragmentation needed follow it).", promtext.Gauge}
	famPMTUProbes   = family{"skein_gateway_path_mtu_probes_total", "Path MTU probes by result: passed (answered), lost (a size the path does not carry, or loss), void (could not be sent alone with DF; tried again).", promtext.Counter}
	famPMTUSearch   = family{"skein_gateway_path_mtu_search_seconds", "How long the last completed path MTU search took (0 before the first).", promtext.Gauge}
	famPMTUSearches = family{"skein_gateway_path_mtu_searches_total", "Path MTU searches completed.", promtext.Counter}
	famWGBytes      = family{"skein_gateway_wireguard_bytes_total", "Bytes of WireGuard datagrams (encrypted, with WireGuard's overhead) by direction: to-tunnel sent to the peer, from-tunnel received from it.", promtext.Counter}
	famRTTHist      = family{"skein_gateway_probe_round_trip_seconds", "Round-trip times of answered probes to the peer gateway through the tunnel.", promtext.Histogram}
	famLost         = family{"skein_gateway_probes_lost_total", "Probes to the peer gateway that got no answer within the probe interval.", promtext.Counter}
	famState        = family{"skein_gateway_connection_state", "1 for the current connection state (Connecting, Connected, Error: the values of a Connection's status), 0 for the others.", promtext.Gauge}
	famLastHS       = family{"skein_gateway_last_handshake_timestamp_seconds", "Unix time of the last WireGuard handshake with the peer since the gateway started (absent before the first; kept when a reconnect replaces the peer).", promtext.Gauge}
	famPeer         = family{"skein_gateway_peer_info", "Always 1; the labels describe the WireGuard peer: this gateway's role (server or client), the peer's public key (base64, as wg shows it) and its current endpoint (empty until known).", promtext.Gauge}
	famActive       = family{"skein_gateway_active", "1 when this replica is the active one (WireGuard up), 0 for a standby.", promtext.Gauge}
	famWindow       = family{"skein_gateway_window_packets", "Packets inside wireguard-go by direction (bounded by --window / window).", promtext.Gauge}
	famWaits        = family{"skein_gateway_window_waits_total", "Times the gateway waited for wireguard-go to take more packets, by direction.", promtext.Counter}
	famForgets      = family{"skein_gateway_window_forgets_total", "Waits that timed out and assumed the packets inside were dropped by wireguard-go, by direction.", promtext.Counter}
	famReconn       = family{"skein_gateway_reconnects_total", "Times this client reset its WireGuard peer to reach a new active replica of the peer gateway (after its goodbye or a silent lost probe).", promtext.Counter}

	// Deprecated names, kept one release.
	famOldPackets   = family{"skein_gateway_packets_total", deprecated("skein_gateway_packets_handled_total, skein_gateway_packets_dropped_total and skein_gateway_packet_events_total"), promtext.Counter}
	famOldRTT       = family{"skein_gateway_probe_rtt_seconds", deprecated("skein_gateway_probe_round_trip_seconds"), promtext.Gauge}
	famOldHandshake = family{"skein_gateway_handshake_age_seconds", deprecated("time() - skein_gateway_last_handshake_timestamp_seconds"), promtext.Gauge}
)

// one writes a family with one sample.
func (f family) one(w *promtext.Writer, v float64, labels ...string) {
	w.Family(f.name, f.help, f.typ)
	w.Sample(f.name, v, labels...)
}

// start writes the family's header; its samples follow.
func (f family) start(w *promtext.Writer) { w.Family(f.name, f.help, f.typ) }

// writeBuildInfo writes skein_gateway_build_info.
func writeBuildInfo(w *promtext.Writer) {
	i := buildinfo.Get()
	name, help := buildinfo.Metric("gateway")
	w.Family(name, help, promtext.Gauge)
	w.Sample(name, 1, "version", i.Version, "commit", i.Commit, "goversion", i.GoVersion)
}

// labelValue turns a counter's name into the new metrics' label value: "drop-ttl-exceeded"
// becomes "ttl_exceeded".
func labelValue(k dataplane.Counter) string {
	return strings.ReplaceAll(strings.TrimPrefix(k.String(), "drop-"), "-", "_")
}

// write writes every family of the gateway, at a scrape.
func (c *collector) write(w *promtext.Writer) {
	famConfigured.one(w, 1)
	writeBuildInfo(w)
	c.writePackets(w)
	c.writeWireGuard(w)
	c.writeProbes(w)
	windows := [dataplane.NumDirections]*dataplane.Window{dataplane.ToTunnel: c.g.out, dataplane.FromTunnel: c.g.in}
	var stats [dataplane.NumDirections]dataplane.WindowStats
	for d, win := range windows {
		stats[d] = win.Stats()
	}
	for _, x := range []struct {
		f     family
		value func(dataplane.WindowStats) float64
	}{
		{famWindow, func(s dataplane.WindowStats) float64 { return float64(s.Inside) }},
		{famWaits, func(s dataplane.WindowStats) float64 { return float64(s.Waits) }},
		{famForgets, func(s dataplane.WindowStats) float64 { return float64(s.Forgets) }},
	} {
		x.f.start(w)
		for d := range dataplane.NumDirections {
			w.Sample(x.f.name, x.value(stats[d]), "direction", d.String())
		}
	}
	famReconn.one(w, float64(c.g.Reconnects()))
}

// writePackets writes the dataplane's counters: each family with all its samples, both
// directions.
func (c *collector) writePackets(w *promtext.Writer) {
	counts := c.g.dp.Counters()
	type sample struct {
		dir   dataplane.Direction
		k     dataplane.Counter
		label string
	}
	// Which family each counter goes to (the same for both directions).
	var handled, dropped, events []sample
	for d := range dataplane.NumDirections {
		for k := range dataplane.NumCounters {
			switch {
			case k == dataplane.Bytes || k == dataplane.NATTranslated:
			case k == dataplane.Forwarded || k == dataplane.Local || k == dataplane.ARPReplied:
				handled = append(handled, sample{d, k, labelValue(k)})
			case k.IsDrop():
				dropped = append(dropped, sample{d, k, labelValue(k)})
			default:
				events = append(events, sample{d, k, labelValue(k)})
			}
		}
	}
	famHandled.start(w)
	for _, s := range handled {
		w.Sample(famHandled.name, float64(counts[s.dir][s.k]), "direction", s.dir.String(), "outcome", s.label)
	}
	for d := range dataplane.NumDirections {
		var sum uint64
		for _, s := range dropped {
			if s.dir == d {
				sum += counts[d][s.k]
			}
		}
		w.Sample(famHandled.name, float64(sum), "direction", d.String(), "outcome", "dropped")
	}
	famDropped.start(w)
	for _, s := range dropped {
		w.Sample(famDropped.name, float64(counts[s.dir][s.k]), "direction", s.dir.String(), "reason", s.label)
	}
	famEvents.start(w)
	for _, s := range events {
		w.Sample(famEvents.name, float64(counts[s.dir][s.k]), "direction", s.dir.String(), "event", s.label)
	}
	// NAT is counted where the translation happens, per packet as it leaves (a superpacket as
	// its segments, like forwarded).
	for _, x := range []struct {
		f family
		k dataplane.Counter
	}{{famBytes, dataplane.Bytes}, {famNAT, dataplane.NATTranslated}} {
		x.f.start(w)
		for d := range dataplane.NumDirections {
			w.Sample(x.f.name, float64(counts[d][x.k]), "direction", d.String())
		}
	}
	famOldPackets.start(w)
	for d := range dataplane.NumDirections {
		for k := range dataplane.NumCounters {
			if k != dataplane.Bytes && k != dataplane.NATTranslated {
				w.Sample(famOldPackets.name, float64(counts[d][k]), "direction", d.String(), "counter", k.String())
			}
		}
	}
}

func (c *collector) writeWireGuard(w *promtext.Writer) {
	p := c.g.peerState()
	c.mu.Lock()
	var bytes [2]int64
	for i, cur := range [2]int64{p.txBytes, p.rxBytes} {
		if cur < c.wgLast[i] {
			c.wgBase[i] += c.wgLast[i] // the peer was replaced
		}
		c.wgLast[i] = cur
		bytes[i] = c.wgBase[i] + cur
	}
	if p.lastHandshake.After(c.lastHS) {
		c.lastHS = p.lastHandshake
	}
	hs := c.lastHS
	c.mu.Unlock()
	famWGDrops.start(w)
	for i := range c.g.wgDrops {
		w.Sample(famWGDrops.name, float64(c.g.wgDrops[i].Load()), "reason", wgDropNames[i])
	}
	ps := c.g.path.Stats()
	famSendErrs.start(w)
	for k := range dataplane.NumSendErrors {
		w.Sample(famSendErrs.name, float64(ps.Errors[k]), "kind", k.String())
	}
	famResent.one(w, float64(ps.Resent))
	famUnbatched.one(w, float64(ps.Singly))
	configured, _ := c.g.dp.MTU()
	famTunnelMTU.start(w)
	w.Sample(famTunnelMTU.name, float64(configured), "kind", "configured")
	w.Sample(famTunnelMTU.name, float64(c.g.dp.EffectiveMTU()), "kind", "effective")
	famPMTUProbes.start(w)
	w.Sample(famPMTUProbes.name, float64(c.g.pmtu.passed.Load()), "result", "passed")
	w.Sample(famPMTUProbes.name, float64(c.g.pmtu.lost.Load()), "result", "lost")
	w.Sample(famPMTUProbes.name, float64(c.g.pmtu.void.Load()), "result", "void")
	// Always exposed (a scrape must hold every documented family): 0 before the first search.
	famPMTUSearch.one(w, time.Duration(c.g.pmtu.lastSearch.Load()).Seconds())
	famPMTUSearches.one(w, float64(c.g.pmtu.searches.Load()))
	famWGBytes.start(w)
	w.Sample(famWGBytes.name, float64(bytes[0]), "direction", dataplane.ToTunnel.String())
	w.Sample(famWGBytes.name, float64(bytes[1]), "direction", dataplane.FromTunnel.String())
	if !hs.IsZero() {
		famLastHS.one(w, float64(hs.UnixNano())/1e9)
		famOldHandshake.one(w, time.Since(hs).Seconds())
	}
	role := "server"
	if c.g.currentPlan().PeerEndpoint.IsValid() {
		role = "client"
	}
	famPeer.one(w, 1, "role", role, "peer_public_key", p.publicKey, "peer_endpoint", p.endpoint)
	active := 0.0
	if c.g.active.Load() {
		active = 1
	}
	famActive.one(w, active)
}

func (c *collector) writeProbes(w *promtext.Writer) {
	s, h := c.g.prober.Status(), c.g.prober.History()
	cum := make([]uint64, len(netstack.RTTBuckets))
	var n uint64
	for i := range netstack.RTTBuckets {
		n += h.Buckets[i]
		cum[i] = n
	}
	famRTTHist.start(w)
	w.Histogram(famRTTHist.name, netstack.RTTBuckets[:], cum, h.Answered, h.Sum)
	famLost.one(w, float64(h.Lost))
	if !s.LastReply.IsZero() {
		famOldRTT.one(w, s.RTT.Seconds())
	}
	famState.start(w)
	for _, st := range []netstack.State{netstack.Connecting, netstack.Connected, netstack.Error} {
		v := 0.0
		if s.State == st {
			v = 1
		}
		w.Sample(famState.name, v, "state", string(st))
	}
}
