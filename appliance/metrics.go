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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/skein-net/skein/control/buildinfo"
	"github.com/skein-net/skein/dataplane"
	"github.com/skein-net/skein/netstack"
)

// serveHTTP serves /metrics, /healthz, /readyz (and /debug/pprof when asked) on addr.
func (g *Gateway) serveHTTP(addr string) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(&collector{g: g}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildinfo.Collector("gateway"))
	mux := http.NewServeMux()
	// Uncompressed: a scrape is some 30 KiB on a local network, and each gzip writer would
	// hold 700 KiB of the gateway's memory.
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{DisableCompression: true}))
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
	g.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := g.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			g.log.Error("http server", "err", err)
		}
	}()
	return nil
}

// collector exports the dataplane's counters, WireGuard's peer state and the prober's view
// at scrape time. It keeps what makes its counters monotonic and its timestamps survive a
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

var (
	descConfigured = prometheus.NewDesc(configuredName, configuredHelp, nil, nil)
	descHandled    = prometheus.NewDesc("skein_gateway_packets_handled_total", "Packets by direction and how they ended: forwarded, local (to the gateway's own addresses), arp_replied or dropped (the reason in skein_gateway_packets_dropped_total).", []string{"direction", "outcome"}, nil)
	descDropped    = prometheus.NewDesc("skein_gateway_packets_dropped_total", "Dropped packets by direction and reason.", []string{"direction", "reason"}, nil)
	descEvents     = prometheus.NewDesc("skein_gateway_packet_events_total", "Things done to packets on their way, by direction: nat_unmatched (no NAT pair), mss_clamped, tso_segmented, icmp_sent (time exceeded, fragmentation needed), icmp_rate_limited.", []string{"direction", "event"}, nil)
	descBytes      = prometheus.NewDesc("skein_gateway_bytes_total", "Bytes of forwarded inner packets by direction.", []string{"direction"}, nil)
	descNAT        = prometheus.NewDesc("skein_gateway_nat_translated_total", "Packets whose addresses were translated (a remapped peer network, or this site's pods presented under another prefix), by direction; a TCP superpacket cut to the tunnel MTU counts as its segments, as in skein_gateway_packets_handled_total.", []string{"direction"}, nil)
	descWGDrops    = prometheus.NewDesc("skein_gateway_wireguard_drops_total", "Packets wireguard-go dropped, by reason: disallowed_source (from the peer, with a source outside its allowed IPs), invalid_ip_version, invalid_mac1, invalid_handshake, invalid_cookie. (Packets that fail to decrypt are dropped without a report.)", []string{"reason"}, nil)
	descWGBytes    = prometheus.NewDesc("skein_gateway_wireguard_bytes_total", "Bytes of WireGuard datagrams (encrypted, with WireGuard's overhead) by direction: to-tunnel sent to the peer, from-tunnel received from it.", []string{"direction"}, nil)
	descRTTHist    = prometheus.NewDesc("skein_gateway_probe_round_trip_seconds", "Round-trip times of answered probes to the peer gateway through the tunnel.", nil, nil)
	descLost       = prometheus.NewDesc("skein_gateway_probes_lost_total", "Probes to the peer gateway that got no answer within the probe interval.", nil, nil)
	descState      = prometheus.NewDesc("skein_gateway_connection_state", "1 for the current connection state (Connecting, Connected, Error: the values of a Connection's status), 0 for the others.", []string{"state"}, nil)
	descLastHS     = prometheus.NewDesc("skein_gateway_last_handshake_timestamp_seconds", "Unix time of the last WireGuard handshake with the peer since the gateway started (absent before the first; kept when a reconnect replaces the peer).", nil, nil)
	descPeer       = prometheus.NewDesc("skein_gateway_peer_info", "Always 1; the labels describe the WireGuard peer: this gateway's role (server or client), the peer's public key (base64, as wg shows it) and its current endpoint (empty until known).", []string{"role", "peer_public_key", "peer_endpoint"}, nil)
	descActive     = prometheus.NewDesc("skein_gateway_active", "1 when this replica is the active one (WireGuard up), 0 for a standby.", nil, nil)
	descWindow     = prometheus.NewDesc("skein_gateway_window_packets", "Packets inside wireguard-go by direction (bounded by --window / window).", []string{"direction"}, nil)
	descWaits      = prometheus.NewDesc("skein_gateway_window_waits_total", "Times the gateway waited for wireguard-go to take more packets, by direction.", []string{"direction"}, nil)
	descForgets    = prometheus.NewDesc("skein_gateway_window_forgets_total", "Waits that timed out and assumed the packets inside were dropped by wireguard-go, by direction.", []string{"direction"}, nil)
	descReconn     = prometheus.NewDesc("skein_gateway_reconnects_total", "Times this client reset its WireGuard peer to reach a new active replica of the peer gateway (after its goodbye or a silent lost probe).", nil, nil)

	// The names of v0.1, kept one release.
	descOldPackets   = prometheus.NewDesc("skein_gateway_packets_total", deprecated("skein_gateway_packets_handled_total, skein_gateway_packets_dropped_total and skein_gateway_packet_events_total"), []string{"direction", "counter"}, nil)
	descOldRTT       = prometheus.NewDesc("skein_gateway_probe_rtt_seconds", deprecated("skein_gateway_probe_round_trip_seconds"), nil, nil)
	descOldHandshake = prometheus.NewDesc("skein_gateway_handshake_age_seconds", deprecated("time() - skein_gateway_last_handshake_timestamp_seconds"), nil, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descConfigured, descWGDrops, descHandled, descDropped, descEvents, descBytes, descNAT, descWGBytes, descRTTHist, descLost,
		descState, descLastHS, descPeer, descActive, descWindow, descWaits, descForgets, descReconn, descOldPackets, descOldRTT, descOldHandshake} {
		ch <- d
	}
}

