// Package overlaytest is an in-memory overlay socket for tests: a dataplane.OverlayConn whose
// far side is the test, playing the cluster's nodes. Push hands the dataplane a datagram as if
// a node's kernel VTEP sent it; what the dataplane sends is kept for TakeSent and Receive. With
// it (and wireguard-go's conn/bindtest) tests assemble whole gateways in one process, with no
// root and no ports, as wireguard-go's own tests do with tun/tuntest.
//
// Frame and Decap build and take apart what a kernel VXLAN device puts on the wire.
//
// A Conn is safe for concurrent use: the dataplane reads and writes it from its goroutines
// while the test pushes and receives from its own.
package overlaytest

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/skein-net/skein/dataplane"
	"github.com/skein-net/skein/dataplane/overlay"
	"github.com/skein-net/skein/dataplane/packet"
)

// Datagram is one whole UDP payload and the address it came from (pushed) or went to (sent).
type Datagram struct {
	B    []byte
	Addr netip.AddrPort
}

// Conn is the in-memory socket. Make it with New.
type Conn struct {
	in     chan Datagram
	batch  int
	wake   chan struct{}
	closed chan struct{}
	once   sync.Once

	mu     sync.Mutex
	sent   []Datagram
	posted chan struct{} // closed and replaced whenever a datagram is sent
}

var _ dataplane.OverlayConn = (*Conn)(nil)

// New returns a Conn whose reads return at most batch datagrams (0: 8). Up to 1024 pushed
// datagrams wait for the dataplane; Push blocks beyond that.
func New(batch int) *Conn {
	if batch == 0 {
		batch = 8
	}
	return &Conn{in: make(chan Datagram, 1024), batch: batch, wake: make(chan struct{}, 1),
		closed: make(chan struct{}), posted: make(chan struct{})}
}

// Push hands b to the dataplane as a datagram from from. It waits in a queue until the dataplane
// reads it, so b must not change after the call.
func (c *Conn) Push(b []byte, from netip.AddrPort) {
	select {
	case c.in <- Datagram{B: b, Addr: from}:
	case <-c.closed:
	}
}

// TakeSent returns what the dataplane sent since the last call, oldest first.
func (c *Conn) TakeSent() []Datagram {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sent
	c.sent = nil
	return s
}

// ErrTimeout is Receive's error when nothing was sent in time.
var ErrTimeout = errors.New("overlaytest: nothing sent in time")

// Receive takes the oldest datagram the dataplane sent, waiting up to timeout for one.
func (c *Conn) Receive(timeout time.Duration) (Datagram, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		if len(c.sent) > 0 {
			d := c.sent[0]
			c.sent = c.sent[1:]
			c.mu.Unlock()
			return d, nil
		}
		posted := c.posted
		c.mu.Unlock()
		select {
		case <-posted:
		case <-deadline.C:
			return Datagram{}, ErrTimeout
		}
	}
}

// ReadBatch implements dataplane.OverlayConn: it blocks for one pushed datagram, then takes
// whatever else is waiting, up to the batch, scattering each over Head and Body as the real
// socket does.
func (c *Conn) ReadBatch(msgs []dataplane.Message) (int, error) {
	var d Datagram
	select {
	case d = <-c.in:
	case <-c.wake:
		return 0, nil
	case <-c.closed:
		return 0, net.ErrClosed
	}
	n := 0
	for {
		scatter(&msgs[n], d)
		n++
		if n == len(msgs) || n == c.batch {
			return n, nil
		}
		select {
		case d = <-c.in:
		default:
			return n, nil
		}
	}
}

func scatter(m *dataplane.Message, d Datagram) {
	h := copy(m.Head, d.B)
	b := copy(m.Body, d.B[h:])
	m.N = h + b
	m.Addr = d.Addr
}

// WriteBatch implements dataplane.OverlayConn: it keeps a copy of every message.
func (c *Conn) WriteBatch(msgs []dataplane.Message) (int, error) {
	select {
	case <-c.closed:
		return 0, net.ErrClosed
	default:
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range msgs {
		b := append(append([]byte(nil), m.Head...), m.Body...)
		c.sent = append(c.sent, Datagram{B: b, Addr: m.Addr})
	}
	close(c.posted)
	c.posted = make(chan struct{})
	return len(msgs), nil
}

// Wake implements dataplane.OverlayConn.
func (c *Conn) Wake() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// BatchSize implements dataplane.OverlayConn.
func (c *Conn) BatchSize() int { return c.batch }

// Close implements dataplane.OverlayConn; a closed Conn's reads and writes fail with
// net.ErrClosed.
func (c *Conn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

// Frame is what a node's kernel VXLAN device sends: a VXLAN header with vni, Ethernet from src
// to dst with etherType, then payload.
func Frame(vni uint32, dst, src packet.MAC, etherType uint16, payload []byte) []byte {
	b := make([]byte, overlay.HeaderLen+len(payload))
	packet.PutVXLAN(b, vni)
	packet.PutEthernet(b[packet.VXLANHeaderLen:], dst, src, etherType)
	copy(b[overlay.HeaderLen:], payload)
	return b
}

// Decap takes a VXLAN datagram apart: its VNI, Ethernet addresses and inner payload.
func Decap(b []byte) (vni uint32, dst, src packet.MAC, inner []byte, err error) {
	vx, err := packet.ParseVXLAN(b)
	if err != nil {
		return 0, dst, src, nil, err
	}
	eth, err := packet.ParseEthernet(vx.Payload())
	if err != nil {
		return 0, dst, src, nil, err
	}
	return vx.VNI(), eth.Dst(), eth.Src(), eth.Payload(), nil
}
