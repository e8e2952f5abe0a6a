//go:build linux

package udp_test

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/skein-net/skein/dataplane"
	"github.com/skein-net/skein/dataplane/udp"
)

var loopback = netip.MustParseAddrPort("127.0.0.1:0")

func listen(t *testing.T, batch int) *udp.Conn {
	t.Helper()
	c, err := udp.Listen(loopback, batch)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func plainPeer(t *testing.T) *net.UDPConn {
	t.Helper()
	pc, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(loopback))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	pc.SetDeadline(time.Now().Add(10 * time.Second))
	return pc
}

func msgs(n, head, body int) []dataplane.Message {
	m := make([]dataplane.Message, n)
	for i := range m {
		m[i] = dataplane.Message{Head: make([]byte, head), Body: make([]byte, body)}
	}
	return m
}

// readAll reads until want datagrams arrived or 5 s passed.
func readAll(t *testing.T, c *udp.Conn, ms []dataplane.Message, want int) []dataplane.Message {
	t.Helper()
	var got []dataplane.Message
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < want && time.Now().Before(deadline) {
		n, err := c.ReadBatch(ms)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms[:n] {
			got = append(got, dataplane.Message{Head: append([]byte(nil), m.Head...), Body: append([]byte(nil), m.Body...), N: m.N, Addr: m.Addr})
		}
	}
	return got
}

func TestReadBatchScatters(t *testing.T) {
	c := listen(t, 8)
	peer := plainPeer(t)
	to := net.UDPAddrFromAddrPort(c.LocalAddr())
	var sent [][]byte
	for i := range 5 {
		d := bytes.Repeat([]byte{byte('a' + i)}, 22+100*i)
		sent = append(sent, d)
		if _, err := peer.WriteToUDP(d, to); err != nil {
			t.Fatal(err)
		}
	}
	got := readAll(t, c, msgs(8, 22, 2000), 5)
	if len(got) != 5 {
		t.Fatalf("received %d datagrams, want 5", len(got))
	}
	from := peer.LocalAddr().(*net.UDPAddr).AddrPort()
	for i, m := range got {
		if m.Addr != from {
			t.Errorf("datagram %d from %v, want %v", i, m.Addr, from)
		}
		if m.N != len(sent[i]) {
			t.Errorf("datagram %d: N = %d, want %d", i, m.N, len(sent[i]))
		}
		whole := append(m.Head, m.Body[:m.N-22]...)
		if !bytes.Equal(whole, sent[i]) {
			t.Errorf("datagram %d: head+body differ from what was sent", i)
		}
	}
}

func TestReadBatchTooBig(t *testing.T) {
	c := listen(t, 4)
	peer := plainPeer(t)
	to := net.UDPAddrFromAddrPort(c.LocalAddr())
	peer.WriteToUDP(make([]byte, 500), to)
	peer.WriteToUDP(make([]byte, 50), to)
	got := readAll(t, c, msgs(4, 22, 100), 2)
	if len(got) != 2 || got[0].N != 0 || got[1].N != 50 {
		t.Fatalf("got %d datagrams, N %v; want the oversized one with N=0, then 50", len(got), []int{got[0].N})
	}
}

func TestWriteBatchGathers(t *testing.T) {
	c := listen(t, 4)
	peer := plainPeer(t)
	to := peer.LocalAddr().(*net.UDPAddr).AddrPort()
	var out []dataplane.Message
	for i := range 10 { // more than one batch
		out = append(out, dataplane.Message{Head: []byte{byte(i), 1, 2}, Body: bytes.Repeat([]byte{byte(i)}, 10+i), Addr: to})
	}
	if n, err := c.WriteBatch(out); n != 10 || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	buf := make([]byte, 100)
	for i := range 10 {
		n, from, err := peer.ReadFromUDP(buf)
		if err != nil {
			t.Fatal(err)
		}
		want := append([]byte{byte(i), 1, 2}, bytes.Repeat([]byte{byte(i)}, 10+i)...)
		if !bytes.Equal(buf[:n], want) || from.AddrPort() != c.LocalAddr() {
			t.Errorf("datagram %d = % x from %v", i, buf[:n], from)
		}
	}
}

func TestWriteBatchSkipsRefused(t *testing.T) {
	c := listen(t, 4)
	peer := plainPeer(t)
	to := peer.LocalAddr().(*net.UDPAddr).AddrPort()
	out := []dataplane.Message{
		{Head: []byte{1}, Body: []byte("ok"), Addr: to},
		{Head: []byte{2}, Body: make([]byte, 70000), Addr: to}, // EMSGSIZE
		{Head: []byte{3}, Body: []byte("ok"), Addr: to},
	}
	n, err := c.WriteBatch(out)
	if n != 2 || err == nil {
		t.Fatalf("WriteBatch = %d, %v; want 2 sent and the refusal reported", n, err)
	}
	buf := make([]byte, 100)
	for _, want := range []byte{1, 3} {
		if n, _, err := peer.ReadFromUDP(buf); err != nil || buf[0] != want || n != 3 {
			t.Errorf("got % x, %v; want datagram %d", buf[:n], err, want)
		}
	}
}

