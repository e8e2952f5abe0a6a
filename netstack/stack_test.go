package netstack_test

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pt "github.com/skein-net/skein/dataplane/packet/packettest"
	"github.com/skein-net/skein/netstack"
)

var (
	gwA = netip.MustParseAddr("169.254.100.1")
	gwB = netip.MustParseAddr("169.254.100.2")
)

// wire connects two stacks through a goroutine each way, like the tunnel does; cut drops
// everything while set.
type wire struct {
	cut   atomic.Bool
	toA   chan []byte
	toB   chan []byte
	stop  chan struct{}
	wg    sync.WaitGroup
	a, b  *netstack.Stack
	count atomic.Int64
}

func newPair(t testing.TB) *wire {
	return newPairOf(t, []netip.Addr{gwA, netip.MustParseAddr("10.80.0.1")}, []netip.Addr{gwB})
}

func newPairOf(t testing.TB, a, b []netip.Addr) *wire {
	w := &wire{toA: make(chan []byte, 64), toB: make(chan []byte, 64), stop: make(chan struct{})}
	send := func(ch chan []byte) func([]byte) error {
		return func(p []byte) error {
			if w.cut.Load() {
				return nil
			}
			w.count.Add(1)
			select {
			case ch <- append([]byte(nil), p...):
			default:
			}
			return nil
		}
	}
	var err error
	if w.a, err = netstack.New(a, 1340, send(w.toB)); err != nil {
		t.Fatal(err)
	}
	if w.b, err = netstack.New(b, 1340, send(w.toA)); err != nil {
		t.Fatal(err)
	}
	for _, pair := range []struct {
		ch chan []byte
		st *netstack.Stack
	}{{w.toA, w.a}, {w.toB, w.b}} {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for {
				select {
				case p := <-pair.ch:
					pair.st.DeliverLocal(p)
				case <-w.stop:
					return
				}
			}
		}()
	}
	t.Cleanup(func() {
		close(w.stop)
		w.wg.Wait()
		w.a.Close()
		w.b.Close()
	})
	return w
}

