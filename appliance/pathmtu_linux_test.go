//go:build linux

package appliance_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/skein-net/skein/internal/netnstest"
)

// The narrow WAN: the two gateways talk through two routers, and the link between the routers
// has a smaller MTU than everything else, as a WAN whose path MTU is below the 1400 bytes the
// tunnel's full-size packets need on the wire (1340 inside + 60 of WireGuard, UDP and IPv4).
//
//	gw-a 10.0.1.1 --- 10.0.1.254 r1 10.0.3.1 ==(mtu)== 10.0.3.2 r2 10.0.2.254 --- 10.0.2.1 gw-b
//
// Both routers send fragmentation needed for a DF packet too big for the narrow link, unless
// the ICMP is dropped (an nftables rule in both: a path MTU black hole).
const narrowServer = "10.0.2.1"

// narrowWAN builds clusters A (client) and B (server) as twoClusters does, joined by the
// narrow WAN, and starts their gateways (the real binary, unprivileged). It returns once both
// are Connected.
func narrowWAN(t testing.TB, bin, dir string, mtu int, dropICMP bool) (a, b *cluster, r1, r2 *netnstest.NS) {
	return narrowWANOver(t, bin, dir, mtu, dropICMP, false)
}

// narrowServer6 is the server gateway's WAN address over IPv6 (narrowWANOver with v6).
const narrowServer6 = "fd00:2::1"

