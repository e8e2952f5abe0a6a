package probe

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The measurement ports of skein-probe serve.
const (
	EchoPort       = 7073 // TCP echo: request/response latency
	ThroughputPort = 7074 // TCP source and sink
	RatePort       = 7075 // UDP sink that counts per session
)

// MaxDuration bounds every measurement, on both sides.
const MaxDuration = 10 * time.Minute

// Throughput is a TCP throughput measurement.
type Throughput struct {
	Streams       int     `json:"streams"`
	Reverse       bool    `json:"reverse"` // the server sent, the caller received
	Bytes         int64   `json:"bytes"`   // counted by the receiver
	Seconds       float64 `json:"seconds"`
	BitsPerSecond float64 `json:"bitsPerSecond"`
}

// Rate is a UDP packet-rate measurement.
type Rate struct {
	Size          int     `json:"size"` // IPv4 packet size: datagram + 28
	Sent          int64   `json:"sent"`
	Received      int64   `json:"received"` // counted by the server
	Seconds       float64 `json:"seconds"`
	PacketsPerSec float64 `json:"packetsPerSecond"` // received
	LossPercent   float64 `json:"lossPercent"`
	BitsPerSecond float64 `json:"bitsPerSecond"` // received IP packets
}

// Latency is a request/response latency measurement over one TCP connection.
type Latency struct {
	Count    int   `json:"count"`
	Size     int   `json:"size"`
	P50Micro int64 `json:"p50Us"`
	P90Micro int64 `json:"p90Us"`
	P99Micro int64 `json:"p99Us"`
}

const (
	modeUpload   = 'u' // the caller sends, the server counts and answers the count
	modeDownload = 'd' // the server sends for the duration given
)

// ServeThroughput serves TCP throughput measurements on ln until it is closed, under
// DefaultLimits: a connection starts with a mode byte and a duration in milliseconds (4
// bytes, big endian, 1 ms to MaxDuration; a request for more is refused: closed unanswered).
// Upload: the server reads until EOF and answers the byte count (8 bytes). Download: the
// server writes for the duration and closes.
func ServeThroughput(ln net.Listener) error { return NewServer("", DefaultLimits).ServeThroughput(ln) }

// throughputBuffer is what the throughput server reads or writes at once.
const throughputBuffer = 128 << 10

// ServeThroughput is the package's ServeThroughput on s.
func (s *Server) ServeThroughput(ln net.Listener) error {
	return s.serveConns(ln, func(c net.Conn) {
		var hdr [5]byte
		_ = c.SetReadDeadline(time.Now().Add(s.limits.RequestTimeout))
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			s.countTimeout(err)
			return
		}
		ms := binary.BigEndian.Uint32(hdr[1:])
		d := time.Duration(ms) * time.Millisecond
		if (hdr[0] != modeUpload && hdr[0] != modeDownload) || ms == 0 || d > MaxDuration {
			s.malformed.Add(1)
			return
		}
		switch hdr[0] {
		case modeUpload:
			// The caller sends for d; silence longer than IdleTimeout, or sending past d
			// with a grace for slow paths, ends it.
			// (io.Discard reads with its own pooled buffers.)
			r := idleReader{c: c, idle: s.limits.IdleTimeout, end: time.Now().Add(d + 30*time.Second)}
			n, err := io.Copy(io.Discard, r)
			if err != nil {
				s.countTimeout(err)
				return
			}
			var cnt [8]byte
			binary.BigEndian.PutUint64(cnt[:], uint64(n))
			_ = c.SetWriteDeadline(time.Now().Add(s.limits.RequestTimeout))
			_, _ = c.Write(cnt[:])
		case modeDownload:
			buf := make([]byte, throughputBuffer) // a valid request: only now the buffer
			end := time.Now().Add(d)
			_ = c.SetWriteDeadline(end.Add(5 * time.Second))
			for time.Now().Before(end) {
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		}
	})
}

