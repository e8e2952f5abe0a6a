package appliance

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"

	"github.com/skein-net/skein/control/gateway/config"
	"github.com/skein-net/skein/dataplane"
	"github.com/skein-net/skein/dataplane/packet"
	"github.com/skein-net/skein/dataplane/udp"
	"github.com/skein-net/skein/netstack"
)

// Gateway is a running gateway: wireguard-go on the dataplane, the netstack for its own
// addresses, the prober, and the HTTP endpoints.
type Gateway struct {
	plan   *config.Gateway
	log    *slog.Logger
	dp     *dataplane.Dataplane
	wg     *device.Device
	path   *dataplane.PathBind // the WAN socket's narrow-path handling and send errors
	out    *dataplane.Window   // packets inside wireguard-go towards the tunnel
	in     *dataplane.Window   // and out of it
	ns     *netstack.Stack
	prober *netstack.Prober
	http   *http.Server
	httpLn net.Listener

	cancel  context.CancelFunc
	stopped chan struct{} // closed by Close
	wgDone  sync.WaitGroup
	// active: WireGuard is up (not a standby); reconnecting: a reconnect runs; lastRx: the
	// peer's received bytes at the last lost probe (see reconnect.go).
	active       atomic.Bool
	reconnecting atomic.Bool
	lastRx       atomic.Int64
	reconnects   atomic.Uint64
	once         sync.Once
	observer     atomic.Pointer[func(netstack.ProbeStatus)]
	goodbyeKey   atomic.Pointer[packet.GoodbyeKey] // nil: goodbyes off
	lastGoodbye  atomic.Int64                      // unix nanoseconds of the last goodbye accepted
	resets       resetBucket                       // rations the peer resets of reconnects
	wgDrops      [numWGDrops]atomic.Uint64         // drops wireguard-go reports, by reason
	pmtuProbe    atomic.Pointer[pathMTUProbe]      // the path MTU probe the netstack sends next
	pmtu         pathMTUStats
	applyMu      sync.Mutex
}

// Options are a gateway's edges to the world. A nil edge means the real one, so that tests can
// run whole gateways in one process with in-memory sockets (dataplane/overlaytest,
// wireguard-go's conn/bindtest), no root and no fixed ports.
type Options struct {
	// Log receives the gateway's logs (nil: slog.Default()).
	Log *slog.Logger
	// Overlay opens the overlay socket at the configured address (nil: a UDP socket,
	// dataplane/udp).
	Overlay func(listen netip.AddrPort) (dataplane.OverlayConn, error)
	// Bind is WireGuard's socket (nil: wireguard-go's default UDP bind).
	Bind conn.Bind
	// Standby starts with the WireGuard side down (no handshakes, no traffic, no probes
	// answered) until SetActive(true): a standby replica.
	Standby bool
}

// Start opens the sockets and starts everything. The process needs no privileges: two UDP
// sockets (WireGuard and overlay, neither on a privileged port unless configured so) and a
// TCP listener for HTTP.
func Start(plan *config.Gateway, log *slog.Logger) (*Gateway, error) {
	return New(plan, Options{Log: log})
}

// StartStandby starts a standby replica (see Options.Standby).
func StartStandby(plan *config.Gateway, log *slog.Logger) (*Gateway, error) {
	return New(plan, Options{Log: log, Standby: true})
}

