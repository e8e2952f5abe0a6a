package dataplane_test

import (
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/conn"

	"github.com/skein-net/skein/dataplane"
	"github.com/skein-net/skein/internal/netnstest"
)

// narrowPath builds sender S, router R and receiver D: S 10.9.1.1 -- 10.9.1.254 R
// 10.9.2.254 ==(1380)== 10.9.2.1 D. With blackHole, R's fragmentation needed is dropped (an
// nftables rule); without, S learns the path MTU from it (a DF ping primes it) before it
// returns.
func narrowPath(t *testing.T, blackHole bool) (s, d *netnstest.NS) {
	s, r, d := netnstest.New(t, "pmtu-s"), netnstest.New(t, "pmtu-r"), netnstest.New(t, "pmtu-d")
	netnstest.Veth(t, s, r, "wan", "10.9.1.1/24", "10.9.1.254/24")
	netnstest.Veth(t, r, d, "narrow", "10.9.2.254/24", "10.9.2.1/24")
	r.Run(t, "ip", "link", "set", "narrow", "mtu", "1380")
	d.Run(t, "ip", "link", "set", "narrow", "mtu", "1380")
	r.Run(t, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	if blackHole {
		r.Run(t, "nft", "add", "table", "ip", "blackhole")
		r.Run(t, "nft", "add", "chain", "ip", "blackhole", "out", "{ type filter hook output priority 0 ; }")
		r.Run(t, "nft", "add", "rule", "ip", "blackhole", "out", "icmp", "type", "destination-unreachable", "icmp", "code", "frag-needed", "drop")
	}
	s.Run(t, "ip", "route", "add", "10.9.2.0/24", "via", "10.9.1.254")
	d.Run(t, "ip", "route", "add", "10.9.1.0/24", "via", "10.9.2.254")
	if !blackHole {
		s.Try("ping", "-c", "1", "-W", "1", "-M", "do", "-s", "1372", "10.9.2.1")
		if out := s.Run(t, "ip", "route", "get", "10.9.2.1"); !strings.Contains(out, "mtu 1380") {
			t.Fatalf("S did not learn the path MTU from R's fragmentation needed: %s", out)
		}
	}
	return s, d
}

// sendThrough opens bind in s, sends n datagrams of size bytes to a socket in d, batch at a
// time, and returns how many datagrams d received within a second and Send's first error.
func sendThrough(t *testing.T, s, d *netnstest.NS, bind conn.Bind, n, batch, size int) (int, error) {
	t.Helper()
	var rx *net.UDPConn
	if err := d.Do(func() (err error) {
		rx, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP("10.9.2.1")})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	if err := s.Do(func() error {
		_, _, err := bind.Open(0)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer bind.Close()
	ep, err := bind.ParseEndpoint(rx.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	var first error
	for sent := 0; sent < n; sent += batch {
		if err := bind.Send(datagrams(batch, size, byte(sent)), ep); err != nil && first == nil {
			first = err
		}
	}
	got := 0
	buf := make([]byte, 2048)
	rx.SetReadDeadline(time.Now().Add(time.Second))
	for got < n {
		k, err := rx.Read(buf)
		if err != nil {
			break
		}
		if k == size {
			got++
		}
	}
	return got, first
}

// TestPathBindNarrowPath sends full-size WireGuard datagrams (1372 bytes of UDP payload,
// 1400 on the wire) over a real path narrowed to 1380, through wireguard-go's StdNetBind
// bare and wrapped in a PathBind. Bare, a GSO batch is refused whole with EMSGSIZE once the
// kernel knows the path MTU, and a single DF datagram vanishes in the black hole; wrapped,
// every datagram arrives (resent one by one and fragmented at the source; sent without DF and
// fragmented by the router).
func TestPathBindNarrowPath(t *testing.T) {
	netnstest.RequireRoot(t)
	const n, size = 64, 1372
	t.Run("GSO batch over a learned path MTU", func(t *testing.T) {
		s, d := narrowPath(t, false)
		got, err := sendThrough(t, s, d, conn.NewStdNetBind(), n, 16, size)
		if !errors.Is(err, syscall.EMSGSIZE) || got != 0 {
			t.Fatalf("bare StdNetBind: %v, %d of %d received; want EMSGSIZE and none (the kernel refusing its GSO batches)", err, got, n)
		}
		p := dataplane.NewPathBind(conn.NewStdNetBind())
		got, err = sendThrough(t, s, d, p, n, 16, size)
		if err != nil || got != n {
			t.Errorf("PathBind: %v, %d of %d received", err, got, n)
		}
		st := p.Stats()
		if st.Errors[dataplane.SendTooBig] != 1 || st.Resent != 16 || st.Singly != n-16 {
			t.Errorf("PathBind counted %+v, want 1 message_too_long, 16 resent, %d sent singly", st, n-16)
		}
		t.Logf("bare: EMSGSIZE, 0 of %d; PathBind: %d of %d (%+v)", n, got, n, st)
	})
	t.Run("black hole", func(t *testing.T) {
		s, d := narrowPath(t, true)
		got, err := sendThrough(t, s, d, conn.NewStdNetBind(), n, 1, size)
		if err != nil || got != 0 {
			t.Fatalf("bare StdNetBind: %v, %d of %d received; want none (DF datagrams dropped at the narrow link, its ICMP too)", err, got, n)
		}
		p := dataplane.NewPathBind(conn.NewStdNetBind())
		got, err = sendThrough(t, s, d, p, n, 1, size)
		if err != nil || got != n {
			t.Errorf("PathBind: %v, %d of %d received", err, got, n)
		}
		if pol := p.Policy(); pol.Sockets != 2 || pol.IPv4DF || pol.Err != "" {
			t.Errorf("policy %+v, want both sockets found and IPv4 without DF", pol)
		}
	})
	t.Run("probe with DF", func(t *testing.T) {
		s, d := narrowPath(t, true)
		p := dataplane.NewPathBind(conn.NewStdNetBind())
		var rx *net.UDPConn
		if err := d.Do(func() (err error) {
			rx, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP("10.9.2.1")})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer rx.Close()
		if err := s.Do(func() error { _, _, err := p.Open(0); return err }); err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		ep, err := p.ParseEndpoint(rx.LocalAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		// transport is a WireGuard transport message of n bytes (UDP payload).
		transport := func(n int, mark byte) []byte {
			b := make([]byte, n)
			b[0], b[16] = 4, mark
			return b
		}
		received := func() map[int]bool {
			got := map[int]bool{}
			buf := make([]byte, 2048)
			rx.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			for {
				k, err := rx.Read(buf)
				if err != nil {
					return got
				}
				got[k] = true
			}
		}
		// A 1372-byte probe (1400 on the wire) does not pass the 1380-byte link with DF; the
		// data datagram of the same size after it, without DF, does (fragmented by R).
		big := p.Arm(1372)
		if err := p.Send([][]byte{{1, 0, 0, 0}, transport(1372, 1), transport(1372, 2)}, ep); err != nil {
			t.Fatal(err)
		}
		if !big.SentDF() {
			t.Fatal("the probe was not sent with DF")
		}
		if got := received(); len(got) != 2 || !got[1372] || !got[4] {
			t.Errorf("received sizes %v, want the handshake-like 4 bytes and one 1372-byte datagram (the data, not the probe)", got)
		}
		// A 1352-byte probe (1380 on the wire) passes.
		small := p.Arm(1352)
		if err := p.Send([][]byte{transport(1352, 3)}, ep); err != nil {
			t.Fatal(err)
		}
		if got := received(); !small.SentDF() || !got[1352] {
			t.Errorf("1352-byte probe: sent with DF %v, received %v; want it through", small.SentDF(), got)
		}
		// A probe whose datagram is not the next data datagram's length is void: not sent
		// with DF, and the datagram leaves as usual.
		void := p.Arm(1352)
		if err := p.Send([][]byte{transport(1000, 4), transport(1352, 5)}, ep); err != nil {
			t.Fatal(err)
		}
		if got := received(); void.SentDF() || !got[1000] || !got[1352] {
			t.Errorf("void probe: sent with DF %v, received %v; want neither with DF, both through", void.SentDF(), got)
		}
	})
}
