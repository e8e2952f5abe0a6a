package probe_test

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skein-net/skein/control/probe"
)

// listen opens a loopback listener served by serve, closed when the test ends.
func listen(t *testing.T, serve func(net.Listener) error) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = serve(ln) }()
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// heapInUse is the heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// closedWithin reports whether the far side closed c (EOF or reset) within d, without
// having sent anything.
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	var b [1]byte
	n, err := c.Read(b[:])
	return n == 0 && err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

// TestIdleConnectionsBounded: a caller opening many idle connections from one address (the
// issue-40 attack: 9,000 connections of 5 bytes grew a server from 8 to 214 MB and held it
// for minutes) gets at most MaxConnsPerSource of them, each closed once the request
// deadline passes, and the server's heap stays bounded meanwhile. Each port is attacked
// with what it waits for: nothing at all (echo), a valid throughput header and then
// silence (throughput).
func TestIdleConnectionsBounded(t *testing.T) {
	const conns = 1000 // bounded: a loop of 1,000 dials, each 2 descriptors
	upload := make([]byte, 5)
	upload[0] = 'u'
	binary.BigEndian.PutUint32(upload[1:], uint32((9 * time.Minute).Milliseconds()))
	for _, tc := range []struct {
		name  string
		serve func(net.Listener) error
		send  []byte
	}{
		{"echo", probe.ServeEcho, nil},
		{"throughput", probe.ServeThroughput, upload},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := listen(t, tc.serve)
			before := heapInUse()
			var open []net.Conn
			defer func() {
				for _, c := range open {
					c.Close()
				}
			}()
			refused := 0 // reset while connecting (the server closed it at once)
			for range conns {
				c, err := net.DialTimeout("tcp", addr, 2*time.Second)
				if errors.Is(err, syscall.ECONNRESET) {
					refused++
					continue
				}
				if err != nil {
					t.Fatalf("dial %d: %v", len(open), err)
				}
				open = append(open, c)
				if tc.send != nil {
					_, _ = c.Write(tc.send) // a refused one may be reset already
				}
			}
			// Let the server take them all in (its accept loop and handlers run).
			time.Sleep(500 * time.Millisecond)
			grown := int64(heapInUse()) - int64(before)
			t.Logf("%d idle connections: heap in use grew %d KiB", conns, grown/1024)
			if grown > 24<<20 {
				t.Errorf("heap grew %d MiB with %d idle connections from one address, want under 24 MiB", grown>>20, conns)
			}
			// Beyond the per-source cap, connections are closed at once.
			for _, c := range open {
				if closedWithin(c, 5*time.Millisecond) {
					refused++
				}
			}
			if want := conns - probe.DefaultLimits.MaxConnsPerSource; refused < want {
				t.Errorf("%d of %d connections from one address closed at once, want at least %d (cap %d per source)", refused, conns, want, probe.DefaultLimits.MaxConnsPerSource)
			}
			// The admitted ones are closed once the request deadline passes.
			deadline := time.Now().Add(probe.DefaultLimits.RequestTimeout + probe.DefaultLimits.IdleTimeout + 5*time.Second)
			idle := 0
			for _, c := range open {
				if !closedWithin(c, time.Until(deadline)) {
					idle++
				}
			}
			if idle > 0 {
				t.Errorf("%d idle connections still open %v after they were made", idle, probe.DefaultLimits.RequestTimeout+probe.DefaultLimits.IdleTimeout+5*time.Second)
			}
		})
	}
}

// TestOtherSourceServedDuringFlood: while one address holds every connection it may, another
// address (127.0.0.2, loopback too) is still served.
func TestOtherSourceServedDuringFlood(t *testing.T) {
	addr := listen(t, probe.ServeEcho)
	var open []net.Conn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	for range probe.DefaultLimits.MaxConnsPerSource + 10 {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if errors.Is(err, syscall.ECONNRESET) {
			continue // refused
		}
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
	}
	d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Skipf("no 127.0.0.2 on this loopback: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "hello" {
		t.Fatalf("echo from another address during a flood: %q, %v", got, err)
	}
}

// TestThroughputDurationBounded: a throughput request for longer than MaxDuration (what
// skeinctl can ask) is refused: the connection is closed without a byte sent.
func TestThroughputDurationBounded(t *testing.T) {
	addr := listen(t, probe.ServeThroughput)
	for _, ms := range []uint32{^uint32(0), uint32(probe.MaxDuration.Milliseconds()) + 1, 0} {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		hdr := make([]byte, 5)
		hdr[0] = 'd'
		binary.BigEndian.PutUint32(hdr[1:], ms)
		if _, err := c.Write(hdr); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		n, err := io.Copy(io.Discard, io.LimitReader(c, 1<<20))
		c.Close()
		if n != 0 || err != nil {
			t.Errorf("download for %d ms: got %d bytes (%v), want the connection closed without data", ms, n, err)
		}
	}
	// Within the bound, it is served.
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hdr := []byte{'d', 0, 0, 0, 100}
	if _, err := c.Write(hdr); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := io.Copy(io.Discard, c); n == 0 || err != nil {
		t.Errorf("download for 100 ms: %d bytes, %v", n, err)
	}
}

