package dataplane_test

import (
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/conn"

	"github.com/skein-net/skein/dataplane"
	"github.com/skein-net/skein/dataplane/packet"
	pt "github.com/skein-net/skein/dataplane/packet/packettest"
)

func TestWindow(t *testing.T) {
	t.Run("room: no wait", func(t *testing.T) {
		w := dataplane.NewWindow(8, time.Hour)
		w.Enter(8)
		w.Wait(nil) // exactly at the limit: room
		if s := w.Stats(); s.Inside != 8 || s.Waits != 0 {
			t.Fatalf("stats %+v", s)
		}
	})
	t.Run("full: waits until half is free", func(t *testing.T) {
		w := dataplane.NewWindow(8, time.Hour)
		w.Enter(12)
		returned := make(chan struct{})
		go func() {
			w.Wait(nil)
			close(returned)
		}()
		for w.Stats().Waits == 0 {
			time.Sleep(time.Millisecond)
		}
		w.Leave(4) // 8 inside: not yet half free
		select {
		case <-returned:
			t.Fatal("Wait returned with 8 of 8 inside")
		case <-time.After(20 * time.Millisecond):
		}
		w.Leave(4) // 4 inside
		<-returned
		if s := w.Stats(); s.Inside != 4 || s.Waits != 1 || s.Forgets != 0 {
			t.Fatalf("stats %+v", s)
		}
	})
	t.Run("nothing leaves: forgets after max wait", func(t *testing.T) {
		w := dataplane.NewWindow(8, 5*time.Millisecond)
		w.Enter(100) // packets wireguard-go dropped
		w.Wait(nil)
		if s := w.Stats(); s.Inside != 0 || s.Forgets != 1 {
			t.Fatalf("stats %+v", s)
		}
		// The forgotten packets were inside after all: their leaving must not widen the
		// window beyond its limit.
		w.Leave(100)
		w.Enter(9)
		if s := w.Stats(); s.Inside != 9 {
			t.Fatalf("after forgotten packets left, inside %d, want 9", s.Inside)
		}
	})
	t.Run("two feeders wait together", func(t *testing.T) {
		// wireguard-go's IPv4 and IPv6 receive goroutines both feed the inbound window.
		w := dataplane.NewWindow(8, time.Hour)
		w.Enter(20)
		var returned sync.WaitGroup
		for range 2 {
			returned.Go(func() { w.Wait(nil) })
		}
		for w.Stats().Waits < 2 {
			time.Sleep(time.Millisecond)
		}
		w.Leave(16)
		returned.Wait() // both wake
		f := dataplane.NewWindow(8, 5*time.Millisecond)
		f.Enter(20)
		for range 2 {
			returned.Go(func() { f.Wait(nil) })
		}
		returned.Wait() // both return after the wait runs out, nothing leaving
		if s := f.Stats(); s.Inside != 0 || s.Forgets == 0 {
			t.Fatalf("stats %+v", s)
		}
	})
	t.Run("done releases", func(t *testing.T) {
		w := dataplane.NewWindow(1, time.Hour)
		w.Enter(5)
		done := make(chan struct{})
		close(done)
		w.Wait(done)
	})
	t.Run("nil window", func(t *testing.T) {
		var w *dataplane.Window
		w.Enter(1)
		w.Leave(1)
		w.Wait(nil)
		if w.Stats() != (dataplane.WindowStats{}) {
			t.Fatal("nil window has stats")
		}
	})
}

// fakeBind is a conn.Bind whose receive function returns the datagrams in next.
type fakeBind struct {
	next []received
	sent int
}

type received struct {
	b    []byte
	from netip.AddrPort
}

func (b *fakeBind) Open(uint16) ([]conn.ReceiveFunc, uint16, error) {
	return []conn.ReceiveFunc{func(packets [][]byte, sizes []int, eps []conn.Endpoint) (int, error) {
		if len(b.next) == 0 {
			return 0, errors.New("no more")
		}
		n := 0
		for ; n < len(b.next) && n < len(packets); n++ {
			sizes[n] = copy(packets[n], b.next[n].b)
			eps[n] = &conn.StdNetEndpoint{AddrPort: b.next[n].from}
		}
		b.next = b.next[n:]
		return n, nil
	}}, 51820, nil
}
func (b *fakeBind) Close() error                                { return nil }
func (b *fakeBind) SetMark(uint32) error                        { return nil }
func (b *fakeBind) Send(bufs [][]byte, _ conn.Endpoint) error   { b.sent += len(bufs); return nil }
func (b *fakeBind) ParseEndpoint(string) (conn.Endpoint, error) { return nil, errors.New("no") }
func (b *fakeBind) BatchSize() int                              { return 4 }

