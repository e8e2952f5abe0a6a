package gateway

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/skein-net/skein/control/gateway/config"
	"github.com/skein-net/skein/dataplane"
	"github.com/skein-net/skein/dataplane/overlay"
	"github.com/skein-net/skein/dataplane/packet"
)

// File is the standalone gateway's configuration file (YAML).
type File struct {
	// Role is "server" (listens, the remote cluster's side in `network connect`) or "client"
	// (dials the server's endpoint).
	Role string `json:"role"`
	// ListenPort is the WireGuard UDP port: required for a server, optional for a client
	// (0 picks a free port).
	ListenPort uint16 `json:"listenPort,omitempty"`
	// Endpoint is the server's address:port; required for a client.
	Endpoint string `json:"endpoint,omitempty"`
	// PrivateKeyFile holds this gateway's WireGuard private key in base64 (`wg genkey`).
	PrivateKeyFile string `json:"privateKeyFile"`
	// PeerPublicKey is the peer gateway's WireGuard public key in base64 (`wg pubkey`).
	PeerPublicKey string `json:"peerPublicKey"`
	// MTU of the tunnel (inner packets); the same on both sides. Default 1340.
	MTU int `json:"mtu,omitempty"`
	// TunnelCIDR is the /30 inside the tunnel shared by both gateways: the server takes the
	// first host, the client the second. Default 169.254.100.0/30.
	TunnelCIDR string `json:"tunnelCIDR,omitempty"`
	// KeepaliveSeconds is WireGuard's persistent keepalive towards the peer (0: off; default
	// 25 on a client, so NATs between keep the path open).
	KeepaliveSeconds *int `json:"keepaliveSeconds,omitempty"`

	// Remote describes the peer cluster's CIDRs.
	Remote RemoteConfig `json:"remote"`
	// Overlay is the gateway's side of the node overlay.
	Overlay OverlayConfig `json:"overlay"`
	// Nodes are this cluster's nodes: their VTEPs and pod CIDRs.
	Nodes []NodeConfig `json:"nodes"`

	// Probe tunes the connection prober.
	Probe ProbeConfig `json:"probe,omitempty"`
	// HTTPListen is where /healthz, /readyz and /metrics are served. Default 127.0.0.1:9471;
	// "off" disables them.
	HTTPListen string `json:"httpListen,omitempty"`
	// Pprof serves Go's profiler under /debug/pprof on the HTTP listener (off by default;
	// only enable it on a listener nobody untrusted reaches).
	Pprof bool `json:"pprof,omitempty"`
	// MemoryLimitMiB is a soft limit for the Go heap (GOMEMLIMIT): above it the garbage
	// collector works harder to give memory back. Default 100; 0 keeps the default, -1 removes
	// the limit.
	MemoryLimitMiB int `json:"memoryLimitMiB,omitempty"`
	// GCPercent is the garbage collector's GOGC (default 400): with the memory limit as the
	// ceiling, collecting less often costs less CPU under load. -1 leaves GC to the limit alone.
	GCPercent int `json:"gcPercent,omitempty"`
	// Window is the most packets wireguard-go may hold in each direction (default 512). Each
	// holds a 64 KiB buffer: more absorbs longer bursts, fewer bounds memory.
	Window int `json:"window,omitempty"`
}

// RemoteConfig is the peer cluster's networks as it numbers them, and as this cluster sees them
// when they clash with local ones (the Configuration's status.remote.cidr).
type RemoteConfig struct {
	PodCIDR      string `json:"podCIDR"`
	ExternalCIDR string `json:"externalCIDR,omitempty"`
	// RemappedPodCIDR and RemappedExternalCIDR: empty means no remap (NAT-less).
	RemappedPodCIDR      string `json:"remappedPodCIDR,omitempty"`
	RemappedExternalCIDR string `json:"remappedExternalCIDR,omitempty"`
}

