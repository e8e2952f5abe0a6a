package appliance

import (
	"bufio"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/skein-net/skein/control/gateway/config"
)

// TestGatewayHTTPConnectionsBounded (found by an attack review): the gateway's HTTP port
// (health, readiness, metrics; in a cluster any pod reaches it) kept every connection a client
// opened, with no idle timeout: 13,000 idle connections, about 20 KB each, would fill the
// gateway pod's 256 Mi and cut the peering. At most httpMaxConnsPerSource connections from
// one source are served at once (the rest closed as they come), and a closed one gives its
// place back.
func TestGatewayHTTPConnectionsBounded(t *testing.T) {
	g := &Gateway{plan: &config.Gateway{}, log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))}
	if err := g.serveHTTP("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.http.Close() })
	addr := g.httpLn.Addr().String()
	ask := func(c net.Conn) bool {
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")); err != nil {
			return false
		}
		r := bufio.NewReader(c)
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				return false
			}
			if strings.TrimSpace(l) == "ok" {
				return true
			}
		}
	}
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	answered := 0
	for range 3 * httpMaxConnsPerSource {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if ask(c) {
			answered++
		}
	}
	if answered != httpMaxConnsPerSource {
		t.Errorf("%d connections from one source held open: %d answered, want %d", 3*httpMaxConnsPerSource, answered, httpMaxConnsPerSource)
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		ok := ask(c)
		c.Close()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no place given back after the connections closed")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if s := boundedHTTPServer(nil); s.IdleTimeout == 0 || s.ReadTimeout == 0 || s.ReadHeaderTimeout == 0 {
		t.Errorf("the gateway's HTTP server has no idle or read deadline: %+v", s)
	}
}