// udpServer runs a probe server's call ports on loopback and returns its UDP address.
func udpServer(t *testing.T) (*probe.Server, *net.UDPAddr) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := probe.NewServer("probe-pod", probe.DefaultLimits)
	go func() { _ = s.ServeCalls(ln, pc) }()
	t.Cleanup(func() { ln.Close() })
	return s, pc.LocalAddr().(*net.UDPAddr)
}

// TestUDPAnswersProbesOnly: the UDP port answers a well-formed probe datagram (as skein-probe
// call and check send) and drops anything else, counting it: it is no reflector of arbitrary
// datagrams, and its answer is never larger than the datagram that asked.
func TestUDPAnswersProbesOnly(t *testing.T) {
	s, addr := udpServer(t)
	c, err := net.DialUDP("udp", nil, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ask := func(dgram []byte) (string, bool) {
		if _, err := c.Write(dgram); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		buf := make([]byte, 2048)
		n, err := c.Read(buf)
		if err != nil {
			return "", false
		}
		if n > len(dgram) {
			t.Errorf("a %d-byte datagram got a %d-byte answer: an amplifier", len(dgram), n)
		}
		return string(buf[:n]), true
	}
	for _, bad := range [][]byte{
		[]byte("call"), // the old unversioned call
		[]byte("GET / HTTP/1.0\r\n\r\n"),
		make([]byte, 512),
		append([]byte("skp\x09"), make([]byte, 300)...), // an unknown version
		probe.CallDatagram("x")[:8],                     // too short to carry the answer
	} {
		if got, ok := ask(bad); ok {
			t.Errorf("malformed datagram %q answered with %q", bad[:min(len(bad), 16)], got)
		}
	}
	if got := s.Stats().Malformed; got != 5 {
		t.Errorf("malformed datagrams counted: %d, want 5", got)
	}
	got, ok := ask(probe.CallDatagram("call"))
	if !ok || !strings.HasPrefix(got, "probe-pod saw 127.0.0.1:") || !strings.HasSuffix(got, " call") {
		t.Errorf("a probe call: %q, %v", got, ok)
	}
	if r := probe.Call(t.Context(), "udp", addr.AddrPort(), time.Second); !r.OK || r.Seen != "127.0.0.1" {
		t.Errorf("probe.Call over UDP: %+v", r)
	}
}

// TestRateSinkAnswersProbesOnly: the rate sink counts and answers only its own datagrams (the
// old headerless query is dropped and counted), and a measurement against it still works.
func TestRateSinkAnswersProbesOnly(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	s := probe.NewServer("", probe.DefaultLimits)
	go func() { _ = s.ServeRate(pc) }()
	c, err := net.DialUDP("udp", nil, pc.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	old := make([]byte, 9) // session id and 'q', as before the header
	old[8] = 'q'
	if _, err := c.Write(old); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := c.Read(make([]byte, 64)); err == nil {
		t.Errorf("a headerless query got a %d-byte answer", n)
	}
	if got := s.Stats().Malformed; got != 1 {
		t.Errorf("malformed: %d, want 1", got)
	}
	r, err := probe.MeasureRate(t.Context(), pc.LocalAddr().(*net.UDPAddr).AddrPort(), 64, 200*time.Millisecond)
	if err != nil || r.Received == 0 {
		t.Errorf("a rate measurement: %+v, %v", r, err)
	}
}

// TestMeasurementsWithinLimits: skeinctl bench's measurements work against bounded servers
// (128 streams, the most it asks, from one address).
func TestMeasurementsWithinLimits(t *testing.T) {
	s := probe.NewServer("", probe.DefaultLimits)
	tput := listen(t, s.ServeThroughput)
	echo := listen(t, s.ServeEcho)
	for _, reverse := range []bool{false, true} {
		r, err := probe.MeasureThroughput(t.Context(), netip.MustParseAddrPort(tput), 128, reverse, 300*time.Millisecond)
		if err != nil || r.Bytes == 0 {
			t.Errorf("128 streams, reverse %v: %+v, %v", reverse, r, err)
		}
	}
	for _, size := range []int{1, 1000, 65536} {
		l, err := probe.MeasureLatency(t.Context(), netip.MustParseAddrPort(echo), size, 100, 2*time.Second)
		if err != nil || l.Count != 100 {
			t.Errorf("latency, %d bytes: %+v, %v", size, l, err)
		}
	}
	if st := s.Stats(); st.Refused != 0 || st.Malformed != 0 {
		t.Errorf("bench measurements were refused: %+v", st)
	}
}