// MeasureThroughput runs streams parallel TCP connections to a skein-probe server for d, the
// caller sending (or, reverse, receiving), and returns what the receivers counted.
func MeasureThroughput(ctx context.Context, to netip.AddrPort, streams int, reverse bool, d time.Duration) (Throughput, error) {
	if streams < 1 || streams > 128 || d <= 0 || d > MaxDuration {
		return Throughput{}, fmt.Errorf("streams 1-128 and a duration up to %s", MaxDuration)
	}
	conns := make([]net.Conn, 0, streams)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range streams {
		c, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", to.String())
		if err != nil {
			return Throughput{}, err
		}
		conns = append(conns, c)
	}
	mode := byte(modeUpload)
	if reverse {
		mode = modeDownload
	}
	var total atomic.Int64
	errs := make([]error, streams)
	start := time.Now()
	end := start.Add(d)
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var hdr [5]byte
			hdr[0] = mode
			binary.BigEndian.PutUint32(hdr[1:], uint32(d.Milliseconds()))
			if _, err := c.Write(hdr[:]); err != nil {
				errs[i] = err
				return
			}
			buf := make([]byte, 128<<10)
			if reverse {
				_ = c.SetReadDeadline(end.Add(30 * time.Second))
				n, err := io.CopyBuffer(io.Discard, c, buf)
				total.Add(n)
				errs[i] = err
				return
			}
			_ = c.SetWriteDeadline(end.Add(5 * time.Second))
			for time.Now().Before(end) {
				if _, err := c.Write(buf); err != nil {
					errs[i] = err
					return
				}
			}
			_ = c.(*net.TCPConn).CloseWrite()
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			var cnt [8]byte
			if _, err := io.ReadFull(c, cnt[:]); err != nil {
				errs[i] = fmt.Errorf("the server's count: %w", err)
				return
			}
			total.Add(int64(binary.BigEndian.Uint64(cnt[:])))
		}()
	}
	stop := context.AfterFunc(ctx, func() {
		for _, c := range conns {
			c.Close()
		}
	})
	wg.Wait()
	stop()
	secs := time.Since(start).Seconds()
	if !reverse {
		secs = d.Seconds() // the senders stopped at end; what is counted was sent by then
	}
	if err := errors.Join(errs...); err != nil {
		return Throughput{}, err
	}
	if ctx.Err() != nil {
		return Throughput{}, ctx.Err()
	}
	n := total.Load()
	return Throughput{Streams: streams, Reverse: reverse, Bytes: n, Seconds: secs, BitsPerSecond: float64(n) * 8 / secs}, nil
}

// rateMagic starts every datagram to the rate sink: "skr" and the protocol's version.
var rateMagic = []byte("skr\x01")

// rateHeader starts every datagram to the rate sink: rateMagic, a session id (8 bytes) and a
// kind.
const rateHeader = 4 + 8 + 1

// rateQuerySize is the size of a query: at least its answer's (the header and a count), so
// the sink answers with no more bytes than it was sent.
const rateQuerySize = 32

const (
	rateData  = 'd'
	rateQuery = 'q' // answered with the session's count (8 bytes after the header)
)

// ServeRate counts datagrams per session on pc until it is closed and answers queries, under
// DefaultLimits. It remembers at most 1024 sessions (the oldest are forgotten).
func ServeRate(pc net.PacketConn) error { return NewServer("", DefaultLimits).ServeRate(pc) }

// ServeRate is the package's ServeRate on s: datagrams without the rate sink's header, and
// queries shorter than their answer, are dropped and counted as malformed.
func (s *Server) ServeRate(pc net.PacketConn) error {
	counts := map[uint64]int64{}
	var order []uint64
	buf := make([]byte, 65536)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			return err
		}
		kind := byte(0)
		if n >= rateHeader && bytes.HasPrefix(buf[:n], rateMagic) {
			kind = buf[rateHeader-1]
		}
		if kind != rateData && (kind != rateQuery || n < rateQuerySize) {
			s.malformed.Add(1)
			continue
		}
		id := binary.BigEndian.Uint64(buf[len(rateMagic):])
		if _, ok := counts[id]; !ok {
			if len(order) == 1024 {
				delete(counts, order[0])
				order = order[1:]
			}
			order = append(order, id)
			counts[id] = 0
		}
		switch kind {
		case rateData:
			counts[id]++
		case rateQuery:
			var reply [rateHeader + 8]byte
			copy(reply[:rateHeader], buf[:rateHeader])
			binary.BigEndian.PutUint64(reply[rateHeader:], uint64(counts[id]))
			_, _ = pc.WriteTo(reply[:], from)
		}
	}
}

