package dataplane

import (
	"net/netip"
	"os"
	"reflect"
	"sync"
	"sync/atomic"

	"golang.zx2c4.com/wireguard/tun"

	"github.com/skein-net/skein/dataplane/overlay"
)

// Message is one UDP datagram of a batch on the overlay side, scattered over (on receive) or
// gathered from (on send) two segments: Head, the first overlay.HeaderLen bytes, and Body, the
// rest. The split lets the inner packet land exactly where wireguard-go's buffer wants it.
type Message struct {
	Head []byte
	Body []byte
	// N is, on receive, the number of bytes received into Head then Body.
	N int
	// Addr is the sender on receive and the destination on send.
	Addr netip.AddrPort
}

// OverlayConn is the overlay side's socket, read and written in batches (shaped like
// wireguard-go's conn.Bind). ReadBatch blocks until at least one datagram arrives, Wake is
// called, or the conn is closed; it must not return transient errors (it retries them), only
// net.ErrClosed or a fatal error. WriteBatch returns how many messages were sent.
type OverlayConn interface {
	ReadBatch(msgs []Message) (int, error)
	WriteBatch(msgs []Message) (int, error)
	// Wake makes a blocked ReadBatch (or the next one) return 0, nil promptly.
	Wake()
	BatchSize() int
	Close() error
}

// LocalHandler takes packets addressed to the gateway's own addresses (the netstack). It must
// copy what it keeps; it reports false if it refused the packet.
type LocalHandler interface {
	DeliverLocal(pkt []byte) bool
}

// Dataplane is the gateway's packet path between wireguard-go and the overlay. It implements
// tun.Device: wireguard-go reads from it what local pods send into the tunnel and writes to it
// what comes out of the tunnel. Read is meant for one goroutine (wireguard-go's TUN reader);
// Write, Inject, Reconfig and Counters may be called from any.
type Dataplane struct {
	t      atomic.Pointer[tables]
	conn   OverlayConn
	batch  int
	ctr    counters
	icmp   limiter
	local  atomic.Pointer[LocalHandler]
	queue  injectQueue
	events chan tun.Event
	closed atomic.Bool
	done   chan struct{} // closed by Close
	once   sync.Once
	// out counts what Read hands to wireguard-go and waits for room before reading the
	// socket; in counts out what wireguard-go writes (nil: no pacing).
	out, in *Window

	// Read side (one goroutine).
	rmsgs  []Message
	rheads [][overlay.HeaderLen]byte
	rb     batch
	// rsegs is the most segments one datagram of the last socket batch was cut into (0: no
	// superpackets). While superpackets flow, Read takes only as many datagrams from the
	// socket as their segments fill wireguard-go's slots, so that segments need not wait
	// (copied) in the queue, which would overflow and drop them.
	rsegs int

	// Write side (under wmu).
	wmu    sync.Mutex
	wmsgs  []Message
	wheads [][overlay.HeaderLen]byte
	wb     batch

	// Inject towards the overlay.
	imu  sync.Mutex
	ibuf []byte

	// probe is the path MTU probe waiting for Read (probe.go); path sends it.
	probe atomic.Pointer[Probe]
	path  *PathBind

	// cmu orders Reconfig and SetPathMTU; pathMTU is the limit SetPathMTU set (0: none).
	cmu     sync.Mutex
	pathMTU int
}

var _ tun.Device = (*Dataplane)(nil)

// New builds a Dataplane for cfg on conn. It owns conn from then on (Close closes it).
func New(cfg Config, conn OverlayConn) (*Dataplane, error) {
	t, err := compile(cfg, false)
	if err != nil {
		return nil, err
	}
	b := conn.BatchSize()
	if b < 1 {
		b = 1
	}
	d := &Dataplane{
		conn:   conn,
		batch:  b,
		events: make(chan tun.Event, 4),
		done:   make(chan struct{}),
		rmsgs:  make([]Message, b),
		rheads: make([][overlay.HeaderLen]byte, b),
		rb:     newBatch(b, b),
		wb:     newBatch(1, 0),
		ibuf:   make([]byte, overlay.HeaderLen+MaxMTU),
	}
	d.queue.init(512)
	d.t.Store(t)
	return d, nil
}