// New starts a gateway with the edges of opts.
func New(plan *config.Gateway, opts Options) (_ *Gateway, err error) {
	log, standby := opts.Log, opts.Standby
	if log == nil {
		log = slog.Default()
	}
	openOverlay := opts.Overlay
	if openOverlay == nil {
		openOverlay = func(listen netip.AddrPort) (dataplane.OverlayConn, error) { return udp.Listen(listen, 0) }
	}
	bind := opts.Bind
	if bind == nil {
		bind = conn.NewDefaultBind()
	}
	g := &Gateway{plan: plan, log: log, stopped: make(chan struct{})}
	g.setGoodbyeKey(plan)
	// The environment (GOMEMLIMIT, GOGC) wins over the configuration.
	if plan.MemoryLimit > 0 && os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(plan.MemoryLimit)
	}
	if plan.GCPercent != 0 && os.Getenv("GOGC") == "" {
		debug.SetGCPercent(plan.GCPercent)
	}
	defer func() {
		if err != nil {
			g.Close()
		}
	}()
	oc, err := openOverlay(plan.OverlayListen)
	if err != nil {
		return nil, fmt.Errorf("overlay.listen %v: %w", plan.OverlayListen, err)
	}
	if g.dp, err = dataplane.New(plan.Dataplane, oc); err != nil {
		oc.Close()
		return nil, err
	}
	mtu, _ := g.dp.MTU()
	if g.ns, err = netstack.New(plan.Dataplane.Local, mtu, g.fromStack); err != nil {
		return nil, err
	}
	g.dp.SetLocalHandler(localTap{g})

	g.out, g.in = dataplane.NewWindow(plan.Window, 0), dataplane.NewWindow(plan.Window, 0)
	g.dp.SetWindows(g.out, g.in)
	// A narrow WAN slows the tunnel down, never stops it (dataplane/pathbind.go).
	g.path = dataplane.NewPathBind(bind)
	g.dp.SetPathBind(g.path)
	g.wg = device.NewDevice(g.dp, dataplane.NewPacedBind(g.path, g.out, g.in), wgLogger(log, &g.wgDrops))
	if err := g.wg.IpcSet(plan.UAPI()); err != nil {
		return nil, fmt.Errorf("wireguard: %w", err)
	}
	if !standby {
		if err := g.wg.Up(); err != nil {
			return nil, fmt.Errorf("wireguard: listen on UDP port %d: %w", plan.ListenPort, err)
		}
		g.active.Store(true)
		g.logPathPolicy()
	}

	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	g.prober = g.ns.NewProber(netstack.ProbeConfig{Local: plan.TunnelIP, Peer: plan.PeerTunnelIP, Interval: plan.ProbeInterval,
		FailAfter: plan.ProbeFail, OnLoss: g.afterLostProbe})
	if standby {
		g.prober.Pause()
	}
	// connected is closed when the prober first says Connected (trimMemory waits for it).
	connected := make(chan struct{})
	var connectedOnce sync.Once
	g.wgDone.Add(3)
	go func() {
		defer g.wgDone.Done()
		g.runPathMTU(ctx)
	}()
	go func(connected <-chan struct{}) {
		defer g.wgDone.Done()
		g.trimMemory(ctx, connected)
	}(connected)
	go func() {
		defer g.wgDone.Done()
		last := netstack.Connecting
		g.prober.Run(ctx, func(s netstack.ProbeStatus) {
			if s.State != last {
				log.Info("connection", "state", string(s.State), "rtt", s.RTT.Round(time.Microsecond), "lost", s.Lost)
				if s.State == netstack.Connected {
					connectedOnce.Do(func() { close(connected) })
				}
				last = s.State
			}
			if fn := g.observer.Load(); fn != nil {
				(*fn)(s)
			}
		})
	}()

	if plan.HTTPListen != "off" {
		if err := g.serveHTTP(plan.HTTPListen); err != nil {
			return nil, err
		}
	}
	log.Info("gateway started", "publicKey", plan.PrivateKey.Public().String(), "wireguardPort", g.listenPort(),
		"overlay", plan.OverlayListen.String(), "tunnelIP", plan.TunnelIP.String(), "peerTunnelIP", plan.PeerTunnelIP.String())
	return g, nil
}

// rehandshake starts a new WireGuard handshake after a lost probe. When the peer's active
// replica changed (failover), the new replica has no session and drops what the old session
// encrypts; wireguard-go alone would start a handshake only after 15 s without an answer
// (keepalive timeout + rekey timeout). wireguard-go limits initiations to one per 5 s, and
// without a known endpoint (a server before its client spoke) it sends nothing.
func (g *Gateway) rehandshake(lost int) {
	g.applyMu.Lock()
	key := g.plan.PeerPublicKey
	g.applyMu.Unlock()
	if peer := g.wg.LookupPeer(device.NoisePublicKey(key)); peer != nil {
		if err := peer.SendHandshakeInitiation(false); err != nil {
			g.log.Debug("handshake after a lost probe", "lost", lost, "err", err)
		}
	}
}

// logPathPolicy says how the WireGuard socket sends (after it opened).
func (g *Gateway) logPathPolicy() {
	if p := g.path.Policy(); p.Err != "" {
		g.log.Warn("the WireGuard socket sends IPv4 with DF: on a path narrower than the tunnel's packets whose ICMP is dropped, full-size packets are lost", "err", p.Err)
	} else if p.Sockets > 0 {
		g.log.Debug("WireGuard socket", "sockets", p.Sockets, "ipv4DF", p.IPv4DF)
	}
}

// ObserveConnection has fn called after every probe whose outcome changed the connection's
// state or RTT.
func (g *Gateway) ObserveConnection(fn func(netstack.ProbeStatus)) { g.observer.Store(&fn) }

// SetActive brings the WireGuard side up (the active replica) or down (a standby).
func (g *Gateway) SetActive(active bool) error {
	if active {
		if err := g.wg.Up(); err != nil {
			return fmt.Errorf("wireguard: listen on UDP port %d: %w", g.plan.ListenPort, err)
		}
		g.active.Store(true)
		g.logPathPolicy()
		g.prober.Resume()
		return nil
	}
	g.active.Store(false)
	g.prober.Pause()
	return g.wg.Down()
}

