package gateway

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/skein-net/skein/control/gateway/config"
	"github.com/skein-net/skein/dataplane"
	"github.com/skein-net/skein/dataplane/overlay"
)

// File is the standalone gateway's configuration file (YAML). The comments on its fields are
// the reference users read: docs/standalone.md and docs/gateway-config.schema.json are
// generated from them (TestConfigReference), with the defaults Build applies. Write them for
// users, and leave the defaults to the generated reference.
type File struct {
	// Role is server (waits for the peer on listenPort; the remote cluster's side in
	// `network connect`) or client (dials the server's endpoint).
	Role string `json:"role"`
	// ListenPort is the WireGuard UDP port. Required for a server. A client without it
	// binds a random free port (the server learns it from the handshake).
	ListenPort uint16 `json:"listenPort,omitempty"`
	// Endpoint is the server's address:port, such as 198.51.100.2:51820. Required for a
	// client; not allowed for a server.
	Endpoint string `json:"endpoint,omitempty"`
	// PrivateKeyFile is a file holding this gateway's WireGuard private key in base64, as
	// `wg genkey` prints it. It must be owned by the user the gateway runs as (or root) and
	// readable by no one else (chmod 600), in directories only that user or root can write
	// (a sticky one such as /tmp holding a file of theirs is fine); the config file is held
	// to the same, except that others may read it.
	PrivateKeyFile string `json:"privateKeyFile"`
	// PeerPublicKey is the peer's WireGuard public key in base64, as `wg pubkey` prints it.
	PeerPublicKey string `json:"peerPublicKey"`
	// MTU is the largest packet inside the tunnel; set the same on both sides (a stock peer:
	// the MTU of its WireGuard interface). TCP SYNs are clamped to fit it.
	MTU int `json:"mtu,omitempty"`
	// TunnelCIDR is a small network inside the tunnel shared by the two gateways: the server
	// owns its first address, the client the second, and each probes the other there. A stock
	// peer must own the other address on its WireGuard interface and allow this gateway's.
	TunnelCIDR string `json:"tunnelCIDR,omitempty"`
	// KeepaliveSeconds is WireGuard's persistent keepalive towards the peer, so that NATs
	// between the two keep the path open (0: off).
	KeepaliveSeconds *int `json:"keepaliveSeconds,omitempty"`

	// Remote is the peer's networks.
	Remote RemoteConfig `json:"remote"`
	// Local is this site's own pod network, and how the peer sees it.
	Local LocalConfig `json:"local,omitempty"`
	// Overlay is the gateway's side of the overlay to this site's nodes.
	Overlay OverlayConfig `json:"overlay"`
	// Nodes are this site's nodes: where their overlay devices are and which pods they host.
	Nodes []NodeConfig `json:"nodes"`

	// Probe tunes the probes to the peer's tunnel address.
	Probe ProbeConfig `json:"probe,omitempty"`
	// HTTPListen is the TCP address of /healthz, /readyz and /metrics; off disables them.
	HTTPListen string `json:"httpListen,omitempty"`
	// Pprof serves Go's profiler under /debug/pprof on httpListen. Enable it only on an
	// address nobody untrusted reaches.
	Pprof bool `json:"pprof,omitempty"`
	// MemoryLimitMiB is a soft limit of the Go heap in MiB (GOMEMLIMIT): above it the garbage
	// collector works harder to give memory back. -1 removes the limit.
	MemoryLimitMiB int `json:"memoryLimitMiB,omitempty"`
	// GCPercent is the garbage collector's GOGC: with the memory limit as the ceiling,
	// collecting less often costs less CPU under load. -1 leaves collection to the limit alone.
	GCPercent int `json:"gcPercent,omitempty"`
	// Window is the most packets wireguard-go may hold in each direction. Each holds a 64 KiB
	// buffer: more absorbs longer bursts, fewer bounds memory.
	Window int `json:"window,omitempty"`
}

