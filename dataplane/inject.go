package dataplane

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"github.com/skein-net/skein/dataplane/overlay"
	"github.com/skein-net/skein/dataplane/packet"
)

// Packets the gateway originates (Inject) and the queue into the tunnel they share with what a
// read batch could not fit into wireguard-go's slots.

// Inject sends a packet the gateway itself originates (the netstack's replies and probes):
// into the tunnel if its destination routes there, else to the node hosting it. The packet is
// copied; no NAT is applied.
func (d *Dataplane) Inject(pkt []byte) error {
	if d.closed.Load() {
		return os.ErrClosed
	}
	t := d.t.Load()
	var (
		hop       uint32
		ok        bool
		dst       fmt.Stringer
		etherType uint16
	)
	if len(pkt) > 0 && pkt[0]>>4 == 6 {
		ip, err := packet.ParseIPv6(pkt)
		if err != nil {
			return fmt.Errorf("inject: %w", err)
		}
		hop, ok = t.routes.Lookup6(ip.Dst())
		dst, etherType = ip.DstAddr(), packet.EtherTypeIPv6
	} else {
		ip, err := packet.ParseIPv4(pkt)
		if err != nil {
			return fmt.Errorf("inject: %w", err)
		}
		hop, ok = t.routes.Lookup4(ip.Dst())
		dst, etherType = ip.DstAddr(), packet.EtherTypeIPv4
	}
	switch {
	case !ok:
		d.ctr.inc(ToTunnel, DropNoRoute)
		return fmt.Errorf("inject: no route to %v", dst)
	case hop == hopLocal:
		return fmt.Errorf("inject: %v is the gateway's own address", dst)
	case hop == hopTunnel:
		// The configured MTU, not the effective one: path MTU probes are larger.
		if len(pkt) > t.cfg.TunnelMTU {
			return fmt.Errorf("inject: %d-byte packet exceeds the tunnel MTU %d", len(pkt), t.cfg.TunnelMTU)
		}
		if !d.queue.push(pkt) {
			d.ctr.inc(ToTunnel, DropQueueFull)
			return errQueueFull
		}
		d.conn.Wake()
		return nil
	}
	if len(pkt) > t.overlayMTU {
		return fmt.Errorf("inject: %d-byte packet exceeds the overlay MTU %d", len(pkt), t.overlayMTU)
	}
	node := t.nodes[hop-hopNode]
	d.imu.Lock()
	defer d.imu.Unlock()
	n := copy(d.ibuf[overlay.HeaderLen:], pkt)
	t.vtep.PutHeader(d.ibuf[:overlay.HeaderLen], node.mac, etherType)
	msg := []Message{{Head: d.ibuf[:overlay.HeaderLen], Body: d.ibuf[overlay.HeaderLen : overlay.HeaderLen+n], Addr: node.addr}}
	if sent, err := d.conn.WriteBatch(msg); sent != 1 {
		d.ctr.inc(FromTunnel, DropSend)
		return fmt.Errorf("inject: send to %v: %w", node.addr, err)
	}
	return nil
}

var errQueueFull = errors.New("inject: queue into the tunnel is full")

// injectQueue holds packets for the tunnel until the reader picks them up: packets the
// gateway originates (netstack, ICMP errors), at most the capacity given to init, and what a
// batch from the overlay socket did not fit into wireguard-go's slots, for which the queue
// grows as needed (Read takes from the socket only when the queue is empty, so that is at
// most one batch). Slots are allocated on first use and reused; an emptied queue starts again
// at its first slot, so a trickle of packets holds one buffer, not one per slot.
type injectQueue struct {
	pending    atomic.Int32 // size, readable without the lock
	mu         sync.Mutex
	slots      [][]byte
	lens       []int
	head, size int
	capacity   int
}

func (q *injectQueue) init(n int) {
	q.capacity = n
	q.slots = make([][]byte, n)
	q.lens = make([]int, n)
}

// push queues a copy of p unless the queue holds its capacity already.
func (q *injectQueue) push(p []byte) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	i, buf, ok := q.next(len(p), false)
	if ok {
		q.commit(i, copy(buf, p))
	}
	return ok
}

// spill queues a copy of p, growing the queue if need be.
func (q *injectQueue) spill(p []byte) {
	q.mu.Lock()
	defer q.mu.Unlock()
	i, buf, _ := q.next(len(p), true)
	q.commit(i, copy(buf, p))
}

// next returns the free slot at the queue's tail, grown to hold need bytes, or false when the
// queue is at its capacity and may not grow. q.mu must be held.
func (q *injectQueue) next(need int, grow bool) (int, []byte, bool) {
	if q.size >= q.capacity && !grow {
		return 0, nil, false
	}
	if q.size == len(q.slots) {
		// Grow the ring, oldest first in the new one.
		n := 2 * len(q.slots)
		slots, lens := make([][]byte, n), make([]int, n)
		for k := range q.size {
			j := (q.head + k) % len(q.slots)
			slots[k], lens[k] = q.slots[j], q.lens[j]
		}
		for k := q.size; k < len(q.slots); k++ { // keep the free slots' buffers
			slots[k] = q.slots[(q.head+k)%len(q.slots)]
		}
		q.slots, q.lens, q.head = slots, lens, 0
	}
	i := (q.head + q.size) % len(q.slots)
	if cap(q.slots[i]) < need {
		q.slots[i] = make([]byte, max(need, 2048))
	}
	return i, q.slots[i][:cap(q.slots[i])], true
}

// commit queues slot i, holding n bytes. q.mu must be held.
func (q *injectQueue) commit(i, n int) {
	q.lens[i] = n
	q.size++
	q.pending.Store(int32(q.size))
}

// spillSegment builds segment k of superpacket ip directly in a queue slot, growing the
// queue if need be.
func (q *injectQueue) spillSegment(ip []byte, s split, k int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	i, buf, _ := q.next(s.hdrLen+s.mss, true)
	q.commit(i, writeSegment(buf, ip, s, k))
}

// drain moves queued packets into bufs at offset; it returns how many.
func (q *injectQueue) drain(bufs [][]byte, sizes []int, offset int) int {
	if q.pending.Load() == 0 {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for q.size > 0 && n < len(bufs) && n < len(sizes) {
		i := q.head
		sizes[n] = copy(bufs[n][offset:], q.slots[i][:q.lens[i]])
		n++
		q.head = (q.head + 1) % len(q.slots)
		q.size--
	}
	if q.size == 0 {
		// Start again at the first slot: one packet at a time (probes, their replies) then
		// reuses one buffer instead of giving every slot of the ring one in turn.
		q.head = 0
	}
	q.pending.Store(int32(q.size))
	return n
}