// WireGuardPort is the UDP port wireguard-go listens on.
func (g *Gateway) WireGuardPort() int { return g.listenPort() }

// Apply switches a running gateway to a new configuration: the dataplane through its atomic
// Reconfig, WireGuard through the UAPI changes only, so established sessions and flows survive
// changes that do not concern them. The gateway's own addresses and sockets cannot change
// while it runs; such a change is refused with an error saying a restart is needed.
func (g *Gateway) Apply(next *config.Gateway) error {
	g.applyMu.Lock()
	defer g.applyMu.Unlock()
	cur := g.plan
	if next.OverlayListen != cur.OverlayListen || next.TunnelIP != cur.TunnelIP || next.PeerTunnelIP != cur.PeerTunnelIP ||
		!slices.Equal(next.Dataplane.Local, cur.Dataplane.Local) || next.HTTPListen != cur.HTTPListen {
		return fmt.Errorf("the gateway's own addresses changed (overlay %v -> %v, tunnel %v -> %v): restart the gateway to apply",
			cur.OverlayListen, next.OverlayListen, cur.TunnelIP, next.TunnelIP)
	}
	if err := g.dp.Reconfig(next.Dataplane); err != nil {
		return err
	}
	u := next.UAPIUpdate(cur)
	if cur.PeerEndpoint.IsValid() && next.PeerEndpoint.IsValid() && next.PeerEndpoint != cur.PeerEndpoint && next.PeerPublicKey == cur.PeerPublicKey {
		// A client dialing elsewhere (the server's next address, a name resolved again):
		// the peer is reset, which forgets wireguard-go's handshake pace, so the next probe
		// starts a handshake there at once, not at the next retransmission (up to 5 s).
		u = next.PeerResetUAPI()
	}
	if u != "" {
		if err := g.wg.IpcSet(u); err != nil {
			return fmt.Errorf("wireguard: %w", err)
		}
	}
	if next.PrivateKey != cur.PrivateKey || next.PeerPublicKey != cur.PeerPublicKey {
		g.setGoodbyeKey(next)
	}
	g.plan = next
	return nil
}

// Dataplane is the gateway's dataplane (for live reconfiguration and counters).
func (g *Gateway) Dataplane() *dataplane.Dataplane { return g.dp }

// Status is the prober's view of the connection.
func (g *Gateway) Status() netstack.ProbeStatus { return g.prober.Status() }

// WireGuardDrops is how many packets wireguard-go dropped and reported for reason (a value of
// skein_gateway_wireguard_drops_total's label).
func (g *Gateway) WireGuardDrops(reason string) uint64 {
	for i, name := range wgDropNames {
		if name == reason {
			return g.wgDrops[i].Load()
		}
	}
	return 0
}

// ProbeHistory counts the probes answered and lost since the gateway started.
func (g *Gateway) ProbeHistory() netstack.ProbeHistory { return g.prober.History() }

// HTTPAddr is where the HTTP endpoints listen (nil when off).
func (g *Gateway) HTTPAddr() net.Addr {
	if g.httpLn == nil {
		return nil
	}
	return g.httpLn.Addr()
}