// MeasureRate sends datagrams making IPv4 packets of size bytes to a skein-probe server as
// fast as the socket takes them for d, then asks the server how many arrived.
func MeasureRate(ctx context.Context, to netip.AddrPort, size int, d time.Duration) (Rate, error) {
	if size < 28+rateHeader || size > 9000 || d <= 0 || d > MaxDuration {
		return Rate{}, fmt.Errorf("size %d-9000 and a duration up to %s", 28+rateHeader, MaxDuration)
	}
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(to))
	if err != nil {
		return Rate{}, err
	}
	defer c.Close()
	dgram := make([]byte, size-28)
	copy(dgram, rateMagic)
	_, _ = rand.Read(dgram[len(rateMagic) : len(rateMagic)+8])
	id := binary.BigEndian.Uint64(dgram[len(rateMagic):])
	dgram[rateHeader-1] = rateData
	var sent int64
	start := time.Now()
	end := start.Add(d)
	for i := 0; ; i++ {
		if i%64 == 0 && (time.Now().After(end) || ctx.Err() != nil) {
			break
		}
		if _, err := c.Write(dgram); err == nil {
			sent++
		}
		// ECONNREFUSED and ENOBUFS are counted as not sent, and the loop goes on.
	}
	secs := time.Since(start).Seconds()
	if ctx.Err() != nil {
		return Rate{}, ctx.Err()
	}
	// Let the queues drain, then ask (a few times: the query may be lost too).
	time.Sleep(300 * time.Millisecond)
	q := make([]byte, rateQuerySize)
	copy(q, rateMagic)
	binary.BigEndian.PutUint64(q[len(rateMagic):], id)
	q[rateHeader-1] = rateQuery
	reply := make([]byte, 64)
	for try := range 10 {
		if _, err := c.Write(q); err != nil && try == 9 {
			return Rate{}, err
		}
		_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		for {
			n, err := c.Read(reply)
			if err != nil {
				break
			}
			if n == rateHeader+8 && bytes.HasPrefix(reply, rateMagic) && binary.BigEndian.Uint64(reply[len(rateMagic):]) == id && reply[rateHeader-1] == rateQuery {
				got := int64(binary.BigEndian.Uint64(reply[rateHeader:]))
				r := Rate{Size: size, Sent: sent, Received: got, Seconds: secs}
				r.PacketsPerSec = float64(got) / secs
				r.BitsPerSecond = r.PacketsPerSec * float64(size) * 8
				if sent > 0 {
					r.LossPercent = max(0, 100*float64(sent-got)/float64(sent))
				}
				return r, nil
			}
		}
	}
	return Rate{}, errors.New("the server never answered how many datagrams it received")
}

// ServeEcho echoes what each TCP connection on ln sends, until ln is closed, under
// DefaultLimits.
func ServeEcho(ln net.Listener) error { return NewServer("", DefaultLimits).ServeEcho(ln) }

// echoBuffer bounds the echo server's buffer; it starts at echoFirst bytes and doubles each
// time a read fills it, so it follows the size of the requests.
const (
	echoFirst  = 64
	echoBuffer = 64 << 10
)

// ServeEcho is the package's ServeEcho on s: the first bytes must come within
// RequestTimeout, later ones within IdleTimeout of the last, and a connection lasts at most
// MaxDuration and a minute.
func (s *Server) ServeEcho(ln net.Listener) error {
	return s.serveConns(ln, func(c net.Conn) {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
		end := time.Now().Add(MaxDuration + time.Minute)
		var buf []byte
		for {
			wait := s.limits.IdleTimeout
			if buf == nil {
				wait = s.limits.RequestTimeout
				buf = make([]byte, echoFirst)
			}
			r := idleReader{c: c, idle: wait, end: end}
			n, err := r.Read(buf)
			if err != nil {
				s.countTimeout(err)
				return
			}
			_ = c.SetWriteDeadline(time.Now().Add(s.limits.IdleTimeout))
			if _, err := c.Write(buf[:n]); err != nil {
				return
			}
			if n == len(buf) && len(buf) < echoBuffer {
				buf = make([]byte, 2*len(buf))
			}
		}
	})
}

// MeasureLatency does request/response round trips of size bytes over one TCP connection
// (TCP_NODELAY), one at a time, for d or count round trips, whichever ends first.
func MeasureLatency(ctx context.Context, to netip.AddrPort, size, count int, d time.Duration) (Latency, error) {
	if size < 1 || size > 65536 || count < 1 || count > 1000000 || d <= 0 || d > MaxDuration {
		return Latency{}, fmt.Errorf("size 1-65536, count 1-1000000 and a duration up to %s", MaxDuration)
	}
	c, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", to.String())
	if err != nil {
		return Latency{}, err
	}
	defer c.Close()
	_ = c.(*net.TCPConn).SetNoDelay(true)
	end := time.Now().Add(d)
	_ = c.SetDeadline(end.Add(10 * time.Second))
	req, resp := make([]byte, size), make([]byte, size)
	lat := make([]time.Duration, 0, min(count, 100000))
	for len(lat) < count && time.Now().Before(end) && ctx.Err() == nil {
		t := time.Now()
		if _, err := c.Write(req); err != nil {
			return Latency{}, err
		}
		if _, err := io.ReadFull(c, resp); err != nil {
			return Latency{}, err
		}
		lat = append(lat, time.Since(t))
	}
	if len(lat) == 0 {
		return Latency{}, errors.New("no round trip completed")
	}
	slices.Sort(lat)
	pct := func(p float64) int64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds() }
	return Latency{Count: len(lat), Size: size, P50Micro: pct(0.50), P90Micro: pct(0.90), P99Micro: pct(0.99)}, nil
}
