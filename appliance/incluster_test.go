package appliance_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"golang.zx2c4.com/wireguard/conn"

	"github.com/skein-net/skein/appliance"
	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/gateway"
	"github.com/skein-net/skein/control/gateway/config"
	"github.com/skein-net/skein/dataplane"
	"github.com/skein-net/skein/dataplane/overlay"
	"github.com/skein-net/skein/dataplane/packet"
	"github.com/skein-net/skein/internal/apitest"
	"github.com/skein-net/skein/internal/metricsdoc"
)

// TestInCluster runs a gateway client configured from API objects on a real API server
// against a standalone gateway server, over loopback: the gateway starts once its objects are
// complete, creates its Connection, reports Connecting then Connected with a latency, applies
// a remapping change live, and reports Error when the server goes away.
func TestInCluster(t *testing.T) {
	env := apitest.Start(t)
	ns := env.Namespace(t, "gw")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	serverKey, _ := config.GenerateKey()
	clientKey, _ := config.GenerateKey()

	// The peer: a standalone gateway server on 127.0.0.2.
	server := startPeerServer(t, log, serverKey, clientKey)
	serverClosed := false
	defer func() {
		if !serverClosed {
			server.Close()
		}
	}()

	// The objects the controller and skeinctl would have made.
	c := env.Client
	labels := map[string]string{netv1alpha1.RemoteClusterIDLabel: "cluster-b"}
	gc := &netv1alpha1.GatewayClient{
		ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: ns, Labels: labels},
		Spec: netv1alpha1.GatewayClientSpec{
			MTU:               1340,
			Endpoint:          netv1alpha1.Endpoint{Addresses: []netv1alpha1.Address{"127.0.0.1"}, Port: int32(server.WireGuardPort())},
			ClientTemplateRef: netv1alpha1.TemplateRef{Kind: "WgGatewayClientTemplate", Name: "wireguard-client"},
		},
	}
	apitest.Must(t, c.Create(ctx, gc))
	httpAddr := freeLoopbackAddr(t)
	ic, err := appliance.StartInCluster(env.Config, gateway.Options{
		Namespace: ns, Name: "gw",
		Local: gateway.Local{PodIP: netip.MustParseAddr("127.0.0.3"), OverlayPort: 47891, ProbeInterval: 200 * time.Millisecond, ProbeFail: 3, HTTPListen: httpAddr},
	}, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	defer ic.Close()

	// Until the objects are complete there is no gateway.
	time.Sleep(500 * time.Millisecond)
	if ic.Gateway() != nil {
		t.Fatal("the gateway started without its key, peer key, Configuration and nodes")
	}
	// Monitoring sees the waiting gateway: its build, and configured 0.
	if m := scrape(t, httpAddr); !strings.Contains(m, "\nskein_gateway_configured 0\n") || !strings.Contains(m, "skein_gateway_build_info{") {
		t.Errorf("a waiting gateway's /metrics:\n%s", m)
	}
	conf := completeClient(t, c, ns, gc, clientKey, serverKey)
	conn := waitConnection(t, c, ns, func(s netv1alpha1.ConnectionStatus) bool { return s.Value == netv1alpha1.Connected })
	if conn.Spec.Type != netv1alpha1.ConnectionTypeClient || conn.Spec.GatewayRef.Name != "gw" || conn.Labels[netv1alpha1.RemoteClusterIDLabel] != "cluster-b" {
		t.Errorf("Connection spec %+v labels %v", conn.Spec, conn.Labels)
	}
	conn = waitConnection(t, c, ns, func(s netv1alpha1.ConnectionStatus) bool { return s.Latency != nil })
	if l := conn.Status.Latency.Value.Duration; l <= 0 || l > time.Second {
		t.Errorf("latency %v", l)
	}
	// Running: every metric of docs/metrics.md, and configured 1.
	m := scrape(t, httpAddr)
	metricsdoc.Check(t, "gateway", m)
	if !strings.Contains(m, "\nskein_gateway_configured 1\n") {
		t.Errorf("a running gateway is not configured 1")
	}
	gw := ic.Gateway()
	if nat := gw.Dataplane().Config().NAT; len(nat) != 1 || nat[0].From.String() != "10.71.0.0/16" {
		t.Errorf("NAT %v", nat)
	}

	// A live change: the remapped pod CIDR moves; the tunnel stays up.
	apitest.Must(t, c.Get(ctx, client.ObjectKeyFromObject(conf), conf))
	conf.Status.Remote.CIDR.Pod = "10.73.0.0/16"
	apitest.Must(t, c.Status().Update(ctx, conf))
	deadline := time.Now().Add(10 * time.Second)
	for {
		if nat := gw.Dataplane().Config().NAT; len(nat) == 1 && nat[0].From.String() == "10.73.0.0/16" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the remapping change was not applied: NAT %v", gw.Dataplane().Config().NAT)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if ic.Gateway() != gw {
		t.Error("the gateway was restarted for a live change")
	}
	if s := gw.Status(); s.State != "Connected" {
		t.Errorf("state %v after the live change", s.State)
	}

	// The peer goes away.
	server.Close()
	serverClosed = true
	waitConnection(t, c, ns, func(s netv1alpha1.ConnectionStatus) bool { return s.Value == netv1alpha1.ConnectionError })
}

