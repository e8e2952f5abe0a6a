package config

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"golang.org/x/crypto/curve25519"

	"github.com/skein-net/skein/dataplane"
)

// Key is a WireGuard (Curve25519) key.
type Key [32]byte

// String is the key in base64, as wg prints it.
func (k Key) String() string { return base64.StdEncoding.EncodeToString(k[:]) }

// Public derives the public key of a private key.
func (k Key) Public() Key {
	var pub Key
	p, err := curve25519.X25519(k[:], curve25519.Basepoint)
	if err == nil {
		copy(pub[:], p)
	}
	return pub
}

// ParseKey parses a base64 WireGuard key.
func ParseKey(s string) (Key, error) {
	var k Key
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil || len(b) != 32 {
		return k, fmt.Errorf("not a WireGuard key (32 bytes in base64, as wg genkey and wg pubkey print)")
	}
	copy(k[:], b)
	return k, nil
}

// Gateway is everything a running gateway needs.
type Gateway struct {
	// Dataplane is the packet path's configuration.
	Dataplane dataplane.Config

	// WireGuard: this gateway's key, its UDP port (0: any), the peer's key, where to reach the
	// peer (zero for a server, which learns it from the handshake), what the peer may send
	// from, and the keepalive (0: off).
	PrivateKey    Key
	ListenPort    uint16
	PeerPublicKey Key
	PeerEndpoint  netip.AddrPort
	AllowedIPs    []netip.Prefix
	Keepalive     int

	// TunnelIP and PeerTunnelIP are the two ends of the tunnel's /30; TunnelIP6 and
	// PeerTunnelIP6 their IPv6 addresses when the gateway carries IPv6 (else zero).
	TunnelIP, PeerTunnelIP   netip.Addr
	TunnelIP6, PeerTunnelIP6 netip.Addr
	// OverlayListen is where the overlay socket binds.
	OverlayListen netip.AddrPort

	ProbeInterval time.Duration
	ProbeFail     int

	HTTPListen  string
	Pprof       bool
	MemoryLimit int64 // bytes; 0 means none
	GCPercent   int   // GOGC; 0 leaves the runtime's default, -1 turns it off
	// Window is the most packets wireguard-go may hold per direction (dataplane.Window);
	// 0 means dataplane.DefaultWindow.
	Window int
}

// UAPI renders the whole WireGuard configuration in wireguard-go's UAPI "set" form.
func (g *Gateway) UAPI() string {
	var b strings.Builder
	fmt.Fprintf(&b, "private_key=%s\nlisten_port=%d\nreplace_peers=true\n", hex.EncodeToString(g.PrivateKey[:]), g.ListenPort)
	g.peerUAPI(&b)
	return b.String()
}

func (g *Gateway) peerUAPI(b *strings.Builder) {
	fmt.Fprintf(b, "public_key=%s\nreplace_allowed_ips=true\n", hex.EncodeToString(g.PeerPublicKey[:]))
	if g.PeerEndpoint.IsValid() {
		fmt.Fprintf(b, "endpoint=%s\n", g.PeerEndpoint)
	}
	fmt.Fprintf(b, "persistent_keepalive_interval=%d\n", g.Keepalive)
	for _, p := range g.AllowedIPs {
		fmt.Fprintf(b, "allowed_ip=%s\n", p)
	}
}

// PeerResetUAPI renders the removal and re-creation of the peer alone: wireguard-go forgets
// its sessions and its handshake rate limit (one initiation per 5 s), so a handshake can start
// at once. The device's key and port stay as they are.
func (g *Gateway) PeerResetUAPI() string {
	var b strings.Builder
	fmt.Fprintf(&b, "public_key=%s\nremove=true\n", hex.EncodeToString(g.PeerPublicKey[:]))
	g.peerUAPI(&b)
	return b.String()
}

// UAPIUpdate renders what changes from old to g, so that an established session survives
// changes that do not concern it: a new peer key replaces the peer, anything else updates it
// in place. It returns "" when nothing changes.
func (g *Gateway) UAPIUpdate(old *Gateway) string {
	if old == nil {
		return g.UAPI()
	}
	var b strings.Builder
	if g.PrivateKey != old.PrivateKey {
		fmt.Fprintf(&b, "private_key=%s\n", hex.EncodeToString(g.PrivateKey[:]))
	}
	if g.ListenPort != old.ListenPort {
		fmt.Fprintf(&b, "listen_port=%d\n", g.ListenPort)
	}
	switch {
	case g.PeerPublicKey != old.PeerPublicKey:
		fmt.Fprintf(&b, "replace_peers=true\n")
		g.peerUAPI(&b)
	case g.PeerEndpoint != old.PeerEndpoint || g.Keepalive != old.Keepalive || !slices.Equal(g.AllowedIPs, old.AllowedIPs):
		g.peerUAPI(&b)
	}
	return b.String()
}

// GenerateKey returns a new random WireGuard private key.
func GenerateKey() (Key, error) {
	var k Key
	if _, err := rand.Read(k[:]); err != nil {
		return k, err
	}
	k[0] &= 248
	k[31] = k[31]&127 | 64
	return k, nil
}

// Keys of a gateway's WireGuard key pair in its Secret (the gateway's status.secretRef).
const (
	SecretPrivateKey = "privateKey"
	SecretPublicKey  = "publicKey"
)

// KeySecretName names the Secret holding gateway's key pair, in the gateway's namespace:
// skein-controller creates it under this name, and the gateway may read that Secret alone (its
// Role grants it by name, so the gateway watches it by name).
func KeySecretName(gateway string) string { return gateway + "-wg-key" }
