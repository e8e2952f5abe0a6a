// Package connlimit bounds the TCP connections a listener hands out: in all, and per source
// address (an IPv6 /64 counts as one source). A connection beyond either bound is closed as
// it is accepted, and counted. Servers that anyone on the pod network can reach use it, so that
// idle connections cannot exhaust their memory (each costs a goroutine and buffers).
package connlimit

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
)

// Listener wraps a net.Listener.
type Listener struct {
	net.Listener
	// OnRefused, when set, is called for each connection closed over a bound (a server's own
	// dropped counter).
	OnRefused func()

	total, perSource int

	mu       sync.Mutex
	open     int
	bySource map[netip.Addr]int
	refused  atomic.Uint64
}

// Wrap bounds ln to total connections at once and perSource from one source.
func Wrap(ln net.Listener, total, perSource int) *Listener {
	return &Listener{Listener: ln, total: total, perSource: perSource, bySource: map[netip.Addr]int{}}
}

// Refused is how many connections were closed for being over a bound.
func (l *Listener) Refused() uint64 { return l.refused.Load() }

// source is a connection's source for the per-source bound: its address, IPv6 ones by /64.
func source(a net.Addr) netip.Addr {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}
	}
	ip := ap.Addr().Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.Addr()
	}
	return ip
}

// Accept returns the next connection within the bounds.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src := source(c.RemoteAddr())
		l.mu.Lock()
		ok := l.open < l.total && l.bySource[src] < l.perSource
		if ok {
			l.open++
			l.bySource[src]++
		}
		l.mu.Unlock()
		if !ok {
			l.refused.Add(1)
			if l.OnRefused != nil {
				l.OnRefused()
			}
			_ = c.Close()
			continue
		}
		return &conn{Conn: c, release: func() {
			l.mu.Lock()
			l.open--
			if l.bySource[src]--; l.bySource[src] <= 0 {
				delete(l.bySource, src)
			}
			l.mu.Unlock()
		}}, nil
	}
}

// conn gives its place back when it is closed (once).
type conn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