// RemoteConfig is the peer's networks as the peer numbers them, and as this site sees them
// when they clash with local ones.
type RemoteConfig struct {
	// PodCIDR is the peer's pod network (a stock peer: the network behind it) as the peer
	// numbers it. WireGuard accepts packets from the peer only from its networks.
	PodCIDR string `json:"podCIDR"`
	// ExternalCIDR is a second network of the peer (its nodes' host-network addresses as it
	// presents them), as the peer numbers it.
	ExternalCIDR string `json:"externalCIDR,omitempty"`
	// RemappedPodCIDR is how this site's pods see podCIDR (same length), when it clashes
	// with a local network: the gateway translates destinations into the tunnel and sources
	// out of it. Empty: the peer's addresses as they are (no NAT).
	RemappedPodCIDR string `json:"remappedPodCIDR,omitempty"`
	// RemappedExternalCIDR is how this site sees externalCIDR (same length).
	RemappedExternalCIDR string `json:"remappedExternalCIDR,omitempty"`
	// PodCIDR6 is a dual-stack peer's IPv6 pod network, beside an IPv4 podCIDR. (An IPv6-only
	// peer may give its networks in podCIDR and externalCIDR instead: they take either
	// family.)
	PodCIDR6 string `json:"podCIDR6,omitempty"`
	// ExternalCIDR6 is a dual-stack peer's IPv6 external network, beside an IPv4 externalCIDR.
	ExternalCIDR6 string `json:"externalCIDR6,omitempty"`
	// RemappedPodCIDR6 is how this site sees podCIDR6 (same length), as remappedPodCIDR.
	RemappedPodCIDR6 string `json:"remappedPodCIDR6,omitempty"`
	// RemappedExternalCIDR6 is how this site sees externalCIDR6 (same length).
	RemappedExternalCIDR6 string `json:"remappedExternalCIDR6,omitempty"`
}

// LocalConfig is this site's pod network as its nodes number it and, to join a peer that
// uses the same addresses and does no NAT of its own (a stock WireGuard peer), the prefix it
// is presented under to the peer.
type LocalConfig struct {
	// PodCIDR is this site's pod network: every node's podCIDRs lie inside it. Needed for
	// remappedPodCIDR; alone it is only checked against the nodes.
	PodCIDR string `json:"podCIDR,omitempty"`
	// RemappedPodCIDR is how the peer sees podCIDR (same length): the gateway translates
	// sources into the tunnel and destinations out of it, ICMP quotes included, without
	// state, and lets no real local address cross. Empty: the peer sees local pods under
	// their own addresses.
	RemappedPodCIDR string `json:"remappedPodCIDR,omitempty"`
	// PodCIDR6 is a dual-stack site's IPv6 pod network, beside an IPv4 podCIDR (podCIDR
	// takes either family).
	PodCIDR6 string `json:"podCIDR6,omitempty"`
	// RemappedPodCIDR6 is how the peer sees podCIDR6 (same length), as remappedPodCIDR.
	RemappedPodCIDR6 string `json:"remappedPodCIDR6,omitempty"`
}

// OverlayConfig is the gateway's VTEP.
type OverlayConfig struct {
	// Kind is the nodes' overlay encapsulation: vxlan or geneve.
	Kind string `json:"kind,omitempty"`
	// Port is the overlay's UDP port, the gateway's and the nodes' (the dstport of their
	// overlay devices).
	Port uint16 `json:"port,omitempty"`
	// VNI is the overlay's network identifier, the same as the nodes' overlay devices'.
	VNI *uint32 `json:"vni,omitempty"`
	// Listen is the gateway's IPv4 address towards the nodes (where they send overlay
	// packets; not 0.0.0.0).
	Listen string `json:"listen"`
	// IP is the gateway's IPv4 address on the overlay: the nodes route the peer's networks
	// via it.
	IP string `json:"ip"`
	// MAC is the gateway's overlay MAC, which the nodes' neighbour entries point at.
	MAC string `json:"mac,omitempty"`
	// MTU is the MTU of the nodes' overlay devices: the largest packet the gateway sends to a
	// node.
	MTU int `json:"mtu,omitempty"`
	// CompleteChecksums recomputes the inner TCP/UDP checksums of what the nodes send, so
	// their overlay devices may keep TX checksum offload (and TSO, much faster) on; false
	// saves about 90 ns a packet where every node has TX offload off.
	CompleteChecksums *bool `json:"completeChecksums,omitempty"`
}

// NodeConfig is one node's VTEP.
type NodeConfig struct {
	// Name names the node in logs and errors.
	Name string `json:"name,omitempty"`
	// VTEP is the node's IPv4 address towards the gateway, where its overlay device listens.
	VTEP string `json:"vtep"`
	// MAC is the MAC address of the node's overlay device (ip link show liqo.vxlan).
	MAC string `json:"mac"`
	// PodCIDRs are the networks of the pods on this node: packets to them go to this node,
	// and this node may send from them only.
	PodCIDRs []string `json:"podCIDRs"`
}

