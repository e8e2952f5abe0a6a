package appliance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/connlimit"
	"github.com/skein-net/skein/control/gateway"
	"github.com/skein-net/skein/control/gateway/config"
	"github.com/skein-net/skein/control/promtext"
	"github.com/skein-net/skein/dataplane/overlay"
	"github.com/skein-net/skein/netstack"
)

// InCluster is a gateway configured from the API: it starts the gateway on the first complete
// configuration, applies later ones live, and reports the connection in its Connection object.
type InCluster struct {
	log     *slog.Logger
	watcher *gateway.Watcher
	cancel  context.CancelFunc
	done    chan struct{}

	election *gateway.Election

	mu      sync.Mutex
	gw      *Gateway
	err     error
	active  bool         // this replica holds the Lease (always true without an election)
	waiting *http.Server // answers /healthz and /readyz until the gateway starts
}

// StartInCluster begins watching; the gateway itself starts once the objects it needs exist.
// With an election, replicas share the gateway's Lease: the holder is active (WireGuard up,
// pod labelled for the Service, VTEP published for the node agents, Connection reported); the
// others are standbys with their WireGuard side down, ready to take over.
func StartInCluster(cfg *rest.Config, opts gateway.Options, election *gateway.Election, log *slog.Logger) (*InCluster, error) {
	if opts.Log == nil {
		opts.Log = log
	}
	ic := &InCluster{log: log, done: make(chan struct{}), election: election, active: election == nil}
	w, err := gateway.New(cfg, opts, ic.apply)
	if err != nil {
		return nil, err
	}
	ic.watcher = w
	if addr := opts.Local.HTTPListen; addr != "" && addr != "off" {
		if err := ic.serveWaiting(addr); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	ic.cancel = cancel
	var elected sync.WaitGroup
	if election != nil {
		elected.Add(1)
		go func() {
			defer elected.Done()
			if err := gateway.RunElection(ctx, cfg, opts.Namespace, opts.Name, *election, ic.becomeActive, ic.becomeStandby); err != nil {
				log.Error("leader election", "err", err)
			}
		}()
	}
	if !opts.Server {
		go ic.watchEndpoint(ctx, w)
	}
	go func() {
		defer close(ic.done)
		if err := w.Run(ctx); err != nil {
			log.Error("watching the API", "err", err)
			ic.mu.Lock()
			ic.err = err
			ic.mu.Unlock()
		}
		elected.Wait()
	}()
	return ic, nil
}

// watchEndpoint moves an active client on to the server's next address (or a fresh
// resolution of its name) when the server has not answered for the watcher's EndpointHold
// since the client began dialing where it dials: an address that does not lead to the server
// is left, and every address of the GatewayClient is tried in turn.
func (ic *InCluster) watchEndpoint(ctx context.Context, w *gateway.Watcher) {
	hold := w.EndpointHold()
	tick := time.NewTicker(min(max(hold/4, 100*time.Millisecond), 5*time.Second))
	defer tick.Stop()
	var since time.Time // when the client began dialing the current address while active
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		ic.mu.Lock()
		gw, active := ic.gw, ic.active
		ic.mu.Unlock()
		now := time.Now()
		if gw == nil || !active {
			since = time.Time{}
			continue
		}
		if since.IsZero() {
			since = now
			continue
		}
		last := since
		if r := gw.Status().LastReply; r.After(last) {
			last = r
		}
		if now.Sub(last) >= hold {
			w.NextEndpoint()
			since = now
		}
	}
}

// becomeActive runs when this replica wins the Lease.
func (ic *InCluster) becomeActive() {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	ic.log.Info("active: this replica holds the gateway's Lease")
	ic.active = true
	if ic.gw != nil {
		ic.activate(ic.gw)
		return
	}
	// Not configured yet (a server waits for its client's PublicKey, and the client is made
	// from the server's endpoint, which needs an active pod): label the pod now, so the
	// Service selects it; the VTEP follows when the gateway starts.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ic.watcher.PublishActive(ctx, *ic.election, true, "", ""); err != nil {
		ic.log.Error("labelling the active pod", "err", err)
	}
}

