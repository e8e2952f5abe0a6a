package appliance_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	nodeMAC := packet.MAC{0x02, 0, 0, 0, 0, 0x31}

	// The peer: a standalone gateway server on 127.0.0.2.
	serverIP := netip.MustParseAddr("10.80.0.1")
	server, err := appliance.Start(&config.Gateway{
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
	}, log)
	if err != nil {
		t.Fatal(err)
	}
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
	overlayIP := netv1alpha1.IP("10.80.0.2")
	gc.Status = netv1alpha1.GatewayClientStatus{
		InternalEndpoint: &netv1alpha1.InternalEndpoint{IP: &overlayIP},
		SecretRef:        &netv1alpha1.ObjectRef{Name: "gw-key"},
	}
	apitest.Must(t, c.Status().Update(ctx, gc))
	apitest.Must(t, c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "gw-key", Namespace: ns},
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
