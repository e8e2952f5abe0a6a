package appliance

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skein-net/skein/control/gateway/config"
)

// TestGatewayHTTPConnectionsBounded (found by an attack review): the gateway's HTTP port
// (health, readiness, metrics; in a cluster any pod reaches it) kept every connection a client
// opened, with no idle timeout: 13,000 idle connections, about 20 KB each, would fill the
// gateway pod's 256 Mi and cut the peering. Now each connection is closed after its answer, at
// most httpMaxConnsPerSource from one source are open at once (the rest closed as they come),
// and a closed one gives its place back.
func TestGatewayHTTPConnectionsBounded(t *testing.T) {
	g := &Gateway{plan: &config.Gateway{}, log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))}
	if err := g.serveHTTP("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.http.Close() })
	addr := g.httpLn.Addr().String()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if errors.Is(err, syscall.ECONNRESET) {
			// Refused, and reset before the dial returned (loopback is that fast): a
			// connection that fails as a reset one would.
			c, _ = net.Pipe()
			c.Close()
			return c
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// ask sends one request and reports whether it was answered, and whether the server then
	// closed the connection.
	ask := func(c net.Conn) (answered, closed bool) {
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")); err != nil {
			return false, true
		}
		r := bufio.NewReader(c)
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				return false, true
			}
			if strings.TrimSpace(l) == "ok" {
				break
			}
		}
		_, err := r.ReadByte()
		return true, err == io.EOF
	}
	// One answer, then the server closes the connection: no idle keep-alive to hold.
	if answered, closed := ask(dial()); !answered || !closed {
		t.Errorf("a request: answered %v, connection closed after it %v; want both", answered, closed)
	}
	// Silent connections take the places of their source: of one more than the bound, one is
	// closed as it comes (whichever the server accepted last), and a further one is not served.
	var silent []net.Conn
	for range httpMaxConnsPerSource + 1 {
		silent = append(silent, dial())
	}
	closedByServer := func() int {
		n := 0
		one := make([]byte, 1)
		for _, c := range silent {
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
			// Closed as it came: a reset (the limiter refuses with one), or an EOF.
			if _, err := c.Read(one); err == io.EOF || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrClosedPipe) {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(3 * time.Second)
	for closedByServer() == 0 && time.Now().Before(deadline) {
	}
	if n := closedByServer(); n != 1 {
		t.Errorf("%d silent connections from one source: %d closed by the server, want 1 (bound %d)", httpMaxConnsPerSource+1, n, httpMaxConnsPerSource)
	}
	if answered, _ := ask(dial()); answered {
		t.Errorf("a connection beyond %d silent ones from one source was served", httpMaxConnsPerSource)
	}
	for _, c := range silent {
		c.Close()
	}
	deadline = time.Now().Add(5 * time.Second)
	for {
		if answered, _ := ask(dial()); answered {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no place given back after the silent connections closed")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if s := boundedHTTPServer(nil); s.IdleTimeout == 0 || s.ReadTimeout == 0 || s.ReadHeaderTimeout == 0 {
		t.Errorf("the gateway's HTTP server has no idle or read deadline: %+v", s)
	}
}
