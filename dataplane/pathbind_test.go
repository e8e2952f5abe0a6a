package dataplane_test

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/conn"

	"github.com/skein-net/skein/dataplane"
)

// narrowBind is a Bind whose "kernel" knows a path MTU: it refuses a batch of more than one
// datagram with one larger than mtu with EMSGSIZE, as Linux refuses a UDP GSO send whose
// segments exceed the path MTU, and takes a single datagram of any size (the kernel fragments
// it). err, if set, is returned for every send instead.
type narrowBind struct {
	conn.Bind
	mtu       int
	err       error
	delivered [][]byte
	batches   int
}

func (b *narrowBind) Send(bufs [][]byte, _ conn.Endpoint) error {
	if b.err != nil {
		return b.err
	}
	if len(bufs) > 1 {
		for _, x := range bufs {
			if len(x) > b.mtu {
				// As wireguard-go returns it: net.OpError around os.SyscallError.
				return &net.OpError{Op: "write", Net: "udp", Err: os.NewSyscallError("sendmmsg", syscall.EMSGSIZE)}
			}
		}
	}
	for _, x := range bufs {
		b.delivered = append(b.delivered, append([]byte(nil), x...))
	}
	b.batches++
	return nil
}

func datagrams(n, size int, first byte) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = make([]byte, size, 64<<10) // room to coalesce into, as wireguard-go's buffers have
		out[i][0] = first + byte(i)
	}
	return out
}

func TestPathBindResendsRefusedBatch(t *testing.T) {
	inner := &narrowBind{mtu: 1352}
	p := dataplane.NewPathBind(inner)
	now := time.Unix(1000, 0)
	p.SetClock(func() time.Time { return now })
	ep := &conn.StdNetEndpoint{AddrPort: netip.MustParseAddrPort("10.0.2.1:51820")}

	// A batch of full-size datagrams (1372 bytes: 1340 inside): refused whole, sent again one
	// by one, all delivered in order.
	if err := p.Send(datagrams(8, 1372, 0), ep); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if len(inner.delivered) != 8 || inner.batches != 8 {
		t.Fatalf("delivered %d datagrams in %d sends, want 8 in 8", len(inner.delivered), inner.batches)
	}
	for i, d := range inner.delivered {
		if d[0] != byte(i) || len(d) != 1372 {
			t.Fatalf("datagram %d is %d bytes starting %d", i, len(d), d[0])
		}
	}
	s := p.Stats()
	if s.Errors[dataplane.SendTooBig] != 1 || s.Resent != 8 || s.Singly != 0 {
		t.Errorf("after a refused batch: %+v, want 1 message_too_long, 8 resent", s)
	}

	// The next batch that large goes one by one at once: no error.
	if err := p.Send(datagrams(4, 1372, 8), ep); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Errors[dataplane.SendTooBig] != 1 || s.Singly != 4 || inner.batches != 12 {
		t.Errorf("second batch: %+v in %d sends, want it sent singly without a new error", s, inner.batches)
	}
	// Smaller datagrams (a path MTU discovered and the tunnel MTU lowered) keep GSO.
	if err := p.Send(datagrams(4, 1300, 12), ep); err != nil || inner.batches != 13 {
		t.Errorf("small batch: %v, %d sends, want one", err, inner.batches)
	}
	// Another destination keeps GSO (and is refused and resent on its own).
	other := &conn.StdNetEndpoint{AddrPort: netip.MustParseAddrPort("10.0.9.1:51820")}
	if err := p.Send(datagrams(2, 1372, 16), other); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Errors[dataplane.SendTooBig] != 2 {
		t.Errorf("another destination: %d refusals, want its own (2 in all)", s.Errors[dataplane.SendTooBig])
	}
	// After GSOHold the gateway tries GSO again for large datagrams: the path may have widened.
	inner.mtu = 1500
	now = now.Add(dataplane.DefaultGSOHold + time.Second)
	before := inner.batches
	if err := p.Send(datagrams(4, 1372, 20), ep); err != nil || inner.batches != before+1 {
		t.Errorf("after the hold: %v, %d sends, want one batch", err, inner.batches-before)
	}
	if len(inner.delivered) != 8+4+4+2+4 {
		t.Errorf("delivered %d datagrams, want 22", len(inner.delivered))
	}
}

