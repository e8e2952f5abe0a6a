package dataplane

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"golang.zx2c4.com/wireguard/tun"

	"github.com/skein-net/skein/dataplane/nat"
	"github.com/skein-net/skein/dataplane/overlay"
	"github.com/skein-net/skein/dataplane/packet"
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
	routs  []Message // ARP replies and ICMP errors back onto the overlay
	ricmp  [][]byte
	rtally tally
	// rsegs is the most segments one datagram of the last socket batch was cut into (0: no
	// superpackets). While superpackets flow, Read takes only as many datagrams from the
	// socket as their segments fill wireguard-go's slots, so that segments need not wait
	// (copied) in the queue, which would overflow and drop them.
	rsegs int

	// Write side.
	wmu    sync.Mutex
	wmsgs  []Message
	wheads [][overlay.HeaderLen]byte
	wicmp  []byte
	wtally tally

	// Inject towards the overlay.
	imu  sync.Mutex
	ibuf []byte
}

var _ tun.Device = (*Dataplane)(nil)

// New builds a Dataplane for cfg on conn. It owns conn from then on (Close closes it).
func New(cfg Config, conn OverlayConn) (*Dataplane, error) {
	t, err := compile(cfg)
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
		routs:  make([]Message, 0, b),
		ricmp:  make([][]byte, b),
		wicmp:  make([]byte, icmpBufLen),
		ibuf:   make([]byte, overlay.HeaderLen+MaxMTU),
	}
	for i := range d.ricmp {
		d.ricmp[i] = make([]byte, icmpBufLen)
	}
	d.queue.init(512)
	d.t.Store(t)
	return d, nil
}