func waitConnection(t *testing.T, c client.Client, ns string, ok func(netv1alpha1.ConnectionStatus) bool) *netv1alpha1.Connection {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	conn := &netv1alpha1.Connection{}
	for {
		err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "gw"}, conn)
		if err == nil && ok(conn.Status) {
			return conn
		}
		if time.Now().After(deadline) {
			t.Fatalf("Connection never reached the wanted state; last: %+v (%v)", conn.Status, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// freeLoopbackAddr is 127.0.0.1 with a port that was free a moment ago.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// scrape fetches /metrics from addr.
func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s %v", resp.Status, err)
	}
	return string(b)
}

// startPeerServer starts a standalone gateway server on 127.0.0.2 (overlay) whose peer is the
// in-cluster client of clientKey; its WireGuard port is on 127.0.0.1.
func startPeerServer(t *testing.T, log *slog.Logger, serverKey, clientKey config.Key) *appliance.Gateway {
	t.Helper()
	return startPeerServerBind(t, log, serverKey, clientKey, nil)
}

// startPeerServerBind is startPeerServer with WireGuard's socket bind (nil: the default).
func startPeerServerBind(t *testing.T, log *slog.Logger, serverKey, clientKey config.Key, bind conn.Bind) *appliance.Gateway {
	t.Helper()
	nodeMAC := packet.MAC{0x02, 0, 0, 0, 0, 0x31}
	serverIP := netip.MustParseAddr("10.80.0.1")
	server, err := appliance.New(&config.Gateway{
		Dataplane: dataplane.Config{
			Overlay:     overlay.Config{Kind: overlay.VXLAN, VNI: netv1alpha1.DefaultVNI, MAC: overlay.GatewayMAC(serverIP), IP: serverIP},
			OverlayPort: 47891,
			TunnelIP:    netip.MustParseAddr("169.254.100.1"),
			Remote:      []netip.Prefix{netip.MustParsePrefix("169.254.100.2/32")},
			Local:       []netip.Addr{serverIP, netip.MustParseAddr("169.254.100.1")},
			Nodes:       []dataplane.Node{{Name: "b1", VTEP: netip.MustParseAddr("127.0.0.9"), MAC: nodeMAC, PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}}},
		},
		PrivateKey:    serverKey,
		PeerPublicKey: clientKey.Public(),
		AllowedIPs:    []netip.Prefix{netip.MustParsePrefix("169.254.100.2/32"), netip.MustParsePrefix("10.244.0.0/16")},
		TunnelIP:      netip.MustParseAddr("169.254.100.1"),
		PeerTunnelIP:  netip.MustParseAddr("169.254.100.2"),
		OverlayListen: netip.MustParseAddrPort("127.0.0.2:47891"),
		ProbeInterval: 200 * time.Millisecond,
		ProbeFail:     3,
		HTTPListen:    "off",
	}, appliance.Options{Log: log, Bind: bind})
	if err != nil {
		t.Fatal(err)
	}
	return server
}