func TestPathBindCountsErrors(t *testing.T) {
	ep := &conn.StdNetEndpoint{AddrPort: netip.MustParseAddrPort("10.0.2.1:51820")}
	for _, c := range []struct {
		err     error
		kind    dataplane.SendError
		wantErr bool
	}{
		{os.NewSyscallError("sendmmsg", syscall.ECONNREFUSED), dataplane.SendRefused, true},
		{&net.OpError{Op: "write", Err: os.NewSyscallError("sendmmsg", syscall.ENOBUFS)}, dataplane.SendNoBuffers, true},
		{os.NewSyscallError("sendmmsg", syscall.EHOSTUNREACH), dataplane.SendUnreachable, true},
		{os.NewSyscallError("sendmmsg", syscall.EPERM), dataplane.SendNotPermitted, true},
		{net.ErrClosed, dataplane.SendOther, true},
		{conn.ErrUDPGSODisabled{RetryErr: nil}, dataplane.SendGSOUnsupported, false},
	} {
		inner := &narrowBind{mtu: 1500, err: c.err}
		p := dataplane.NewPathBind(inner)
		err := p.Send(datagrams(4, 100, 0), ep)
		if (err != nil) != c.wantErr {
			t.Errorf("%v: Send returned %v", c.err, err)
		}
		s := p.Stats()
		for k := range dataplane.NumSendErrors {
			want := uint64(0)
			if k == c.kind {
				want = 1
			}
			if s.Errors[k] != want {
				t.Errorf("%v: %v counted %d, want %d", c.err, k, s.Errors[k], want)
			}
		}
		if s.Resent != 0 {
			t.Errorf("%v: resent %d", c.err, s.Resent)
		}
	}
	// A refused single datagram is counted and returned, not retried.
	inner := &narrowBind{mtu: 1500, err: os.NewSyscallError("sendmmsg", syscall.EMSGSIZE)}
	p := dataplane.NewPathBind(inner)
	if err := p.Send(datagrams(1, 9000, 0), ep); !errors.Is(err, syscall.EMSGSIZE) || p.Stats().Errors[dataplane.SendTooBig] != 1 {
		t.Errorf("single datagram: %v, %+v", err, p.Stats())
	}
}

func TestPathBindSendAllocs(t *testing.T) {
	inner := &countingBind{}
	p := dataplane.NewPathBind(inner)
	ep := &conn.StdNetEndpoint{AddrPort: netip.MustParseAddrPort("10.0.2.1:51820")}
	bufs := datagrams(64, 1372, 0)
	if n := testing.AllocsPerRun(100, func() { p.Send(bufs, ep) }); n != 0 {
		t.Errorf("Send allocates %v times per batch", n)
	}
}

type countingBind struct {
	conn.Bind
	n int
}

func (b *countingBind) Send(bufs [][]byte, _ conn.Endpoint) error { b.n += len(bufs); return nil }

// TestSendProbe: a probe waits for Read; a second one is refused while the first is fresh;
// Read hands it alone to wireguard-go and arms the PathBind, whose next data datagram of the
// probe's length is the probe (here without a socket to set DF on: void, sent as usual).
func TestSendProbe(t *testing.T) {
	dp, _ := newDP(t, baseConfig())
	inner := &narrowBind{mtu: 1500}
	p := dataplane.NewPathBind(inner)
	dp.SetPathBind(p)
	probe := make([]byte, 1312)
	probe[0] = 0x45
	pr, err := dp.SendProbe(probe, 1312+32)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dp.SendProbe(probe, 1312+32); err == nil {
		t.Error("a second probe was queued while the first waits")
	}
	pkts := readPackets(t, dp)
	if len(pkts) != 1 || len(pkts[0]) != 1312 {
		t.Fatalf("Read returned %d packets, want the probe alone", len(pkts))
	}
	msg := make([]byte, 1312+32)
	msg[0] = 4
	ep := &conn.StdNetEndpoint{AddrPort: netip.MustParseAddrPort("10.0.2.1:51820")}
	if err := p.Send([][]byte{msg}, ep); err != nil {
		t.Fatal(err)
	}
	if pr.SentDF() || len(inner.delivered) != 1 {
		t.Errorf("without a socket: sent with DF %v, delivered %d; want void and delivered", pr.SentDF(), len(inner.delivered))
	}
	if _, err := dp.SendProbe(probe, 1312+32); err != nil {
		t.Errorf("the next probe: %v", err)
	}
}