// Reconfig swaps in a new configuration atomically; packets in flight finish with the old
// one. Applying the configuration already in force changes nothing. On error the old
// configuration stays.
func (d *Dataplane) Reconfig(cfg Config) error {
	d.cmu.Lock()
	defer d.cmu.Unlock()
	old := d.t.Load()
	if reflect.DeepEqual(old.cfg, cfg) {
		return nil
	}
	t, err := compile(cfg, false)
	if err != nil {
		return err
	}
	if reflect.DeepEqual(old.cfg, t.cfg) {
		return nil // the same once defaults are filled in
	}
	d.t.Store(t.withPathMTU(d.pathMTU))
	if t.cfg.TunnelMTU != old.cfg.TunnelMTU {
		select {
		case d.events <- tun.EventMTUUpdate:
		default:
		}
	}
	return nil
}

// Config returns the configuration in force, with defaults filled in.
func (d *Dataplane) Config() Config { return d.t.Load().cfg }

// Counters returns a snapshot of the packet counters.
func (d *Dataplane) Counters() Counts { return d.ctr.snapshot() }

// SetWindows makes the dataplane pace wireguard-go (see Window): Read counts the packets it
// returns into out and waits for room in it; Write counts its packets out of in. Call it
// before wireguard-go starts; nil windows do nothing.
func (d *Dataplane) SetWindows(out, in *Window) { d.out, d.in = out, in }

// SetLocalHandler attaches the handler for the gateway's own addresses (nil detaches).
func (d *Dataplane) SetLocalHandler(h LocalHandler) {
	if h == nil {
		d.local.Store(nil)
		return
	}
	d.local.Store(&h)
}

// File is nil: there is no kernel device.
func (d *Dataplane) File() *os.File { return nil }

// MTU is the configured tunnel MTU (wireguard-go pads to it; the gateway's own packets, path
// MTU probes among them, may be that large). EffectiveMTU may be lower.
func (d *Dataplane) MTU() (int, error) { return d.t.Load().cfg.TunnelMTU, nil }

// EffectiveMTU is the largest inner packet forwarded into the tunnel as it is: the configured
// tunnel MTU, or the path MTU SetPathMTU set if lower. A larger packet with DF is answered
// fragmentation needed (Packet Too Big) with this MTU, a TCP superpacket is cut to it and
// SYNs are clamped to it.
func (d *Dataplane) EffectiveMTU() int { return d.t.Load().tunnelMTU }

// SetPathMTU limits the tunnel MTU to mtu (at least MinMTU; 0 lifts the limit) at once, for
// packets in flight and new ones alike: what the gateways' path MTU discovery found the WAN
// carries. It survives Reconfig. A limit at or above the configured MTU changes nothing.
func (d *Dataplane) SetPathMTU(mtu int) {
	d.cmu.Lock()
	defer d.cmu.Unlock()
	if mtu < 0 {
		mtu = 0
	}
	d.pathMTU = mtu
	d.t.Store(d.t.Load().withPathMTU(mtu))
}

// Name names the device in wireguard-go's logs.
func (d *Dataplane) Name() (string, error) { return "skein", nil }

// Events delivers MTU updates. There is no EventUp: whoever runs wireguard-go brings the
// device up (or keeps a standby replica down) with Device.Up and Device.Down.
func (d *Dataplane) Events() <-chan tun.Event { return d.events }

// BatchSize is the overlay socket's batch size.
func (d *Dataplane) BatchSize() int { return d.batch }

// Close closes the overlay socket; Read and Write fail from then on.
func (d *Dataplane) Close() error {
	var err error
	d.once.Do(func() {
		d.closed.Store(true)
		close(d.done)
		err = d.conn.Close()
		close(d.events)
	})
	return err
}
