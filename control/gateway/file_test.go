package gateway_test

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/gateway"
	"github.com/skein-net/skein/dataplane/nat"
	"github.com/skein-net/skein/internal/golden"
)

const (
	testPriv = "wOQfw2x5vxkjlCxwLbHc3p9sD/k8BnX1kE9sQ4ZlV2w="
	testPub  = "HzH1bbs1WBq8nWS8qDXzDIVBOtKkVDjQbc8v4d1O9Dw="
)

func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	dir := t.TempDir()
	key := filepath.Join(dir, "private.key")
	if err := os.WriteFile(key, []byte(testPriv+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(p, []byte(strings.ReplaceAll(yaml, "KEYFILE", key)), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const goodServer = `role: server
listenPort: 51820
privateKeyFile: KEYFILE
peerPublicKey: ` + testPub + `
mtu: 1340
remote:
  podCIDR: 10.244.0.0/16
  remappedPodCIDR: 10.71.0.0/16
  externalCIDR: 10.70.0.0/16
overlay:
  listen: 192.168.77.2
  ip: 10.80.0.1
nodes:
- name: n1
  vtep: 192.168.77.1
  mac: 02:00:00:00:00:11
  podCIDRs: [10.244.1.0/24]
`

func TestResolve(t *testing.T) {
	c, err := gateway.LoadFile(writeConfig(t, goodServer))
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	if p.TunnelIP.String() != "169.254.100.1" || p.PeerTunnelIP.String() != "169.254.100.2" {
		t.Errorf("server tunnel addresses %v, %v", p.TunnelIP, p.PeerTunnelIP)
	}
	wantNAT := []nat.Pair{{From: netip.MustParsePrefix("10.71.0.0/16"), To: netip.MustParsePrefix("10.244.0.0/16")}}
	if len(p.Dataplane.NAT) != 1 || p.Dataplane.NAT[0] != wantNAT[0] {
		t.Errorf("NAT %v, want %v", p.Dataplane.NAT, wantNAT)
	}
	// NAT-less external CIDR and the peer's tunnel address route into the tunnel.
	remote := map[string]bool{}
	for _, r := range p.Dataplane.Remote {
		remote[r.String()] = true
	}
	if !remote["10.70.0.0/16"] || !remote["169.254.100.2/32"] || remote["10.244.0.0/16"] {
		t.Errorf("remote routes %v", p.Dataplane.Remote)
	}
	// WireGuard accepts the peer's real CIDRs only; keys go in hex; no private key in base64.
	uapi := p.UAPI()
	for _, want := range []string{"listen_port=51820", "allowed_ip=10.244.0.0/16", "allowed_ip=10.70.0.0/16", "allowed_ip=169.254.100.2/32", "public_key=1f31f56d"} {
		if !strings.Contains(uapi, want) {
			t.Errorf("wireguard config lacks %q:\n%s", want, uapi)
		}
	}
	if strings.Contains(uapi, testPriv) || strings.Contains(uapi, "allowed_ip=10.71.0.0/16") {
		t.Errorf("wireguard config:\n%s", uapi)
	}
	if p.Dataplane.Overlay.IP.String() != "10.80.0.1" || p.OverlayListen.String() != "192.168.77.2:4789" || p.Dataplane.Overlay.VNI != netv1alpha1.DefaultVNI {
		t.Errorf("overlay %+v listen %v", p.Dataplane.Overlay, p.OverlayListen)
	}
	if p.Window != 0 {
		t.Errorf("window %d, want 0 (the dataplane's default)", p.Window)
	}
	if pub := p.PrivateKey.Public().String(); pub == testPub || len(pub) != 44 {
		t.Errorf("public key %q", pub)
	}

	client := strings.Replace(strings.Replace(goodServer, "role: server", "role: client", 1), "listenPort: 51820", "endpoint: 192.0.2.10:51820", 1)
	c, err = gateway.LoadFile(writeConfig(t, client))
	if err != nil {
		t.Fatal(err)
	}
	if p, err = c.Resolve(); err != nil {
		t.Fatal(err)
	}
	if uapi := p.UAPI(); p.TunnelIP.String() != "169.254.100.2" || !strings.Contains(uapi, "endpoint=192.0.2.10:51820") || !strings.Contains(uapi, "persistent_keepalive_interval=25") {
		t.Errorf("client: tunnel IP %v, wireguard:\n%s", p.TunnelIP, uapi)
	}
}

// TestResolveDualStack: a standalone gateway between two dual-stack sites, the peer's IPv6
// pods remapped, this site's IPv6 pods presented under another prefix.
func TestResolveDualStack(t *testing.T) {
	yaml := strings.Replace(goodServer, "externalCIDR: 10.70.0.0/16", "externalCIDR: 10.70.0.0/16\n  podCIDR6: fd00:244::/48\n  remappedPodCIDR6: fd71::/48", 1)
	yaml = strings.Replace(yaml, "podCIDRs: [10.244.1.0/24]", "podCIDRs: [10.244.1.0/24, 'fd00:244:0:1::/64']", 1)
	yaml = strings.Replace(yaml, "mtu: 1340", "mtu: 1340\nlocal:\n  podCIDR: 10.244.0.0/16\n  podCIDR6: fd00:244::/48\n  remappedPodCIDR6: fd72::/48", 1)
	c, err := gateway.LoadFile(writeConfig(t, yaml))
	if err != nil {
		t.Fatal(err)
	}
	g, err := c.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	dp := g.Dataplane
	if fmt.Sprint(dp.NAT) != "[10.71.0.0/16->10.244.0.0/16 fd71::/48->fd00:244::/48]" || fmt.Sprint(dp.LocalNAT) != "[fd00:244::/48->fd72::/48]" {
		t.Errorf("NAT %v, local NAT %v", dp.NAT, dp.LocalNAT)
	}
	if !g.TunnelIP6.IsValid() || !dp.OverlayIP6.IsValid() || !strings.Contains(fmt.Sprint(g.AllowedIPs), "fd00:244::/48") {
		t.Errorf("tunnel IPv6 %v, overlay IPv6 %v, allowed IPs %v", g.TunnelIP6, dp.OverlayIP6, g.AllowedIPs)
	}
}

func TestResolveErrors(t *testing.T) {
	cases := []struct {
		from, to string
		want     string
	}{
		{"role: server", "role: router", `role: "router": want server or client`},
		{"listenPort: 51820\n", "", "listenPort: a server needs a port"},
		{"role: server", "role: client", "endpoint: a client needs"},
		{"peerPublicKey: " + testPub, "peerPublicKey: abc", "peerPublicKey: not a WireGuard key"},
		{"privateKeyFile: KEYFILE", "privateKeyFile: /nonexistent/key", "privateKeyFile: open /nonexistent/key"},
		{"remappedPodCIDR: 10.71.0.0/16", "remappedPodCIDR: 10.71.0.0/24", "remote.remappedPodCIDR: 10.71.0.0/24 must have the length"},
		{"podCIDR: 10.244.0.0/16", "podCIDR: 10.244.0.1/16", "remote.podCIDR"},
		{"listen: 192.168.77.2", "listen: nowhere", "overlay.listen"},
		{"mac: 02:00:00:00:00:11", "mac: 02:00", "nodes[0].mac"},
		{"podCIDRs: [10.244.1.0/24]", "podCIDRs: [10.244.1.0/33]", "nodes[0].podCIDRs[0]"},
		{"mtu: 1340", "mtu: 100", "tunnel MTU 100"},
		{"mtu: 1340", "mtu: 1340\nwindow: -1", "window: -1: want 1-16384 packets"},
		{"mtu: 1340", "mtu: 1340\nlocal:\n  remappedPodCIDR: 10.99.0.0/16", "local.remappedPodCIDR: set without local.podCIDR"},
		{"mtu: 1340", "mtu: 1340\nlocal:\n  podCIDR: 10.244.0/16", `local.podCIDR: "10.244.0/16" is not an IPv4 or IPv6 CIDR`},
		{"mtu: 1340", "mtu: 1340\nlocal:\n  podCIDR: 10.244.0.0/16\n  remappedPodCIDR: x", `local.remappedPodCIDR: "x" is not an IPv4 or IPv6 CIDR`},
		{"mtu: 1340", "mtu: 1340\nlocal:\n  podCIDR: 10.244.0.0/16\n  remappedPodCIDR: 10.71.0.0/16", "local.remappedPodCIDR: 10.71.0.0/16 overlaps remote.remappedPodCIDR"},
		{"mtu: 1340", "mtu: 1340\nlocal:\n  podCIDR: 10.245.0.0/16\n  remappedPodCIDR: 10.99.0.0/16", "nodes[0].podCIDRs[0]: 10.244.1.0/24 is outside local.podCIDR 10.245.0.0/16"},
		// Dual-stack fields.
		{"externalCIDR: 10.70.0.0/16", "externalCIDR: 10.70.0.0/16\n  podCIDR6: 10.69.0.0/16", `remote.podCIDR6: "10.69.0.0/16" is not an IPv6 CIDR`},
		{"externalCIDR: 10.70.0.0/16", "externalCIDR: 10.70.0.0/16\n  remappedPodCIDR6: fd71::/48", "remote.remappedPodCIDR6: set without remote.podCIDR6"},
		{"externalCIDR: 10.70.0.0/16", "externalCIDR: 10.70.0.0/16\n  podCIDR6: fd00:244::/48\n  remappedPodCIDR6: fd71::/64", "remote.remappedPodCIDR6: fd71::/64 must have the length of fd00:244::/48"},
		{"externalCIDR: 10.70.0.0/16", "externalCIDR: 10.70.0.0/16\n  podCIDR6: fd00:244::/48\n  remappedPodCIDR6: 10.72.0.0/16", `remote.remappedPodCIDR6: "10.72.0.0/16" is not an IPv6 CIDR`},
		{"externalCIDR: 10.70.0.0/16", "externalCIDR: 10.70.0.0/16\n  podCIDR6: '::ffff:10.0.0.0/104'", `remote.podCIDR6: "::ffff:10.0.0.0/104" is not an IPv4 or IPv6 CIDR`},
		{"mtu: 1340", "mtu: 1340\nlocal:\n  podCIDR: 10.244.0.0/16\n  podCIDR6: fd00:244::/48\n  remappedPodCIDR6: fd99::/56", "local.remappedPodCIDR6: fd99::/56 must have the length of fd00:244::/48"},
		{"podCIDRs: [10.244.1.0/24]", "podCIDRs: [10.244.1.0/24, '64:ff9b:1::/120']", "nodes[0].podCIDRs[1]: 64:ff9b:1::/120 overlaps 64:ff9b:1::/96"},
	}
	for _, tc := range cases {
		if !strings.Contains(goodServer, tc.from) {
			t.Fatalf("test case edits %q, which the config does not have", tc.from)
		}
		c, err := gateway.LoadFile(writeConfig(t, strings.Replace(goodServer, tc.from, tc.to, 1)))
		if err == nil {
			_, err = c.Resolve()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q -> %q: %v, want an error containing %q", tc.from, tc.to, err, tc.want)
		}
	}
	if _, err := gateway.LoadFile(writeConfig(t, goodServer+"unknownField: 1\n")); err == nil || !strings.Contains(err.Error(), "unknownField: unknown field (known here: role, listenPort,") {
		t.Errorf("unknown field: %v", err)
	}
}

// TestMisspeltKeys: a key the file does not take is named at its path with the key it most
// likely meant; a value of the wrong type names its field and the type wanted.
func TestMisspeltKeys(t *testing.T) {
	cases := []struct {
		from, to string
		want     []string
	}{
		{"  podCIDR: 10.244.0.0/16", "  podCidr: 10.244.0.0/16", []string{"remote.podCidr: unknown field; did you mean podCIDR?"}},
		{"  remappedPodCIDR: 10.71.0.0/16", "  remapedPodCIDR: 10.71.0.0/16", []string{"remote.remapedPodCIDR: unknown field; did you mean remappedPodCIDR?"}},
		{"  vtep: 192.168.77.1", "  vtpe: 192.168.77.1", []string{"nodes[0].vtpe: unknown field; did you mean vtep?"}},
		{"listenPort: 51820", "listenport: 51820\npeerPublickey: x", []string{"listenport: unknown field; did you mean listenPort?", "peerPublickey: unknown field; did you mean peerPublicKey?"}},
		{"mtu: 1340", "mtu: 1340\ntunnelCidr: 169.254.100.0/30\nkeepalive: 5", []string{"tunnelCidr: unknown field; did you mean tunnelCIDR?", "keepalive: unknown field (known here: role,"}},
		{"mtu: 1340", "mtu: 1340\nlocal:\n  remappedPodCidr: 10.99.0.0/16", []string{"local.remappedPodCidr: unknown field; did you mean remappedPodCIDR?"}},
		{"mtu: 1340", "mtu: big", []string{"mtu: want a whole number, not a string"}},
		{"listenPort: 51820", "listenPort: 70000", []string{"listenPort: want a whole number from 0 to 65535, not 70000"}},
		{"podCIDRs: [10.244.1.0/24]", "podCIDRs: 10.244.1.0/24", []string{"nodes[0].podCIDRs: want a list, not a string"}},
		{"mtu: 1340", "mtu: 1340\nmtu: 1400", []string{`key "mtu" already set`}},
		{"mtu: 1340", "mtu: 1340\n---\nrole: client\n", []string{"more than one YAML document"}},
	}
	for _, tc := range cases {
		if !strings.Contains(goodServer, tc.from) {
			t.Fatalf("test case edits %q, which the config does not have", tc.from)
		}
		_, err := gateway.LoadFile(writeConfig(t, strings.Replace(goodServer, tc.from, tc.to, 1)))
		if err == nil {
			t.Errorf("%q: loaded", tc.to)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: %v\nwant it to say %q", tc.to, err, w)
			}
		}
		if strings.Contains(err.Error(), "JSON") {
			t.Errorf("%q: %v\nspeaks of JSON in a YAML file", tc.to, err)
		}
	}
}

// TestFileBounds: what the gateway reads from files is bounded. A device (/dev/zero, which
// never ends) and a file over 1 MiB are refused as the config; a key file that group or
// others may write is refused (whoever writes it replaces the gateway's identity).
func TestFileBounds(t *testing.T) {
	if _, err := gateway.LoadFile("/dev/zero"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("/dev/zero as the config: %v", err)
	}
	// A FIFO nobody writes to: refused at once (opening it used to wait for a writer, and no
	// signal ended the wait).
	fifo := filepath.Join(t.TempDir(), "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := gateway.LoadFile(fifo); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("a FIFO as the config: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("LoadFile of a FIFO without a writer still waits after 10 s")
	}
	big := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(big, make([]byte, 2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := gateway.LoadFile(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a 2 MiB config: %v", err)
	}
	// A key readable by group or others is refused too, as wg(8) and OpenSSH refuse theirs
	// (TestStandaloneFilesChecked has the rest).
	for mode, ok := range map[os.FileMode]bool{0o600: true, 0o400: true, 0o644: false, 0o640: false, 0o666: false, 0o620: false, 0o602: false} {
		path := writeConfig(t, goodServer)
		key := filepath.Join(filepath.Dir(path), "private.key")
		if err := os.Chmod(key, mode); err != nil {
			t.Fatal(err)
		}
		c, err := gateway.LoadFile(path)
		if err == nil {
			_, err = c.Resolve()
		}
		if ok != (err == nil) || (!ok && !strings.Contains(err.Error(), "by group or others")) {
			t.Errorf("key file mode %04o: %v", mode, err)
		}
	}
}

// TestManyUnknownKeys: a file of many unknown keys gets a bounded error.
func TestManyUnknownKeys(t *testing.T) {
	var b strings.Builder
	b.WriteString(goodServer)
	for i := range 5000 {
		fmt.Fprintf(&b, "unknown%d: 1\n", i)
	}
	_, err := gateway.LoadFile(writeConfig(t, b.String()))
	if err == nil || !strings.Contains(err.Error(), "... and 4980 more") || len(err.Error()) > 8000 {
		t.Errorf("error of %d bytes: %.300v", len(fmt.Sprint(err)), err)
	}
}

// TestStockPeerScript: the script a stock WireGuard peer runs, for a server gateway whose
// pods keep their addresses and for a client presenting them under another prefix; and the
// networks no stock peer can route to the gateway refused.
func TestStockPeerScript(t *testing.T) {
	stockRemote := strings.Replace(goodServer, "  podCIDR: 10.244.0.0/16\n  remappedPodCIDR: 10.71.0.0/16\n  externalCIDR: 10.70.0.0/16\n", "  podCIDR: 192.168.50.0/24\n", 1)
	client := strings.NewReplacer("role: server", "role: client", "listenPort: 51820", "endpoint: 192.0.2.10:51999",
		"mtu: 1340", "mtu: 1280\nlocal:\n  podCIDR: 10.244.0.0/16\n  remappedPodCIDR: 10.99.0.0/16").Replace(goodServer)
	script := func(y string) (string, error) {
		c, err := gateway.LoadFile(writeConfig(t, y))
		if err != nil {
			return "", err
		}
		g, err := c.Resolve()
		if err != nil {
			return "", err
		}
		return c.StockPeerScript(g)
	}
	for _, tc := range []struct{ name, yaml string }{{"stock-peer-of-server", stockRemote}, {"stock-peer-of-client", client}} {
		s, err := script(tc.yaml)
		if err != nil {
			t.Fatal(err)
		}
		golden.Check(t, tc.name, s)
	}
	for _, bad := range []struct{ name, yaml, want string }{
		{"the sites overlap and this one is not presented under another prefix", goodServer,
			"this site's pods, 10.244.1.0/24 to the peer, overlap the peer's own network 10.244.0.0/16"},
		{"a default route as the local pod network", strings.Replace(stockRemote, "mtu: 1340", "mtu: 1340\nlocal:\n  podCIDR: 0.0.0.0/0", 1),
			"local.podCIDR: 0.0.0.0/0 is a default route"},
		{"half the Internet on a node", strings.Replace(stockRemote, "podCIDRs: [10.244.1.0/24]", "podCIDRs: [10.244.1.0/24, 64.0.0.0/2]", 1),
			"64.0.0.0/2 is wider than a /8"},
		{"the peer's endpoint inside the pods' network", strings.Replace(client, "192.0.2.10:51999", "10.99.7.7:51999", 1),
			"holds the peer's own endpoint 10.99.7.7"},
	} {
		if _, err := script(bad.yaml); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want an error containing %q", bad.name, err, bad.want)
		}
	}
}
