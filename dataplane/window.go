package dataplane

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.zx2c4.com/wireguard/conn"
)

// Why windows: wireguard-go queues packets between its two edges without a bound that
// matters (1024 batches of up to 128 packets per queue), and every queued packet holds a
// 64 KiB buffer. TCP fills whatever queue its path has, so under many streams the gateway's
// heap grows to hundreds of MiB, and with a memory limit the garbage collector then runs
// constantly and wireguard-go's buffer pools are emptied and refilled with freshly zeroed
// buffers: throughput halves. A Window caps the packets inside wireguard-go in one direction;
// the edge that feeds wireguard-go waits for room before it takes more from its socket, so the
// excess waits in the kernel's socket buffer (and is dropped there when that is full, which
// is the signal TCP needs), not in 64 KiB buffers.

// Window counts the packets inside wireguard-go in one direction: Enter where they go in,
// Leave where they come out. Wait blocks the feeding edge while more than the limit are
// inside. Packets wireguard-go drops on the way (no session yet, failed authentication) never
// leave; when a Wait finds no room for MaxWait the window assumes that is what happened and
// forgets them. All methods may be called from any goroutine (wireguard-go reads IPv4 and
// IPv6 with a goroutine each, both feeding the inbound window).
type Window struct {
	limit   int64
	maxWait time.Duration
	inside  atomic.Int64
	waiters atomic.Int32

	mu   sync.Mutex
	room chan struct{} // closed (and replaced) when half the window frees up with waiters

	waits, forgets atomic.Uint64
}

// DefaultWindow is the default limit of a Window: at 64 KiB per packet, 32 MiB of buffers
// per direction, about 1.5 ms of a 3 Gbit/s stream of 1340-byte packets.
const DefaultWindow = 512

// DefaultWindowWait is how long Wait waits for room before it forgets what is inside.
const DefaultWindowWait = 20 * time.Millisecond

// NewWindow returns a window of limit packets (DefaultWindow if limit <= 0) whose Wait gives
// up after maxWait (DefaultWindowWait if maxWait <= 0).
func NewWindow(limit int, maxWait time.Duration) *Window {
	if limit <= 0 {
		limit = DefaultWindow
	}
	if maxWait <= 0 {
		maxWait = DefaultWindowWait
	}
	return &Window{limit: int64(limit), maxWait: maxWait, room: make(chan struct{})}
}

// Enter counts n packets handed to wireguard-go. A nil Window counts nothing.
func (w *Window) Enter(n int) {
	if w == nil || n == 0 {
		return
	}
	if v := w.inside.Add(int64(n)); v < int64(n) {
		// Forgotten packets left after all: do not let them widen the window.
		w.inside.CompareAndSwap(v, int64(n))
	}
}

// Leave counts n packets out of wireguard-go and wakes the waiting feeders once half the
// window is free.
func (w *Window) Leave(n int) {
	if w == nil || n == 0 {
		return
	}
	if v := w.inside.Add(-int64(n)); v <= w.limit/2 && w.waiters.Load() > 0 {
		w.wakeAll()
	}
}

func (w *Window) wakeAll() {
	w.mu.Lock()
	close(w.room)
	w.room = make(chan struct{})
	w.mu.Unlock()
}

// Wait returns at once while the window has room; else when half of it is free, after
// MaxWait (forgetting what is inside), or when done is closed.
func (w *Window) Wait(done <-chan struct{}) {
	if w == nil || w.inside.Load() <= w.limit {
		return
	}
	w.waits.Add(1)
	w.waiters.Add(1)
	defer w.waiters.Add(-1)
	timer := time.NewTimer(w.maxWait)
	defer timer.Stop()
	for {
		// Take the channel before looking: a Leave after the look closes this one.
		w.mu.Lock()
		room := w.room
		w.mu.Unlock()
		if w.inside.Load() <= w.limit/2 {
			return
		}
		select {
		case <-room:
		case <-timer.C:
			w.forgets.Add(1)
			w.inside.Store(0)
			w.wakeAll() // other waiters too
			return
		case <-done:
			return
		}
	}
}

// WindowStats is a snapshot of a Window.
type WindowStats struct {
	Inside  int64  // packets inside wireguard-go now (as counted)
	Waits   uint64 // times the feeder waited for room
	Forgets uint64 // waits that ran out and forgot the packets inside
}