// ProbeConfig tunes the prober.
type ProbeConfig struct {
	// Interval is the time between two probes, as a Go duration (2s, 500ms).
	Interval string `json:"interval,omitempty"`
	// FailAfter is how many probes lost in a row make the connection Error.
	FailAfter int `json:"failAfter,omitempty"`
}

// Bounds on what the gateway reads from files: a config file and a key file are small.
const (
	maxConfigFile = 1 << 20
	maxKeyFile    = 1 << 10
)

// LoadFile reads a config file; Resolve validates it.
func LoadFile(path string) (*File, error) {
	b, err := readChecked(path, maxConfigFile, configFile)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, err := decodeFile(b)
	if err != nil {
		if strings.Contains(err.Error(), "\n") {
			return nil, fmt.Errorf("config %s:\n  %w", path, err)
		}
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Resolve validates c (naming every bad field) and resolves it with config.Build. The private
// key is read from its file.
func (c *File) Resolve() (*config.Gateway, error) {
	var front []string
	bad := func(field, format string, a ...any) {
		front = append(front, field+": "+fmt.Sprintf(format, a...))
	}
	s := config.Spec{
		ListenPort: c.ListenPort, Keepalive: c.KeepaliveSeconds, TunnelMTU: c.MTU, RequireNodes: true,
		HTTPListen: c.HTTPListen, Pprof: c.Pprof, MemoryLimitMiB: c.MemoryLimitMiB, GCPercent: c.GCPercent, Window: c.Window,
		ProbeFail: c.Probe.FailAfter,
	}
	switch c.Role {
	case "server":
		s.Server = true
	case "client":
	default:
		bad("role", "%q: want server or client", c.Role)
		s.Server = c.Endpoint == "" // whichever the rest of the file describes
	}
	var err error
	if s.PrivateKey, err = readKey(c.PrivateKeyFile); err != nil {
		bad("privateKeyFile", "%v", err)
	}
	if c.PeerPublicKey == "" {
		bad("peerPublicKey", "required: the peer's public key (wg pubkey < its private key)")
	} else if s.PeerPublicKey, err = config.ParseKey(c.PeerPublicKey); err != nil {
		bad("peerPublicKey", "%v", err)
	}
	if c.Endpoint != "" {
		if s.PeerEndpoint, err = netip.ParseAddrPort(c.Endpoint); err != nil {
			bad("endpoint", "%q is not address:port: %v", c.Endpoint, err)
		}
	}
	if c.TunnelCIDR != "" {
		if s.TunnelCIDR, err = netip.ParsePrefix(c.TunnelCIDR); err != nil {
			bad("tunnelCIDR", "%q: want an IPv4 network of at least 4 addresses, such as %s", c.TunnelCIDR, config.DefaultTunnelCIDR)
		}
	}

	// cidr parses a CIDR of the file (of family "IPv6", or either for ""), naming field.
	cidr := func(field, v, family string) (netip.Prefix, bool) {
		p, err := netip.ParsePrefix(v)
		switch {
		case err != nil || p.Masked() != p || p.Addr().Is4In6():
			bad(field, "%q is not an IPv4 or IPv6 CIDR without host bits", v)
		case family == "IPv6" && !p.Addr().Is6():
			bad(field, "%q is not an IPv6 CIDR: it holds the IPv6 network beside the IPv4 one", v)
		default:
			return p, true
		}
		return p, false
	}
	r := c.Remote
	if r.PodCIDR == "" {
		bad("remote.podCIDR", "required: the peer cluster's pod CIDR as it numbers it")
	}
	for _, r := range []struct{ field, real, remapped, remappedField, family string }{
		{"remote.podCIDR", r.PodCIDR, r.RemappedPodCIDR, "remote.remappedPodCIDR", ""},
		{"remote.externalCIDR", r.ExternalCIDR, r.RemappedExternalCIDR, "remote.remappedExternalCIDR", ""},
		{"remote.podCIDR6", r.PodCIDR6, r.RemappedPodCIDR6, "remote.remappedPodCIDR6", "IPv6"},
		{"remote.externalCIDR6", r.ExternalCIDR6, r.RemappedExternalCIDR6, "remote.remappedExternalCIDR6", "IPv6"},
	} {
		if r.real == "" {
			if r.remapped != "" {
				bad(r.remappedField, "set without %s", r.field)
			}
			continue
		}
		real, ok := cidr(r.field, r.real, r.family)
		if !ok {
			continue
		}
		rm := config.Remote{Field: r.field, Real: real}
		if r.remapped != "" {
			rm.Field = r.remappedField
			if rm.Seen, ok = cidr(r.remappedField, r.remapped, r.family); !ok {
				continue
			}
		}
		s.Remote = append(s.Remote, rm)
	}

	for _, l := range []struct{ field, real, remapped, remappedField, family string }{
		{"local.podCIDR", c.Local.PodCIDR, c.Local.RemappedPodCIDR, "local.remappedPodCIDR", ""},
		{"local.podCIDR6", c.Local.PodCIDR6, c.Local.RemappedPodCIDR6, "local.remappedPodCIDR6", "IPv6"},
	} {
		if l.real == "" {
			if l.remapped != "" {
				bad(l.remappedField, "set without %s (this site's pod network as its nodes number it)", l.field)
			}
			continue
		}
		loc := config.Local{Field: l.field, PresentedField: l.remappedField}
		var ok bool
		if loc.Real, ok = cidr(l.field, l.real, l.family); !ok {
			continue
		}
		if l.remapped != "" {
			if loc.Presented, ok = cidr(l.remappedField, l.remapped, l.family); !ok {
				continue
			}
		}
		s.Local = append(s.Local, loc)
	}

	o := &s.Overlay
	o.Port, o.VNI, o.MTU, o.CompleteChecksums = c.Overlay.Port, c.Overlay.VNI, c.Overlay.MTU, c.Overlay.CompleteChecksums
	if c.Overlay.Kind != "" {
		if o.Kind, err = overlay.ParseKind(c.Overlay.Kind); err != nil {
			bad("overlay.kind", "%v", err)
		}
	}
	if o.Listen, err = netip.ParseAddr(c.Overlay.Listen); err != nil {
		bad("overlay.listen", "%q: want the gateway's IPv4 underlay address", c.Overlay.Listen)
	}
	if o.IP, err = netip.ParseAddr(c.Overlay.IP); err != nil {
		bad("overlay.ip", "%q: want the gateway's IPv4 overlay address", c.Overlay.IP)
	}
	if c.Overlay.MAC != "" {
		if o.MAC, err = overlay.ParseMAC(c.Overlay.MAC); err != nil {
			bad("overlay.mac", "%v", err)
		}
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
		for j, p := range n.PodCIDRs {
			pc, err := netip.ParsePrefix(p)
			if err != nil || pc.Masked() != pc {
				bad(fmt.Sprintf("%s.podCIDRs[%d]", field, j), "%q is not a CIDR without host bits", p)
				continue
			}
			node.PodCIDRs = append(node.PodCIDRs, pc)
		}
		s.Nodes = append(s.Nodes, node)
	}
	if c.Probe.Interval != "" {
		if s.ProbeInterval, err = time.ParseDuration(c.Probe.Interval); err != nil {
			bad("probe.interval", "%q: want a duration of at least %v, such as %v", c.Probe.Interval, config.MinProbeInterval, config.DefaultProbeInterval)
		}
	}
	if len(front) > 0 {
		// Build still checks the rest, so that one run names every bad field; what did not
		// parse is left at its zero value and Build's remarks on those fields are dropped.
		_, err := config.Build(s)
		return nil, config.Join(front, err)
	}
	return config.Build(s)
}

// readKey reads a base64 WireGuard key from a file.
func readKey(path string) (config.Key, error) {
	if path == "" {
		return config.Key{}, errors.New("required: a file holding the private key (wg genkey > FILE)")
	}
	b, err := readChecked(path, maxKeyFile, keyFile)
	if errors.Is(err, fs.ErrPermission) {
		return config.Key{}, fmt.Errorf("%w: the gateway runs as uid %d; chown the key file to that user (and keep it chmod 600)", err, os.Geteuid())
	}
	if err != nil {
		return config.Key{}, err
	}
	k, err := config.ParseKey(string(b))
	if err != nil {
		return config.Key{}, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}
