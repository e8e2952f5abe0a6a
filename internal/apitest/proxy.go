package apitest

import (
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Proxy stands between clients and the API server at the TCP level (TLS passes through), so
// a test can make the API server unreachable for some clients, as a frozen control plane or a
// broken network would, while the test itself still reaches it directly.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	frozen bool
	conns  map[net.Conn]struct{} // client sides, open or held
	ups    map[net.Conn]struct{} // API server sides
}

// Proxy starts a proxy to this API server; it stops with the test.
func (e *Env) Proxy(tb testing.TB) *Proxy {
	tb.Helper()
	u, err := url.Parse(e.Config.Host)
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{ln: ln, target: u.Host, conns: map[net.Conn]struct{}{}, ups: map[net.Conn]struct{}{}}
	go p.serve()
	tb.Cleanup(func() {
		ln.Close()
		p.closeAll()
	})
	return p
}

// KubeconfigFile writes a kubeconfig of the API server's credentials that goes through p.
func (p *Proxy) KubeconfigFile(tb testing.TB, e *Env) string {
	tb.Helper()
	cfg := strings.ReplaceAll(string(e.env.KubeConfig), p.target, p.ln.Addr().String())
	path := filepath.Join(tb.TempDir(), "kubeconfig-proxied")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}

// Freeze makes the API server unreachable through p as a stopped process would be: open
// connections get no more answers and new ones connect but are never answered.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	p.frozen = true
	p.mu.Unlock()
	p.closeUpstreams()
}

// Thaw ends a freeze: the held connections are closed (clients reconnect) and new ones are
// forwarded again.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	p.frozen = false
	p.mu.Unlock()
	p.closeAll()
}

// ThawHung ends a freeze for new connections only: those held during the freeze stay open and
// unanswered, as connections to a restarted API server do when nothing tells the client they
// are dead (no RST reaches it). A client that keeps using such a connection hangs until it
// gives up on it.
func (p *Proxy) ThawHung() {
	p.mu.Lock()
	p.frozen = false
	p.mu.Unlock()
}

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.conns[c] = struct{}{}
		frozen := p.frozen
		p.mu.Unlock()
		if frozen {
			continue // held: connected, never answered
		}
		go p.pipe(c)
	}
}

func (p *Proxy) pipe(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		p.drop(c)
		return
	}
	p.mu.Lock()
	p.ups[up] = struct{}{}
	p.mu.Unlock()
	go func() { _, _ = io.Copy(up, c) }()
	_, _ = io.Copy(c, up)
	up.Close()
	p.mu.Lock()
	delete(p.ups, up)
	frozen := p.frozen
	p.mu.Unlock()
	// The API server's side ended. Unless frozen (the client must see a hang), so does ours.
	if !frozen {
		p.drop(c)
	}
}

func (p *Proxy) drop(c net.Conn) {
	c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *Proxy) closeUpstreams() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for up := range p.ups {
		up.Close()
	}
}

func (p *Proxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for up := range p.ups {
		up.Close()
	}
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}