// Stats returns a snapshot of the window.
func (w *Window) Stats() WindowStats {
	if w == nil {
		return WindowStats{}
	}
	return WindowStats{Inside: max(0, w.inside.Load()), Waits: w.waits.Load(), Forgets: w.forgets.Load()}
}

// PacedBind wraps wireguard-go's Bind so that the windows see the tunnel side: Send counts
// the data packets leaving towards the peer out of Out (the dataplane counts them into it in
// Read); each receive function waits for room in In before it reads and counts the data
// packets it returns into it (the dataplane counts them out in Write).
//
// Only packets from where the gateway last sent to (the peer's endpoint) count into In:
// anybody can send transport messages to the gateway's public port, wireguard-go drops them
// unauthenticated, and counted they would hold the window shut until it forgets them.
type PacedBind struct {
	conn.Bind
	Out, In *Window
	done    chan struct{}
	peer    atomic.Pointer[netip.AddrPort] // the last Send's destination
}

// NewPacedBind wraps b.
func NewPacedBind(b conn.Bind, out, in *Window) *PacedBind {
	return &PacedBind{Bind: b, Out: out, In: in}
}

// Open opens the wrapped Bind and wraps its receive functions.
func (p *PacedBind) Open(port uint16) ([]conn.ReceiveFunc, uint16, error) {
	fns, actual, err := p.Bind.Open(port)
	if err != nil {
		return nil, 0, err
	}
	done := make(chan struct{})
	p.done = done
	wrapped := make([]conn.ReceiveFunc, len(fns))
	for i, fn := range fns {
		wrapped[i] = func(packets [][]byte, sizes []int, eps []conn.Endpoint) (int, error) {
			p.In.Wait(done)
			n, err := fn(packets, sizes, eps)
			if peer := p.peer.Load(); peer != nil {
				p.In.Enter(countData(packets[:n], sizes[:n], eps[:n], *peer))
			}
			return n, err
		}
	}
	return wrapped, actual, nil
}

// Close closes the wrapped Bind and releases waiting receive functions.
func (p *PacedBind) Close() error {
	if p.done != nil {
		close(p.done)
		p.done = nil
	}
	return p.Bind.Close()
}

// Send sends through the wrapped Bind and counts the data packets out of Out, sent or not.
func (p *PacedBind) Send(bufs [][]byte, ep conn.Endpoint) error {
	if to := endpointOf(ep); to.IsValid() {
		if cur := p.peer.Load(); cur == nil || *cur != to {
			p.peer.Store(&to)
		}
	}
	err := p.Bind.Send(bufs, ep)
	n := 0
	for _, b := range bufs {
		if isData(b, len(b)) {
			n++
		}
	}
	p.Out.Leave(n)
	return err
}

// A WireGuard transport message: type 4, then receiver index and counter (16 bytes in all),
// then the encrypted packet and its 16-byte tag; a keepalive carries no packet.
const (
	wgTransportType = 4
	wgKeepaliveLen  = 16 + 16
)

// isData reports whether b[:size] is a WireGuard transport message carrying a packet.
func isData(b []byte, size int) bool {
	return size > wgKeepaliveLen && b[0] == wgTransportType && b[1]|b[2]|b[3] == 0
}

// countData counts the data messages among packets that came from peer.
func countData(packets [][]byte, sizes []int, eps []conn.Endpoint, peer netip.AddrPort) int {
	n := 0
	for i, b := range packets {
		if isData(b, sizes[i]) && samePeer(endpointOf(eps[i]), peer) {
			n++
		}
	}
	return n
}

// endpointOf is where ep points: address and port for wireguard-go's own endpoint type, the
// address alone (port 0) for others.
func endpointOf(ep conn.Endpoint) netip.AddrPort {
	switch e := ep.(type) {
	case nil:
		return netip.AddrPort{}
	case *conn.StdNetEndpoint:
		return e.AddrPort
	default:
		return netip.AddrPortFrom(e.DstIP(), 0)
	}
}

// samePeer compares endpoints, by address alone where a port is unknown.
func samePeer(a, b netip.AddrPort) bool {
	if a.Port() == 0 || b.Port() == 0 {
		return a.Addr().Unmap() == b.Addr().Unmap()
	}
	return a.Addr().Unmap() == b.Addr().Unmap() && a.Port() == b.Port()
}

var _ conn.Bind = (*PacedBind)(nil)