// completeClient gives the GatewayClient gc what the controller and skeinctl would: its
// overlay address and key Secret, the server's PublicKey, the Configuration (remapped) and a
// node; it returns the Configuration.
func completeClient(t *testing.T, c client.Client, ns string, gc *netv1alpha1.GatewayClient, clientKey, serverKey config.Key) *netv1alpha1.Configuration {
	t.Helper()
	ctx := context.Background()
	labels := gc.Labels
	overlayIP := netv1alpha1.IP("10.80.0.2")
	gc.Status = netv1alpha1.GatewayClientStatus{
		InternalEndpoint: &netv1alpha1.InternalEndpoint{IP: &overlayIP},
		SecretRef:        &netv1alpha1.ObjectRef{Name: config.KeySecretName(gc.Name)},
	}
	apitest.Must(t, c.Status().Update(ctx, gc))
	apitest.Must(t, c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: config.KeySecretName(gc.Name), Namespace: ns},
		Data: map[string][]byte{config.SecretPrivateKey: []byte(clientKey.String()), config.SecretPublicKey: []byte(clientKey.Public().String())}}))
	apitest.Must(t, c.Create(ctx, &netv1alpha1.PublicKey{
		ObjectMeta: metav1.ObjectMeta{Name: "cluster-b", Namespace: ns, Labels: map[string]string{netv1alpha1.RemoteClusterIDLabel: "cluster-b", netv1alpha1.GatewayResourceLabel: "true"}},
		Spec:       netv1alpha1.PublicKeySpec{PublicKey: serverKey.Public().String()},
	}))
	conf := &netv1alpha1.Configuration{
		ObjectMeta: metav1.ObjectMeta{Name: "cluster-b", Namespace: ns, Labels: labels},
		Spec:       netv1alpha1.ConfigurationSpec{Remote: netv1alpha1.ClusterConfig{CIDR: netv1alpha1.ClusterConfigCIDR{Pod: "10.244.0.0/16", External: "10.70.0.0/16"}}},
	}
	apitest.Must(t, c.Create(ctx, conf))
	conf.Status.Remote = &netv1alpha1.ClusterConfig{CIDR: netv1alpha1.ClusterConfigCIDR{Pod: "10.71.0.0/16", External: "10.70.0.0/16"}}
	apitest.Must(t, c.Status().Update(ctx, conf))
	inode := &netv1alpha1.InternalNode{ObjectMeta: metav1.ObjectMeta{Name: ns + "-a1"}}
	apitest.Must(t, c.Create(ctx, inode))
	t.Cleanup(func() { c.Delete(context.Background(), inode) })
	inode.Status.VTEP = &netv1alpha1.VTEP{IP: "127.0.0.8", MAC: "02:00:00:00:00:21"}
	apitest.Must(t, c.Status().Update(ctx, inode))

	return conf
}

// TestEndpointFallback: a GatewayClient whose first address leads nowhere and whose second is
// a name that first resolves to a wrong address: the client dials each in turn, resolves the
// name again, and connects; with every address dead it keeps cycling, never stuck on one.
func TestEndpointFallback(t *testing.T) {
	env := apitest.Start(t)
	ns := env.Namespace(t, "gw")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	serverKey, _ := config.GenerateKey()
	clientKey, _ := config.GenerateKey()
	// The server's WireGuard socket is bound to 127.0.0.1 alone, so that other loopback
	// addresses lead nowhere.
	server := startPeerServerBind(t, log, serverKey, clientKey, &addrBind{addr: netip.MustParseAddr("127.0.0.1")})
	defer server.Close()

	var mu sync.Mutex
	var resolved []string
	resolve := func(host string) (netip.Addr, error) {
		mu.Lock()
		defer mu.Unlock()
		if host != "gw.peer.test" {
			return netip.Addr{}, fmt.Errorf("no such host %q", host)
		}
		a := "127.0.0.66" // the name's old address: nothing answers there
		if len(resolved) > 0 {
			a = "127.0.0.1"
		}
		resolved = append(resolved, a)
		return netip.MustParseAddr(a), nil
	}
	c := env.Client
	gc := &netv1alpha1.GatewayClient{
		ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: ns, Labels: map[string]string{netv1alpha1.RemoteClusterIDLabel: "cluster-b"}},
		Spec: netv1alpha1.GatewayClientSpec{
			MTU:               1340,
			Endpoint:          netv1alpha1.Endpoint{Addresses: []netv1alpha1.Address{"127.0.0.77", "gw.peer.test"}, Port: int32(server.WireGuardPort())},
			ClientTemplateRef: netv1alpha1.TemplateRef{Kind: "WgGatewayClientTemplate", Name: "wireguard-client"},
		},
	}
	apitest.Must(t, c.Create(ctx, gc))
	ic, err := appliance.StartInCluster(env.Config, gateway.Options{
		Namespace: ns, Name: "gw", EndpointHold: 2 * time.Second,
		Local: gateway.Local{PodIP: netip.MustParseAddr("127.0.0.3"), OverlayPort: 47891, ProbeInterval: 200 * time.Millisecond, ProbeFail: 3,
			HTTPListen: "off", Resolve: resolve},
	}, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	defer ic.Close()
	completeClient(t, c, ns, gc, clientKey, serverKey)
	start := time.Now()
	waitConnection(t, c, ns, func(s netv1alpha1.ConnectionStatus) bool { return s.Value == netv1alpha1.Connected })
	took := time.Since(start)
	mu.Lock()
	t.Logf("connected %v after the objects were complete, the name resolved %d times: %v", took.Round(100*time.Millisecond), len(resolved), resolved)
	if len(resolved) < 2 || resolved[0] != "127.0.0.66" {
		t.Errorf("the name was resolved %v: want the old address first, then again", resolved)
	}
	mu.Unlock()
	if ep := ic.Gateway().Plan().PeerEndpoint; ep.Addr() != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("connected through %v, want 127.0.0.1", ep)
	}

	// The server goes away: the client cycles through its addresses (the name included) and
	// does not stop at one.
	server.Close()
	seen := map[netip.Addr]bool{}
	deadline := time.Now().Add(20 * time.Second)
	for len(seen) < 2 && time.Now().Before(deadline) {
		seen[ic.Gateway().Plan().PeerEndpoint.Addr()] = true
		time.Sleep(100 * time.Millisecond)
	}
	if len(seen) < 2 {
		t.Errorf("with the server gone, the client dialed only %v in 20 s (EndpointHold 2 s)", seen)
	}
}