// ipcInts reads numeric keys of wireguard-go's UAPI state (one peer, so each key once).
func (g *Gateway) ipcInts(keys ...string) map[string]int64 {
	out := map[string]int64{}
	s, err := g.wg.IpcGet()
	if err != nil {
		return out
	}
	for _, l := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(l, "=")
		if ok && slices.Contains(keys, k) {
			out[k], _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return out
}

// listenPort reads the port wireguard-go bound.
func (g *Gateway) listenPort() int { return int(g.ipcInts("listen_port")["listen_port"]) }

// lastHandshake reads the peer's last handshake time from wireguard-go.
func (g *Gateway) lastHandshake() time.Time { return g.peerState().lastHandshake }

// wgPeer is what wireguard-go reports of the one peer.
type wgPeer struct {
	publicKey        string // base64, as wg shows it
	endpoint         string // "" until known
	lastHandshake    time.Time
	rxBytes, txBytes int64
}

// peerState reads the peer's state from wireguard-go's UAPI in one call.
func (g *Gateway) peerState() wgPeer {
	var p wgPeer
	s, err := g.wg.IpcGet()
	if err != nil {
		return p
	}
	var sec, nsec int64
	for l := range strings.Lines(s) {
		k, v, ok := strings.Cut(strings.TrimSpace(l), "=")
		if !ok {
			continue
		}
		switch k {
		case "public_key":
			if raw, err := hex.DecodeString(v); err == nil {
				p.publicKey = base64.StdEncoding.EncodeToString(raw)
			}
		case "endpoint":
			p.endpoint = v
		case "last_handshake_time_sec":
			sec, _ = strconv.ParseInt(v, 10, 64)
		case "last_handshake_time_nsec":
			nsec, _ = strconv.ParseInt(v, 10, 64)
		case "rx_bytes":
			p.rxBytes, _ = strconv.ParseInt(v, 10, 64)
		case "tx_bytes":
			p.txBytes, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if sec != 0 || nsec != 0 {
		p.lastHandshake = time.Unix(sec, nsec)
	}
	return p
}

// currentPlan is the configuration in force (Apply replaces it).
// Plan is the configuration the gateway runs with (the last one applied); treat it as
// read-only.
func (g *Gateway) Plan() *config.Gateway { return g.currentPlan() }

func (g *Gateway) currentPlan() *config.Gateway {
	g.applyMu.Lock()
	defer g.applyMu.Unlock()
	return g.plan
}

// Close stops everything and releases the sockets. An active gateway first says goodbye to
// its peer, which then reconnects at once (to this gateway's successor).
func (g *Gateway) Close() {
	g.once.Do(func() {
		g.sayGoodbye()
		close(g.stopped)
		if g.cancel != nil {
			g.cancel()
		}
		if g.http != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = g.http.Shutdown(ctx)
			cancel()
		}
		if g.wg != nil {
			g.wg.Close() // closes the dataplane (its tun.Device) too
		} else if g.dp != nil {
			g.dp.Close()
		}
		g.wgDone.Wait()
		if g.ns != nil {
			g.ns.Close()
		}
	})
}

// wgDropReasons are the packets wireguard-go drops and says so (at its verbose level), by the
// format string it logs them with. (It drops what fails to decrypt without a word.)
var wgDropReasons = map[string]int{
	"IPv4 packet with disallowed source address from %v": wgDropDisallowedSource,
	"IPv6 packet with disallowed source address from %v": wgDropDisallowedSource,
	"Packet with invalid IP version from %v":             wgDropInvalidIPVersion,
	"Received packet with invalid mac1":                  wgDropInvalidMAC1,
	"Received invalid initiation message from %s":        wgDropInvalidHandshake,
	"Received invalid response message from %s":          wgDropInvalidHandshake,
	"Could not decrypt invalid cookie response":          wgDropInvalidCookie,
}

const (
	wgDropDisallowedSource = iota
	wgDropInvalidIPVersion
	wgDropInvalidMAC1
	wgDropInvalidHandshake
	wgDropInvalidCookie
	numWGDrops
)

var wgDropNames = [numWGDrops]string{"disallowed_source", "invalid_ip_version", "invalid_mac1", "invalid_handshake", "invalid_cookie"}

// wgErrorEvery is how often one kind of wireguard-go error is logged; the repeats in between
// are counted and reported with the next.
const wgErrorEvery = 10 * time.Second

// wgLogger routes wireguard-go's logs to slog: errors as errors (each kind at most once per
// wgErrorEvery, so an outage is a few lines, not hundreds), the rest at debug level,
// formatted only when debug is on; the drops it reports are counted in drops.
// wireguard-go names peers by an abbreviated public key and never logs private keys.
func wgLogger(log *slog.Logger, drops *[numWGDrops]atomic.Uint64) *device.Logger {
	var mu sync.Mutex
	type seen struct {
		at         time.Time
		suppressed int
	}
	last := map[string]*seen{}
	return &device.Logger{
		Verbosef: func(format string, args ...any) {
			if i, ok := wgDropReasons[format]; ok {
				drops[i].Add(1)
			}
			if log.Enabled(context.Background(), slog.LevelDebug) {
				log.Debug(fmt.Sprintf(format, args...), "component", "wireguard")
			}
		},
		Errorf: func(format string, args ...any) {
			msg := fmt.Sprintf(format, args...)
			if strings.Contains(msg, "no known endpoint for peer") {
				// A server's probes before its client first connects: expected, not an error.
				log.Debug(msg, "component", "wireguard")
				return
			}
			mu.Lock()
			s := last[format]
			if s == nil {
				s = &seen{}
				last[format] = s
			}
			now := time.Now()
			if !s.at.IsZero() && now.Sub(s.at) < wgErrorEvery {
				s.suppressed++
				mu.Unlock()
				return
			}
			suppressed := s.suppressed
			s.at, s.suppressed = now, 0
			mu.Unlock()
			if suppressed > 0 {
				log.Error(msg, "component", "wireguard", "repeatsSinceLastLogged", suppressed)
				return
			}
			log.Error(msg, "component", "wireguard")
		},
	}
}
