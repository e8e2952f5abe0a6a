//go:build linux

package appliance_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/curve25519"
	"golang.org/x/sys/unix"

	pt "github.com/skein-net/skein/dataplane/packet/packettest"
	"github.com/skein-net/skein/internal/metricsdoc"
	"github.com/skein-net/skein/internal/netnstest"
	"github.com/skein-net/skein/internal/safebuffer"
)

// buildGateway compiles cmd/skein-gateway into dir.
func buildGateway(t testing.TB, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "skein-gateway")
	cmd := exec.Command("go", "build", "-o", bin, "../cmd/skein-gateway")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func keyPair(t testing.TB) (priv, pub string) {
	var k [32]byte
	rand.Read(k[:])
	k[0] &= 248
	k[31] = k[31]&127 | 64
	p, err := curve25519.X25519(k[:], curve25519.Basepoint)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(k[:]), base64.StdEncoding.EncodeToString(p)
}

// cluster is one side: a node namespace with the kernel overlay device and a pod address on
// its loopback, and a gateway namespace between the node's underlay and the WAN.
type cluster struct {
	node, gw *netnstest.NS
	nodeMAC  string
	gwMAC    string
	proc     *exec.Cmd
	logs     *safebuffer.Buffer
	cfgPath  string
	sub      string // third byte of the site's underlay 192.168.<sub>.0/24
	podCIDR  string
}

const wanServer, wanClient = "10.0.0.2", "10.0.0.1"

// offload keeps TX checksum offload (and TSO) on the nodes' overlay devices, as
// recommended with the gateways completing checksums (their default); SKEIN_TEST_OFFLOAD=0
// turns it off on the nodes.
var offload = os.Getenv("SKEIN_TEST_OFFLOAD") != "0"

// workdir is a directory the gateways (running as nobody) can read, with the gateway binary.
func workdir(t testing.TB) (dir, bin string) {
	dir = t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir, buildGateway(t, dir)
}

func writeFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// writeKey writes a private key as the gateway wants it: mode 0600, owned by the user the
// gateways run as (nobody), who alone may read it (skein-gateway refuses a key that group or
// others may read, or that another user owns).
func writeKey(t testing.TB, dir, name, key string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(key), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	return p
}

// newSite builds a cluster's namespaces: node (underlay 192.168.<sub>.1, kernel overlay
// device, pod address on loopback, remoteSeen routed via the gateway's overlay IP) and gateway
// (192.168.<sub>.2 towards the node).
func newSite(t testing.TB, name, sub, pod, remoteSeen, gwMAC string) *cluster {
	c := &cluster{node: netnstest.New(t, "node-"+name), gw: netnstest.New(t, "gw-"+name), gwMAC: gwMAC, sub: sub}
	nodeIP, gwIP := "192.168."+sub+".1", "192.168."+sub+".2"
	netnstest.Veth(t, c.node, c.gw, "eth0", nodeIP+"/24", gwIP+"/24")
	c.nodeMAC = c.node.AddVXLAN(t, netnstest.VXLANNode{Underlay: nodeIP, VNI: 18952, Port: 4789, Address: "10.80.0.11/16", Gateway: gwIP, GatewayMAC: gwMAC, Offload: offload})
	c.node.Run(t, "ip", "addr", "add", pod+"/32", "dev", "lo")
	c.node.Run(t, "ip", "route", "add", remoteSeen, "via", "10.80.0.1", "dev", "liqo.vxlan", "onlink")
	c.podCIDR = strings.TrimSuffix(pod, pod[strings.LastIndexByte(pod, '.'):]) + ".0/24"
	return c
}

// config renders the site's gateway config; wg is the role-specific WireGuard part
// (role, listenPort or endpoint), remap the remote CIDR as seen here.
func (c *cluster) config(wg, keyFile, peerPub, remap string) string {
	return fmt.Sprintf(`%s
privateKeyFile: %s
peerPublicKey: %s
remote:
  podCIDR: 10.244.0.0/16
  remappedPodCIDR: %s
overlay:
  listen: 192.168.%s.2
  ip: 10.80.0.1
  mac: %s
  completeChecksums: true
nodes:
- name: node
  vtep: 192.168.%s.1
  mac: %s
  podCIDRs: [%s]
probe:
  interval: 200ms
  failAfter: 3
pprof: true
`, wg, keyFile, peerPub, remap, c.sub, c.gwMAC, c.sub, c.nodeMAC, c.podCIDR)
}

