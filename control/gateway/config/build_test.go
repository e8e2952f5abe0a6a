package config_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/gateway/config"
	"github.com/skein-net/skein/dataplane"
	"github.com/skein-net/skein/dataplane/kernel"
	"github.com/skein-net/skein/dataplane/overlay"
)

func spec(server bool) config.Spec {
	k1, _ := config.ParseKey("wOQfw2x5vxkjlCxwLbHc3p9sD/k8BnX1kE9sQ4ZlV2w=")
	k2, _ := config.ParseKey("YAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=")
	s := config.Spec{Server: server, PrivateKey: k1, PeerPublicKey: k2.Public(),
		Remote:  []config.Remote{{Field: "pod", Real: netip.MustParsePrefix("10.244.0.0/16"), Seen: netip.MustParsePrefix("10.71.0.0/16")}},
		Overlay: config.Overlay{Listen: netip.MustParseAddr("192.168.77.2"), IP: netip.MustParseAddr("10.80.0.1")}}
	if server {
		s.ListenPort = netv1alpha1.DefaultPort
	} else {
		s.PeerEndpoint = netip.MustParseAddrPort("192.0.2.1:51820")
	}
	return s
}

func TestBuildDefaults(t *testing.T) {
	for _, server := range []bool{true, false} {
		g, err := config.Build(spec(server))
		if err != nil {
			t.Fatal(err)
		}
		dp := g.Dataplane
		wantKeepalive, tunnel, peer := 0, "169.254.100.1", "169.254.100.2"
		if !server {
			wantKeepalive, tunnel, peer = config.DefaultKeepalive, peer, tunnel
		}
		switch {
		case g.Keepalive != wantKeepalive:
			t.Errorf("server %v: keepalive %d, want %d", server, g.Keepalive, wantKeepalive)
		case g.TunnelIP.String() != tunnel || g.PeerTunnelIP.String() != peer:
			t.Errorf("server %v: tunnel %v peer %v", server, g.TunnelIP, g.PeerTunnelIP)
		case dp.TunnelMTU != netv1alpha1.DefaultMTU || dp.Overlay.VNI != netv1alpha1.DefaultVNI || dp.Overlay.Kind != overlay.VXLAN:
			t.Errorf("server %v: MTU %d VNI %d kind %v", server, dp.TunnelMTU, dp.Overlay.VNI, dp.Overlay.Kind)
		case g.OverlayListen.Port() != overlay.VXLAN.DefaultPort() || dp.OverlayPort != g.OverlayListen.Port():
			t.Errorf("server %v: overlay listen %v, nodes' port %d", server, g.OverlayListen, dp.OverlayPort)
		case dp.Overlay.MAC != overlay.GatewayMAC(dp.Overlay.IP) || !dp.CompleteChecksums:
			t.Errorf("server %v: MAC %v checksums %v", server, dp.Overlay.MAC, dp.CompleteChecksums)
		case g.ProbeInterval != config.DefaultProbeInterval || g.ProbeFail != config.DefaultProbeFail:
			t.Errorf("server %v: probe %v/%d", server, g.ProbeInterval, g.ProbeFail)
		case g.HTTPListen != config.DefaultHTTPListen || g.MemoryLimit != config.DefaultMemoryLimitMiB<<20 || g.GCPercent != config.DefaultGCPercent:
			t.Errorf("server %v: http %q memory %d gc %d", server, g.HTTPListen, g.MemoryLimit, g.GCPercent)
		case len(dp.NAT) != 1 || len(g.AllowedIPs) != 2 || g.AllowedIPs[1] != netip.MustParsePrefix("10.244.0.0/16"):
			t.Errorf("server %v: NAT %v allowed %v", server, dp.NAT, g.AllowedIPs)
		}
	}
	s := spec(false)
	off, vni := 0, uint32(7)
	s.Keepalive, s.Overlay.VNI, s.MemoryLimitMiB = &off, &vni, -1
	g, err := config.Build(s)
	if err != nil {
		t.Fatal(err)
	}
	if g.Keepalive != 0 || g.Dataplane.Overlay.VNI != 7 || g.MemoryLimit != 0 {
		t.Errorf("explicit keepalive 0, VNI 7 and no memory limit: got %d, %d, %d", g.Keepalive, g.Dataplane.Overlay.VNI, g.MemoryLimit)
	}
}