// OverlayConfig is the gateway's VTEP.
type OverlayConfig struct {
	// Kind is vxlan (default) or geneve.
	Kind string `json:"kind,omitempty"`
	// Port is the overlay UDP port, the gateway's and the nodes' (default 4789, or 6081).
	Port uint16 `json:"port,omitempty"`
	// VNI of the overlay (default 18952, the number of table 18952).
	VNI *uint32 `json:"vni,omitempty"`
	// Listen is the gateway's underlay address, where nodes send overlay frames.
	Listen string `json:"listen"`
	// IP is the gateway's overlay address (nodes route remote CIDRs via it).
	IP string `json:"ip"`
	// MAC is the gateway's overlay MAC; default derived from IP (stable across restarts).
	MAC string `json:"mac,omitempty"`
	// MTU of the nodes' overlay devices (inner packets). Default 1450.
	MTU int `json:"mtu,omitempty"`
	// CompleteChecksums recomputes inner TCP/UDP checksums of everything the nodes send, so
	// their overlay devices may keep TX checksum offload (and TSO, much faster) on. Default
	// true; false saves about 90 ns per packet where every node has TX offload off.
	CompleteChecksums *bool `json:"completeChecksums,omitempty"`
}

// NodeConfig is one node's VTEP.
type NodeConfig struct {
	Name     string   `json:"name"`
	VTEP     string   `json:"vtep"`
	MAC      string   `json:"mac"`
	PodCIDRs []string `json:"podCIDRs"`
}

// ProbeConfig tunes the prober.
type ProbeConfig struct {
	Interval  string `json:"interval,omitempty"`  // default 2s
	FailAfter int    `json:"failAfter,omitempty"` // default 5
}

// DefaultVNI is the overlay VNI when none is configured.
const DefaultVNI = 18952

// Defaults of the gateway's Go runtime: a soft heap limit and a GOGC. Under 32 TCP streams on
// 2 cores they keep the peak RSS below 150 MiB; a tighter limit makes the collector run often
// enough to cost throughput (wireguard-go keeps 64 KiB buffers in flight).
const (
	DefaultMemoryLimitMiB = 140
	DefaultGCPercent      = 400
)

// MaxWindow bounds the window setting: 16384 packets hold 1 GiB of wireguard-go's buffers.
const MaxWindow = 16384

// LoadFile reads a config file; Resolve validates it.
func LoadFile(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var c File
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return &c, nil
}