// twoClusters builds cluster A (client) and B (server), both with pods in 10.244.0.0/16:
// A's pod 10.244.1.5 on node a, B's pod 10.244.2.7 on node b. A sees B's pods as 10.71.0.0/16,
// B sees A's as 10.72.0.0/16. The gateways run as the real binary, as user nobody with no
// capabilities.
func twoClusters(t testing.TB) (a, b *cluster) {
	netnstest.RequireRoot(t)
	dir, bin := workdir(t)
	privA, pubA := keyPair(t)
	privB, pubB := keyPair(t)
	a = newSite(t, "a", "77", "10.244.1.5", "10.71.0.0/16", "02:5b:00:00:00:0a")
	b = newSite(t, "b", "78", "10.244.2.7", "10.72.0.0/16", "02:5b:00:00:00:0b")
	netnstest.Veth(t, a.gw, b.gw, "wan", wanClient+"/24", wanServer+"/24")
	cfgA := a.config("role: client\nendpoint: "+wanServer+":51820", writeKey(t, dir, "a.key", privA), pubB, "10.71.0.0/16")
	cfgB := b.config("role: server\nlistenPort: 51820", writeKey(t, dir, "b.key", privB), pubA, "10.72.0.0/16")
	b.start(t, bin, writeFile(t, dir, "b.yaml", cfgB))
	a.start(t, bin, writeFile(t, dir, "a.yaml", cfgA))
	return a, b
}

// start runs the gateway binary in the gateway namespace as nobody, without capabilities.
func (c *cluster) start(t testing.TB, bin, cfg string) {
	t.Helper()
	c.cfgPath = cfg
	c.logs = &safebuffer.Buffer{}
	c.proc = exec.Command("ip", "netns", "exec", c.gw.Name,
		"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--",
		bin, "--config", cfg)
	c.proc.Stdout, c.proc.Stderr = c.logs, c.logs
	c.proc.Env = childEnv()
	c.proc.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.proc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			if m, err := c.get("/metrics"); err == nil {
				var lines []string
				for _, l := range strings.Split(m, "\n") {
					if strings.HasPrefix(l, "skein_") && !strings.HasSuffix(l, " 0") {
						lines = append(lines, l)
					}
				}
				t.Logf("gateway in %s, non-zero metrics:\n%s", c.gw.Name, strings.Join(lines, "\n"))
			}
		}
		c.proc.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { c.proc.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			c.proc.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("gateway in %s logged:\n%s", c.gw.Name, c.logs.String())
		}
	})
	// Wait for its HTTP endpoint.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := c.get("/healthz"); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("gateway in %s did not come up:\n%s", c.gw.Name, c.logs.String())
}

// get fetches a path from the gateway's HTTP endpoint (127.0.0.1:9471 in its namespace).
func (c *cluster) get(path string) (string, error) {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (conn net.Conn, err error) {
			err2 := c.gw.Do(func() error {
				conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return nil
			})
			if err2 != nil {
				return nil, err2
			}
			return conn, err
		},
	}}
	resp, err := client.Get("http://127.0.0.1:9471" + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// metric returns the value of the first sample of the metrics text whose line starts with
// prefix, or -1.
func (c *cluster) metric(t testing.TB, prefix string) float64 {
	t.Helper()
	text, err := c.get("/metrics")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, prefix) {
			var v float64
			fmt.Sscan(l[strings.LastIndexByte(l, ' ')+1:], &v)
			return v
		}
	}
	return -1
}

// in runs fn with a socket-creating function bound to ns.
func in(t testing.TB, ns *netnstest.NS, fn func() error) {
	t.Helper()
	if err := ns.Do(fn); err != nil {
		t.Fatal(err)
	}
}

