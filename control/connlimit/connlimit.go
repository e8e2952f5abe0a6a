// Package connlimit bounds the TCP connections listeners hand out: in all, and per source
// address (an IPv6 /64 counts as one source). A connection beyond either bound is reset as it
// is accepted, and counted. Servers that anyone on the pod network can reach use it (the
// gateway's HTTP port, skein's DNS, skein-probe), so that idle connections cannot exhaust their
// memory: each costs a goroutine and buffers.
package connlimit

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Limiter is a budget of connections, shared by the listeners it wraps (a server with
// several ports holds one budget over all of them).
type Limiter struct {
	// OnRefused, when set, is called for each connection closed over a bound (a server's own
	// dropped counter). Set it before the first Accept.
	OnRefused func()

	total, perSource int

	mu       sync.Mutex
	open     int
	bySource map[netip.Addr]int
	refused  atomic.Uint64
}

// New returns a budget of total connections at once, perSource of them from one source.
func New(total, perSource int) *Limiter {
	return &Limiter{total: total, perSource: perSource, bySource: map[netip.Addr]int{}}
}

// Wrap bounds ln alone to total connections at once and perSource from one source.
func Wrap(ln net.Listener, total, perSource int) net.Listener {
	return New(total, perSource).Listener(ln)
}

// Listener wraps ln: Accept returns only the connections within the budget, and rides out a
// full descriptor table (EMFILE, ENFILE) and connections aborted before they were accepted
// instead of failing; closing a returned connection gives its place back.
func (l *Limiter) Listener(ln net.Listener) net.Listener { return &listener{Listener: ln, l: l} }

// Refused is how many connections were closed for being over a bound.
func (l *Limiter) Refused() uint64 { return l.refused.Load() }

// Open is how many connections hold a place now.
func (l *Limiter) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// source is a connection's source for the per-source bound: its address, IPv6 ones by /64.
func source(a net.Addr) netip.Addr {
	var ap netip.AddrPort
	switch v := a.(type) {
	case *net.TCPAddr:
		ap = v.AddrPort()
	default:
		var err error
		if ap, err = netip.ParseAddrPort(a.String()); err != nil {
			return netip.Addr{}
		}
	}
	ip := ap.Addr().Unmap().WithZone("")
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.Addr()
	}
	return ip
}

func (l *Limiter) admit(src netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open >= l.total || l.bySource[src] >= l.perSource {
		return false
	}
	l.open++
	l.bySource[src]++
	return true
}

func (l *Limiter) release(src netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.bySource[src]--; l.bySource[src] <= 0 {
		delete(l.bySource, src)
	}
}

type listener struct {
	net.Listener
	l *Limiter
}

func (ln *listener) Accept() (net.Conn, error) {
	for {
		c, err := ln.Listener.Accept()
		if err != nil {
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ECONNABORTED) {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			return nil, err
		}
		src := source(c.RemoteAddr())
		if !ln.l.admit(src) {
			ln.l.refused.Add(1)
			if ln.l.OnRefused != nil {
				ln.l.OnRefused()
			}
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // a reset: nothing of it stays in TIME_WAIT here
			}
			_ = c.Close()
			continue
		}
		return &conn{Conn: c, release: func() { ln.l.release(src) }}, nil
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
