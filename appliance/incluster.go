package appliance

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/gwconfig"
	"github.com/skein-net/skein/control/gwwatch"
	"github.com/skein-net/skein/netstack"
)

// InCluster is a gateway configured from the API: it starts the gateway on the first complete
// configuration, applies later ones live, and reports the connection in its Connection object.
type InCluster struct {
	log     *slog.Logger
	watcher *gwwatch.Watcher
	cancel  context.CancelFunc
	done    chan struct{}

	mu  sync.Mutex
	gw  *Gateway
	err error
}

// StartInCluster begins watching; the gateway itself starts once the objects it needs exist.
func StartInCluster(cfg *rest.Config, opts gwwatch.Options, log *slog.Logger) (*InCluster, error) {
	if opts.Log == nil {
		opts.Log = log
	}
	ic := &InCluster{log: log, done: make(chan struct{})}
	w, err := gwwatch.New(cfg, opts, ic.apply)
	if err != nil {
		return nil, err
	}
	ic.watcher = w
	ctx, cancel := context.WithCancel(context.Background())
	ic.cancel = cancel
	go func() {
		defer close(ic.done)
		if err := w.Run(ctx); err != nil {
			log.Error("watching the API", "err", err)
			ic.mu.Lock()
			ic.err = err
			ic.mu.Unlock()
		}
	}()
	return ic, nil
}

// apply starts the gateway or reconfigures it.
func (ic *InCluster) apply(g *gwconfig.Gateway) error {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	if ic.gw != nil {
		return ic.gw.Apply(g)
	}
	gw, err := Start(g, ic.log)
	if err != nil {
		return err
	}
	gw.ObserveConnection(ic.report)
	ic.gw = gw
	return nil
}

var connectionValue = map[netstack.State]netv1alpha1.ConnectionStatusValue{
	netstack.Connecting: netv1alpha1.Connecting,
	netstack.Connected:  netv1alpha1.Connected,
	netstack.Error:      netv1alpha1.ConnectionError,
}

func (ic *InCluster) report(s netstack.ProbeStatus) {
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

// Close stops watching and the gateway.
func (ic *InCluster) Close() {
	ic.cancel()
	<-ic.done
	ic.mu.Lock()
	defer ic.mu.Unlock()
	if ic.gw != nil {
		ic.gw.Close()
	}
}