// narrowWANOver is narrowWAN, over IPv6 with v6: the WAN carries IPv6 too (fd00:1::/64,
// fd00:3::/64, fd00:2::/64 in place of 10.0.1-3.0/24) and the client dials the server's IPv6
// address; the routers drop ICMPv6 Packet Too Big with dropICMP.
func narrowWANOver(t testing.TB, bin, dir string, mtu int, dropICMP, v6 bool) (a, b *cluster, r1, r2 *netnstest.NS) {
	t.Helper()
	privA, pubA := keyPair(t)
	privB, pubB := keyPair(t)
	a = newSite(t, "a", "77", "10.244.1.5", "10.71.0.0/16", "02:5b:00:00:00:0a")
	b = newSite(t, "b", "78", "10.244.2.7", "10.72.0.0/16", "02:5b:00:00:00:0b")
	r1, r2 = netnstest.New(t, "r1"), netnstest.New(t, "r2")
	netnstest.Veth(t, a.gw, r1, "wan", "10.0.1.1/24", "10.0.1.254/24")
	netnstest.Veth(t, r1, r2, "narrow", "10.0.3.1/30", "10.0.3.2/30")
	netnstest.Veth(t, r2, b.gw, "wan", "10.0.2.254/24", narrowServer+"/24")
	for _, r := range []*netnstest.NS{r1, r2} {
		r.Run(t, "ip", "link", "set", "narrow", "mtu", fmt.Sprint(mtu))
		r.Run(t, "sysctl", "-qw", "net.ipv4.ip_forward=1")
		if dropICMP {
			r.Run(t, "nft", "add", "table", "ip", "blackhole")
			r.Run(t, "nft", "add", "chain", "ip", "blackhole", "out", "{ type filter hook output priority 0 ; }")
			r.Run(t, "nft", "add", "rule", "ip", "blackhole", "out", "icmp", "type", "destination-unreachable", "icmp", "code", "frag-needed", "counter", "drop")
		}
	}
	r1.Run(t, "ip", "route", "add", "10.0.2.0/24", "via", "10.0.3.2")
	r2.Run(t, "ip", "route", "add", "10.0.1.0/24", "via", "10.0.3.1")
	a.gw.Run(t, "ip", "route", "add", "10.0.2.0/24", "via", "10.0.1.254")
	b.gw.Run(t, "ip", "route", "add", "10.0.1.0/24", "via", "10.0.2.254")
	endpoint := narrowServer + ":51820"
	if v6 {
		for _, x := range []struct {
			ns        *netnstest.NS
			dev, addr string
		}{{a.gw, "wan", "fd00:1::1/64"}, {r1, "wan", "fd00:1::254/64"}, {r1, "narrow", "fd00:3::1/64"},
			{r2, "narrow", "fd00:3::2/64"}, {r2, "wan", "fd00:2::254/64"}, {b.gw, "wan", narrowServer6 + "/64"}} {
			x.ns.Run(t, "ip", "addr", "add", x.addr, "dev", x.dev, "nodad")
		}
		for _, r := range []*netnstest.NS{r1, r2} {
			r.Run(t, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
			if dropICMP {
				r.Run(t, "nft", "add", "table", "ip6", "blackhole")
				r.Run(t, "nft", "add", "chain", "ip6", "blackhole", "out", "{ type filter hook output priority 0 ; }")
				r.Run(t, "nft", "add", "rule", "ip6", "blackhole", "out", "icmpv6", "type", "packet-too-big", "counter", "drop")
			}
		}
		r1.Run(t, "ip", "-6", "route", "add", "fd00:2::/64", "via", "fd00:3::2")
		r2.Run(t, "ip", "-6", "route", "add", "fd00:1::/64", "via", "fd00:3::1")
		a.gw.Run(t, "ip", "-6", "route", "add", "fd00:2::/64", "via", "fd00:1::254")
		b.gw.Run(t, "ip", "-6", "route", "add", "fd00:1::/64", "via", "fd00:2::254")
		endpoint = "'[" + narrowServer6 + "]:51820'"
	}

	cfgA := a.config("role: client\nendpoint: "+endpoint, writeKey(t, dir, "a.key", privA), pubB, "10.71.0.0/16")
	cfgB := b.config("role: server\nlistenPort: 51820", writeKey(t, dir, "b.key", privB), pubA, "10.72.0.0/16")
	b.start(t, bin, writeFile(t, dir, "b.yaml", cfgB))
	a.start(t, bin, writeFile(t, dir, "a.yaml", cfgA))
	for _, c := range []*cluster{a, b} {
		deadline := time.Now().Add(15 * time.Second)
		for c.metric(t, `skein_gateway_connection_state{state="Connected"}`) != 1 {
			if time.Now().After(deadline) {
				t.Fatalf("gateway in %s never Connected", c.gw.Name)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return a, b, r1, r2
}

// blackholed is how many fragmentation-needed (and Packet Too Big) errors the router's
// nftables rules dropped.
func blackholed(t *testing.T, r *netnstest.NS) int {
	total := 0
	for _, family := range []string{"ip", "ip6"} {
		out, err := r.Try("nft", "list", "chain", family, "blackhole", "out")
		if err != nil {
			continue
		}
		var n, bytes int
		if i := strings.Index(out, "counter packets "); i >= 0 {
			fmt.Sscanf(out[i:], "counter packets %d bytes %d", &n, &bytes)
		}
		total += n
	}
	return total
}

// bulk sends size bytes from the pod of src to the pod of dst (listening on port) through the
// tunnel and checks that they arrive intact, within limit. It returns the rate in Mbit/s, or
// an error saying how far it got.
func bulk(t *testing.T, src, dst *cluster, srcIP, dstIP, dialIP string, port, size int, limit time.Duration) (float64, error) {
	t.Helper()
	var ln net.Listener
	in(t, dst.node, func() (err error) {
		ln, err = net.Listen("tcp4", net.JoinHostPort(dstIP, fmt.Sprint(port)))
		return err
	})
	defer ln.Close()
	type result struct {
		n   int64
		sum []byte
		err error
	}
	got := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- result{err: err}
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(limit))
		h := sha256.New()
		n, err := io.CopyN(h, c, int64(size))
		got <- result{n, h.Sum(nil), err}
	}()
	var c net.Conn
	in(t, src.node, func() (err error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(srcIP)}, Timeout: 5 * time.Second}
		c, err = d.Dial("tcp4", net.JoinHostPort(dialIP, fmt.Sprint(port)))
		return err
	})
	defer c.Close()
	data := make([]byte, size)
	rand.Read(data)
	start := time.Now()
	c.SetDeadline(start.Add(limit))
	go c.Write(data) // the receiver's result says how far it got
	r := <-got
	took := time.Since(start)
	if r.err != nil || r.n != int64(size) {
		return 0, fmt.Errorf("%d of %d bytes in %v: %v", r.n, size, took.Round(time.Millisecond), r.err)
	}
	if want := sha256.Sum256(data); !bytes.Equal(r.sum, want[:]) {
		return 0, fmt.Errorf("the bytes received differ from those sent")
	}
	return float64(size) * 8 / took.Seconds() / 1e6, nil
}