// Reconfig swaps in a new configuration atomically; packets in flight finish with the old
// one. Applying the configuration already in force changes nothing. On error the old
// configuration stays.
func (d *Dataplane) Reconfig(cfg Config) error {
	old := d.t.Load()
	if reflect.DeepEqual(old.cfg, cfg) {
		return nil
	}
	t, err := compile(cfg)
	if err != nil {
		return err
	}
	if reflect.DeepEqual(old.cfg, t.cfg) {
		return nil // the same once defaults are filled in
	}
	d.t.Store(t)
	if t.tunnelMTU != old.tunnelMTU {
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

// MTU is the tunnel MTU.
func (d *Dataplane) MTU() (int, error) { return d.t.Load().tunnelMTU, nil }

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

// Read fills bufs with packets for the tunnel: packets injected by the netstack and ICMP
// errors first, then what local pods send over the overlay, in the order they came.
//
// Datagrams are received into the last slots of bufs and their packets packed from the
// first slot on: a packet already in its slot stays where it is, a TCP superpacket is cut
// into the slots in front of it (its last segment in place), so one Read turns a few 64 KiB
// datagrams into wireguard-go's full batch with one copy per segment. What does not fit
// waits in the queue for the next Read.
func (d *Dataplane) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	limit := min(len(bufs), len(sizes))
	for {
		if d.closed.Load() {
			return 0, os.ErrClosed
		}
		d.out.Wait(d.done)
		if n := d.queue.drain(bufs, sizes, offset); n > 0 {
			d.out.Enter(n)
			return n, nil
		}
		k := min(limit, d.batch)
		if d.rsegs > 1 {
			k = max(1, min(k, limit/d.rsegs))
		}
		base := limit - k
		msgs := d.rmsgs[:k]
		for i := range msgs {
			msgs[i] = Message{Head: d.rheads[i][:], Body: bufs[base+i][offset:]}
		}
		got, err := d.conn.ReadBatch(msgs)
		if err != nil {
			if d.closed.Load() {
				return 0, os.ErrClosed
			}
			return 0, fmt.Errorf("overlay receive: %w", err)
		}
		t := d.t.Load()
		now := time.Time{}
		cur := 0 // the next free output slot
		// queued: a packet of this batch did not fit and went to the queue, so everything
		// after it goes there too, keeping the order.
		queued := false
		d.rsegs /= 2 // forget superpackets slowly: the next batch likely has them too
		for i := range got {
			src := base + i
			replies := len(d.routs)
			size, sp := d.toTunnel(t, &msgs[i], i, &now)
			if len(d.routs) > replies && src >= cur {
				// An ARP reply is written over its request, which must stay until
				// flushOverlay: skip over its slot (zero sizes are skipped by wireguard-go).
				for j := cur; j <= src; j++ {
					sizes[j] = 0
				}
				cur = src + 1
			}
			if size == 0 {
				continue
			}
			pkt := packet.IPv4(bufs[src][offset : offset+size])
			d.rsegs = max(d.rsegs, sp.n)
			if queued {
				d.queuePacket(pkt, sp, 0)
				continue
			}
			// Free output slots: up to this datagram's own, or to the end for the last one.
			avail := src + 1 - cur
			if i == got-1 {
				avail = limit - cur
			}
			n := max(1, sp.n)
			place := min(n, avail)
			own := src - cur // index of the segment that lands in this datagram's slot
			for j := range place {
				if j == own {
					continue
				}
				if sp.n == 0 {
					sizes[cur+j] = copy(bufs[cur+j][offset:], pkt)
				} else {
					sizes[cur+j] = writeSegment(bufs[cur+j][offset:], pkt, sp, j)
				}
			}
			if place < n {
				d.queuePacket(pkt, sp, place)
				queued = true
			}
			if own < place {
				sizes[src] = segmentInPlace(pkt, sp, own)
			}
			cur += place
		}
		d.flushOverlay(&d.rtally)
		d.ctr.add(ToTunnel, &d.rtally)
		if cur > 0 {
			d.out.Enter(cur)
			return cur, nil
		}
		if d.queue.pending.Load() > 0 {
			continue
		}
	}
}

// queuePacket moves a processed packet, or the segments of a superpacket from segment from
// on, into the queue, which grows for them.
func (d *Dataplane) queuePacket(pkt packet.IPv4, sp split, from int) {
	if sp.n == 0 {
		d.queue.spill(pkt)
		return
	}
	for k := from; k < sp.n; k++ {
		d.queue.spillSegment(pkt, sp, k)
	}
}

var overlayDrops = [overlay.NumResults]Counter{
	overlay.DropUnknownPeer:   DropUnknownVTEP,
	overlay.DropMalformed:     DropMalformedOverlay,
	overlay.DropVNI:           DropWrongVNI,
	overlay.DropGeneveControl: DropGeneveControl,
	overlay.DropNotForUs:      DropNotForUs,
	overlay.DropEtherType:     DropEtherType,
	overlay.DropARP:           DropARP,
}

// toTunnel handles datagram m (slot i of the batch) from the overlay and returns the size of
// the packet to hand to wireguard-go, which then starts at the start of m.Body, or 0.
func (d *Dataplane) toTunnel(t *tables, m *Message, slot int, now *time.Time) (int, split) {
	tl := &d.rtally
	if m.N < overlay.HeaderLen {
		tl[DropMalformedOverlay]++
		return 0, split{}
	}
	inner, res := t.vtep.Decap(m.Addr.Addr(), m.Head, m.Body[:m.N-overlay.HeaderLen])
	switch res {
	case overlay.Deliver:
	case overlay.Reply:
		tl[ARPReplied]++
		d.routs = append(d.routs, Message{Head: m.Head, Body: inner, Addr: netip.AddrPortFrom(m.Addr.Addr(), t.cfg.OverlayPort)})
		return 0, split{}
	default:
		tl[overlayDrops[res]]++
		return 0, split{}
	}
	return d.forwardToTunnel(t, inner, slot, now)
}

// forwardToTunnel routes, checks, translates and clamps an inner packet from the overlay. It
// returns the packet's size (0: not for the tunnel) and, for a TCP superpacket larger than the
// tunnel MTU, how to cut it.
func (d *Dataplane) forwardToTunnel(t *tables, inner []byte, slot int, now *time.Time) (int, split) {
	tl := &d.rtally
	ip, err := packet.ParseIPv4(inner)
	if err != nil {
		tl[DropMalformedIP]++
		return 0, split{}
	}
	hop, ok := t.routes.Lookup4(ip.Dst())
	if !ok {
		tl[DropNoRoute]++
		return 0, split{}
	}
	switch {
	case hop == hopLocal:
		d.deliverLocal(ip, tl)
		return 0, split{}
	case hop != hopTunnel:
		tl[DropLoop]++
		return 0, split{}
	}
	if ip.TTL() <= 1 {
		tl[DropTTL]++
		d.icmpToOverlay(t, ip, icmpTimeExceeded, icmpTTLInTransit, 0, slot, now, tl)
		return 0, split{}
	}
	var sp split
	if len(ip) > t.tunnelMTU {
		sp = planSplit(ip, t.tunnelMTU)
		if sp.n == 0 && ip.DontFragment() {
			tl[DropTooBig]++
			d.icmpToOverlay(t, ip, icmpDestUnreach, icmpFragNeeded, uint32(t.tunnelMTU), slot, now, tl)
			return 0, split{}
		}
	}
	if t.cfg.CompleteChecksums && sp.n == 0 {
		completeChecksum(ip)
	}
	ip.DecTTL()
	if c, drop := natVerdict(t.in.RewriteDst(ip), t.cfg.DropUnmatched, tl); drop {
		tl[c]++
		return 0, split{}
	}
	if sp.n > 0 {
		// Checksums are computed per segment; counted as the packets they become.
		tl[Segmented]++
		tl[Forwarded] += uint64(sp.n)
		tl[Bytes] += uint64(len(ip) + (sp.n-1)*sp.hdrLen)
		return len(ip), sp
	}
	clamp(ip, t.mss, tl)
	tl[Forwarded]++
	tl[Bytes] += uint64(len(ip))
	return len(ip), split{}
}

// completeChecksum recomputes the TCP or UDP checksum of an unfragmented packet (a UDP
// checksum of 0, "none", stays 0).
func completeChecksum(ip packet.IPv4) {
	if ip.IsFragment() {
		return
	}
	l4 := ip.Payload()
	var off int
	switch ip.Protocol() {
	case packet.ProtoTCP:
		if len(l4) < packet.TCPMinHeaderLen {
			return
		}
		off = packet.TCPChecksumOffset
	case packet.ProtoUDP:
		if len(l4) < packet.UDPHeaderLen || l4[6]|l4[7] == 0 {
			return
		}
		off = packet.UDPChecksumOffset
	default:
		return
	}
	l4[off], l4[off+1] = 0, 0
	c := transportChecksum(ip, l4)
	if c == 0 && ip.Protocol() == packet.ProtoUDP {
		c = 0xffff
	}
	l4[off], l4[off+1] = byte(c>>8), byte(c)
}

// natVerdict counts a NAT result and says whether (and as what) to drop the packet.
func natVerdict(r nat.Result, dropUnmatched bool, tl *tally) (Counter, bool) {
	switch r {
	case nat.NoMatch:
		tl[NATUnmatched]++
		return DropNATUnmatched, dropUnmatched
	case nat.Truncated:
		return DropNATTruncated, true
	case nat.BadQuote:
		return DropNATBadQuote, true
	}
	return 0, false
}

// clamp lowers the MSS of a TCP SYN (unfragmented or first fragment) to mss.
func clamp(ip packet.IPv4, mss uint16, tl *tally) {
	if ip.Protocol() != packet.ProtoTCP || ip.FragmentOffset() != 0 {
		return
	}
	seg, err := packet.ParseTCP(ip.Payload())
	if err != nil {
		return
	}
	if seg.ClampMSS(mss) {
		tl[MSSClamped]++
	}
}

func (d *Dataplane) deliverLocal(ip packet.IPv4, tl *tally) {
	if h := d.local.Load(); h != nil && (*h).DeliverLocal(ip) {
		tl[Local]++
		return
	}
	tl[DropLocalUnavailable]++
}

// allowICMP applies the rate limit, reading the clock once per batch.
func (d *Dataplane) allowICMP(t *tables, now *time.Time, tl *tally) bool {
	if now.IsZero() {
		*now = time.Now()
	}
	if !d.icmp.allow(*now, t.cfg.ICMPRate, t.cfg.ICMPBurst) {
		tl[ICMPRateLimited]++
		return false
	}
	tl[ICMPSent]++
	return true
}

// icmpToOverlay sends an ICMP error about orig back to the local pod that sent it, from the
// gateway's overlay IP, using the batch slot's scratch buffer.
func (d *Dataplane) icmpToOverlay(t *tables, orig packet.IPv4, typ, code uint8, rest uint32, slot int, now *time.Time, tl *tally) {
	if !mayAnswer(orig) {
		return
	}
	hop, ok := t.routes.Lookup4(orig.Src())
	if !ok || hop < hopNode {
		return
	}
	if !d.allowICMP(t, now, tl) {
		return
	}
	node := t.nodes[hop-hopNode]
	buf := d.ricmp[slot]
	n := buildICMPError(buf[overlay.HeaderLen:], t.overlayIP, typ, code, rest, orig)
	t.vtep.PutHeader(buf[:overlay.HeaderLen], node.mac, packet.EtherTypeIPv4)
	d.routs = append(d.routs, Message{Head: buf[:overlay.HeaderLen], Body: buf[overlay.HeaderLen : overlay.HeaderLen+n], Addr: node.addr})
}

// flushOverlay sends the ARP replies and ICMP errors a read batch produced.
func (d *Dataplane) flushOverlay(tl *tally) {
	if len(d.routs) == 0 {
		return
	}
	n, _ := d.conn.WriteBatch(d.routs)
	tl[DropSend] += uint64(len(d.routs) - n)
	clear(d.routs)
	d.routs = d.routs[:0]
}

// Write takes packets out of the tunnel (decrypted by wireguard-go, at bufs[i][offset:]) and
// sends them to the nodes hosting their destinations. It always reports every packet consumed:
// drops are counted, not returned as errors, so wireguard-go keeps going.
func (d *Dataplane) Write(bufs [][]byte, offset int) (int, error) {
	if d.closed.Load() {
		return 0, os.ErrClosed
	}
	d.in.Leave(len(bufs))
	d.wmu.Lock()
	defer d.wmu.Unlock()
	if len(bufs) > len(d.wmsgs) {
		d.wmsgs = make([]Message, len(bufs))
		d.wheads = make([][overlay.HeaderLen]byte, len(bufs))
	}
	t := d.t.Load()
	tl := &d.wtally
	now := time.Time{}
	k := 0
	for _, b := range bufs {
		if len(b) <= offset {
			tl[DropMalformedIP]++
			continue
		}
		node, ip, ok := d.fromTunnel(t, b[offset:], &now)
		if !ok {
			continue
		}
		t.vtep.PutHeader(d.wheads[k][:], node.mac, packet.EtherTypeIPv4)
		d.wmsgs[k] = Message{Head: d.wheads[k][:], Body: ip, Addr: node.addr}
		k++
	}
	if k > 0 {
		sent, _ := d.conn.WriteBatch(d.wmsgs[:k])
		for _, m := range d.wmsgs[:sent] {
			tl[Bytes] += uint64(len(m.Body))
		}
		tl[Forwarded] += uint64(sent)
		tl[DropSend] += uint64(k - sent)
		clear(d.wmsgs[:k])
	}
	d.ctr.add(FromTunnel, tl)
	return len(bufs), nil
}

// fromTunnel routes, checks, translates and clamps a packet out of the tunnel; ok means send
// ip to node.
func (d *Dataplane) fromTunnel(t *tables, pkt []byte, now *time.Time) (node nodeHop, ip packet.IPv4, ok bool) {
	tl := &d.wtally
	ip, err := packet.ParseIPv4(pkt)
	if err != nil {
		tl[DropMalformedIP]++
		return node, nil, false
	}
	hop, found := t.routes.Lookup4(ip.Dst())
	switch {
	case !found:
		tl[DropNoRoute]++
		return node, nil, false
	case hop == hopLocal:
		d.deliverLocal(ip, tl)
		return node, nil, false
	case hop == hopTunnel:
		tl[DropLoop]++
		return node, nil, false
	}
	if ip.TTL() <= 1 {
		tl[DropTTL]++
		d.icmpToTunnel(t, ip, icmpTimeExceeded, icmpTTLInTransit, 0, now, tl)
		return node, nil, false
	}
	if len(ip) > t.overlayMTU && ip.DontFragment() {
		tl[DropTooBig]++
		d.icmpToTunnel(t, ip, icmpDestUnreach, icmpFragNeeded, uint32(t.overlayMTU), now, tl)
		return node, nil, false
	}
	ip.DecTTL()
	if c, drop := natVerdict(t.out.RewriteSrc(ip), t.cfg.DropUnmatched, tl); drop {
		tl[c]++
		return node, nil, false
	}
	clamp(ip, t.mss, tl)
	return t.nodes[hop-hopNode], ip, true
}

// icmpToTunnel queues an ICMP error about orig back into the tunnel, from the gateway's tunnel
// address.
func (d *Dataplane) icmpToTunnel(t *tables, orig packet.IPv4, typ, code uint8, rest uint32, now *time.Time, tl *tally) {
	if !t.hasTunIP || !mayAnswer(orig) || !d.allowICMP(t, now, tl) {
		return
	}
	n := buildICMPError(d.wicmp, t.tunnelIP, typ, code, rest, orig)
	if !d.queue.push(d.wicmp[:n]) {
		tl[DropQueueFull]++
		return
	}
	d.conn.Wake()
}

// Inject sends a packet the gateway itself originates (the netstack's replies and probes):
// into the tunnel if its destination routes there, else to the node hosting it. The packet is
// copied; no NAT is applied.
func (d *Dataplane) Inject(pkt []byte) error {
	if d.closed.Load() {
		return os.ErrClosed
	}
	ip, err := packet.ParseIPv4(pkt)
	if err != nil {
		return fmt.Errorf("inject: %w", err)
	}
	t := d.t.Load()
	hop, ok := t.routes.Lookup4(ip.Dst())
	switch {
	case !ok:
		d.ctr.inc(ToTunnel, DropNoRoute)
		return fmt.Errorf("inject: no route to %v", ip.DstAddr())
	case hop == hopLocal:
		return fmt.Errorf("inject: %v is the gateway's own address", ip.DstAddr())
	case hop == hopTunnel:
		if len(ip) > t.tunnelMTU {
			return fmt.Errorf("inject: %d-byte packet exceeds the tunnel MTU %d", len(ip), t.tunnelMTU)
		}
		if !d.queue.push(ip) {
			d.ctr.inc(ToTunnel, DropQueueFull)
			return errQueueFull
		}
		d.conn.Wake()
		return nil
	}
	if len(ip) > t.overlayMTU {
		return fmt.Errorf("inject: %d-byte packet exceeds the overlay MTU %d", len(ip), t.overlayMTU)
	}
	node := t.nodes[hop-hopNode]
	d.imu.Lock()
	defer d.imu.Unlock()
	n := copy(d.ibuf[overlay.HeaderLen:], ip)
	t.vtep.PutHeader(d.ibuf[:overlay.HeaderLen], node.mac, packet.EtherTypeIPv4)
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
// most one batch). Slots are allocated on first use and reused.
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
func (q *injectQueue) spillSegment(ip packet.IPv4, s split, k int) {
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
	q.pending.Store(int32(q.size))
	return n
}
