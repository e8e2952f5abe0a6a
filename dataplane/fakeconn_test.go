package dataplane_test

import (
	"net"
	"net/netip"
	"sync"

	"github.com/skein-net/skein/dataplane"
)

// datagram is a whole UDP payload with its peer address.
type datagram struct {
	b    []byte
	addr netip.AddrPort
}

// chanConn is an in-memory OverlayConn: tests push datagrams to in and read what the
// dataplane sent from sent. ReadBatch scatters like the real socket does.
type chanConn struct {
	in     chan datagram
	batch  int // BatchSize; 8 if 0
	wake   chan struct{}
	closed chan struct{}
	once   sync.Once

	mu   sync.Mutex
	sent []datagram
}

func newChanConn() *chanConn {
	return &chanConn{in: make(chan datagram, 64), wake: make(chan struct{}, 1), closed: make(chan struct{})}
}

func (c *chanConn) ReadBatch(msgs []dataplane.Message) (int, error) {
	var d datagram
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
		if n == len(msgs) {
			return n, nil
		}
		select {
		case d = <-c.in:
		default:
			return n, nil
		}
	}
}

func scatter(m *dataplane.Message, d datagram) {
	h := copy(m.Head, d.b)
	b := copy(m.Body, d.b[h:])
	m.N = h + b
	m.Addr = d.addr
}

func (c *chanConn) WriteBatch(msgs []dataplane.Message) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range msgs {
		b := append(append([]byte(nil), m.Head...), m.Body...)
		c.sent = append(c.sent, datagram{b: b, addr: m.Addr})
	}
	return len(msgs), nil
}

func (c *chanConn) Wake() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *chanConn) BatchSize() int {
	if c.batch == 0 {
		return 8
	}
	return c.batch
}

func (c *chanConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

func (c *chanConn) takeSent() []datagram {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sent
	c.sent = nil
	return s
}

// replayConn returns the same batch of datagrams on every ReadBatch without copying the
// bodies: the benchmark lays the datagram into the buffers once, and ReadBatch only restores
// the headers the dataplane rewrote (overlay head, and the first bytes of the inner packet:
// TTL, addresses, checksums, MSS). It allocates nothing and discards what is written.
type replayConn struct {
	head    []byte
	inner   []byte // pristine first bytes of the inner packet
	n       int
	addr    netip.AddrPort
	batch   int
	written int
}

func (c *replayConn) ReadBatch(msgs []dataplane.Message) (int, error) {
	k := min(len(msgs), c.batch)
	for i := range k {
		copy(msgs[i].Head, c.head)
		copy(msgs[i].Body, c.inner)
		msgs[i].N = c.n
		msgs[i].Addr = c.addr
	}
	return k, nil
}

func (c *replayConn) WriteBatch(msgs []dataplane.Message) (int, error) {
	c.written += len(msgs)
	return len(msgs), nil
}

func (c *replayConn) Wake()          {}
func (c *replayConn) BatchSize() int { return c.batch }
func (c *replayConn) Close() error   { return nil }