func TestWakeAndClose(t *testing.T) {
	c := listen(t, 4)
	ms := msgs(4, 22, 100)
	done := make(chan error, 1)
	go func() {
		n, err := c.ReadBatch(ms)
		if err == nil && n != 0 {
			err = errors.New("woken ReadBatch returned datagrams")
		}
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	c.Wake()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wake did not unblock ReadBatch")
	}
	// The deadline is cleared: the next read blocks for data, and gets it.
	peer := plainPeer(t)
	go func() {
		time.Sleep(20 * time.Millisecond)
		peer.WriteToUDP([]byte("after the wake, twenty-two bytes or more"), net.UDPAddrFromAddrPort(c.LocalAddr()))
	}()
	if got := readAll(t, c, ms, 1); len(got) != 1 {
		t.Fatal("no datagram after a wake")
	}
	go func() {
		_, err := c.ReadBatch(ms)
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("ReadBatch after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock ReadBatch")
	}
}

func TestNoAllocs(t *testing.T) {
	a, b := listen(t, 8), listen(t, 8)
	out := msgs(8, 22, 1400)
	for i := range out {
		out[i].Addr = b.LocalAddr()
	}
	in := msgs(8, 22, 2000)
	if n := testing.AllocsPerRun(200, func() {
		if n, err := a.WriteBatch(out); n != 8 || err != nil {
			t.Fatalf("WriteBatch = %d, %v", n, err)
		}
		for got := 0; got < 8; {
			n, err := b.ReadBatch(in)
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
	}); n != 0 {
		t.Errorf("%v allocations per batch of 8 sent and received, want 0", n)
	}
}

func TestListenErrors(t *testing.T) {
	if _, err := udp.Listen(netip.MustParseAddrPort("[::ffff:127.0.0.1]:0"), 0); err == nil {
		t.Error("an IPv4-mapped address was accepted")
	}
	c := listen(t, 0)
	if c.BatchSize() != udp.DefaultBatch {
		t.Errorf("BatchSize %d, want %d", c.BatchSize(), udp.DefaultBatch)
	}
	if _, err := udp.Listen(c.LocalAddr(), 0); err == nil {
		t.Error("a port in use was accepted")
	}
}

// TestWriteBatchGSO: runs of same-size datagrams to one address (sent as one GSO send) arrive
// as the separate datagrams they were, in order, a shorter last one included.
func TestWriteBatchGSO(t *testing.T) {
	c := listen(t, 64)
	p1, p2 := plainPeer(t), plainPeer(t)
	to1, to2 := p1.LocalAddr().(*net.UDPAddr).AddrPort(), p2.LocalAddr().(*net.UDPAddr).AddrPort()
	var out []dataplane.Message
	for i := range 30 {
		size, to := 1000, to1
		if i == 19 {
			size = 500 // ends the first run
		}
		if i == 25 {
			to = to2 // interrupts the second run
		}
		out = append(out, dataplane.Message{Head: []byte{byte(i)}, Body: bytes.Repeat([]byte{byte(i)}, size-1), Addr: to})
	}
	if n, err := c.WriteBatch(out); n != 30 || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	buf := make([]byte, 2000)
	for i := range 30 {
		p := p1
		if i == 25 {
			p = p2
		}
		n, _, err := p.ReadFromUDP(buf)
		if err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
		if n != len(out[i].Head)+len(out[i].Body) || buf[0] != byte(i) || buf[n-1] != byte(i) {
			t.Fatalf("datagram %d: %d bytes starting %d, want %d bytes of %d", i, n, buf[0], len(out[i].Head)+len(out[i].Body), i)
		}
	}
}

// TestIPv6Underlay: on an IPv6 address the socket receives from and sends to IPv6 peers, GSO
// runs included; an IPv4 destination is refused (counted by the caller), not sent.
func TestIPv6Underlay(t *testing.T) {
	lo6 := netip.MustParseAddrPort("[::1]:0")
	c, err := udp.Listen(lo6, 16)
	if err != nil {
		t.Skipf("no IPv6 on loopback (the kernel's IPv6 is off): %v", err)
	}
	defer c.Close()
	peer, err := net.ListenUDP("udp6", net.UDPAddrFromAddrPort(lo6))
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	peer.SetDeadline(time.Now().Add(10 * time.Second))
	to := peer.LocalAddr().(*net.UDPAddr).AddrPort()
	var out []dataplane.Message
	for i := range 5 {
		out = append(out, dataplane.Message{Head: []byte{byte(i)}, Body: bytes.Repeat([]byte{byte(i)}, 999), Addr: to})
	}
	out = append(out, dataplane.Message{Head: []byte{9}, Body: []byte("to IPv4"), Addr: netip.MustParseAddrPort("127.0.0.1:9")})
	if n, err := c.WriteBatch(out); n != 5 || err == nil {
		t.Errorf("WriteBatch = %d, %v; want the 5 IPv6 datagrams sent and the IPv4 one refused", n, err)
	}
	buf := make([]byte, 2000)
	for i := range 5 {
		n, _, err := peer.ReadFromUDP(buf)
		if err != nil || n != 1000 || buf[0] != byte(i) {
			t.Fatalf("datagram %d: %d bytes starting %d, %v", i, n, buf[0], err)
		}
	}
	if _, err := peer.WriteToUDPAddrPort([]byte("back over IPv6"), c.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, c, msgs(4, 4, 100), 1)
	if len(got) != 1 || got[0].Addr != to || string(append(got[0].Head, got[0].Body...)[:got[0].N]) != "back over IPv6" {
		t.Fatalf("received %+v, want one datagram from %v", got, to)
	}
}