// requestResponse sends a full-size UDP datagram (1300 bytes of payload: 1328 inside the
// tunnel, 1400 on the wire) from src's pod to an echo server on dst's pod and waits for it
// to come back, tries times, a second each. It returns how many of the last round trips
// completed in a row. (Over a tunnel MTU lowered below 1328 the first one or two are
// answered fragmentation needed, by each side's gateway, as a router with a smaller MTU
// would; the pods' kernels fragment the next ones.)
func requestResponse(t *testing.T, src, dst *cluster, srcIP, dstIP, dialIP string, port, tries int) int {
	t.Helper()
	var srv *net.UDPConn
	in(t, dst.node, func() (err error) {
		srv, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(dstIP), Port: port})
		return err
	})
	defer srv.Close()
	go func() {
		buf := make([]byte, 2000)
		for {
			n, from, err := srv.ReadFromUDP(buf)
			if err != nil {
				return
			}
			srv.WriteToUDP(buf[:n], from)
		}
	}()
	var cl *net.UDPConn
	in(t, src.node, func() (err error) {
		cl, err = net.DialUDP("udp4", &net.UDPAddr{IP: net.ParseIP(srcIP)}, &net.UDPAddr{IP: net.ParseIP(dialIP), Port: port})
		return err
	})
	defer cl.Close()
	req, resp := make([]byte, 1300), make([]byte, 2000)
	run := 0
	for i := range tries {
		req[0] = byte(i)
		cl.Write(req)
		cl.SetReadDeadline(time.Now().Add(time.Second))
		answered := false
		for !answered {
			n, err := cl.Read(resp)
			if err != nil {
				break
			}
			answered = n == len(req) && resp[0] == byte(i)
		}
		if run++; !answered {
			run = 0
		}
	}
	return run
}

// TestNarrowWAN runs the tunnel over a WAN whose path MTU is 1280, 1380 or 1420 (and 1500 as
// the reference), with fragmentation needed delivered and dropped: bulk TCP both ways and
// full-size request/response must complete. Before the gateways handled it, a 1380-byte path
// with ICMP delivered stalled bulk TCP completely (0 bytes: every GSO batch refused with
// EMSGSIZE, `sendmmsg: message too long`), and with ICMP dropped full-size packets vanished.
func TestNarrowWAN(t *testing.T) {
	netnstest.RequireRoot(t)
	dir, bin := workdir(t)
	const size = 8 << 20
	for _, mtu := range []int{1500, 1420, 1380, 1280} {
		for _, drop := range []bool{false, true} {
			if mtu == 1500 && drop {
				continue
			}
			mode := "icmp-delivered"
			if drop {
				mode = "icmp-dropped"
			}
			t.Run(fmt.Sprintf("mtu-%d-%s", mtu, mode), func(t *testing.T) {
				a, b, r1, r2 := narrowWAN(t, bin, dir, mtu, drop)
				// The path really is this narrow: a DF datagram one byte too big does not pass.
				if mtu < 1500 {
					if out, err := a.gw.Try("ping", "-c", "1", "-W", "1", "-M", "do", "-s", fmt.Sprint(mtu-28+1), narrowServer); err == nil {
						t.Fatalf("a %d-byte DF ping crossed the narrow WAN:\n%s", mtu+1, out)
					}
				}
				// Both gateways discover the path MTU and lower their tunnel MTU to the
				// largest multiple of 16 whose datagram fits (1340, the configured, if it does).
				want := min(1340, (mtu-60)&^15)
				took := waitTunnelMTU(t, want, 30*time.Second, a, b)
				var rates [2]float64
				for i, dir := range []struct {
					src, dst             *cluster
					srcIP, dstIP, dialIP string
				}{{a, b, "10.244.1.5", "10.244.2.7", "10.71.2.7"}, {b, a, "10.244.2.7", "10.244.1.5", "10.72.1.5"}} {
					rate, err := bulk(t, dir.src, dir.dst, dir.srcIP, dir.dstIP, dir.dialIP, 8080+i, size, 20*time.Second)
					if err != nil {
						t.Errorf("bulk TCP %s -> %s: %v", dir.src.gw.Name, dir.dst.gw.Name, err)
					}
					rates[i] = rate
					if ok := requestResponse(t, dir.src, dir.dst, dir.srcIP, dir.dstIP, dir.dialIP, 7000+i, 6); ok < 3 {
						t.Errorf("full-size request/response %s -> %s: the last %d of 6 round trips completed, want at least 3", dir.src.gw.Name, dir.dst.gw.Name, ok)
					}
				}
				tooLong := strings.Count(a.logs.String()+b.logs.String(), "message too long")
				refused := a.metric(t, `skein_gateway_wireguard_send_errors_total{kind="message_too_long"}`)
				resent := a.metric(t, "skein_gateway_wireguard_datagrams_resent_total")
				t.Logf("path MTU %d, %s: tunnel MTU %d discovered in %v; bulk TCP A->B %.0f Mbit/s, B->A %.0f Mbit/s; %d fragmentation-needed dropped by the routers; %d 'message too long' log lines; A: %v batches refused, %v datagrams resent",
					mtu, mode, want, took.Round(10*time.Millisecond), rates[0], rates[1], blackholed(t, r1)+blackholed(t, r2), tooLong, refused, resent)
				for _, c := range []*cluster{a, b} {
					if v := c.metric(t, "skein_gateway_reconnects_total"); v > 0 {
						t.Errorf("gateway in %s reconnected %v times", c.gw.Name, v)
					}
				}
				if drop && mtu < 1400 && blackholed(t, r1)+blackholed(t, r2) == 0 {
					t.Log("note: the routers dropped no fragmentation needed (nothing was sent with DF above the path MTU)")
				}
			})
		}
	}
}

