package dataplane_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/curve25519"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"

	"github.com/skein-net/skein/dataplane"
	"github.com/skein-net/skein/dataplane/nat"
	"github.com/skein-net/skein/dataplane/overlaytest"
	"github.com/skein-net/skein/dataplane/packet"
	pt "github.com/skein-net/skein/dataplane/packet/packettest"
)

func wgKeys(t *testing.T) (priv, pub string) {
	var k [32]byte
	if _, err := rand.Read(k[:]); err != nil {
		t.Fatal(err)
	}
	k[0] &= 248
	k[31] = k[31]&127 | 64
	p, err := curve25519.X25519(k[:], curve25519.Basepoint)
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(k[:]), hex.EncodeToString(p)
}

func listenPort(t *testing.T, d *device.Device) string {
	s, err := d.IpcGet()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(s, "\n") {
		if p, ok := strings.CutPrefix(l, "listen_port="); ok {
			return p
		}
	}
	t.Fatalf("no listen_port in %q", s)
	return ""
}

// TestThroughWireguardGo is steps 3 and 4 of DESIGN.md's packet walk with stock wireguard-go
// engines (device.NewDevice on our tun.Device) talking over loopback: clusters A and B both use
// 10.244.0.0/16; A sees B's pods as 10.71.0.0/16, B sees A's as 10.72.0.0/16. A pod on A's
// node sends to 10.71.2.7 over A's overlay; B's node receives it from 10.72.1.5 for 10.244.2.7;
// the reply takes the mirror path.
func TestThroughWireguardGo(t *testing.T) {
	cfgA := baseConfig() // node1 hosts 10.244.1.0/24; 10.71/16 -> 10.244/16
	cfgB := baseConfig()
	cfgB.TunnelIP = addr("169.254.100.2")
	cfgB.Remote = []netip.Prefix{pfx("169.254.100.1/32")}
	cfgB.Local = []netip.Addr{addr("10.80.0.1"), addr("169.254.100.2")}
	cfgB.NAT = []nat.Pair{{From: pfx("10.72.0.0/16"), To: pfx("10.244.0.0/16")}}

	dpA, ovA := newDP(t, cfgA)
	dpB, ovB := newDP(t, cfgB)
	privA, pubA := wgKeys(t)
	privB, pubB := wgKeys(t)
	logger := device.NewLogger(device.LogLevelError, "wireguard-go: ")
	wgA := device.NewDevice(dpA, conn.NewDefaultBind(), logger)
	wgB := device.NewDevice(dpB, conn.NewDefaultBind(), logger)
	t.Cleanup(wgA.Close)
	t.Cleanup(wgB.Close)
	// AllowedIPs are the peer's real CIDRs (and its tunnel address).
	for _, c := range []struct {
		d         *device.Device
		priv, pub string
	}{{wgA, privA, pubB}, {wgB, privB, pubA}} {
		if err := c.d.IpcSet(fmt.Sprintf("private_key=%s\nlisten_port=0\npublic_key=%s\nallowed_ip=10.244.0.0/16\nallowed_ip=169.254.100.0/30\n", c.priv, c.pub)); err != nil {
			t.Fatal(err)
		}
		if err := c.d.Up(); err != nil {
			t.Fatal(err)
		}
	}
	if err := wgA.IpcSet(fmt.Sprintf("public_key=%s\nendpoint=127.0.0.1:%s\n", pubB, listenPort(t, wgB))); err != nil {
		t.Fatal(err)
	}
	if err := wgB.IpcSet(fmt.Sprintf("public_key=%s\nendpoint=127.0.0.1:%s\n", pubA, listenPort(t, wgA))); err != nil {
		t.Fatal(err)
	}

	// Node B's pods: put 10.244.2.0/24 on B's node2 as configured by baseConfig.
	req := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 6, DF: true,
		Payload: pt.TCP("10.244.1.5", "10.71.2.7", 40000, 80, packet.TCPFlagSYN, pt.MSSOption(1460), nil)}.Build()
	ovA.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv4, req), from1)
	got := waitSent(t, ovB)
	inner := decapSent(t, got, node2, node2MAC)
	if s, d := ip4(inner[12:16]), ip4(inner[16:20]); s != "10.72.1.5" || d != "10.244.2.7" {
		t.Fatalf("B's node received %s -> %s, want 10.72.1.5 -> 10.244.2.7", s, d)
	}
	if mss, _ := tcpMSS(inner); mss != dataplane.DefaultTunnelMTU-40 {
		t.Errorf("MSS %d at B's node, want %d", mss, dataplane.DefaultTunnelMTU-40)
	}
	checkSums(t, "at B's node", inner)
	if inner[8] != 62 {
		t.Errorf("TTL %d at B's node, want 62 (two gateways)", inner[8])
	}

	// The reply, from B's node (node2's kernel VTEP), back to A's pod.
	reply := pt.IPv4{Src: "10.244.2.7", Dst: "10.72.1.5", Proto: 6, DF: true,
		Payload: pt.TCP("10.244.2.7", "10.72.1.5", 80, 40000, packet.TCPFlagSYN|packet.TCPFlagACK, pt.MSSOption(1460), nil)}.Build()
	frame := vxlanFrame(gwMAC, packet.EtherTypeIPv4, reply)
	packet.PutEthernet(frame[8:], gwMAC, node2MAC, packet.EtherTypeIPv4)
	ovB.Push(frame, netip.AddrPortFrom(node2, 40002))
	back := decapSent(t, waitSent(t, ovA), node1, node1MAC)
	if s, d := ip4(back[12:16]), ip4(back[16:20]); s != "10.71.2.7" || d != "10.244.1.5" {
		t.Fatalf("A's node received %s -> %s, want 10.71.2.7 -> 10.244.1.5", s, d)
	}
	checkSums(t, "at A's node", back)
}

// waitSent waits for the dataplane to send one overlay datagram.
func waitSent(t *testing.T, c *overlaytest.Conn) overlaytest.Datagram {
	t.Helper()
	d, err := c.Receive(10 * time.Second)
	if err != nil {
		t.Fatal("nothing came out of the tunnel within 10s")
	}
	if more := c.TakeSent(); len(more) != 0 {
		t.Fatalf("%d datagrams sent, want 1", 1+len(more))
	}
	return d
}
