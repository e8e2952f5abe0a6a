//go:build linux

package appliance_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skein-net/skein/internal/netnstest"
	"github.com/skein-net/skein/internal/safebuffer"
)

// The examples of docs/standalone.md, run as written. The doc marks what the test needs to
// know with HTML comments (invisible when rendered):
//
//	<!-- example: NAME --> ... <!-- end example -->   one example
//	<!-- on: HOST -->                                  the next ```sh block runs on HOST
//	<!-- on: HOST, background -->                      ... and keeps running (a gateway)
//	<!-- copy: HOST:PATH HOST:PATH -->                 a file copied between hosts (scp)
//
// Each host is a network namespace the test builds with the doc's addresses (the example's
// table); the pods and the LAN hosts behind s are namespaces too. Each block runs whole, as
// `bash -euo pipefail`, with only what must not touch the machine itself changed:
//   - /etc/skein and /etc/wireguard become a directory of the host's own under the test's;
//   - the user skein becomes nobody (the test adds no user to the machine);
//   - wg0 gets a name of the test's own, since wireguard-go's control socket lives in the
//     machine's /var/run/wireguard, shared by every namespace.

// docStep is one marked step of an example.
type docStep struct {
	kind       string // "on" or "copy"
	host       string
	background bool
	script     string // on: the block
	from, to   string // copy: HOST:PATH
}

var (
	exampleRE = regexp.MustCompile(`(?s)<!-- example: ([a-z0-9-]+) -->(.*?)<!-- end example -->`)
	stepRE    = regexp.MustCompile("(?s)<!-- on: ([a-z0-9-]+)(, background)? -->\\s*```sh\\n(.*?)```|<!-- copy: (\\S+) (\\S+) -->")
)

// docExamples reads the examples of docs/standalone.md.
func docExamples(t *testing.T) map[string][]docStep {
	t.Helper()
	b, err := os.ReadFile("../docs/standalone.md")
	if err != nil {
		t.Fatal(err)
	}
	examples := map[string][]docStep{}
	for _, m := range exampleRE.FindAllStringSubmatch(string(b), -1) {
		examples[m[1]] = parseSteps(t, m[2])
	}
	return examples
}

// docLab is the hosts of one example and what the test changes in the doc's commands.
type docLab struct {
	t     *testing.T
	dir   string // the hosts' directories and the binaries
	path  string // PATH with skein-gateway and wireguard-go first
	wg    string // the name wg0 becomes
	hosts map[string]*netnstest.NS
	logs  map[string]*safebuffer.Buffer
}

func newDocLab(t *testing.T) *docLab {
	netnstest.RequireRoot(t)
	for _, tool := range []string{"wg", "runuser", "bridge", "ping"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed (.ci/install-deps installs it): %v", tool, err)
		}
	}
	dir, bin := workdir(t)
	buildStockWG(t, dir)
	if filepath.Dir(bin) != dir {
		t.Fatalf("gateway binary %s not in %s", bin, dir)
	}
	l := &docLab{t: t, dir: dir, path: dir + ":" + os.Getenv("PATH"), wg: fmt.Sprintf("wgd%d", os.Getpid()%100000),
		hosts: map[string]*netnstest.NS{}, logs: map[string]*safebuffer.Buffer{}}
	// Registered before the namespaces, so it runs after they are gone: wireguard-go, killed
	// with its namespace, leaves its control socket behind.
	t.Cleanup(func() { os.Remove("/var/run/wireguard/" + l.wg + ".sock") })
	return l
}

func (l *docLab) host(name string) *netnstest.NS {
	if ns, ok := l.hosts[name]; ok {
		return ns
	}
	ns := netnstest.New(l.t, name)
	l.hosts[name] = ns
	return ns
}

// link joins two hosts with a veth pair named name on both sides.
func (l *docLab) link(a, b, name, addrA, addrB string) {
	netnstest.Veth(l.t, l.host(a), l.host(b), name, addrA, addrB)
}

// behind puts host h (a pod, a LAN host) behind router r on a link named name: r has gw, h has
// addr and its default route via gw.
func (l *docLab) behind(r, h, name, gw, addr string) {
	l.link(r, h, name, gw, addr)
	l.host(h).Run(l.t, "ip", "route", "add", "default", "via", strings.Split(gw, "/")[0])
}

// hostDir is where host's /etc/skein and /etc/wireguard are.
func (l *docLab) hostDir(host string) string {
	d := filepath.Join(l.dir, host)
	if err := os.MkdirAll(d, 0o755); err != nil {
		l.t.Fatal(err)
	}
	return d
}

