package probe

import (
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/skein-net/skein/control/connlimit"
)

// A skein-probe server is unauthenticated: anyone who reaches a probe pod may call it. What a
// caller can cost it is bounded (issue 40): TCP connections at once per server and per source
// address, the time a connection may stay without sending its request or between reads,
// what a request may ask (MaxDuration), and buffers are only allocated once a valid request
// has arrived. The UDP ports answer only well-formed probe datagrams, never with more bytes
// than the datagram that asked.

// Limits bound what one skein-probe server gives its callers.
type Limits struct {
	// MaxConns is how many TCP connections the server holds at once, over all its ports.
	MaxConns int
	// MaxConnsPerSource is how many of them may come from one source address (an IPv6 /64).
	// skeinctl bench asks for up to 128 parallel streams from one pod.
	MaxConnsPerSource int
	// RequestTimeout is how long a connection may take to send its request.
	RequestTimeout time.Duration
	// IdleTimeout is how long a connection may stay silent once data flows.
	IdleTimeout time.Duration
}

// DefaultLimits are skein-probe serve's.
var DefaultLimits = Limits{MaxConns: 512, MaxConnsPerSource: 160, RequestTimeout: 5 * time.Second, IdleTimeout: 15 * time.Second}

// Stats count what a server refused.
type Stats struct {
	Open      int64 // TCP connections held now
	Refused   int64 // TCP connections closed at once: over MaxConns or MaxConnsPerSource
	Malformed int64 // requests and datagrams that are not skein-probe's, dropped
	TimedOut  int64 // TCP connections closed for a missing request or silence
}

// Server serves skein-probe's ports under one set of limits.
type Server struct {
	host   string
	limits Limits
	conns  *connlimit.Limiter // over all the server's TCP ports

	malformed, timedOut atomic.Int64
}

// NewServer returns a server that answers calls as host (its pod's name).
func NewServer(host string, l Limits) *Server {
	d := DefaultLimits
	if l.MaxConns <= 0 {
		l.MaxConns = d.MaxConns
	}
	if l.MaxConnsPerSource <= 0 {
		l.MaxConnsPerSource = d.MaxConnsPerSource
	}
	if l.RequestTimeout <= 0 {
		l.RequestTimeout = d.RequestTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = d.IdleTimeout
	}
	return &Server{host: host, limits: l, conns: connlimit.New(l.MaxConns, l.MaxConnsPerSource)}
}

// Stats returns the server's counts.
func (s *Server) Stats() Stats {
	return Stats{Open: int64(s.conns.Open()), Refused: int64(s.conns.Refused()), Malformed: s.malformed.Load(), TimedOut: s.timedOut.Load()}
}

// Listener wraps ln so that Accept returns only the connections the limits admit (the rest
// are reset at once and counted); closing a returned connection frees its place. It also
// rides out a full descriptor table instead of failing.
func (s *Server) Listener(ln net.Listener) net.Listener { return s.conns.Listener(ln) }

// serveConns accepts admitted connections from ln and runs handle on each in its own
// goroutine, closing it after.
func (s *Server) serveConns(ln net.Listener, handle func(net.Conn)) error {
	ln = s.Listener(ln)
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			handle(c)
		}()
	}
}

// countTimeout counts err when it is a deadline passing.
func (s *Server) countTimeout(err error) {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		s.timedOut.Add(1)
	}
}

// idleReader reads from c with a deadline that moves with each read: idle from now, never
// past end.
type idleReader struct {
	c    net.Conn
	idle time.Duration
	end  time.Time
}

func (r idleReader) Read(b []byte) (int, error) {
	d := time.Now().Add(r.idle)
	if d.After(r.end) {
		d = r.end
	}
	_ = r.c.SetReadDeadline(d)
	return r.c.Read(b)
}
