//go:build linux

package dataplane_test

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/skein-net/skein/dataplane"
	"github.com/skein-net/skein/dataplane/kernel"
	"github.com/skein-net/skein/dataplane/nat"
	"github.com/skein-net/skein/dataplane/overlay"
	"github.com/skein-net/skein/dataplane/packet"
	pt "github.com/skein-net/skein/dataplane/packet/packettest"
	"github.com/skein-net/skein/dataplane/udp"
	"github.com/skein-net/skein/internal/netnstest"
)

// kernelNode is a node namespace with a kernel overlay device towards a gateway namespace,
// as skein-agent sets it up: underlay 192.168.77.0/24 on a veth, the overlay device with
// 10.80.0.11/16, a pod address 10.244.1.5 on its loopback, and the remote cluster's
// remapped pod CIDR 10.71.0.0/16 routed via the gateway's overlay IP 10.80.0.1.
type kernelNode struct {
	node, gw *netnstest.NS
	mac      packet.MAC
}

const (
	nodeUnderlay = "192.168.77.1"
	gwUnderlay   = "192.168.77.2"
)

func newKernelNode(t *testing.T, kind overlay.Kind, staticNeighbour bool) *kernelNode {
	netnstest.RequireRoot(t)
	k := &kernelNode{node: netnstest.New(t, "node"), gw: netnstest.New(t, "gw")}
	n, g := k.node, k.gw
	n.Run(t, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", g.Name)
	n.Run(t, "ip", "addr", "add", nodeUnderlay+"/24", "dev", "eth0")
	n.Run(t, "ip", "link", "set", "eth0", "up")
	g.Run(t, "ip", "addr", "add", gwUnderlay+"/24", "dev", "eth0")
	g.Run(t, "ip", "link", "set", "eth0", "up")

	switch kind {
	case overlay.VXLAN:
		n.Run(t, "ip", "link", "add", "liqo.vxlan", "type", "vxlan", "id", "200", "dstport", "4789", "local", nodeUnderlay, "nolearning")
		// Broadcast (ARP) and the gateway's MAC both go to the gateway's VTEP.
		n.Run(t, "bridge", "fdb", "append", "00:00:00:00:00:00", "dev", "liqo.vxlan", "dst", gwUnderlay)
		n.Run(t, "bridge", "fdb", "append", overlay.MACString(gwMAC), "dev", "liqo.vxlan", "dst", gwUnderlay)
	case overlay.Geneve:
		if out, err := n.Try("ip", "link", "add", "liqo.vxlan", "type", "geneve", "id", "200", "remote", gwUnderlay, "dstport", "6081"); err != nil {
			t.Skipf("the kernel has no Geneve support (CONFIG_GENEVE, module geneve): %s", strings.TrimSpace(out))
		}
	}
	// As skein-agent does: no TX checksum offload on the overlay device, or inner checksums
	// reach the gateway unfinished over the veth.
	if err := n.Do(func() error { return kernel.SetTxChecksum("liqo.vxlan", false) }); err != nil {
		t.Fatal(err)
	}
	n.Run(t, "ip", "link", "set", "liqo.vxlan", "mtu", "1450", "up")
	n.Run(t, "ip", "addr", "add", "10.80.0.11/16", "dev", "liqo.vxlan")
	n.Run(t, "ip", "addr", "add", "10.244.1.5/32", "dev", "lo") // the pod's address (no dummy driver here)
	n.Run(t, "ip", "route", "add", "10.71.0.0/16", "via", "10.80.0.1", "dev", "liqo.vxlan", "onlink")
	if staticNeighbour {
		n.Run(t, "ip", "neigh", "replace", "10.80.0.1", "lladdr", overlay.MACString(gwMAC), "dev", "liqo.vxlan", "nud", "permanent")
	}
	out := n.Run(t, "cat", "/sys/class/net/liqo.vxlan/address")
	mac, err := overlay.ParseMAC(strings.TrimSpace(out))
	if err != nil {
		t.Fatal(err)
	}
	k.mac = mac
	return k
}

// gateway starts a dataplane on a socket inside the gateway namespace, and a stand-in for the
// remote cluster behind the tunnel: it answers UDP echo (port 7) to 10.244.2.7, as wireguard-go
// would deliver it, by writing the reply back out of the tunnel.
func (k *kernelNode) gateway(t *testing.T, kind overlay.Kind) (*dataplane.Dataplane, <-chan packet.IPv4) {
	return k.gatewayWith(t, kind, nil)
}

// gatewayWith is gateway with the config changed by mut (nil: unchanged). Its stand-in
// answers UDP echo to fd00:244:0:2::7 as well; seen gets the IPv4 packets only.
func (k *kernelNode) gatewayWith(t *testing.T, kind overlay.Kind, mut func(*dataplane.Config)) (*dataplane.Dataplane, <-chan packet.IPv4) {
	var conn *udp.Conn
	if err := k.gw.Do(func() (err error) {
		conn, err = udp.Listen(netip.AddrPortFrom(netip.MustParseAddr(gwUnderlay), kind.DefaultPort()), 0)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	cfg := dataplane.Config{
		Overlay:  overlay.Config{Kind: kind, VNI: 200, MAC: gwMAC, IP: netip.MustParseAddr("10.80.0.1")},
		TunnelIP: netip.MustParseAddr("169.254.100.1"),
		NAT:      []nat.Pair{{From: pfx("10.71.0.0/16"), To: pfx("10.244.0.0/16")}},
		Nodes:    []dataplane.Node{{Name: "node", VTEP: netip.MustParseAddr(nodeUnderlay), MAC: k.mac, PodCIDRs: []netip.Prefix{pfx("10.244.1.0/24")}}},
		Local:    []netip.Addr{netip.MustParseAddr("10.80.0.1")},
	}
	if mut != nil {
		mut(&cfg)
	}
	dp, err := dataplane.New(cfg, conn)
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan packet.IPv4, 64)
	done := make(chan struct{})
	t.Cleanup(func() {
		dp.Close()
		<-done
	})
	go func() {
		defer close(done)
		bufs := make([][]byte, dp.BatchSize())
		for i := range bufs {
			bufs[i] = make([]byte, 65535)
		}
		sizes := make([]int, len(bufs))
		for {
			n, err := dp.Read(bufs, sizes, offset)
			if err != nil {
				if !errors.Is(err, os.ErrClosed) {
					t.Errorf("Read: %v", err)
				}
				return
			}
			for i := range n {
				if sizes[i] == 0 {
					continue
				}
				pkt := append([]byte(nil), bufs[i][offset:offset+sizes[i]]...)
				if pkt[0]>>4 == 6 {
					echo6(dp, pkt)
					continue
				}
				ip := packet.IPv4(pkt)
				select {
				case seen <- ip:
				default:
				}
				if ip.Protocol() != packet.ProtoUDP || ip.DstAddr().String() != "10.244.2.7" {
					continue
				}
				u := packet.UDP(ip.Payload())
				if u.DstPort() != 7 {
					continue
				}
				reply := pt.IPv4{Src: "10.244.2.7", Dst: ip.SrcAddr().String(), Proto: 17,
					Payload: pt.UDP("10.244.2.7", ip.SrcAddr().String(), 7, u.SrcPort(), u.Payload(), false)}.Build()
				dp.Write([][]byte{append(make([]byte, offset), reply...)}, offset)
			}
		}
	}()
	return dp, seen
}

// echo6 answers a UDP echo (port 7) to fd00:244:0:2::7 out of the tunnel, as the remote
// cluster's pod would.
func echo6(dp *dataplane.Dataplane, pkt []byte) {
	ip := packet.IPv6(pkt)
	if ip.NextHeader() != packet.ProtoUDP || ip.DstAddr().String() != "fd00:244:0:2::7" {
		return
	}
	u := packet.UDP(ip.Payload())
	if u.DstPort() != 7 {
		return
	}
	src := ip.SrcAddr().String()
	reply := pt.IPv6{Src: "fd00:244:0:2::7", Dst: src, Next: 17, Payload: pt.UDP("fd00:244:0:2::7", src, 7, u.SrcPort(), u.Payload(), false)}.Build()
	dp.Write([][]byte{append(make([]byte, offset), reply...)}, offset)
}

// echo sends msg from the pod address to 10.71.2.7:7 in the node namespace and waits for the
// echo, retrying while the kernel resolves the gateway's MAC.
func (k *kernelNode) echo(t *testing.T, msg string) {
	t.Helper()
	var c *net.UDPConn
	if err := k.node.Do(func() (err error) {
		c, err = net.DialUDP("udp4", &net.UDPAddr{IP: net.ParseIP("10.244.1.5"), Port: 9000}, &net.UDPAddr{IP: net.ParseIP("10.71.2.7"), Port: 7})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 2000)
	for attempt := range 5 {
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(time.Second))
		n, err := c.Read(buf)
		if err == nil {
			if string(buf[:n]) != msg {
				t.Fatalf("echo %q, want %q", buf[:n], msg)
			}
			return
		}
		t.Logf("attempt %d: %v", attempt, err)
	}
	t.Fatal("no echo through the gateway and the kernel overlay device")
}

func testKernelInterop(t *testing.T, kind overlay.Kind) {
	for _, static := range []bool{true, false} {
		name := "static neighbour"
		if !static {
			name = "kernel resolves the gateway by ARP"
		}
		t.Run(name, func(t *testing.T) {
			k := newKernelNode(t, kind, static)
			dp, seen := k.gateway(t, kind)
			k.echo(t, "through the kernel's "+kind.String()+" device and back")
			// The remote side saw the pod's real address and its own real address.
			select {
			case ip := <-seen:
				if ip.SrcAddr().String() != "10.244.1.5" || ip.DstAddr().String() != "10.244.2.7" {
					t.Errorf("into the tunnel %v -> %v, want 10.244.1.5 -> 10.244.2.7", ip.SrcAddr(), ip.DstAddr())
				}
				if p := pt.Problem(ip); p != "" {
					t.Error(p)
				}
			default:
				t.Error("nothing went into the tunnel")
			}
			// Counters are added when a batch is done, which may trail the echo a little.
			c := dp.Counters()
			for i := 0; i < 100 && c.Get(dataplane.FromTunnel, dataplane.Forwarded) == 0; i++ {
				time.Sleep(10 * time.Millisecond)
				c = dp.Counters()
			}
			if c.Get(dataplane.ToTunnel, dataplane.Forwarded) == 0 || c.Get(dataplane.FromTunnel, dataplane.Forwarded) == 0 {
				t.Errorf("counters to-tunnel %v from-tunnel %v", c[dataplane.ToTunnel], c[dataplane.FromTunnel])
			}
			if !static && c.Get(dataplane.ToTunnel, dataplane.ARPReplied) == 0 {
				t.Errorf("the kernel reached the gateway without ARP: %v", c[dataplane.ToTunnel])
			}
			if static {
				return
			}
			// Path MTU discovery across the gateway: a 1400-byte DF datagram exceeds the
			// tunnel MTU (1340); the gateway answers fragmentation needed and the kernel
			// lowers the path MTU to 10.71.2.7.
			if mtu := k.pathMTU(t, 1400); mtu != dataplane.DefaultTunnelMTU {
				t.Errorf("path MTU after a 1400-byte DF datagram: %d, want %d", mtu, dataplane.DefaultTunnelMTU)
			}
			if c := dp.Counters(); c.Get(dataplane.ToTunnel, dataplane.DropTooBig) == 0 || c.Get(dataplane.ToTunnel, dataplane.ICMPSent) == 0 {
				t.Errorf("counters %v", c[dataplane.ToTunnel])
			}
		})
	}
}

// pathMTU sends a size-byte datagram with DF from the pod address and returns the kernel's
// path MTU for the destination once it drops below the device MTU (or after 3 s).
func (k *kernelNode) pathMTU(t *testing.T, size int) int {
	var c *net.UDPConn
	if err := k.node.Do(func() (err error) {
		c, err = net.DialUDP("udp4", &net.UDPAddr{IP: net.ParseIP("10.244.1.5"), Port: 9001}, &net.UDPAddr{IP: net.ParseIP("10.71.2.7"), Port: 9})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw, _ := c.SyscallConn()
	setsock := func(fn func(fd int)) {
		if err := raw.Control(func(fd uintptr) { fn(int(fd)) }); err != nil {
			t.Fatal(err)
		}
	}
	setsock(func(fd int) { unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO) })
	mtu := 0
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := c.Write(make([]byte, size-28)); err != nil && !errors.Is(err, syscall.EMSGSIZE) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		setsock(func(fd int) { mtu, _ = unix.GetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU) })
		if mtu < 1450 {
			break
		}
	}
	return mtu
}

// TestKernelVXLANInterop: frames from the kernel's VXLAN device are decapsulated by our VTEP
// and frames from our VTEP are decapsulated by the kernel (UDP echo through both), the
// kernel's ARP is answered, and fragmentation needed from the gateway lowers the kernel's
// path MTU.
func TestKernelVXLANInterop(t *testing.T) { testKernelInterop(t, overlay.VXLAN) }

// TestKernelGeneveInterop is the same with Geneve; it skips where the kernel has no Geneve
// (our Geneve is also checked against gopacket's decoder in package overlay).
func TestKernelGeneveInterop(t *testing.T) { testKernelInterop(t, overlay.Geneve) }

// TestKernelIPv6Interop: IPv6 between a pod behind the kernel's VXLAN device and the remote
// cluster, through the gateway (the inner frames' EtherType IPv6 both ways, the peer's clashing
// fd00:244::/56 seen here as fd71::/56); the gateway's ICMPv6 errors as the kernel takes them:
// a Packet Too Big lowers its path MTU to the tunnel's, and a Time Exceeded for a hop limit of 1
// reaches the sending socket's error queue from the gateway's overlay address.
func TestKernelIPv6Interop(t *testing.T) {
	k := newKernelNode(t, overlay.VXLAN, true)
	n := k.node
	n.Run(t, "ip", "-6", "addr", "add", "fd80::11/64", "dev", "liqo.vxlan", "nodad")
	n.Run(t, "ip", "-6", "addr", "add", "fd00:244:0:1::5/128", "dev", "lo", "nodad")
	n.Run(t, "ip", "-6", "neigh", "replace", "fd80::1", "lladdr", overlay.MACString(gwMAC), "dev", "liqo.vxlan", "nud", "permanent")
	n.Run(t, "ip", "-6", "route", "add", "fd71::/56", "via", "fd80::1", "dev", "liqo.vxlan", "onlink")
	dp, _ := k.gatewayWith(t, overlay.VXLAN, func(c *dataplane.Config) {
		c.NAT = append(c.NAT, nat.Pair{From: pfx("fd71::/56"), To: pfx("fd00:244::/56")})
		c.Nodes[0].PodCIDRs = append(c.Nodes[0].PodCIDRs, pfx("fd00:244:0:1::/64"))
		c.OverlayIP6, c.TunnelIP6 = netip.MustParseAddr("fd80::1"), netip.MustParseAddr("fd99::1")
	})
	var conn *net.UDPConn
	if err := n.Do(func() (err error) {
		conn, err = net.DialUDP("udp6", &net.UDPAddr{IP: net.ParseIP("fd00:244:0:1::5"), Port: 9000}, &net.UDPAddr{IP: net.ParseIP("fd71:0:0:2::7"), Port: 7})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	raw, _ := conn.SyscallConn()
	setsock := func(fn func(fd int) error) {
		t.Helper()
		var ferr error
		if err := raw.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil || ferr != nil {
			t.Fatal(err, ferr)
		}
	}

	// Echo through the kernel's VXLAN device, the gateway, the "tunnel" and back.
	buf := make([]byte, 2000)
	echoed := false
	for attempt := 0; attempt < 5 && !echoed; attempt++ {
		if _, err := conn.Write([]byte("ipv6 through the kernel's vxlan device")); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(time.Second))
		if m, err := conn.Read(buf); err == nil && string(buf[:m]) == "ipv6 through the kernel's vxlan device" {
			echoed = true
		}
	}
	if !echoed {
		t.Fatal("no IPv6 echo through the gateway and the kernel's VXLAN device")
	}

	// Path MTU: a 1400-byte datagram, not to be fragmented, exceeds the tunnel MTU; the
	// gateway's Packet Too Big makes the kernel lower the path MTU to 1340.
	setsock(func(fd int) error {
		return unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO)
	})
	mtu := 0
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		if _, err := conn.Write(make([]byte, 1400-48)); err != nil && !errors.Is(err, syscall.EMSGSIZE) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		setsock(func(fd int) (err error) {
			mtu, err = unix.GetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MTU)
			return err
		})
		if mtu < 1450 {
			break
		}
	}
	if mtu != dataplane.DefaultTunnelMTU {
		t.Errorf("IPv6 path MTU after a 1400-byte datagram: %d, want %d", mtu, dataplane.DefaultTunnelMTU)
	}

	// Time exceeded: hop limit 1, the error read from the socket's error queue.
	setsock(func(fd int) error { return unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVERR, 1) })
	setsock(func(fd int) error { return unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS, 1) })
	// (A write may first report the path MTU change: EMSGSIZE.)
	for attempt := 0; ; attempt++ {
		_, err := conn.Write([]byte("expires at the gateway"))
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EMSGSIZE) || attempt == 3 {
			t.Fatal(err)
		}
	}
	var ee *unix.SockExtendedErr
	var offender netip.Addr
	for deadline := time.Now().Add(3 * time.Second); ee == nil && time.Now().Before(deadline); {
		oob := make([]byte, 512)
		var oobn int
		var rerr error
		setsock(func(fd int) error {
			_, oobn, _, _, rerr = unix.Recvmsg(fd, make([]byte, 100), oob, unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT)
			return nil
		})
		if rerr != nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_RECVERR && len(m.Data) >= sizeofSockExtendedErr+28 {
				e := *(*unix.SockExtendedErr)(unsafe.Pointer(&m.Data[0]))
				ee = &e
				// The offender is a sockaddr_in6 after the extended error.
				offender = netip.AddrFrom16([16]byte(m.Data[sizeofSockExtendedErr+8 : sizeofSockExtendedErr+24]))
			}
		}
	}
	switch {
	case ee == nil:
		t.Error("no ICMPv6 error reached the socket's error queue")
	case ee.Origin != unix.SO_EE_ORIGIN_ICMP6 || ee.Type != packet.ICMPv6TimeExceeded || ee.Code != 0 || offender.String() != "fd80::1":
		t.Errorf("error queue: origin %d type %d code %d from %v, want ICMPv6 (%d) time exceeded (3/0) from fd80::1", ee.Origin, ee.Type, ee.Code, offender, unix.SO_EE_ORIGIN_ICMP6)
	}
	if c := dp.Counters(); c.Get(dataplane.ToTunnel, dataplane.DropTooBig) == 0 || c.Get(dataplane.ToTunnel, dataplane.DropTTL) == 0 || c.Get(dataplane.ToTunnel, dataplane.ICMPSent) < 2 {
		t.Errorf("counters %v", c[dataplane.ToTunnel])
	}
}

// sizeofSockExtendedErr is the size of struct sock_extended_err (unix.SockExtendedErr).
const sizeofSockExtendedErr = int(unsafe.Sizeof(unix.SockExtendedErr{}))
