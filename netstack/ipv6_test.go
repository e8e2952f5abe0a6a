package netstack_test

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	pt "github.com/skein-net/skein/dataplane/packet/packettest"
	"github.com/skein-net/skein/netstack"
)

var (
	gw6A = netip.MustParseAddr("fdb7:736b:6e00:7475::1")
	gw6B = netip.MustParseAddr("fdb7:736b:6e00:7475::2")
)

// dualPair is newPair with both stacks dual-stack.
func dualPair(t testing.TB) *wire {
	return newPairOf(t, []netip.Addr{gwA, gw6A, netip.MustParseAddr("10.80.0.1")}, []netip.Addr{gwB, gw6B})
}

func TestPing6(t *testing.T) {
	w := dualPair(t)
	for _, c := range []struct{ src, dst netip.Addr }{{gw6A, gw6B}, {gwA, gwB}} {
		rtt, err := w.a.Ping(context.Background(), c.src, c.dst, 1, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if rtt <= 0 || rtt > 2*time.Second {
			t.Errorf("%v: RTT %v", c.dst, rtt)
		}
	}
	w.cut.Store(true)
	if _, err := w.a.Ping(context.Background(), gw6A, gw6B, 2, 100*time.Millisecond); err == nil {
		t.Error("a ping over a cut wire was answered")
	}
	w.cut.Store(false)
	// The endpoint of the lost ping serves the next one; the late reply of a lost ping is
	// not taken for the next one's.
	if _, err := w.a.Ping(context.Background(), gw6A, gw6B, 3, 2*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestPingsConcurrent: pings from one address at once (the prober's and a reconnect's) each
// get their own reply.
func TestPingsConcurrent(t *testing.T) {
	w := dualPair(t)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			src, dst := gwA, gwB
			if i%2 == 1 {
				src, dst = gw6A, gw6B
			}
			_, err := w.a.Ping(context.Background(), src, dst, uint16(100+i), 5*time.Second)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// TestAnswersEcho6: an ICMPv6 echo request built outside gVisor is answered with a valid
// reply from the address it was sent to, and nothing else leaves the stack (no router
// solicitation, duplicate address detection or MLD report: there is no link to discover).
func TestAnswersEcho6(t *testing.T) {
	req := pt.IPv6{Src: "fd00:244::5", Dst: "fd80::1", Next: 58, Payload: pt.ICMPv6("fd00:244::5", "fd80::1", 128, 0, [4]byte{0, 7, 0, 1}, []byte("are you there"))}.Build()
	other := pt.IPv6{Src: "fd00:244::5", Dst: "fd80::2", Next: 58, Payload: pt.ICMPv6("fd00:244::5", "fd80::2", 128, 0, [4]byte{0, 7, 0, 2}, nil)}.Build()
	r := echoAnswers(t, []netip.Addr{gw6A, netip.MustParseAddr("fd80::1"), gwA}, req, other)
	if p := pt.Problem6(r); p != "" {
		t.Error(p)
	}
	if netip.AddrFrom16([16]byte(r[8:24])).String() != "fd80::1" || netip.AddrFrom16([16]byte(r[24:40])).String() != "fd00:244::5" || r[6] != 58 || r[40] != 129 {
		t.Errorf("reply % x", r[:48])
	}
	if string(r[48:]) != "are you there" {
		t.Errorf("reply data %q", r[48:])
	}
}

func TestProber6(t *testing.T) {
	w := dualPair(t)
	p := w.a.NewProber(netstack.ProbeConfig{Local: gw6A, Peer: gw6B, Interval: 50 * time.Millisecond, FailAfter: 3})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx, nil); close(done) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(5 * time.Second)
	for p.Status().State != netstack.Connected {
		if time.Now().After(deadline) {
			t.Fatal("not Connected over IPv6")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// BenchmarkPing: one probe's cost in allocations (the prober runs every 2 s for the life of
// an idle gateway, so its garbage is most of what an idle gateway allocates).
func BenchmarkPing(b *testing.B) {
	for _, c := range []struct {
		name     string
		src, dst netip.Addr
	}{{"ipv4", gwA, gwB}, {"ipv6", gw6A, gw6B}} {
		b.Run(c.name, func(b *testing.B) {
			w := dualPair(b)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := w.a.Ping(context.Background(), c.src, c.dst, uint16(i), 2*time.Second); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
