//go:build linux

package appliance_test

import (
	"log/slog"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/skein-net/skein/appliance"
	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/gateway/config"
	"github.com/skein-net/skein/dataplane"
	"github.com/skein-net/skein/dataplane/overlay"
	"github.com/skein-net/skein/dataplane/packet"
)

// TestReconnect: a standalone client against a server whose replicas take turns on one
// address and port (as behind a Service). When the active server stops gracefully it says
// goodbye and the client reconnects to its successor at once; when one stops silently, the
// client's next lost probe, with nothing received from the peer, does the same. Both
// reconnects are counted. The client probes once a minute in the first part, so only the
// goodbye can explain a prompt reconnect (wireguard-go alone waits 15 s).
func TestReconnect(t *testing.T) {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	serverKey, _ := config.GenerateKey()
	clientKey, _ := config.GenerateKey()
	const wgPort = 47931
	tunnelS, tunnelC := netip.MustParseAddr("169.254.100.1"), netip.MustParseAddr("169.254.100.2")
	plan := func(server bool, probe time.Duration) *config.Gateway {
		ip, listen, peer, local, tun, peerTun := "10.80.0.1", "127.0.0.2:47932", clientKey.Public(), serverKey, tunnelS, tunnelC
		g := &config.Gateway{ListenPort: wgPort}
		if !server {
			ip, listen, peer, local, tun, peerTun = "10.80.0.2", "127.0.0.3:47932", serverKey.Public(), clientKey, tunnelC, tunnelS
			g = &config.Gateway{PeerEndpoint: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), wgPort)}
		}
		overlayIP := netip.MustParseAddr(ip)
		g.Dataplane = dataplane.Config{
			Overlay:     overlay.Config{Kind: overlay.VXLAN, VNI: netv1alpha1.DefaultVNI, MAC: overlay.GatewayMAC(overlayIP), IP: overlayIP},
			OverlayPort: 47932,
			TunnelIP:    tun,
			Remote:      []netip.Prefix{netip.PrefixFrom(peerTun, 32)},
			Local:       []netip.Addr{overlayIP, tun},
			Nodes:       []dataplane.Node{{Name: "n1", VTEP: netip.MustParseAddr("127.0.0.9"), MAC: packet.MAC{2, 0, 0, 0, 0, 0x31}}},
		}
		g.PrivateKey, g.PeerPublicKey = local, peer
		g.AllowedIPs = []netip.Prefix{netip.PrefixFrom(peerTun, 32)}
		g.TunnelIP, g.PeerTunnelIP = tun, peerTun
		g.OverlayListen = netip.MustParseAddrPort(listen)
		g.ProbeInterval, g.ProbeFail, g.HTTPListen = probe, 3, "off"
		return g
	}
	startServer := func(t *testing.T) *appliance.Gateway {
		t.Helper()
		s, err := appliance.Start(plan(true, 100*time.Millisecond), log)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}

	t.Run("goodbye", func(t *testing.T) {
		s1 := startServer(t)
		client, err := appliance.Start(plan(false, time.Minute), log)
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		waitAnswered(t, s1, time.Now(), 10*time.Second)
		s1.Close() // graceful: says goodbye
		time.Sleep(300 * time.Millisecond)
		s2 := startServer(t) // the successor, same key and port
		waitAnswered(t, s2, time.Now(), 10*time.Second)
		if n := client.Reconnects(); n != 1 {
			t.Errorf("client reconnects %d, want 1 (after the goodbye)", n)
		}
	})

	t.Run("silent", func(t *testing.T) {
		s1 := startServer(t)
		client, err := appliance.Start(plan(false, 200*time.Millisecond), log)
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		waitAnswered(t, s1, time.Now(), 10*time.Second)
		if err := s1.SetActive(false); err != nil { // gone without a word, as after SIGKILL
			t.Fatal(err)
		}
		s1.Close()
		time.Sleep(300 * time.Millisecond)
		s2 := startServer(t)
		waitAnswered(t, s2, time.Now(), 10*time.Second)
		if n := client.Reconnects(); n == 0 {
			t.Error("client did not reconnect after lost probes with nothing received")
		}
	})
}