// labelValue turns a counter's name into the new metrics' label value: "drop-ttl-exceeded"
// becomes "ttl_exceeded".
func labelValue(k dataplane.Counter) string {
	return strings.ReplaceAll(strings.TrimPrefix(k.String(), "drop-"), "-", "_")
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descConfigured, prometheus.GaugeValue, 1)
	c.collectPackets(ch)
	c.collectWireGuard(ch)
	c.collectProbes(ch)
	for d, w := range map[dataplane.Direction]*dataplane.Window{dataplane.ToTunnel: c.g.out, dataplane.FromTunnel: c.g.in} {
		ws := w.Stats()
		ch <- prometheus.MustNewConstMetric(descWindow, prometheus.GaugeValue, float64(ws.Inside), d.String())
		ch <- prometheus.MustNewConstMetric(descWaits, prometheus.CounterValue, float64(ws.Waits), d.String())
		ch <- prometheus.MustNewConstMetric(descForgets, prometheus.CounterValue, float64(ws.Forgets), d.String())
	}
	ch <- prometheus.MustNewConstMetric(descReconn, prometheus.CounterValue, float64(c.g.Reconnects()))
}

func (c *collector) collectPackets(ch chan<- prometheus.Metric) {
	counts := c.g.dp.Counters()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for d := range dataplane.NumDirections {
		dir := d.String()
		var dropped uint64
		for k := range dataplane.NumCounters {
			v := counts[d][k]
			switch {
			case k == dataplane.Bytes:
				counter(descBytes, v, dir)
				continue
			case k == dataplane.Forwarded || k == dataplane.Local || k == dataplane.ARPReplied:
				counter(descHandled, v, dir, labelValue(k))
			case k.IsDrop():
				dropped += v
				counter(descDropped, v, dir, labelValue(k))
			case k == dataplane.NATTranslated:
				// Counted where the translation happens, per packet as it leaves (a
				// superpacket as its segments, like forwarded).
				counter(descNAT, v, dir)
				continue
			default:
				counter(descEvents, v, dir, labelValue(k))
			}
			counter(descOldPackets, v, dir, k.String())
		}
		counter(descHandled, dropped, dir, "dropped")
	}
}

func (c *collector) collectWireGuard(ch chan<- prometheus.Metric) {
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
	for i := range c.g.wgDrops {
		ch <- prometheus.MustNewConstMetric(descWGDrops, prometheus.CounterValue, float64(c.g.wgDrops[i].Load()), wgDropNames[i])
	}
	ch <- prometheus.MustNewConstMetric(descWGBytes, prometheus.CounterValue, float64(bytes[0]), dataplane.ToTunnel.String())
	ch <- prometheus.MustNewConstMetric(descWGBytes, prometheus.CounterValue, float64(bytes[1]), dataplane.FromTunnel.String())
	if !hs.IsZero() {
		ch <- prometheus.MustNewConstMetric(descLastHS, prometheus.GaugeValue, float64(hs.UnixNano())/1e9)
		ch <- prometheus.MustNewConstMetric(descOldHandshake, prometheus.GaugeValue, time.Since(hs).Seconds())
	}
	role := "server"
	if c.g.currentPlan().PeerEndpoint.IsValid() {
		role = "client"
	}
	ch <- prometheus.MustNewConstMetric(descPeer, prometheus.GaugeValue, 1, role, p.publicKey, p.endpoint)
	active := 0.0
	if c.g.active.Load() {
		active = 1
	}
	ch <- prometheus.MustNewConstMetric(descActive, prometheus.GaugeValue, active)
}

func (c *collector) collectProbes(ch chan<- prometheus.Metric) {
	s, h := c.g.prober.Status(), c.g.prober.History()
	buckets := make(map[float64]uint64, len(netstack.RTTBuckets))
	var cum uint64
	for i, le := range netstack.RTTBuckets {
		cum += h.Buckets[i]
		buckets[le] = cum
	}
	ch <- prometheus.MustNewConstHistogram(descRTTHist, h.Answered, h.Sum, buckets)
	ch <- prometheus.MustNewConstMetric(descLost, prometheus.CounterValue, float64(h.Lost))
	if !s.LastReply.IsZero() {
		ch <- prometheus.MustNewConstMetric(descOldRTT, prometheus.GaugeValue, s.RTT.Seconds())
	}
	for _, st := range []netstack.State{netstack.Connecting, netstack.Connected, netstack.Error} {
		v := 0.0
		if s.State == st {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descState, prometheus.GaugeValue, v, string(st))
	}
}