func TestBuildRefuses(t *testing.T) {
	cases := []struct {
		mut  func(*config.Spec)
		want string
	}{
		{func(s *config.Spec) { s.ListenPort = 0 }, "listenPort: a server needs a port"},
		{func(s *config.Spec) { s.PeerEndpoint = netip.MustParseAddrPort("192.0.2.1:1") }, "endpoint: a server does not dial"},
		{func(s *config.Spec) { s.PeerPublicKey = config.Key{} }, "peerPublicKey: required"},
		{func(s *config.Spec) { s.TunnelCIDR = netip.MustParsePrefix("169.254.100.0/31") }, "tunnelCIDR: 169.254.100.0/31"},
		{func(s *config.Spec) { s.Remote[0].Seen = netip.MustParsePrefix("10.71.0.0/24") }, "pod: 10.71.0.0/24 must have the length of 10.244.0.0/16"},
		{func(s *config.Spec) { s.Remote[0].Real = netip.MustParsePrefix("10.244.0.1/16") }, "pod: 10.244.0.1/16 is not an IPv4 or IPv6 CIDR"},
		{func(s *config.Spec) { s.Remote[0].Real = netip.MustParsePrefix("::ffff:10.244.0.0/112") }, "pod: ::ffff:10.244.0.0/112 is not an IPv4 or IPv6 CIDR"},
		{func(s *config.Spec) { s.Remote[0].Seen = netip.MustParsePrefix("fd71::/112") }, "pod: fd71::/112 is IPv6 and 10.244.0.0/16 IPv4: want two CIDRs of one family"},
		{func(s *config.Spec) { s.Remote = append(s.Remote, remote("fd00:244::/48", "64:ff9b:1::/48")) }, "64:ff9b:1::/48 overlaps ::/8"},
		{func(s *config.Spec) { s.Remote = append(s.Remote, remote("fe80::/64", "")) }, "fe80::/64 overlaps fe80::/10"},
		{func(s *config.Spec) { s.Remote = append(s.Remote, remote("::/0", "")) }, "::/0 is a default route"},
		{func(s *config.Spec) { s.Remote = append(s.Remote, remote("fd00:244::/48", "fd71::/64")) }, "fd71::/64 must have the length of fd00:244::/48"},
		{func(s *config.Spec) {
			s.Nodes = []dataplane.Node{{Name: "a", VTEP: netip.MustParseAddr("192.168.77.5"), MAC: [6]byte{2, 0, 0, 0, 0, 1}, PodCIDRs: []netip.Prefix{netip.MustParsePrefix("64:ff9b:1::/104")}}}
		}, "nodes[0].podCIDRs[0]: 64:ff9b:1::/104 overlaps 64:ff9b:1::/96"},
		{func(s *config.Spec) {
			s.Remote = append(s.Remote, remote("fd00:244::/48", "fd71::/48"))
			s.Nodes = []dataplane.Node{{Name: "a", VTEP: netip.MustParseAddr("192.168.77.5"), MAC: [6]byte{2, 0, 0, 0, 0, 1}, PodCIDRs: []netip.Prefix{netip.MustParsePrefix("fd71:0:0:1::/64")}}}
		}, "fd71::/48 overlaps nodes[0]'s pod CIDR fd71:0:0:1::/64"},
		{func(s *config.Spec) {
			s.Remote = append(s.Remote, remote("fd00:244::/48", "fd71::/48"))
			s.TunnelMTU = 1200
		}, "IPv6 needs links of at least 1280 bytes"},
		{func(s *config.Spec) { s.Overlay.Listen = netip.Addr{} }, "overlay.listen"},
		{func(s *config.Spec) { v := uint32(1 << 24); s.Overlay.VNI = &v }, "overlay.vni"},
		{func(s *config.Spec) { s.RequireNodes = true }, "nodes: at least one"},
		{func(s *config.Spec) { s.ProbeInterval = time.Millisecond }, "probe.interval: 1ms"},
		{func(s *config.Spec) { s.Window = config.MaxWindow + 1 }, "window: 16385"},
		{func(s *config.Spec) { s.MemoryLimitMiB = -2 }, "memoryLimitMiB: -2"},
		{func(s *config.Spec) { s.TunnelMTU = 100 }, "tunnel MTU 100"},
		{func(s *config.Spec) { s.PeerPublicKey = s.PrivateKey.Public() }, "peerPublicKey: is this gateway's own public key"},
		// The tunnel, the peer's networks, the overlay and the local pods kept apart (attack review).
		{func(s *config.Spec) { s.TunnelCIDR = netip.MustParsePrefix("0.0.0.0/0") }, "tunnelCIDR: 0.0.0.0/0 holds the gateway's overlay address"},
		{func(s *config.Spec) { s.TunnelCIDR = netip.MustParsePrefix("10.71.4.0/30") }, "tunnelCIDR: 10.71.4.0/30 overlaps pod 10.71.0.0/16"},
		{func(s *config.Spec) { s.TunnelCIDR = netip.MustParsePrefix("192.168.77.0/30") }, "tunnelCIDR: 192.168.77.0/30 holds the gateway's underlay address"},
		{func(s *config.Spec) {
			s.Nodes = []dataplane.Node{{VTEP: netip.MustParseAddr("192.168.77.9"), PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.71.1.0/24")}}}
		}, "pod: 10.71.0.0/16 overlaps nodes[0]'s pod CIDR 10.71.1.0/24"},
		{func(s *config.Spec) { s.Remote[0].Seen = netip.MustParsePrefix("10.80.0.0/16") }, "pod: 10.80.0.0/16 holds the gateway's overlay address 10.80.0.1"},
		{func(s *config.Spec) { s.Nodes = []dataplane.Node{{VTEP: netip.MustParseAddr("224.0.0.5")}} }, "nodes[0].vtep: 224.0.0.5 is not a node's unicast"},
		{func(s *config.Spec) { s.Nodes = []dataplane.Node{{VTEP: netip.MustParseAddr("192.168.77.2")}} }, "nodes[0].vtep: 192.168.77.2 is the gateway's own address"},
		{func(s *config.Spec) { s.Overlay.Listen = netip.MustParseAddr("0.0.0.0") }, "overlay.listen: 0.0.0.0"},
		{func(s *config.Spec) { s.Remote[0].Seen = netip.MustParsePrefix("169.254.0.0/16") }, "pod: 169.254.0.0/16 overlaps 169.254.0.0/16 (link-local"},
		{func(s *config.Spec) {
			s.Remote[0].Real, s.Remote[0].Seen = netip.MustParsePrefix("0.0.0.0/0"), netip.Prefix{}
		}, "pod: 0.0.0.0/0 is a default route"},
		{func(s *config.Spec) {
			s.Remote[0].Real, s.Remote[0].Seen = netip.MustParsePrefix("192.168.0.0/16"), netip.Prefix{}
		}, "pod: 192.168.0.0/16 holds the gateway's underlay address 192.168.77.2"},
		{func(s *config.Spec) { s.Remote[0].Seen = netip.MustParsePrefix("192.168.0.0/16") }, "pod: 192.168.0.0/16 holds the gateway's underlay address"},
		{func(s *config.Spec) {
			s.Nodes = []dataplane.Node{{Name: "a", VTEP: netip.MustParseAddr("10.71.9.9"), MAC: [6]byte{2, 0, 0, 0, 0, 1}}}
		}, "pod: 10.71.0.0/16 holds nodes[0]'s VTEP 10.71.9.9"},
		{func(s *config.Spec) {
			s.Nodes = []dataplane.Node{{Name: "a", VTEP: netip.IPv4Unspecified(), MAC: [6]byte{2, 0, 0, 0, 0, 1}}}
		}, "nodes[0].vtep: 0.0.0.0"},
		{func(s *config.Spec) {
			n := dataplane.Node{Name: "a", VTEP: netip.MustParseAddr("192.168.77.5"), MAC: [6]byte{2, 0, 0, 0, 0, 1}}
			s.Nodes = []dataplane.Node{n, n}
		}, "nodes[1].vtep: 192.168.77.5 is also nodes[0]'s"},
		{func(s *config.Spec) { s.MemoryLimitMiB = 1 << 44 }, "memoryLimitMiB: 17592186044416 MiB is more than a PiB"},
		{func(s *config.Spec) {
			s.Server, s.ListenPort, s.PeerEndpoint = false, 0, netip.MustParseAddrPort("192.0.2.1:0")
		}, "endpoint: 192.0.2.1:0"},
		// This site's pods presented to the peer under another prefix.
		{func(s *config.Spec) { s.Local = []config.Local{local("10.244.0.0/16", "10.99.0.0/24")} }, "local.remappedPodCIDR: 10.99.0.0/24 must have the length of 10.244.0.0/16"},
		{func(s *config.Spec) {
			s.Local = []config.Local{local("10.244.0.0/16", "10.244.0.0/16"), local("10.244.1.0/24", "")}
		}, "local.podCIDR: 10.244.1.0/24 overlaps 10.244.0.0/16"},
		{func(s *config.Spec) { s.Local = []config.Local{local("10.244.0.0/16", "10.71.0.0/16")} }, "local.remappedPodCIDR: 10.71.0.0/16 overlaps pod 10.71.0.0/16: the peer could not tell"},
		{func(s *config.Spec) { s.Local = []config.Local{local("10.1.0.0/16", "10.244.0.0/16")} }, "local.remappedPodCIDR: 10.244.0.0/16 overlaps pod 10.244.0.0/16"},
		{func(s *config.Spec) { s.Local = []config.Local{local("10.244.0.0/16", "169.254.0.0/16")} }, "local.remappedPodCIDR: 169.254.0.0/16 overlaps 169.254.0.0/16"},
		{func(s *config.Spec) { s.Local = []config.Local{local("10.244.0.0/16", "192.168.0.0/16")} }, "local.remappedPodCIDR: 192.168.0.0/16 holds the gateway's overlay or underlay address"},
		{func(s *config.Spec) { s.Local = []config.Local{local("10.244.0.0/16", "0.0.0.0/0")} }, "local.remappedPodCIDR: 0.0.0.0/0 must have the length"},
		{func(s *config.Spec) {
			s.Local = []config.Local{local("10.244.0.0/16", "10.99.0.0/16")}
			s.Nodes = []dataplane.Node{{Name: "a", VTEP: netip.MustParseAddr("192.168.77.5"), MAC: [6]byte{2, 0, 0, 0, 0, 1}, PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.245.1.0/24")}}}
		}, "nodes[0].podCIDRs[0]: 10.245.1.0/24 is outside local.podCIDR 10.244.0.0/16"},
		{func(s *config.Spec) {
			s.Local = []config.Local{local("10.244.1.0/24", "")}
			s.Nodes = []dataplane.Node{{Name: "a", VTEP: netip.MustParseAddr("192.168.77.5"), MAC: [6]byte{2, 0, 0, 0, 0, 1}, PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}}}
		}, "nodes[0].podCIDRs[0]: 10.244.0.0/16 is outside local.podCIDR 10.244.1.0/24"},
	}
	for _, tc := range cases {
		s := spec(true)
		tc.mut(&s)
		_, err := config.Build(s)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want an error containing %q", err, tc.want)
		}
	}
}

func remote(real, seen string) config.Remote {
	r := config.Remote{Field: "remote " + real, Real: netip.MustParsePrefix(real)}
	if seen != "" {
		r.Seen = netip.MustParsePrefix(seen)
	}
	return r
}

// TestBuildDualStack: a gateway with an IPv6 network of the peer's and IPv6 pods of its own
// routes both families: the IPv6 pairs and routes are the dataplane's, WireGuard accepts both
// families from the peer, and the gateway has an IPv6 address in the tunnel and on the overlay
// (its IPv4 ones inside 64:ff9b:1::/96), which the netstack owns and the ICMPv6 errors leave
// from. An IPv4-only gateway has none of them.
func TestBuildDualStack(t *testing.T) {
	for _, server := range []bool{true, false} {
		s := spec(server)
		s.Remote = append(s.Remote, remote("fd00:244::/48", "fd71::/48"), remote("fd00:96::/112", ""))
		s.Nodes = []dataplane.Node{{Name: "a", VTEP: netip.MustParseAddr("192.168.77.5"), MAC: [6]byte{2, 0, 0, 0, 0, 1},
			PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:244:0:1::/64")}}}
		g, err := config.Build(s)
		if err != nil {
			t.Fatal(err)
		}
		dp := g.Dataplane
		tunnel, peer := "64:ff9b:1::a9fe:6401", "64:ff9b:1::a9fe:6402"
		if !server {
			tunnel, peer = peer, tunnel
		}
		if g.TunnelIP6.String() != tunnel || g.PeerTunnelIP6.String() != peer || dp.TunnelIP6 != g.TunnelIP6 {
			t.Errorf("server %v: tunnel IPv6 %v, peer %v, dataplane's %v; want %s and %s", server, g.TunnelIP6, g.PeerTunnelIP6, dp.TunnelIP6, tunnel, peer)
		}
		if dp.OverlayIP6.String() != "64:ff9b:1::a50:1" {
			t.Errorf("overlay IPv6 %v, want 64:ff9b:1::a50:1 (10.80.0.1 inside 64:ff9b:1::/96)", dp.OverlayIP6)
		}
		want := []string{"10.80.0.1", "169.254.100.1", "64:ff9b:1::a50:1", "64:ff9b:1::a9fe:6401"}
		if !server {
			want[1], want[3] = "169.254.100.2", "64:ff9b:1::a9fe:6402"
		}
		if got := fmtList(dp.Local); got != strings.Join(want, " ") {
			t.Errorf("local addresses %s, want %s", got, strings.Join(want, " "))
		}
		if got, want := fmtList(g.AllowedIPs), "169.254.100.2/32 "+peer+"/128 10.244.0.0/16 fd00:244::/48 fd00:96::/112"; server && got != want {
			t.Errorf("allowed IPs %s, want %s", got, want)
		}
		if got := fmtList(dp.NAT); got != "10.71.0.0/16->10.244.0.0/16 fd71::/48->fd00:244::/48" {
			t.Errorf("NAT %s", got)
		}
		if got := fmtList(dp.Remote); !strings.Contains(got, peer+"/128") || !strings.Contains(got, "fd00:96::/112") {
			t.Errorf("routes into the tunnel %s: want the peer's tunnel IPv6 address and the NAT-less IPv6 network", got)
		}
	}
	g, err := config.Build(spec(true))
	if err != nil {
		t.Fatal(err)
	}
	if dp := g.Dataplane; g.TunnelIP6.IsValid() || dp.TunnelIP6.IsValid() || dp.OverlayIP6.IsValid() || len(dp.Local) != 2 {
		t.Errorf("an IPv4-only gateway has IPv6 addresses: %v %v %v", g.TunnelIP6, dp.OverlayIP6, dp.Local)
	}
	// IPv6 pods of its own alone make a gateway dual-stack (the peer routes them to it).
	s := spec(true)
	s.Nodes = []dataplane.Node{{Name: "a", VTEP: netip.MustParseAddr("192.168.77.5"), MAC: [6]byte{2, 0, 0, 0, 0, 1}, Pods: []netip.Addr{netip.MustParseAddr("fd00:244::5")}}}
	if g, err = config.Build(s); err != nil || !g.TunnelIP6.IsValid() {
		t.Errorf("a gateway with an IPv6 pod: %v, tunnel IPv6 %v", err, g.TunnelIP6)
	}
}

func fmtList[T any](l []T) string {
	var out []string
	for _, x := range l {
		out = append(out, fmt.Sprint(x))
	}
	return strings.Join(out, " ")
}

func local(real, presented string) config.Local {
	l := config.Local{Field: "local.podCIDR", PresentedField: "local.remappedPodCIDR", Real: netip.MustParsePrefix(real)}
	if presented != "" {
		l.Presented = netip.MustParsePrefix(presented)
	}
	return l
}

// TestBuildLocal: this site's pods presented to the peer under another prefix become the
// dataplane's LocalNAT; presented as they are, or only named, they add no translation.
func TestBuildLocal(t *testing.T) {
	s := spec(true)
	s.Nodes = []dataplane.Node{{Name: "a", VTEP: netip.MustParseAddr("192.168.77.5"), MAC: [6]byte{2, 0, 0, 0, 0, 1}, PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}}}
	s.Local = []config.Local{local("10.244.0.0/16", "10.99.0.0/16")}
	g, err := config.Build(s)
	if err != nil {
		t.Fatal(err)
	}
	if l := g.Dataplane.LocalNAT; len(l) != 1 || l[0].From.String() != "10.244.0.0/16" || l[0].To.String() != "10.99.0.0/16" {
		t.Errorf("LocalNAT %v, want 10.244.0.0/16->10.99.0.0/16", l)
	}
	for _, same := range []string{"", "10.244.0.0/16"} {
		s.Local = []config.Local{local("10.244.0.0/16", same)}
		if g, err = config.Build(s); err != nil || len(g.Dataplane.LocalNAT) != 0 {
			t.Errorf("presented as %q: LocalNAT %v, %v; want none", same, g.Dataplane.LocalNAT, err)
		}
	}
}

func TestJoinDropsWhatTheFrontEndNamed(t *testing.T) {
	s := spec(true)
	s.PrivateKey, s.Overlay.Listen, s.Window = config.Key{}, netip.Addr{}, -1
	_, err := config.Build(s)
	err = config.Join([]string{"privateKeyFile: open /x: no such file", "overlay.listen: \"nowhere\": want an address"}, err)
	msg := err.Error()
	if strings.Contains(msg, "privateKey: required") || strings.Count(msg, "overlay.listen") != 1 || !strings.Contains(msg, "window: -1") || !strings.Contains(msg, "privateKeyFile: open") {
		t.Errorf("joined:\n%s", msg)
	}
	if config.Join(nil, nil) != nil {
		t.Error("nothing wrong joined into an error")
	}
}

// TestDefaultsAgree: the packages below control (which may not import the API package) keep
// their own copies of two spec values; they must not drift from the spec's.
func TestDefaultsAgree(t *testing.T) {
	if dataplane.DefaultTunnelMTU != netv1alpha1.DefaultMTU {
		t.Errorf("dataplane.DefaultTunnelMTU %d, spec %d", dataplane.DefaultTunnelMTU, netv1alpha1.DefaultMTU)
	}
	if kernel.Table != netv1alpha1.RouteTable {
		t.Errorf("kernel.Table %d, spec %d", kernel.Table, netv1alpha1.RouteTable)
	}
}

// TestBuildIPv6Underlay: an IPv6-only cluster's gateway listens on its IPv6 pod address for
// nodes with IPv6 VTEPs, and its overlay MTU allows for the outer IPv6 header; a node VTEP of
// the other family is refused.
func TestBuildIPv6Underlay(t *testing.T) {
	s := spec(true)
	s.Remote = []config.Remote{remote("fd00:244::/48", "fd71::/48")}
	s.Overlay.Listen = netip.MustParseAddr("fd00:77::2")
	s.Nodes = []dataplane.Node{{Name: "a", VTEP: netip.MustParseAddr("fd00:77::5"), MAC: [6]byte{2, 0, 0, 0, 0, 1},
		PodCIDRs: []netip.Prefix{netip.MustParsePrefix("fd00:244:0:1::/64")}}}
	g, err := config.Build(s)
	if err != nil {
		t.Fatal(err)
	}
	if g.OverlayListen.String() != "[fd00:77::2]:4789" || g.Dataplane.OverlayMTU != 1500-overlay.Overhead6 {
		t.Errorf("overlay listen %v, MTU %d; want [fd00:77::2]:4789 and %d", g.OverlayListen, g.Dataplane.OverlayMTU, 1500-overlay.Overhead6)
	}
	s.Nodes[0].VTEP = netip.MustParseAddr("192.168.77.5")
	if _, err := config.Build(s); err == nil || !strings.Contains(err.Error(), "nodes[0].vtep: 192.168.77.5 is not of the family of the gateway's underlay address fd00:77::2") {
		t.Errorf("an IPv4 VTEP beside an IPv6 underlay: %v", err)
	}
}