func wgMessage(typ byte, size int) []byte {
	m := make([]byte, size)
	m[0] = typ
	return m
}

func TestPacedBind(t *testing.T) {
	out, in := dataplane.NewWindow(100, time.Hour), dataplane.NewWindow(100, time.Hour)
	peer := netip.MustParseAddrPort("192.0.2.1:51820")
	other := netip.MustParseAddrPort("198.51.100.9:40000")
	fb := &fakeBind{}
	pb := dataplane.NewPacedBind(fb, out, in)
	fns, port, err := pb.Open(0)
	if err != nil || port != 51820 || len(fns) != 1 {
		t.Fatalf("Open: %v %d %d", err, port, len(fns))
	}
	bufs := make([][]byte, 4)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	receive := func(batch ...received) {
		t.Helper()
		fb.next = batch
		if n, err := fns[0](bufs, make([]int, 4), make([]conn.Endpoint, 4)); n != len(batch) || err != nil {
			t.Fatalf("receive: %d %v", n, err)
		}
	}
	// Before the gateway sent anything, nobody is the peer: nothing counts.
	receive(received{wgMessage(4, 32+60), peer})
	if s := in.Stats(); s.Inside != 0 {
		t.Errorf("counted %d before knowing the peer", s.Inside)
	}

	out.Enter(3)
	if err := pb.Send([][]byte{wgMessage(4, 100), wgMessage(4, 32), wgMessage(2, 92), wgMessage(4, 48)}, &conn.StdNetEndpoint{AddrPort: peer}); err != nil {
		t.Fatal(err)
	}
	if s := out.Stats(); s.Inside != 1 || fb.sent != 4 {
		t.Errorf("sent 2 data packets of 3 inside: window counts %d inside, bind sent %d", s.Inside, fb.sent)
	}
	receive(
		received{wgMessage(4, 32+60), peer},    // a data packet
		received{wgMessage(4, 32), peer},       // a keepalive
		received{wgMessage(1, 148), peer},      // a handshake initiation
		received{wgMessage(4, 32+1340), other}, // from somebody else: wireguard-go drops it
	)
	if s := in.Stats(); s.Inside != 1 {
		t.Errorf("received 1 data packet from the peer, window counts %d", s.Inside)
	}
	if err := pb.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestDataplaneWindows: Read counts what it hands wireguard-go into the out window and waits
// for room before reading its socket; Write counts packets out of the in window.
func TestDataplaneWindows(t *testing.T) {
	dp, c := newDP(t, baseConfig())
	out, in := dataplane.NewWindow(2, time.Hour), dataplane.NewWindow(2, time.Hour)
	dp.SetWindows(out, in)
	data := make([]byte, 5000) // four segments
	c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv4, superpacket(data)), from1)
	if got := readPackets(t, dp); len(got) != 4 {
		t.Fatalf("read %d packets, want 4", len(got))
	}
	if s := out.Stats(); s.Inside != 4 {
		t.Fatalf("out window counts %d inside, want 4", s.Inside)
	}
	// The window is full (4 > 2): the next Read waits before it reads the socket, and reads
	// once half the window is free.
	small := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 17, Payload: pt.UDP("10.244.1.5", "10.71.2.7", 1, 2, []byte("x"), false)}.Build()
	c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv4, small), from1)
	go func() {
		for out.Stats().Waits == 0 {
			time.Sleep(time.Millisecond)
		}
		out.Leave(4)
	}()
	if got := readPackets(t, dp); len(got) != 1 {
		t.Fatalf("read %d packets, want 1", len(got))
	}
	if s := out.Stats(); s.Waits != 1 || s.Inside != 1 {
		t.Fatalf("out window %+v, want one wait and 1 inside", s)
	}
	in.Enter(3)
	reply := pt.IPv4{Src: "10.244.2.7", Dst: "10.72.1.5", Proto: 17, TTL: 64, Payload: pt.UDP("10.244.2.7", "10.72.1.5", 2, 1, []byte("y"), false)}.Build()
	write(t, dp, reply, reply)
	if s := in.Stats(); s.Inside != 1 {
		t.Fatalf("in window counts %d inside after 2 of 3 were written, want 1", s.Inside)
	}
}