// addrBind is a WireGuard bind on one address (wireguard-go's own binds listen on all of
// them, and on loopback every 127/8 address reaches a socket bound to all): datagrams to any
// other address find no socket.
type addrBind struct {
	addr netip.Addr
	mu   sync.Mutex
	c    *net.UDPConn
}

// addrEndpoint is a peer's address for addrBind.
type addrEndpoint netip.AddrPort

func (e addrEndpoint) ClearSrc()           {}
func (e addrEndpoint) SrcToString() string { return "" }
func (e addrEndpoint) DstToString() string { return netip.AddrPort(e).String() }
func (e addrEndpoint) DstToBytes() []byte  { b, _ := netip.AddrPort(e).MarshalBinary(); return b }
func (e addrEndpoint) DstIP() netip.Addr   { return netip.AddrPort(e).Addr() }
func (e addrEndpoint) SrcIP() netip.Addr   { return netip.Addr{} }

func (b *addrBind) Open(port uint16) ([]conn.ReceiveFunc, uint16, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.c != nil {
		return nil, 0, conn.ErrBindAlreadyOpen
	}
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(b.addr, port)))
	if err != nil {
		return nil, 0, err
	}
	b.c = c
	recv := func(bufs [][]byte, sizes []int, eps []conn.Endpoint) (int, error) {
		n, from, err := c.ReadFromUDPAddrPort(bufs[0])
		if err != nil {
			return 0, err
		}
		sizes[0], eps[0] = n, addrEndpoint(netip.AddrPortFrom(from.Addr().Unmap(), from.Port()))
		return 1, nil
	}
	return []conn.ReceiveFunc{recv}, uint16(c.LocalAddr().(*net.UDPAddr).Port), nil
}

func (b *addrBind) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.c == nil {
		return nil
	}
	err := b.c.Close()
	b.c = nil
	return err
}

func (b *addrBind) SetMark(uint32) error { return nil }
func (b *addrBind) BatchSize() int       { return 1 }

func (b *addrBind) Send(bufs [][]byte, ep conn.Endpoint) error {
	b.mu.Lock()
	c := b.c
	b.mu.Unlock()
	if c == nil {
		return net.ErrClosed
	}
	for _, p := range bufs {
		if _, err := c.WriteToUDPAddrPort(p, netip.AddrPort(ep.(addrEndpoint))); err != nil {
			return err
		}
	}
	return nil
}

func (b *addrBind) ParseEndpoint(s string) (conn.Endpoint, error) {
	ap, err := netip.ParseAddrPort(s)
	return addrEndpoint(ap), err
}