// localize changes a block of the doc as the comment above says, and nothing else.
func (l *docLab) localize(host, script string) string {
	d := l.hostDir(host)
	r := strings.NewReplacer(
		"/etc/skein", d+"/etc/skein",
		"/etc/wireguard", d+"/etc/wireguard",
		"chown skein ", "chown nobody ",
		"runuser -u skein ", "runuser -u nobody ",
	)
	s := r.Replace(script)
	return regexp.MustCompile(`\bwg0\b`).ReplaceAllString(s, l.wg)
}

func (l *docLab) run(steps []docStep) {
	t := l.t
	for i, s := range steps {
		switch s.kind {
		case "copy":
			read := func(hp string) string {
				h, p, _ := strings.Cut(hp, ":")
				return l.localize(h, p)
			}
			b, err := os.ReadFile(read(s.from))
			if err != nil {
				t.Fatalf("step %d, copy %s: %v", i, s.from, err)
			}
			if err := os.WriteFile(read(s.to), b, 0o644); err != nil {
				t.Fatalf("step %d, copy to %s: %v", i, s.to, err)
			}
		case "on":
			ns, ok := l.hosts[s.host]
			if !ok {
				t.Fatalf("step %d runs on %q, a host the example's table does not have", i, s.host)
			}
			args := []string{"netns", "exec", ns.Name, "env", "PATH=" + l.path, "bash", "-euo", "pipefail", "-c", l.localize(s.host, s.script)}
			if !s.background {
				out, err := exec.Command("ip", args...).CombinedOutput()
				if err != nil {
					t.Fatalf("step %d on %s failed: %v\n--- script ---\n%s--- output ---\n%s", i, s.host, err, s.script, out)
				}
				t.Logf("on %s:\n%s", s.host, out)
				continue
			}
			logs := &safebuffer.Buffer{}
			l.logs[s.host] = logs
			cmd := exec.Command("ip", args...)
			cmd.Stdout, cmd.Stderr = logs, logs
			cmd.Env = childEnv()
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			host := s.host
			t.Cleanup(func() {
				syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
				done := make(chan struct{})
				go func() { cmd.Wait(); close(done) }()
				select {
				case <-done:
				case <-time.After(5 * time.Second):
					syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
					<-done
				}
				if t.Failed() {
					t.Logf("%s's gateway logged:\n%s", host, logs.String())
				}
			})
		}
	}
}

// gateway is the gateway running on host, for its /metrics.
func (l *docLab) gateway(host string) *cluster {
	return &cluster{gw: l.hosts[host], logs: l.logs[host]}
}

