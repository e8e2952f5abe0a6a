//go:build linux

package appliance_test

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skein-net/skein/internal/netnstest"
)

// streamSeconds is how long each measured TCP stream runs.
const streamSeconds = 3

// stream runs n parallel TCP streams from src (in its namespace) to dst:port (a listener in
// dstNS) for d and returns the bytes received per second. The sockets are made inside the
// namespaces; the copying runs in this process.
func stream(tb testing.TB, srcNS *netnstest.NS, src string, dstNS *netnstest.NS, listen, dial string, n int, d time.Duration) float64 {
	var ln net.Listener
	in(tb, dstNS, func() (err error) {
		ln, err = net.Listen("tcp4", listen)
		return err
	})
	defer ln.Close()
	var received atomic.Int64
	var wg sync.WaitGroup
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				buf := make([]byte, 256<<10)
				for {
					k, err := c.Read(buf)
					received.Add(int64(k))
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	conns := make([]net.Conn, n)
	for i := range conns {
		in(tb, srcNS, func() (err error) {
			dl := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
			conns[i], err = dl.Dial("tcp4", dial)
			return err
		})
	}
	// Warm up (slow start, handshakes), then measure.
	stop := make(chan struct{})
	var senders sync.WaitGroup
	for _, c := range conns {
		senders.Add(1)
		go func() {
			defer senders.Done()
			defer c.Close()
			buf := make([]byte, 64<<10)
			for {
				select {
				case <-stop:
					return
				default:
				}
				c.SetWriteDeadline(time.Now().Add(time.Second))
				if _, err := c.Write(buf); err != nil && !os.IsTimeout(err) {
					return
				}
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	start, before := time.Now(), received.Load()
	time.Sleep(d)
	rate := float64(received.Load()-before) / time.Since(start).Seconds()
	close(stop)
	senders.Wait()
	ln.Close()
	wg.Wait()
	return rate
}

// rssKiB returns a process's VmRSS and VmHWM in KiB.
func rssKiB(tb testing.TB, pid int) (rss, hwm int) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && (f[0] == "VmRSS:" || f[0] == "VmHWM:") {
			v, _ := strconv.Atoi(f[1])
			if f[0] == "VmRSS:" {
				rss = v
			} else {
				hwm = v
			}
		}
	}
	return rss, hwm
}

// BenchmarkTCPStream measures one TCP stream pod -> pod through the whole skein path (node
// kernel VXLAN -> gateway -> WireGuard -> gateway -> node) and through a bare wireguard-go
// tunnel (the stock daemon on TUN) between two namespaces, in the same run, both with a
// 1340-byte tunnel MTU; and the gateways' RSS idle and under 32 parallel streams. Run with
//
//	go test -run XXX -bench TCPStream -benchtime 1x ./appliance
func BenchmarkTCPStream(b *testing.B) {
	netnstest.RequireRoot(b)
	dir, _ := workdir(b)
	stockBin := buildStockWG(b, dir)

	// Bare wireguard-go between two namespaces.
	w1, w2 := netnstest.New(b, "bare1"), netnstest.New(b, "bare2")
	netnstest.Veth(b, w1, w2, "wan", "10.0.0.1/24", "10.0.0.2/24")
	priv1, pub1 := keyPair(b)
	priv2, pub2 := keyPair(b)
	if1 := startStockWG(b, w1, stockBin, "wgb")
	if2 := startStockWG(b, w2, stockBin, "wgc")
	w1.Run(b, "wg", "set", if1, "private-key", writeKey(b, dir, "w1.key", priv1), "listen-port", "51820", "peer", pub2, "allowed-ips", "10.9.0.2/32", "endpoint", "10.0.0.2:51820")
	w2.Run(b, "wg", "set", if2, "private-key", writeKey(b, dir, "w2.key", priv2), "listen-port", "51820", "peer", pub1, "allowed-ips", "10.9.0.1/32", "endpoint", "10.0.0.1:51820")
	for _, x := range []struct {
		ns     *netnstest.NS
		ifname string
		addr   string
	}{{w1, if1, "10.9.0.1/24"}, {w2, if2, "10.9.0.2/24"}} {
		x.ns.Run(b, "ip", "addr", "add", x.addr, "dev", x.ifname)
		x.ns.Run(b, "ip", "link", "set", x.ifname, "mtu", "1340", "up")
	}

	a, c := twoClusters(b)
	deadline := time.Now().Add(15 * time.Second)
	for a.metric(b, `skein_gateway_connection_state{state="Connected"}`) != 1 {
		if time.Now().After(deadline) {
			b.Fatal("gateways never connected")
		}
		time.Sleep(100 * time.Millisecond)
	}
	idleA, _ := rssKiB(b, a.proc.Process.Pid)
	idleC, _ := rssKiB(b, c.proc.Process.Pid)

	d := streamSeconds * time.Second
	var bare, skein []float64
	for range b.N {
		// Interleaved, so drift hits both alike.
		if os.Getenv("SKEIN_BENCH_ONLY") != "skein" {
			bare = append(bare, stream(b, w1, "10.9.0.1", w2, "10.9.0.2:5201", "10.9.0.2:5201", 1, d))
		}
		skein = append(skein, stream(b, a.node, "10.244.1.5", c.node, "10.244.2.7:5201", "10.71.2.7:5201", 1, d))
	}
	if dir := os.Getenv("SKEIN_BENCH_PROFILE"); dir != "" {
		// CPU profiles of both gateways during one more single stream.
		done := make(chan struct{})
		go func() {
			stream(b, a.node, "10.244.1.5", c.node, "10.244.2.7:5203", "10.71.2.7:5203", 1, d)
			close(done)
		}()
		time.Sleep(200 * time.Millisecond)
		var pw sync.WaitGroup
		for name, g := range map[string]*cluster{"a": a, "b": c} {
			pw.Add(1)
			go func() {
				defer pw.Done()
				prof, err := g.get("/debug/pprof/profile?seconds=2")
				if err != nil {
					b.Error(err)
					return
				}
				os.WriteFile(dir+"/gateway-"+name+".pprof", []byte(prof), 0o644)
			}()
		}
		pw.Wait()
		<-done
	}
	multi := stream(b, a.node, "10.244.1.5", c.node, "10.244.2.7:5202", "10.71.2.7:5202", 32, d)
	_, hwmA := rssKiB(b, a.proc.Process.Pid)
	_, hwmC := rssKiB(b, c.proc.Process.Pid)

	mbit := func(xs []float64) float64 {
		var s float64
		for _, x := range xs {
			s += x
		}
		return s / float64(max(len(xs), 1)) * 8 / 1e6
	}
	b.ReportMetric(mbit(skein), "skein-Mbit/s")
	b.ReportMetric(mbit(bare), "bare-wireguard-go-Mbit/s")
	b.ReportMetric(mbit(skein)/mbit(bare), "ratio")
	b.ReportMetric(mbit([]float64{multi}), "skein-32-streams-Mbit/s")
	b.ReportMetric(float64(max(idleA, idleC))/1024, "gateway-idle-RSS-MiB")
	b.ReportMetric(float64(max(hwmA, hwmC))/1024, "gateway-peak-RSS-MiB")
	b.Logf("per run: skein %v, bare %v (bytes/s)", skein, bare)
}