// waitTunnelMTU waits until every gateway's effective tunnel MTU is want, at most limit, and
// returns how long that took.
func waitTunnelMTU(t testing.TB, want int, limit time.Duration, gws ...*cluster) time.Duration {
	t.Helper()
	start := time.Now()
	for _, c := range gws {
		for {
			got := c.metric(t, `skein_gateway_tunnel_mtu_bytes{kind="effective"}`)
			if int(got) == want && c.metric(t, "skein_gateway_path_mtu_searches_total") >= 1 {
				break // and a search completed
			}
			if time.Since(start) > limit {
				t.Fatalf("gateway in %s: effective tunnel MTU %v after %v, want %d (probes: passed %v, lost %v, void %v)", c.gw.Name, got, limit, want,
					c.metric(t, `skein_gateway_path_mtu_probes_total{result="passed"}`), c.metric(t, `skein_gateway_path_mtu_probes_total{result="lost"}`),
					c.metric(t, `skein_gateway_path_mtu_probes_total{result="void"}`))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return time.Since(start)
}

// TestNarrowWANLater narrows the WAN under running gateways (1500 -> 1380, its ICMP dropped,
// with bulk TCP flowing): both find the new path MTU by probing and lower their tunnel MTU
// within 30 s, without a reconnect, and bulk TCP and full-size request/response complete.
func TestNarrowWANLater(t *testing.T) {
	netnstest.RequireRoot(t)
	dir, bin := workdir(t)
	a, b, r1, r2 := narrowWAN(t, bin, dir, 1500, true)
	waitTunnelMTU(t, 1340, 30*time.Second, a, b)
	// A stream running across the change and the discovery (A's probes wait for gaps in it).
	done := make(chan float64, 1)
	go func() {
		done <- stream(t, a.node, "10.244.1.5", b.node, "10.244.2.7:8090", "10.71.2.7:8090", 1, 20*time.Second)
	}()
	time.Sleep(time.Second)
	for _, r := range []*netnstest.NS{r1, r2} {
		r.Run(t, "ip", "link", "set", "narrow", "mtu", "1380")
	}
	took := waitTunnelMTU(t, 1312, 30*time.Second, a, b)
	across := <-done * 8 / 1e6
	if across < 10 {
		t.Errorf("the stream across the change carried %.1f Mbit/s", across)
	}
	rate, err := bulk(t, a, b, "10.244.1.5", "10.244.2.7", "10.71.2.7", 8091, 8<<20, 20*time.Second)
	if err != nil {
		t.Errorf("bulk TCP after the change: %v", err)
	}
	if ok := requestResponse(t, a, b, "10.244.1.5", "10.244.2.7", "10.71.2.7", 7010, 6); ok < 3 {
		t.Errorf("full-size request/response after the change: the last %d of 6 completed, want at least 3", ok)
	}
	for _, c := range []*cluster{a, b} {
		if v := c.metric(t, "skein_gateway_reconnects_total"); v > 0 {
			t.Errorf("gateway in %s reconnected %v times", c.gw.Name, v)
		}
	}
	t.Logf("1500 -> 1380 (ICMP dropped): tunnel MTU 1340 -> 1312 on both gateways %v after the change (A's probes: %v void); the stream across it %.0f Mbit/s, bulk TCP after it %.0f Mbit/s",
		took.Round(10*time.Millisecond), a.metric(t, `skein_gateway_path_mtu_probes_total{result="void"}`), across, rate)
}

// BenchmarkNarrowWAN measures one TCP stream pod -> pod (A to B) over the narrowed WAN of
// TestNarrowWAN once the gateways have found its path MTU, at 1500 (the reference), 1420,
// 1380 and 1280, ICMP delivered and dropped, and reports each against 1500. Run with
//
//	go test -run XXX -bench NarrowWAN -benchtime 3x ./appliance
func BenchmarkNarrowWAN(b *testing.B) {
	netnstest.RequireRoot(b)
	dir, bin := workdir(b)
	var ref float64
	for _, mtu := range []int{1500, 1420, 1380, 1280} {
		for _, drop := range []bool{false, true} {
			if mtu == 1500 && drop {
				continue
			}
			mode := "icmp-delivered"
			if drop {
				mode = "icmp-dropped"
			}
			b.Run(fmt.Sprintf("mtu-%d-%s", mtu, mode), func(b *testing.B) {
				a, c, _, _ := narrowWAN(b, bin, dir, mtu, drop)
				took := waitTunnelMTU(b, min(1340, (mtu-60)&^15), 30*time.Second, a, c)
				var sum float64
				for i := range b.N {
					sum += stream(b, a.node, "10.244.1.5", c.node, fmt.Sprintf("10.244.2.7:%d", 5300+i), fmt.Sprintf("10.71.2.7:%d", 5300+i), 1, streamSeconds*time.Second)
				}
				rate := sum / float64(b.N) * 8 / 1e6
				if mtu == 1500 {
					ref = rate
				}
				b.ReportMetric(rate, "Mbit/s")
				if ref > 0 {
					b.ReportMetric(rate/ref, "ratio-to-1500")
				}
				b.ReportMetric(took.Seconds(), "discovery-s")
			})
		}
	}
}

// TestNarrowWAN6 is TestNarrowWAN over an IPv6 WAN (the tunnel inside still carries the pods'
// IPv4): IPv6 routers never fragment, so with Packet Too Big dropped only the gateways' own
// discovery keeps full-size packets flowing. A tunnel MTU of 1340 needs 1420 bytes over IPv6;
// at 1380 the gateways must find 1296 (1380 - 80, down to a multiple of 16), at 1280 1200.
func TestNarrowWAN6(t *testing.T) {
	netnstest.RequireRoot(t)
	dir, bin := workdir(t)
	for _, mtu := range []int{1380, 1280} {
		for _, drop := range []bool{false, true} {
			mode := "icmp-delivered"
			if drop {
				mode = "icmp-dropped"
			}
			t.Run(fmt.Sprintf("mtu-%d-%s", mtu, mode), func(t *testing.T) {
				a, b, r1, r2 := narrowWANOver(t, bin, dir, mtu, drop, true)
				if out, err := a.gw.Try("ping", "-6", "-c", "1", "-W", "1", "-M", "do", "-s", fmt.Sprint(mtu-48+1), narrowServer6); err == nil {
					t.Fatalf("a %d-byte IPv6 ping crossed the narrow WAN:\n%s", mtu+1, out)
				}
				want := (mtu - 80) &^ 15
				took := waitTunnelMTU(t, want, 30*time.Second, a, b)
				var rates [2]float64
				for i, dir := range []struct {
					src, dst             *cluster
					srcIP, dstIP, dialIP string
				}{{a, b, "10.244.1.5", "10.244.2.7", "10.71.2.7"}, {b, a, "10.244.2.7", "10.244.1.5", "10.72.1.5"}} {
					rate, err := bulk(t, dir.src, dir.dst, dir.srcIP, dir.dstIP, dir.dialIP, 8080+i, 8<<20, 20*time.Second)
					if err != nil {
						t.Errorf("bulk TCP %s -> %s: %v", dir.src.gw.Name, dir.dst.gw.Name, err)
					}
					rates[i] = rate
					if ok := requestResponse(t, dir.src, dir.dst, dir.srcIP, dir.dstIP, dir.dialIP, 7000+i, 6); ok < 3 {
						t.Errorf("full-size request/response %s -> %s: the last %d of 6 round trips completed, want at least 3", dir.src.gw.Name, dir.dst.gw.Name, ok)
					}
				}
				t.Logf("IPv6 path MTU %d, %s: tunnel MTU %d discovered in %v; bulk TCP A->B %.0f Mbit/s, B->A %.0f Mbit/s; %d Packet Too Big dropped by the routers",
					mtu, mode, want, took.Round(10*time.Millisecond), rates[0], rates[1], blackholed(t, r1)+blackholed(t, r2))
			})
		}
	}
}