func (l *docLab) waitConnected(hosts ...string) {
	l.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for _, h := range hosts {
		g := l.gateway(h)
		for {
			if _, err := g.get("/healthz"); err == nil && g.metric(l.t, `skein_gateway_connection_state{state="Connected"}`) == 1 {
				break
			}
			if time.Now().After(deadline) {
				l.t.Fatalf("the gateway on %s never reached Connected", h)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// tcpCall sends data from host from (source address src) to dialled:port, where host to
// listens on its own address, and checks the data comes back whole and the listener saw the
// call from wantSeen.
func (l *docLab) tcpCall(from, src, to, listen, dialled, wantSeen string, data []byte) {
	t := l.t
	t.Helper()
	var ln net.Listener
	in(t, l.hosts[to], func() (err error) {
		ln, err = net.Listen("tcp4", listen+":7100")
		return err
	})
	defer ln.Close()
	seen := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		seen <- c.RemoteAddr().(*net.TCPAddr).IP.String()
		io.Copy(c, c)
	}()
	var conn net.Conn
	in(t, l.hosts[from], func() (err error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
		conn, err = d.DialContext(context.Background(), "tcp4", dialled+":7100")
		return err
	})
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	go conn.Write(data)
	got := make([]byte, len(data))
	if _, err := io.ReadFull(conn, got); err != nil {
		t.Fatalf("%s -> %s: echo: %v", from, dialled, err)
	}
	if sha256.Sum256(got) != sha256.Sum256(data) {
		t.Fatalf("%s -> %s: %d bytes came back changed", from, dialled, len(data))
	}
	if s := <-seen; s != wantSeen {
		t.Errorf("%s -> %s: the receiver saw the call from %s, want %s", from, dialled, s, wantSeen)
	}
}

func (l *docLab) ping(from, dst string, size int, df bool) (string, error) {
	args := []string{"ping", "-n", "-c", "2", "-i", "0.2", "-W", "2", "-s", fmt.Sprint(size)}
	if df {
		args = append(args, "-M", "do")
	}
	return l.hosts[from].Try(append(args, dst)...)
}

func TestStandaloneDoc(t *testing.T) {
	examples := docExamples(t)
	for _, name := range []string{"skein-skein", "stock-peer"} {
		if len(examples[name]) == 0 {
			t.Fatalf("docs/standalone.md has no example %q (or no steps in it)", name)
		}
	}
	if len(examples) != 2 {
		t.Errorf("docs/standalone.md has %d examples; this test runs skein-skein and stock-peer: run the others too", len(examples))
	}
	data := make([]byte, 4<<20)
	rand.Read(data)

	t.Run("skein-skein", func(t *testing.T) {
		l := newDocLab(t)
		l.link("a1", "gw-a", "eth0", "192.168.77.1/24", "192.168.77.2/24")
		l.link("gw-a", "gw-b", "wan", "198.51.100.1/24", "198.51.100.2/24")
		l.link("gw-b", "b1", "eth0", "192.168.78.2/24", "192.168.78.1/24")
		l.behind("a1", "pod-a", "cni0", "10.244.1.1/24", "10.244.1.5/24")
		l.behind("b1", "pod-b", "cni0", "10.244.2.1/24", "10.244.2.7/24")
		l.run(examples["skein-skein"])
		l.waitConnected("gw-a", "gw-b")

		l.tcpCall("pod-a", "10.244.1.5", "pod-b", "10.244.2.7", "10.71.2.7", "10.72.1.5", data)
		l.tcpCall("pod-b", "10.244.2.7", "pod-a", "10.244.1.5", "10.72.1.5", "10.71.2.7", data[:64<<10])
		if out, err := l.ping("pod-a", "10.71.2.7", 56, false); err != nil {
			t.Errorf("ping from A's pod to B's: %v\n%s", err, out)
		}
	})

	t.Run("stock-peer", func(t *testing.T) {
		l := newDocLab(t)
		l.link("a1", "gw-a", "eth0", "192.168.77.1/24", "192.168.77.2/24")
		l.link("gw-a", "s", "wan", "198.51.100.1/24", "198.51.100.2/24")
		l.behind("a1", "pod-a", "cni0", "10.244.1.1/24", "10.244.1.5/24")
		l.behind("s", "lan-s", "lan0", "10.244.1.1/24", "10.244.1.7/24")
		l.run(examples["stock-peer"])
		l.waitConnected("gw-a")
		if out := l.hosts["s"].Run(t, "wg", "show", l.wg, "latest-handshakes"); strings.Contains(out, "\t0\n") || !strings.Contains(out, "\t") {
			t.Errorf("the stock peer reports no handshake: %q", out)
		}

		// Both sites on 10.244.1.0/24: A's pods are 10.99.1.x to s's LAN, its hosts 10.71.1.x
		// to A's pods.
		l.tcpCall("pod-a", "10.244.1.5", "lan-s", "10.244.1.7", "10.71.1.7", "10.99.1.5", data)
		l.tcpCall("lan-s", "10.244.1.7", "pod-a", "10.244.1.5", "10.99.1.5", "10.71.1.7", data[:64<<10])
		if out, err := l.ping("lan-s", "10.99.1.5", 56, false); err != nil {
			t.Errorf("ping from s's LAN to A's pod: %v\n%s", err, out)
		}
		// The path MTU: 1340 bytes with DF cross; one more gets fragmentation needed from the
		// gateway, its quote translated back to what A's pod sent.
		if out, err := l.ping("pod-a", "10.71.1.7", 1340-28, true); err != nil {
			t.Errorf("a 1340-byte ping with DF from A's pod: %v\n%s", err, out)
		}
		if out, _ := l.ping("pod-a", "10.71.1.7", 1341-28, true); !strings.Contains(out, "mtu = 1340") {
			t.Errorf("a 1341-byte ping with DF from A's pod did not learn the MTU 1340:\n%s", out)
		}
		// Nothing of A's real addresses reached s: s's own LAN host never saw 10.244.1.5, and the
		// gateway counted its translations both ways.
		g := l.gateway("gw-a")
		for _, dir := range []string{"to-tunnel", "from-tunnel"} {
			if v := g.metric(t, `skein_gateway_nat_translated_total{direction="`+dir+`"}`); v <= 0 {
				t.Errorf("nat_translated %s = %v, want > 0", dir, v)
			}
		}
		if v := g.metric(t, `skein_gateway_packets_dropped_total{direction="to-tunnel",reason="nat_unmatched"}`); v != 0 {
			t.Errorf("%v packets from A's pods matched no local remap", v)
		}
	})
}

// TestNATMetricWithoutRemap: a gateway with nothing to translate counts no translation, also
// when the node's TSO sends superpackets the gateway cuts into segments (the metric used to be
// forwarded minus unmatched, which counted about 40,000 packets here). The stock peer runs what
// skein-gateway --print-peer-config prints, its placeholders filled in (wg[0] keeps the
// interface's name out of localize's reach, so that the sed gives the script's wg0 the test's
// name).
func TestNATMetricWithoutRemap(t *testing.T) {
	l := newDocLab(t)
	l.link("a1", "gw-a", "eth0", "192.168.77.1/24", "192.168.77.2/24")
	l.link("gw-a", "s", "wan", "198.51.100.1/24", "198.51.100.2/24")
	l.behind("a1", "pod-a", "cni0", "10.244.1.1/24", "10.244.1.5/24")
	l.behind("s", "lan-s", "lan0", "192.168.50.1/24", "192.168.50.7/24")
	l.run(parseSteps(t, `
<!-- on: a1 -->
`+"```sh"+`
sysctl -w net.ipv4.ip_forward=1
ip link add liqo.vxlan address 02:5b:00:00:01:01 type vxlan id 18952 dstport 4789 local 192.168.77.1 nolearning
ip link set liqo.vxlan mtu 1450 up
bridge fdb append 02:5b:00:00:00:0a dev liqo.vxlan dst 192.168.77.2
ip neigh replace 10.80.0.1 lladdr 02:5b:00:00:00:0a dev liqo.vxlan nud permanent
ip route add 192.168.50.0/24 via 10.80.0.1 dev liqo.vxlan onlink
`+"```"+`
<!-- on: gw-a -->
`+"```sh"+`
mkdir -p /etc/skein
(umask 077; wg genkey > /etc/skein/a.key)
wg pubkey < /etc/skein/a.key > /etc/skein/a.pub
`+"```"+`
<!-- on: s -->
`+"```sh"+`
mkdir -p /etc/wireguard
(umask 077; wg genkey > /etc/wireguard/s.key)
wg pubkey < /etc/wireguard/s.key > /etc/wireguard/s.pub
`+"```"+`
<!-- copy: gw-a:/etc/skein/a.pub s:/etc/wireguard/a.pub -->
<!-- copy: s:/etc/wireguard/s.pub gw-a:/etc/skein/s.pub -->
<!-- on: gw-a -->
`+"```sh"+`
cat > /etc/skein/a.yaml <<EOF
role: server
listenPort: 51820
privateKeyFile: /etc/skein/a.key
peerPublicKey: $(cat /etc/skein/s.pub)
remote:
  podCIDR: 192.168.50.0/24
overlay:
  listen: 192.168.77.2
  ip: 10.80.0.1
  mac: 02:5b:00:00:00:0a
nodes:
- name: a1
  vtep: 192.168.77.1
  mac: 02:5b:00:00:01:01
  podCIDRs: [10.244.1.0/24]
EOF
chown skein /etc/skein/a.key
`+"```"+`
<!-- on: gw-a, background -->
`+"```sh"+`
runuser -u skein -- skein-gateway --config /etc/skein/a.yaml
`+"```"+`
<!-- on: gw-a -->
`+"```sh"+`
runuser -u skein -- skein-gateway --print-peer-config --config /etc/skein/a.yaml > /etc/skein/peer.sh
`+"```"+`
<!-- copy: gw-a:/etc/skein/peer.sh s:/etc/wireguard/peer.sh -->
<!-- on: s -->
`+"```sh"+`
cat /etc/wireguard/peer.sh
sysctl -w net.ipv4.ip_forward=1
sed -e 's|PEER_PRIVATE_KEY_FILE|/etc/wireguard/s.key|; s|GATEWAY_ADDRESS|198.51.100.1|; s|wg[0]|wg0|g' /etc/wireguard/peer.sh | bash -euo pipefail
`+"```"+`
`))
	l.waitConnected("gw-a")
	data := make([]byte, 8<<20)
	rand.Read(data)
	l.tcpCall("pod-a", "10.244.1.5", "lan-s", "192.168.50.7", "192.168.50.7", "10.244.1.5", data)
	g := l.gateway("gw-a")
	if v := g.metric(t, `skein_gateway_packet_events_total{direction="to-tunnel",event="tso_segmented"}`); v <= 0 {
		t.Errorf("no superpacket reached the gateway (tso_segmented %v): the test did not test what it is for", v)
	}
	for _, dir := range []string{"to-tunnel", "from-tunnel"} {
		fwd := g.metric(t, `skein_gateway_packets_handled_total{direction="`+dir+`",outcome="forwarded"}`)
		if v := g.metric(t, `skein_gateway_nat_translated_total{direction="`+dir+`"}`); v != 0 || fwd < 1000 {
			t.Errorf("%s: %v translated of %v forwarded, want 0 of more than 1000", dir, v, fwd)
		}
	}
}

// parseSteps reads steps marked as in docs/standalone.md from text.
func parseSteps(t *testing.T, text string) []docStep {
	var steps []docStep
	for _, s := range stepRE.FindAllStringSubmatch(text, -1) {
		if s[4] != "" {
			steps = append(steps, docStep{kind: "copy", from: s[4], to: s[5]})
			continue
		}
		steps = append(steps, docStep{kind: "on", host: s[1], background: s[2] != "", script: s[3]})
	}
	if len(steps) == 0 {
		t.Fatal("no steps")
	}
	return steps
}