// Resolve validates c (naming every bad field) and resolves it. The private key is read from
// its file.
func (c *File) Resolve() (*config.Gateway, error) {
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, a...)))
	}
	p := &config.Gateway{HTTPListen: c.HTTPListen, Pprof: c.Pprof, ListenPort: c.ListenPort, GCPercent: c.GCPercent}
	if p.GCPercent == 0 {
		p.GCPercent = DefaultGCPercent
	}
	switch {
	case c.MemoryLimitMiB == 0:
		p.MemoryLimit = DefaultMemoryLimitMiB << 20
	case c.MemoryLimitMiB > 0:
		p.MemoryLimit = int64(c.MemoryLimitMiB) << 20
	case c.MemoryLimitMiB < -1:
		bad("memoryLimitMiB", "%d: want a number of MiB, or -1 for no limit", c.MemoryLimitMiB)
	}
	if p.HTTPListen == "" {
		p.HTTPListen = "127.0.0.1:9471"
	}
	if c.Window < 0 || c.Window > MaxWindow {
		bad("window", "%d: want 1-%d packets (0: the default %d)", c.Window, MaxWindow, dataplane.DefaultWindow)
	}
	p.Window = c.Window

	priv, err := readKey(c.PrivateKeyFile)
	if err != nil {
		bad("privateKeyFile", "%v", err)
	} else {
		p.PrivateKey = priv
	}
	switch c.Role {
	case "server":
		if c.ListenPort == 0 {
			bad("listenPort", "a server needs a port (the spec's default is 51820)")
		}
		if c.Endpoint != "" {
			bad("endpoint", "a server does not dial; remove it or use role: client")
		}
	case "client":
		if c.Endpoint == "" {
			bad("endpoint", "a client needs the server's address:port")
		}
	default:
		bad("role", "%q: want server or client", c.Role)
	}
	if p.PeerPublicKey, err = config.ParseKey(c.PeerPublicKey); err != nil {
		bad("peerPublicKey", "%v", err)
	}
	if c.Endpoint != "" {
		if p.PeerEndpoint, err = netip.ParseAddrPort(c.Endpoint); err != nil {
			bad("endpoint", "%q is not address:port: %v", c.Endpoint, err)
		}
	}
	keepalive := 0
	if c.Role == "client" {
		keepalive = 25
	}
	if c.KeepaliveSeconds != nil {
		keepalive = *c.KeepaliveSeconds
	}
	if keepalive < 0 || keepalive > 65535 {
		bad("keepaliveSeconds", "%d is outside 0-65535", keepalive)
	} else {
		p.Keepalive = keepalive
	}

	tunCIDR := c.TunnelCIDR
	if tunCIDR == "" {
		tunCIDR = "169.254.100.0/30"
	}
	if tp, err := netip.ParsePrefix(tunCIDR); err != nil || !tp.Addr().Is4() || tp.Bits() > 30 || tp.Masked() != tp {
		bad("tunnelCIDR", "%q: want an IPv4 network of at least 4 addresses, such as 169.254.100.0/30", tunCIDR)
	} else {
		first := tp.Addr().Next()
		second := first.Next()
		p.TunnelIP, p.PeerTunnelIP = first, second
		if c.Role == "client" {
			p.TunnelIP, p.PeerTunnelIP = second, first
		}
	}

	dp := dataplane.Config{TunnelMTU: c.MTU, OverlayMTU: c.Overlay.MTU, TunnelIP: p.TunnelIP, CompleteChecksums: c.Overlay.CompleteChecksums == nil || *c.Overlay.CompleteChecksums}
	if p.PeerTunnelIP.IsValid() {
		dp.Remote = append(dp.Remote, netip.PrefixFrom(p.PeerTunnelIP, 32))
		p.AllowedIPs = append(p.AllowedIPs, netip.PrefixFrom(p.PeerTunnelIP, 32))
	}
	for _, r := range []struct{ field, real, remapped, remappedField string }{
		{"remote.podCIDR", c.Remote.PodCIDR, c.Remote.RemappedPodCIDR, "remote.remappedPodCIDR"},
		{"remote.externalCIDR", c.Remote.ExternalCIDR, c.Remote.RemappedExternalCIDR, "remote.remappedExternalCIDR"},
	} {
		if r.real == "" {
			if r.field == "remote.podCIDR" {
				bad(r.field, "required: the peer cluster's pod CIDR as it numbers it")
			}
			if r.remapped != "" {
				bad(r.remappedField, "set without %s", r.field)
			}
			continue
		}
		real, err := netip.ParsePrefix(r.real)
		if err != nil || real.Masked() != real || !real.Addr().Is4() {
			bad(r.field, "%q is not an IPv4 CIDR without host bits", r.real)
			continue
		}
		if r.remapped == "" {
			addRemote(&dp, p, real, real)
			continue
		}
		seen, err := netip.ParsePrefix(r.remapped)
		if err != nil || seen.Masked() != seen || !seen.Addr().Is4() {
			bad(r.remappedField, "%q is not an IPv4 CIDR without host bits", r.remapped)
			continue
		}
		if seen.Bits() != real.Bits() {
			bad(r.remappedField, "%s must have the length of %s (/%d)", seen, real, real.Bits())
			continue
		}
		addRemote(&dp, p, real, seen)
	}

	kind := overlay.VXLAN
	if c.Overlay.Kind != "" {
		if kind, err = overlay.ParseKind(c.Overlay.Kind); err != nil {
			bad("overlay.kind", "%v", err)
		}
	}
	vni := uint32(DefaultVNI)
	if c.Overlay.VNI != nil {
		vni = *c.Overlay.VNI
	}
	dp.Overlay = overlay.Config{Kind: kind, VNI: vni}
	dp.OverlayPort = c.Overlay.Port
	port := c.Overlay.Port
	if port == 0 {
		port = kind.DefaultPort()
	}
	if a, err := netip.ParseAddr(c.Overlay.Listen); err != nil || !a.Is4() {
		bad("overlay.listen", "%q: want the gateway's IPv4 underlay address", c.Overlay.Listen)
	} else {
		p.OverlayListen = netip.AddrPortFrom(a, port)
	}
	if a, err := netip.ParseAddr(c.Overlay.IP); err != nil || !a.Is4() {
		bad("overlay.ip", "%q: want the gateway's IPv4 overlay address", c.Overlay.IP)
	} else {
		dp.Overlay.IP = a
		dp.Overlay.MAC = MACFor(a)
	}
	if c.Overlay.MAC != "" {
		if m, err := overlay.ParseMAC(c.Overlay.MAC); err != nil {
			bad("overlay.mac", "%v", err)
		} else {
			dp.Overlay.MAC = m
		}
	}
	if dp.Overlay.IP.IsValid() && p.TunnelIP.IsValid() {
		dp.Local = []netip.Addr{dp.Overlay.IP, p.TunnelIP}
	}
	if len(c.Nodes) == 0 {
		bad("nodes", "at least one node VTEP is needed to deliver traffic from the tunnel")
	}
	for i, n := range c.Nodes {
		field := fmt.Sprintf("nodes[%d]", i)
		node := dataplane.Node{Name: n.Name}
		if node.VTEP, err = netip.ParseAddr(n.VTEP); err != nil {
			bad(field+".vtep", "%q is not an IP address", n.VTEP)
		}
		if node.MAC, err = overlay.ParseMAC(n.MAC); err != nil {
			bad(field+".mac", "%v", err)
		}
		for j, s := range n.PodCIDRs {
			pc, err := netip.ParsePrefix(s)
			if err != nil || pc.Masked() != pc {
				bad(fmt.Sprintf("%s.podCIDRs[%d]", field, j), "%q is not a CIDR without host bits", s)
				continue
			}
			node.PodCIDRs = append(node.PodCIDRs, pc)
		}
		dp.Nodes = append(dp.Nodes, node)
	}

	p.ProbeInterval = 2 * time.Second
	if c.Probe.Interval != "" {
		if d, err := time.ParseDuration(c.Probe.Interval); err != nil || d < 100*time.Millisecond {
			bad("probe.interval", "%q: want a duration of at least 100ms, such as 2s", c.Probe.Interval)
		} else {
			p.ProbeInterval = d
		}
	}
	p.ProbeFail = c.Probe.FailAfter
	if p.ProbeFail < 0 {
		bad("probe.failAfter", "%d is negative", p.ProbeFail)
	}
	if p.ProbeFail == 0 {
		p.ProbeFail = 5
	}
	if len(errs) == 0 {
		if err := dataplane.Validate(dp); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("invalid gateway config:\n  %w", joinIndented(errs))
	}
	p.Dataplane = dp
	return p, nil
}

func joinIndented(errs []error) error {
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return errors.New(strings.Join(msgs, "\n  "))
}

// readKey reads a base64 WireGuard key from a file.
func readKey(path string) (config.Key, error) {
	if path == "" {
		return config.Key{}, errors.New("required: a file holding the private key (wg genkey > FILE)")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return config.Key{}, err
	}
	k, err := config.ParseKey(string(b))
	if err != nil {
		return config.Key{}, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// MACFor derives a stable, locally administered unicast MAC from an overlay IP.
func MACFor(ip netip.Addr) packet.MAC {
	h := sha256.Sum256(ip.AsSlice())
	return packet.MAC{0x02, 0x5b, h[0], h[1], h[2], h[3]}
}