func TestTwoClusters(t *testing.T) {
	a, b := twoClusters(t)

	// The prober connects both sides.
	for _, c := range []*cluster{a, b} {
		deadline := time.Now().Add(15 * time.Second)
		for c.metric(t, `skein_gateway_connection_state{state="Connected"}`) != 1 {
			if time.Now().After(deadline) {
				t.Fatalf("gateway in %s never Connected:\n%s", c.gw.Name, c.logs.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	t.Run("unprivileged", func(t *testing.T) {
		for _, c := range []*cluster{a, b} {
			// ip netns exec and setpriv exec the next program, so the pid is the gateway's.
			status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.proc.Process.Pid))
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"Uid:": "65534", "Gid:": "65534", "CapEff:": "0000000000000000", "CapPrm:": "0000000000000000", "CapBnd:": "0000000000000000"}
			for _, l := range strings.Split(string(status), "\n") {
				if f := strings.Fields(l); len(f) >= 2 && want[f[0]] != "" {
					if f[1] != want[f[0]] {
						t.Errorf("gateway in %s: %s", c.gw.Name, l)
					}
					delete(want, f[0])
				}
			}
			if !strings.Contains(string(status), "Name:\tskein-gateway") || len(want) > 0 {
				t.Errorf("pid %d is not the gateway or lacks %v", c.proc.Process.Pid, want)
			}
		}
	})

	t.Run("udp both ways, remapped source", func(t *testing.T) {
		var srv *net.UDPConn
		in(t, b.node, func() (err error) {
			srv, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP("10.244.2.7"), Port: 7})
			return err
		})
		defer srv.Close()
		seen := make(chan string, 1)
		go func() {
			buf := make([]byte, 2000)
			n, from, err := srv.ReadFromUDP(buf)
			if err != nil {
				return
			}
			seen <- from.String()
			srv.WriteToUDP(buf[:n], from)
		}()
		var cl *net.UDPConn
		in(t, a.node, func() (err error) {
			cl, err = net.DialUDP("udp4", &net.UDPAddr{IP: net.ParseIP("10.244.1.5"), Port: 9000}, &net.UDPAddr{IP: net.ParseIP("10.71.2.7"), Port: 7})
			return err
		})
		defer cl.Close()
		cl.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := cl.Write([]byte("hello from A")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 100)
		n, err := cl.Read(buf)
		if err != nil || string(buf[:n]) != "hello from A" {
			t.Fatalf("echo: %q, %v", buf[:n], err)
		}
		if from := <-seen; from != "10.72.1.5:9000" {
			t.Errorf("B's pod saw the datagram from %s, want 10.72.1.5:9000 (A's pod as B sees it)", from)
		}
	})

	t.Run("udp started from B", func(t *testing.T) {
		var srv *net.UDPConn
		in(t, a.node, func() (err error) {
			srv, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP("10.244.1.5"), Port: 7})
			return err
		})
		defer srv.Close()
		go func() {
			buf := make([]byte, 2000)
			n, from, err := srv.ReadFromUDP(buf)
			if err == nil {
				srv.WriteToUDP(append([]byte(from.String()+" "), buf[:n]...), from)
			}
		}()
		var cl *net.UDPConn
		in(t, b.node, func() (err error) {
			cl, err = net.DialUDP("udp4", &net.UDPAddr{IP: net.ParseIP("10.244.2.7"), Port: 9100}, &net.UDPAddr{IP: net.ParseIP("10.72.1.5"), Port: 7})
			return err
		})
		defer cl.Close()
		cl.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := cl.Write([]byte("hello from B")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 100)
		n, err := cl.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		// A's pod answers with the source it saw: B's pod as A sees it.
		if got := string(buf[:n]); got != "10.71.2.7:9100 hello from B" {
			t.Errorf("A's pod answered %q, want it to have seen 10.71.2.7:9100", got)
		}
	})

	t.Run("ping", func(t *testing.T) {
		var pc net.PacketConn
		in(t, a.node, func() (err error) {
			pc, err = net.ListenPacket("ip4:icmp", "10.244.1.5")
			return err
		})
		defer pc.Close()
		echo := pt.ICMP(8, 0, [4]byte{0x12, 0x34, 0, 1}, []byte("skein ping"))
		pc.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := pc.WriteTo(echo, &net.IPAddr{IP: net.ParseIP("10.71.2.7")}); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				t.Fatalf("no echo reply: %v", err)
			}
			if n >= 8 && buf[0] == 0 && bytes.Equal(buf[4:8], []byte{0x12, 0x34, 0, 1}) {
				if from.String() != "10.71.2.7" {
					t.Errorf("reply from %v", from)
				}
				return
			}
		}
	})

	t.Run("tcp bulk both ways with MSS clamp", func(t *testing.T) {
		var ln net.Listener
		in(t, b.node, func() (err error) {
			ln, err = net.Listen("tcp4", "10.244.2.7:8080")
			return err
		})
		defer ln.Close()
		const size = 8 << 20
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			// Read everything, answer with its hash, then send as much back.
			h := sha256.New()
			io.CopyN(h, c, size)
			c.Write(h.Sum(nil))
			io.CopyN(c, zeroReader{}, size)
		}()
		var c net.Conn
		in(t, a.node, func() (err error) {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("10.244.1.5")}, Timeout: 5 * time.Second}
			c, err = d.Dial("tcp4", "10.71.2.7:8080")
			return err
		})
		defer c.Close()
		c.SetDeadline(time.Now().Add(60 * time.Second))
		start := time.Now()
		data := make([]byte, size)
		rand.Read(data)
		if _, err := c.Write(data); err != nil {
			t.Fatal(err)
		}
		sum := make([]byte, 32)
		if _, err := io.ReadFull(c, sum); err != nil {
			t.Fatal(err)
		}
		if want := sha256.Sum256(data); !bytes.Equal(sum, want[:]) {
			t.Fatal("B received different bytes than A sent")
		}
		if n, err := io.CopyN(io.Discard, c, size); err != nil || n != size {
			t.Fatalf("reply: %d bytes, %v", n, err)
		}
		t.Logf("16 MiB through the gateways in %v", time.Since(start).Round(time.Millisecond))
		if v := a.metric(t, `skein_gateway_packet_events_total{direction="to-tunnel",event="mss_clamped"}`); v < 1 {
			t.Errorf("A clamped no SYN (mss-clamped = %v)", v)
		}
	})

	t.Run("fragmentation needed", func(t *testing.T) {
		var c *net.UDPConn
		in(t, a.node, func() (err error) {
			c, err = net.DialUDP("udp4", &net.UDPAddr{IP: net.ParseIP("10.244.1.5"), Port: 9002}, &net.UDPAddr{IP: net.ParseIP("10.71.2.7"), Port: 9})
			return err
		})
		defer c.Close()
		raw, _ := c.SyscallConn()
		raw.Control(func(fd uintptr) {
			unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
		})
		mtu := 0
		for i := 0; i < 20 && (mtu == 0 || mtu >= 1450); i++ {
			c.Write(make([]byte, 1500-28-50)) // 1450 bytes on the wire: the overlay device's MTU
			time.Sleep(50 * time.Millisecond)
			raw.Control(func(fd uintptr) { mtu, _ = unix.GetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU) })
		}
		if mtu != 1340 {
			t.Errorf("path MTU to the remote pod is %d after a large DF datagram, want 1340 (the tunnel MTU)", mtu)
		}
	})

	t.Run("metrics", func(t *testing.T) {
		// Both are Connected (waited for above). Three datagrams from A's pod to B's: forwarded into A's tunnel and out of B's.
		in(t, a.node, func() error {
			c, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.ParseIP("10.244.1.5")}, &net.UDPAddr{IP: net.ParseIP("10.71.2.7"), Port: 9})
			if err != nil {
				return err
			}
			defer c.Close()
			for range 3 {
				c.Write([]byte("metrics"))
			}
			return nil
		})
		deadline := time.Now().Add(5 * time.Second)
		for b.metric(t, `skein_gateway_packets_handled_total{direction="from-tunnel",outcome="forwarded"}`) < 1 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		for _, c := range []struct {
			site *cluster
			role string
			dir  string
		}{{a, "client", "to-tunnel"}, {b, "server", "from-tunnel"}} {
			text, err := c.site.get("/metrics")
			if err != nil {
				t.Fatal(err)
			}
			metricsdoc.Check(t, "gateway", text)
			if v := c.site.metric(t, `skein_gateway_packets_handled_total{direction="`+c.dir+`",outcome="forwarded"}`); v < 1 {
				t.Errorf("%s: forwarded %v packets %s", c.role, v, c.dir)
			}
			if v := c.site.metric(t, "skein_gateway_probe_round_trip_seconds_count"); v < 1 {
				t.Errorf("%s: %v probes answered", c.role, v)
			}
			if v := c.site.metric(t, "skein_gateway_last_handshake_timestamp_seconds"); time.Since(time.Unix(int64(v), 0)) > 3*time.Minute {
				t.Errorf("%s: last handshake at %v", c.role, v)
			}
			if v := c.site.metric(t, `skein_gateway_peer_info{peer_endpoint="`); v != 1 {
				t.Errorf("%s: no peer_info with an endpoint", c.role)
			}
			if !strings.Contains(text, `role="`+c.role+`"`) || c.site.metric(t, "skein_gateway_active") != 1 {
				t.Errorf("%s: peer_info's role or active wrong", c.role)
			}
		}
	})

	t.Run("SIGHUP reloads", func(t *testing.T) {
		waitLog := func(what string) {
			t.Helper()
			deadline := time.Now().Add(5 * time.Second)
			for !strings.Contains(a.logs.String(), what) {
				if time.Now().After(deadline) {
					t.Fatalf("A did not log %q after SIGHUP:\n%s", what, a.logs.String())
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		good, err := os.ReadFile(a.cfgPath)
		if err != nil {
			t.Fatal(err)
		}
		a.proc.Process.Signal(syscall.SIGHUP)
		waitLog("SIGHUP: configuration reloaded")
		// A broken file: refused, the running configuration stays, the tunnel too.
		if err := os.WriteFile(a.cfgPath, append(good, []byte("bogus: 1\n")...), 0o644); err != nil {
			t.Fatal(err)
		}
		a.proc.Process.Signal(syscall.SIGHUP)
		waitLog("the configuration was not reloaded; the running one stays")
		if err := os.WriteFile(a.cfgPath, good, 0o644); err != nil {
			t.Fatal(err)
		}
		if a.proc.ProcessState != nil {
			t.Fatal("A exited on SIGHUP")
		}
		if v := a.metric(t, `skein_gateway_connection_state{state="Connected"}`); v != 1 {
			t.Errorf("A is not Connected after the reloads (%v)", v)
		}
	})

	t.Run("connection error when the peer goes away", func(t *testing.T) {
		b.proc.Process.Signal(syscall.SIGTERM)
		deadline := time.Now().Add(10 * time.Second)
		for a.metric(t, `skein_gateway_connection_state{state="Error"}`) != 1 {
			if time.Now().After(deadline) {
				t.Fatal("A never reported Error after B stopped")
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestStockWireguardPeer connects our gateway (standalone, server) to the upstream
// wireguard-go binary at our pinned version on a kernel TUN, configured with wg from
// wireguard-tools: handshake, probes answered by the peer's kernel, and traffic started from
// either side.
func TestStockWireguardPeer(t *testing.T) {
	netnstest.RequireRoot(t)
	wgTool, err := exec.LookPath("wg")
	if err != nil {
		t.Fatalf("wg (Debian package wireguard-tools) is needed: %v", err)
	}
	dir, bin := workdir(t)
	stockBin := buildStockWG(t, dir)
	privA, pubA := keyPair(t)
	privS, pubS := keyPair(t)
	a := newSite(t, "a", "77", "10.244.1.5", "10.71.0.0/16", "02:5b:00:00:00:0a")
	stock := netnstest.New(t, "stock")
	netnstest.Veth(t, a.gw, stock, "wan", wanServer+"/24", wanClient+"/24")
	a.start(t, bin, writeFile(t, dir, "a.yaml", a.config("role: server\nlistenPort: 51820", writeKey(t, dir, "a.key", privA), pubS, "10.71.0.0/16")))

	// The stock peer: wireguard-go on a TUN in its namespace, the remote "pod" 10.244.2.7 on
	// its loopback, A's real pod CIDR routed into the tunnel.
	ifname := startStockWG(t, stock, stockBin, "wgs")
	keyFile := writeKey(t, dir, "stock.key", privS)
	stock.Run(t, wgTool, "set", ifname, "private-key", keyFile, "peer", pubA,
		"allowed-ips", "10.244.1.0/24,169.254.100.1/32", "endpoint", wanServer+":51820", "persistent-keepalive", "1")
	stock.Run(t, "ip", "addr", "add", "169.254.100.2/30", "dev", ifname)
	stock.Run(t, "ip", "link", "set", ifname, "mtu", "1340", "up")
	stock.Run(t, "ip", "addr", "add", "10.244.2.7/32", "dev", "lo")
	stock.Run(t, "ip", "route", "add", "10.244.1.0/24", "dev", ifname)

	deadline := time.Now().Add(15 * time.Second)
	for a.metric(t, `skein_gateway_connection_state{state="Connected"}`) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("our gateway never reached Connected against the stock peer:\n%s", a.logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out := stock.Run(t, wgTool, "show", ifname, "latest-handshakes"); strings.Contains(out, "\t0\n") || !strings.Contains(out, pubA) {
		t.Errorf("stock peer reports no handshake: %q", out)
	}

	// From A's pod to the stock side, which sees A's real address (it does no NAT).
	var srv *net.UDPConn
	in(t, stock, func() (err error) {
		srv, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP("10.244.2.7"), Port: 7})
		return err
	})
	defer srv.Close()
	from := make(chan string, 1)
	go func() {
		buf := make([]byte, 2000)
		n, addr, err := srv.ReadFromUDP(buf)
		if err == nil {
			from <- addr.String()
			srv.WriteToUDP(buf[:n], addr)
		}
	}()
	var cl *net.UDPConn
	in(t, a.node, func() (err error) {
		cl, err = net.DialUDP("udp4", &net.UDPAddr{IP: net.ParseIP("10.244.1.5"), Port: 9000}, &net.UDPAddr{IP: net.ParseIP("10.71.2.7"), Port: 7})
		return err
	})
	defer cl.Close()
	cl.SetDeadline(time.Now().Add(5 * time.Second))
	cl.Write([]byte("to the stock peer"))
	buf := make([]byte, 100)
	if n, err := cl.Read(buf); err != nil || string(buf[:n]) != "to the stock peer" {
		t.Fatalf("echo through the stock peer: %q, %v", buf[:n], err)
	}
	if f := <-from; f != "10.244.1.5:9000" {
		t.Errorf("stock side saw %s, want 10.244.1.5:9000", f)
	}

	// From the stock side to A's pod, which sees it as 10.71.2.7.
	var podSrv *net.UDPConn
	in(t, a.node, func() (err error) {
		podSrv, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP("10.244.1.5"), Port: 7001})
		return err
	})
	defer podSrv.Close()
	var sc *net.UDPConn
	in(t, stock, func() (err error) {
		sc, err = net.DialUDP("udp4", &net.UDPAddr{IP: net.ParseIP("10.244.2.7"), Port: 7000}, &net.UDPAddr{IP: net.ParseIP("10.244.1.5"), Port: 7001})
		return err
	})
	defer sc.Close()
	sc.Write([]byte("from the stock peer"))
	podSrv.SetDeadline(time.Now().Add(5 * time.Second))
	n, addr, err := podSrv.ReadFromUDP(buf)
	if err != nil || string(buf[:n]) != "from the stock peer" {
		t.Fatalf("A's pod got %q, %v", buf[:n], err)
	}
	if addr.String() != "10.71.2.7:7000" {
		t.Errorf("A's pod saw the stock side as %s, want 10.71.2.7:7000", addr)
	}
}

// buildStockWG builds the upstream wireguard-go daemon at the version go.mod pins.
func buildStockWG(t testing.TB, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "wireguard-go")
	if out, err := exec.Command("go", "build", "-o", bin, "golang.zx2c4.com/wireguard").CombinedOutput(); err != nil {
		t.Fatalf("building the pinned wireguard-go: %v\n%s", err, out)
	}
	return bin
}

// startStockWG runs the stock wireguard-go daemon on a TUN named after prefix and the test's
// pid inside ns, waits for its UAPI socket, and stops it (removing the socket) when t ends.
func startStockWG(t testing.TB, ns *netnstest.NS, bin, prefix string) string {
	t.Helper()
	ifname := fmt.Sprintf("%s%d", prefix, os.Getpid()%100000)
	proc := exec.Command("ip", "netns", "exec", ns.Name, bin, "-f", ifname)
	logs := &safebuffer.Buffer{}
	proc.Stdout, proc.Stderr = logs, logs
	proc.Env = childEnv()
	proc.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	sock := "/var/run/wireguard/" + ifname + ".sock"
	t.Cleanup(func() {
		proc.Process.Signal(syscall.SIGTERM)
		proc.Wait()
		os.Remove(sock)
		if t.Failed() {
			t.Logf("stock wireguard-go %s logged:\n%s", ifname, logs.String())
		}
	})
	for i := 0; ; i++ {
		if _, err := os.Stat(sock); err == nil {
			return ifname
		}
		if i == 100 {
			t.Fatalf("wireguard-go did not create %s:\n%s", sock, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// childEnv is the test's environment without the Go runtime's GC settings, so that the
// gateways run with their configured ones and stock wireguard-go with its defaults, whatever
// the test binary was run with.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOGC=") && !strings.HasPrefix(kv, "GOMEMLIMIT=") {
			env = append(env, kv)
		}
	}
	return env
}
