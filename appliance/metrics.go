package appliance

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/skein-net/skein/dataplane"
	"github.com/skein-net/skein/netstack"
)

// serveHTTP serves /metrics, /healthz, /readyz (and /debug/pprof when asked) on addr.
func (g *Gateway) serveHTTP(addr string) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(&collector{g: g}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
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

// collector exports the dataplane's counters and the connection state at scrape time.
type collector struct{ g *Gateway }

var (
	descPackets   = prometheus.NewDesc("skein_gateway_packets_total", "Packets by direction and outcome (forwarded, local, arp-replied, drop-<reason>, and events such as mss-clamped).", []string{"direction", "counter"}, nil)
	descBytes     = prometheus.NewDesc("skein_gateway_bytes_total", "Bytes of forwarded inner packets by direction.", []string{"direction"}, nil)
	descRTT       = prometheus.NewDesc("skein_gateway_probe_rtt_seconds", "Round-trip time of the last answered probe to the peer gateway.", nil, nil)
	descConnected = prometheus.NewDesc("skein_gateway_connection_state", "1 for the current connection state.", []string{"state"}, nil)
	descHandshake = prometheus.NewDesc("skein_gateway_handshake_age_seconds", "Seconds since the last WireGuard handshake with the peer (absent before the first).", nil, nil)
	descNAT       = prometheus.NewDesc("skein_gateway_nat_translated_total", "Packets whose addresses were translated, by direction.", []string{"direction"}, nil)
	descWindow    = prometheus.NewDesc("skein_gateway_window_packets", "Packets inside wireguard-go by direction (bounded by --window / window).", []string{"direction"}, nil)
	descWaits     = prometheus.NewDesc("skein_gateway_window_waits_total", "Times the gateway waited for wireguard-go to take more packets, by direction.", []string{"direction"}, nil)
	descReconnect = prometheus.NewDesc("skein_gateway_reconnects_total", "Times this client reset its WireGuard peer to reach a new active replica of the peer gateway (after its goodbye or a silent lost probe).", nil, nil)
	descForgets   = prometheus.NewDesc("skein_gateway_window_forgets_total", "Waits that timed out and assumed the packets inside were dropped by wireguard-go, by direction.", []string{"direction"}, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPackets, descBytes, descRTT, descConnected, descHandshake, descNAT, descWindow, descWaits, descForgets, descReconnect} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	counts := c.g.dp.Counters()
	for d := range dataplane.NumDirections {
		for k := range dataplane.NumCounters {
			if k == dataplane.Bytes {
				ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(counts[d][k]), d.String())
				continue
			}
			ch <- prometheus.MustNewConstMetric(descPackets, prometheus.CounterValue, float64(counts[d][k]), d.String(), k.String())
		}
		passedUnmatched := counts[d][dataplane.NATUnmatched] - min(counts[d][dataplane.NATUnmatched], counts[d][dataplane.DropNATUnmatched])
		translated := counts[d][dataplane.Forwarded] - min(counts[d][dataplane.Forwarded], passedUnmatched)
		ch <- prometheus.MustNewConstMetric(descNAT, prometheus.CounterValue, float64(translated), d.String())
	}
	for d, w := range map[dataplane.Direction]*dataplane.Window{dataplane.ToTunnel: c.g.out, dataplane.FromTunnel: c.g.in} {
		ws := w.Stats()
		ch <- prometheus.MustNewConstMetric(descWindow, prometheus.GaugeValue, float64(ws.Inside), d.String())
		ch <- prometheus.MustNewConstMetric(descWaits, prometheus.CounterValue, float64(ws.Waits), d.String())
		ch <- prometheus.MustNewConstMetric(descForgets, prometheus.CounterValue, float64(ws.Forgets), d.String())
	}
	ch <- prometheus.MustNewConstMetric(descReconnect, prometheus.CounterValue, float64(c.g.Reconnects()))
	s := c.g.prober.Status()
	if !s.LastReply.IsZero() {
		ch <- prometheus.MustNewConstMetric(descRTT, prometheus.GaugeValue, s.RTT.Seconds())
	}
	for _, st := range []netstack.State{netstack.Connecting, netstack.Connected, netstack.Error} {
		v := 0.0
		if s.State == st {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descConnected, prometheus.GaugeValue, v, string(st))
	}
	if hs := c.g.lastHandshake(); !hs.IsZero() {
		ch <- prometheus.MustNewConstMetric(descHandshake, prometheus.GaugeValue, time.Since(hs).Seconds())
	}
}