// becomeStandby runs when this replica loses (or releases) the Lease.
func (ic *InCluster) becomeStandby() {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	if !ic.active {
		return
	}
	ic.log.Info("standby: the gateway's Lease is lost or released")
	ic.active = false
	if ic.gw != nil {
		if err := ic.gw.SetActive(false); err != nil {
			ic.log.Error("going standby", "err", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ic.watcher.PublishActive(ctx, *ic.election, false, "", ""); err != nil {
		ic.log.Error("unlabel the pod", "err", err)
	}
}

// activate brings gw up and publishes this replica; ic.mu is held.
func (ic *InCluster) activate(gw *Gateway) {
	if err := gw.SetActive(true); err != nil {
		ic.log.Error("going active", "err", err)
		return
	}
	if ic.election == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cfg := gw.Dataplane().Config()
	if err := ic.watcher.PublishActive(ctx, *ic.election, true, gw.plan.OverlayListen.Addr().String(), overlay.MACString(cfg.Overlay.MAC)); err != nil {
		ic.log.Error("publishing the active replica", "err", err)
	}
}

// apply starts the gateway or reconfigures it.
func (ic *InCluster) apply(g *config.Gateway) error {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	if ic.gw != nil {
		return ic.gw.Apply(g)
	}
	ic.stopWaiting() // the gateway serves the same address
	gw, err := StartStandby(g, ic.log)
	if err != nil {
		return err
	}
	gw.ObserveConnection(ic.report)
	ic.gw = gw
	if ic.active {
		ic.activate(gw)
	}
	return nil
}

var connectionValue = map[netstack.State]netv1alpha1.ConnectionStatusValue{
	netstack.Connecting: netv1alpha1.Connecting,
	netstack.Connected:  netv1alpha1.Connected,
	netstack.Error:      netv1alpha1.ConnectionError,
}

func (ic *InCluster) report(s netstack.ProbeStatus) {
	ic.mu.Lock()
	active := ic.active
	ic.mu.Unlock()
	if !active {
		return // a standby's probes cannot pass; the active replica reports
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rtt := time.Duration(0)
	if s.State == netstack.Connected {
		rtt = s.RTT
	}
	if err := ic.watcher.ReportConnection(ctx, connectionValue[s.State], rtt); err != nil && !errors.Is(err, context.Canceled) {
		ic.log.Debug("connection status not written yet", "err", err)
	}
}

// serveWaiting answers the kubelet's probes while the gateway waits for its configuration (a
// server waits for its client's PublicKey, which is created after the server is ready): the
// process is healthy and ready to be configured, so both say ok, naming what is missing.
func (ic *InCluster) serveWaiting(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("httpListen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	// Monitoring sees a waiting gateway too: its build and skein_gateway_configured 0.
	mux.Handle("/metrics", promtext.Handler(func(w *promtext.Writer) {
		famConfigured.one(w, 0)
		writeBuildInfo(w)
	}))
	ok := func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok: waiting for the gateway's configuration (see the log)")
	}
	mux.HandleFunc("/healthz", ok)
	mux.HandleFunc("/readyz", ok)
	ic.waiting = boundedHTTPServer(mux)
	go func() { _ = ic.waiting.Serve(connlimit.Wrap(ln, httpMaxConns, httpMaxConnsPerSource)) }()
	return nil
}

// stopWaiting closes the waiting server and its listener; ic.mu is held.
func (ic *InCluster) stopWaiting() {
	if ic.waiting != nil {
		_ = ic.waiting.Close()
		ic.waiting = nil
	}
}

// Gateway returns the running gateway, or nil before its configuration is complete.
func (ic *InCluster) Gateway() *Gateway {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	return ic.gw
}

// Err is the watcher's fatal error, if it stopped.
func (ic *InCluster) Err() error {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	return ic.err
}

// Done is closed when the watcher stops.
func (ic *InCluster) Done() <-chan struct{} { return ic.done }

// Active reports whether this replica is the active one.
func (ic *InCluster) Active() bool {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	return ic.active
}

// Close stops watching and the gateway, releasing the Lease at once. An active replica says
// goodbye to the peer and stops answering first, so that the peer reconnects at once and its
// handshakes reach the successor rather than this replica.
func (ic *InCluster) Close() {
	ic.mu.Lock()
	gw, active := ic.gw, ic.active
	ic.mu.Unlock()
	if gw != nil && active {
		gw.sayGoodbye()
		if err := gw.SetActive(false); err != nil {
			ic.log.Warn("stopping: bring WireGuard down", "err", err)
		}
	}
	ic.cancel()
	<-ic.done
	ic.mu.Lock()
	defer ic.mu.Unlock()
	ic.stopWaiting()
	if ic.gw != nil {
		ic.gw.Close()
	}
}