func TestPing(t *testing.T) {
	w := newPair(t)
	rtt, err := w.a.Ping(context.Background(), gwA, gwB, 1, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rtt <= 0 || rtt > 2*time.Second {
		t.Errorf("RTT %v", rtt)
	}
	w.cut.Store(true)
	if _, err := w.a.Ping(context.Background(), gwA, gwB, 2, 100*time.Millisecond); err == nil {
		t.Error("a ping over a cut wire was answered")
	}
}

// TestAnswersEcho: an echo request built outside gVisor is answered with a valid reply from
// the address it was sent to; a request for an address the stack does not own is not.
func TestAnswersEcho(t *testing.T) {
	req := pt.IPv4{Src: "10.244.1.5", Dst: "10.80.0.1", Proto: 1, Payload: pt.ICMP(8, 0, [4]byte{0, 7, 0, 1}, []byte("are you there"))}.Build()
	other := pt.IPv4{Src: "10.244.1.5", Dst: "10.80.0.2", Proto: 1, Payload: pt.ICMP(8, 0, [4]byte{0, 7, 0, 2}, nil)}.Build()
	r := echoAnswers(t, []netip.Addr{gwA, netip.MustParseAddr("10.80.0.1")}, req, other)
	if p := pt.Problem(r); p != "" {
		t.Error(p)
	}
	if netip.AddrFrom4([4]byte(r[12:16])).String() != "10.80.0.1" || netip.AddrFrom4([4]byte(r[16:20])).String() != "10.244.1.5" || r[20] != 0 {
		t.Errorf("reply % x", r[:28])
	}
	if string(r[28:]) != "are you there" {
		t.Errorf("reply data %q", r[28:])
	}
}

// echoAnswers delivers req and other (a request for an address not among addrs) to a new
// stack owning addrs and returns the one packet it sends; anything else it sends (before them
// too) fails the test.
func echoAnswers(t *testing.T, addrs []netip.Addr, req, other []byte) []byte {
	t.Helper()
	var mu sync.Mutex
	var out [][]byte
	st, err := netstack.New(addrs, 1340, func(p []byte) error {
		mu.Lock()
		defer mu.Unlock()
		out = append(out, append([]byte(nil), p...))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	time.Sleep(100 * time.Millisecond) // anything the stack sends on its own, it sends now
	if !st.DeliverLocal(req) {
		t.Fatal("refused")
	}
	st.DeliverLocal(other)
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		n := len(out)
		mu.Unlock()
		if n > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(out) != 1 {
		t.Fatalf("%d packets out, want the one echo reply", len(out))
	}
	return out[0]
}

func TestProber(t *testing.T) {
	w := newPair(t)
	p := w.a.NewProber(netstack.ProbeConfig{Local: gwA, Peer: gwB, Interval: 50 * time.Millisecond, FailAfter: 3})
	if s := p.Status(); s.State != netstack.Connecting {
		t.Fatalf("initial state %v", s.State)
	}
	changes := make(chan netstack.ProbeStatus, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		p.Run(ctx, func(s netstack.ProbeStatus) { changes <- s })
		close(done)
	}()
	defer func() { cancel(); <-done }()
	wait := func(want netstack.State) netstack.ProbeStatus {
		t.Helper()
		timeout := time.After(5 * time.Second)
		for {
			select {
			case s := <-changes:
				if s.State == want {
					return s
				}
			case <-timeout:
				t.Fatalf("state never became %v (now %+v)", want, p.Status())
			}
		}
	}
	s := wait(netstack.Connected)
	if s.RTT <= 0 || s.LastReply.IsZero() {
		t.Errorf("connected without RTT: %+v", s)
	}
	w.cut.Store(true)
	cutAt := time.Now()
	s = wait(netstack.Error)
	if s.Lost != 3 {
		t.Errorf("Error after %d losses, want 3", s.Lost)
	}
	h := p.History()
	var inBuckets uint64
	for _, n := range h.Buckets {
		inBuckets += n
	}
	if h.Answered == 0 || inBuckets != h.Answered || h.Sum <= 0 || h.Lost < 3 {
		t.Errorf("history %+v: want the answered probes in the buckets, their RTTs summed and >= 3 lost", h)
	}
	if d := time.Since(cutAt); d < 100*time.Millisecond {
		t.Errorf("Error after %v, before 3 intervals could pass", d)
	}
	w.cut.Store(false)
	wait(netstack.Connected)
}

func TestNewErrors(t *testing.T) {
	if _, err := netstack.New(nil, 1340, func([]byte) error { return nil }); err == nil {
		t.Error("no addresses accepted")
	}
	for _, addrs := range [][]string{
		{"169.254.100.1", "169.254.100.1"}, // twice
		{"::ffff:10.0.0.1"},                // IPv4 mapped: which family?
		{"fe80::1%eth0"},                   // a zone
		{"0.0.0.0"}, {"::"}, {"ff02::1"}, {"224.0.0.1"},
	} {
		var as []netip.Addr
		for _, a := range addrs {
			as = append(as, netip.MustParseAddr(a))
		}
		if st, err := netstack.New(as, 1340, func([]byte) error { return nil }); err == nil {
			st.Close()
			t.Errorf("%v accepted", addrs)
		}
	}
	if _, err := netstack.New([]netip.Addr{netip.MustParseAddr("fd00::1")}, 1200, func([]byte) error { return nil }); err == nil {
		t.Error("an IPv6 stack with a link MTU below 1280 accepted")
	}
	for _, mtu := range []int{0, -5, 67, 1 << 20} {
		if st, err := netstack.New([]netip.Addr{gwA}, mtu, func([]byte) error { return nil }); err == nil {
			st.Close()
			t.Errorf("link MTU %d accepted", mtu)
		}
	}
	// A family the stack has no address of: not its packets, and no pings from it.
	st, err := netstack.New([]netip.Addr{gwA}, 1340, func([]byte) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	req := pt.IPv6{Src: "fd00::5", Dst: "fd00::1", Next: 58, Payload: pt.ICMPv6("fd00::5", "fd00::1", 128, 0, [4]byte{0, 7, 0, 1}, nil)}.Build()
	if st.DeliverLocal(req) {
		t.Error("an IPv4-only stack took an IPv6 packet")
	}
	if _, err := st.Ping(context.Background(), netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2"), 1, time.Second); err == nil {
		t.Error("an IPv4-only stack pinged from an IPv6 address")
	}
	if _, err := st.Ping(context.Background(), gwA, netip.MustParseAddr("fd00::2"), 1, time.Second); err == nil {
		t.Error("a ping from IPv4 to IPv6 was sent")
	}
	if _, err := st.Ping(context.Background(), gwB, gwA, 1, time.Second); err == nil {
		t.Error("a ping from an address the stack does not own was sent")
	}
	if _, err := st.Ping(context.Background(), netip.MustParseAddr("::ffff:169.254.100.1"), netip.MustParseAddr("::ffff:169.254.100.2"), 1, time.Second); err == nil {
		t.Error("a ping between IPv4-mapped addresses was sent")
	}
	// Only ICMP reaches the stack: no other protocol, no fragments, no IPv6 extension headers.
	st6, err := netstack.New([]netip.Addr{gwA, netip.MustParseAddr("fd00::1")}, 1340, func([]byte) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer st6.Close()
	for name, p := range map[string][]byte{
		"udp":                 pt.IPv4{Src: "10.244.1.5", Dst: gwA.String(), Proto: 17, Payload: pt.UDP("10.244.1.5", gwA.String(), 1, 2, nil, false)}.Build(),
		"icmp first fragment": pt.IPv4{Src: "10.244.1.5", Dst: gwA.String(), Proto: 1, MF: true, Payload: pt.ICMP(8, 0, [4]byte{}, make([]byte, 64))}.Build(),
		"ipv6 fragment":       pt.IPv6{Src: "fd00::5", Dst: "fd00::1", Ext: [][]byte{pt.FragmentHeader(0, true, 1)}, Proto: 58, Payload: make([]byte, 16)}.Build(),
		"ipv6 udp":            pt.IPv6{Src: "fd00::5", Dst: "fd00::1", Next: 17, Payload: pt.UDP("fd00::5", "fd00::1", 1, 2, nil, false)}.Build(),
	} {
		if st6.DeliverLocal(p) {
			t.Errorf("%s taken by the stack", name)
		}
	}
}

func TestProberPause(t *testing.T) {
	w := newPair(t)
	p := w.a.NewProber(netstack.ProbeConfig{Local: gwA, Peer: gwB, Interval: 50 * time.Millisecond, FailAfter: 2})
	p.Pause()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx, nil); close(done) }()
	defer func() { cancel(); <-done }()
	// The wire works: a probe would be answered, so staying Connecting with nothing sent
	// proves no probe went out.
	time.Sleep(300 * time.Millisecond)
	if s := p.Status(); s.State != netstack.Connecting || w.count.Load() != 0 {
		t.Errorf("paused prober: state %v, %d packets sent", s.State, w.count.Load())
	}
	p.Resume()
	deadline := time.Now().Add(5 * time.Second)
	for p.Status().State != netstack.Connected {
		if time.Now().After(deadline) {
			t.Fatal("not Connected after Resume")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
