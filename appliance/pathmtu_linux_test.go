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
func narrowWAN(t *testing.T, bin, dir string, mtu int, dropICMP bool) (a, b *cluster, r1, r2 *netnstest.NS) {
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

	cfgA := a.config("role: client\nendpoint: "+narrowServer+":51820", writeFile(t, dir, "a.key", privA), pubB, "10.71.0.0/16")
	cfgB := b.config("role: server\nlistenPort: 51820", writeFile(t, dir, "b.key", privB), pubA, "10.72.0.0/16")
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

// blackholed is how many fragmentation-needed errors the router's nftables rule dropped.
func blackholed(t *testing.T, r *netnstest.NS) int {
	out, err := r.Try("nft", "list", "chain", "ip", "blackhole", "out")
	if err != nil {
		return 0
	}
	var n, bytes int
	if i := strings.Index(out, "counter packets "); i >= 0 {
		fmt.Sscanf(out[i:], "counter packets %d bytes %d", &n, &bytes)
	}
	return n
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
// to come back, trying up to tries times, a second each. It returns how many round trips
// completed.
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
	ok := 0
	for i := range tries {
		req[0] = byte(i)
		cl.Write(req)
		cl.SetReadDeadline(time.Now().Add(time.Second))
		for {
			n, err := cl.Read(resp)
			if err != nil {
				break
			}
			if n == len(req) && resp[0] == byte(i) {
				ok++
				break
			}
		}
	}
	return ok
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
					if ok := requestResponse(t, dir.src, dir.dst, dir.srcIP, dir.dstIP, dir.dialIP, 7000+i, 5); ok < 4 {
						t.Errorf("full-size request/response %s -> %s: %d of 5 round trips", dir.src.gw.Name, dir.dst.gw.Name, ok)
					}
				}
				tooLong := strings.Count(a.logs.String()+b.logs.String(), "message too long")
				refused := a.metric(t, `skein_gateway_wireguard_send_errors_total{kind="message_too_long"}`)
				resent := a.metric(t, "skein_gateway_wireguard_datagrams_resent_total")
				t.Logf("path MTU %d, %s: bulk TCP A->B %.0f Mbit/s, B->A %.0f Mbit/s; %d fragmentation-needed dropped by the routers; %d 'message too long' log lines; A: %v batches refused, %v datagrams resent",
					mtu, mode, rates[0], rates[1], blackholed(t, r1)+blackholed(t, r2), tooLong, refused, resent)
				if !drop && mtu < 1400 && (refused < 1 || resent < 1) {
					// A's kernel learned the path MTU from the DF ping above: its GSO batches
					// are refused, and must have been sent again.
					t.Errorf("A counted %v batches refused as too big and %v datagrams resent, want some of both", refused, resent)
				}
				if drop && mtu < 1400 && blackholed(t, r1)+blackholed(t, r2) == 0 {
					t.Log("note: the routers dropped no fragmentation needed (nothing was sent with DF above the path MTU)")
				}
			})
		}
	}
}
