package dataplane

import (
	"fmt"
	"net/netip"
	"os"

	"github.com/skein-net/skein/dataplane/nat"
	"github.com/skein-net/skein/dataplane/overlay"
	"github.com/skein-net/skein/dataplane/packet"
)

// The direction into the tunnel: what local pods send over the overlay, read by wireguard-go
// through Read, routed, translated (destination), clamped and cut to the tunnel MTU; ARP
// replies and ICMP errors go back onto the overlay.

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
	bufs, sizes = bufs[:limit], sizes[:limit]
	for {
		if d.closed.Load() {
			return 0, os.ErrClosed
		}
		switch d.takeProbe(bufs, sizes, offset) {
		case 1:
			d.out.Enter(1)
			return 1, nil
		case 0:
			continue // waiting for wireguard-go to empty
		}
		d.out.Wait(d.done)
		n := d.queue.drain(bufs, sizes, offset)
		if n == 0 {
			var err error
			if n, err = d.readOverlay(bufs, sizes, offset); err != nil {
				return 0, err
			}
		}
		if n > 0 {
			d.out.Enter(n)
			return n, nil
		}
		// The socket batch held nothing for the tunnel (dropped, answered, or all queued):
		// again, the queue first.
	}
}

// receive reads one batch from the overlay socket into the last slots of bufs: as many as
// superpackets' segments leave room for in front of them. It returns the first slot used and
// how many datagrams arrived.
func (d *Dataplane) receive(bufs [][]byte, offset int) (base, got int, err error) {
	k := min(len(bufs), d.batch)
	if d.rsegs > 1 {
		k = max(1, min(k, len(bufs)/d.rsegs))
	}
	base = len(bufs) - k
	msgs := d.rmsgs[:k]
	for i := range msgs {
		msgs[i] = Message{Head: d.rheads[i][:], Body: bufs[base+i][offset:]}
	}
	if got, err = d.conn.ReadBatch(msgs); err != nil {
		if d.closed.Load() {
			return 0, 0, os.ErrClosed
		}
		return 0, 0, fmt.Errorf("overlay receive: %w", err)
	}
	return base, got, nil
}

// readOverlay processes one socket batch and packs what goes into the tunnel from the first
// slot on; it returns how many slots it filled (0 when nothing of the batch was for the
// tunnel, or all of it went to the queue).
func (d *Dataplane) readOverlay(bufs [][]byte, sizes []int, offset int) (int, error) {
	base, got, err := d.receive(bufs, offset)
	if err != nil {
		return 0, err
	}
	b := &d.rb
	b.start(d.t.Load())
	cur := 0 // the next free output slot
	// queued: a packet of this batch did not fit and went to the queue, so everything after
	// it goes there too, keeping the order.
	queued := false
	d.rsegs /= 2 // forget superpackets slowly: the next batch likely has them too
	for i := range got {
		src := base + i
		replies := len(b.replies)
		size, sp := d.toTunnel(b, &d.rmsgs[i], i)
		if len(b.replies) > replies && src >= cur {
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
		pkt := bufs[src][offset : offset+size]
		d.rsegs = max(d.rsegs, sp.n)
		if queued {
			d.queuePacket(pkt, sp, 0)
			continue
		}
		if sp.n == 0 && src == cur {
			sizes[src] = size // the common case: a packet in the next free slot stays there
			cur++
			continue
		}
		// Free output slots: up to this datagram's own, or to the end for the last one.
		end := src + 1
		if i == got-1 {
			end = len(bufs)
		}
		var n int
		n, queued = d.place(bufs[cur:end], sizes[cur:end], offset, pkt, sp, src-cur)
		cur += n
	}
	d.flushOverlay(b)
	d.ctr.add(ToTunnel, &b.tl)
	return cur, nil
}

// place puts a packet, or the segments of a superpacket, into the free slots bufs, the last
// of which (own) holds the packet itself: the segment that lands in own is cut in place, the
// others copied in front of it, and what does not fit goes to the queue. It returns how many
// slots it filled and whether it queued anything.
func (d *Dataplane) place(bufs [][]byte, sizes []int, offset int, pkt []byte, sp split, own int) (int, bool) {
	n := max(1, sp.n)
	k := min(n, len(bufs))
	for j := range k {
		if j == own {
			continue
		}
		if sp.n == 0 {
			sizes[j] = copy(bufs[j][offset:], pkt)
		} else {
			sizes[j] = writeSegment(bufs[j][offset:], pkt, sp, j)
		}
	}
	if k < n {
		d.queuePacket(pkt, sp, k)
	}
	if own < k {
		sizes[own] = segmentInPlace(pkt, sp, own)
	}
	return k, k < n
}

// queuePacket moves a processed packet, or the segments of a superpacket from segment from
// on, into the queue, which grows for them.
func (d *Dataplane) queuePacket(pkt []byte, sp split, from int) {
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
func (d *Dataplane) toTunnel(b *batch, m *Message, slot int) (int, split) {
	if m.N < overlay.HeaderLen {
		b.tl[DropMalformedOverlay]++
		return 0, split{}
	}
	inner, res, peer := b.t.vtep.DecapPeer(m.Addr.Addr(), m.Head, m.Body[:m.N-overlay.HeaderLen])
	switch res {
	case overlay.Deliver:
	case overlay.Reply:
		b.tl[ARPReplied]++
		b.replies = append(b.replies, Message{Head: m.Head, Body: inner, Addr: netip.AddrPortFrom(m.Addr.Addr(), b.t.cfg.OverlayPort)})
		return 0, split{}
	default:
		b.tl[overlayDrops[res]]++
		return 0, split{}
	}
	if len(inner) >= packet.IPv4MinHeaderLen && inner[0]>>4 == 4 && inner[12] == 169 && inner[13] == 254 {
		b.tl[DropLinkLocalSource]++
		return 0, split{}
	}
	// The inner Ethernet header (in m.Head after Decap) says which IP version the packet is.
	if overlay.InnerEtherType(m.Head) == packet.EtherTypeIPv6 {
		if len(inner) == 0 || inner[0]>>4 != 6 {
			b.tl[DropMalformedIP]++
			return 0, split{}
		}
		return d.forwardToTunnel6(b, inner, slot, uint32(hopNode+peer))
	}
	return d.forwardToTunnel(b, inner, slot, uint32(hopNode+peer))
}

// relays reports whether a packet from the node at hop sender may carry a source of the node
// at hop owner: the relay node forwards the other nodes' frames (Config.RelayNode).
func (t *tables) relays(sender, owner uint32) bool {
	return t.relay != 0 && sender == t.relay && owner >= hopNode
}

// isLinkLocal6 reports whether a is in fe80::/10.
func isLinkLocal6(a [16]byte) bool { return a[0] == 0xfe && a[1]&0xc0 == 0x80 }

// countSegments counts a superpacket of size bytes as the packets it becomes (their checksums
// are computed per segment).
func (b *batch) countSegments(size int, sp split) {
	b.tl[Segmented]++
	b.tl[Forwarded] += uint64(sp.n)
	b.tl[Bytes] += uint64(size + (sp.n-1)*sp.hdrLen)
}

// forwardToTunnel6 is forwardToTunnel for IPv6: routes, checks, translates and clamps an inner
// IPv6 packet from the overlay, and returns its size (0: not for the tunnel) and, for a TCP
// superpacket larger than the tunnel MTU, how to cut it. A packet whose hop limit runs out or
// that is larger than the tunnel MTU and cannot be cut is dropped and answered with an ICMPv6
// error from OverlayIP6, if set (the batch slot's scratch buffer holds it).
func (d *Dataplane) forwardToTunnel6(b *batch, inner []byte, slot int, sender uint32) (int, split) {
	t := b.t
	ip, err := packet.ParseIPv6(inner)
	if err != nil {
		b.tl[DropMalformedIP]++
		return 0, split{}
	}
	if isLinkLocal6(ip.Src()) {
		b.tl[DropLinkLocalSource]++
		return 0, split{}
	}
	hop, ok := t.routes.Lookup6(ip.Dst())
	switch {
	case !ok:
		b.tl[DropNoRoute]++
		return 0, split{}
	case hop == hopLocal:
		d.deliverLocal(b, ip)
		return 0, split{}
	case hop != hopTunnel:
		b.tl[DropLoop]++
		return 0, split{}
	}
	if owner, ok := t.routes.Lookup6(ip.Src()); !ok || owner != sender && !t.relays(sender, owner) {
		b.tl[DropSpoofedSource]++
		return 0, split{}
	}
	if ip.HopLimit() <= 1 {
		b.tl[DropTTL]++
		d.icmpToOverlay6(b, ip, errHopLimitExceeded, slot)
		return 0, split{}
	}
	var sp split
	if len(ip) > t.tunnelMTU {
		if sp = planSplit6(ip, t.tunnelMTU); sp.n == 0 {
			b.tl[DropTooBig]++
			d.icmpToOverlay6(b, ip, errPacketTooBig(t.tunnelMTU), slot)
			return 0, split{}
		}
	}
	if t.cfg.CompleteChecksums && sp.n == 0 {
		packet.CompleteTransportChecksum6(ip)
	}
	ip.SetHopLimit(ip.HopLimit() - 1)
	peer, own := t.in.RewriteDst6(ip), nat.Matched
	if t.own != nil && peer != nat.Truncated && peer != nat.BadQuote && peer != nat.Unsupported {
		if _, ok := t.own.Map6(ip.Src()); ok {
			own = t.own.RewriteSrc6(ip)
		} else {
			own = nat.NoMatch
		}
	}
	if c, drop := b.natVerdict(peer, own, uint64(max(1, sp.n))); drop {
		b.tl[c]++
		return 0, split{}
	}
	if sp.n > 0 {
		b.countSegments(len(ip), sp)
		return len(ip), sp
	}
	b.clamp6(ip)
	b.tl[Forwarded]++
	b.tl[Bytes] += uint64(len(ip))
	return len(ip), split{}
}

// forwardToTunnel routes, checks, translates and clamps an inner packet from the overlay, sent
// by the node at route hop sender. It returns the packet's size (0: not for the tunnel) and,
// for a TCP superpacket larger than the tunnel MTU, how to cut it.
func (d *Dataplane) forwardToTunnel(b *batch, inner []byte, slot int, sender uint32) (int, split) {
	t := b.t
	ip, err := packet.ParseIPv4(inner)
	if err != nil {
		b.tl[DropMalformedIP]++
		return 0, split{}
	}
	hop, ok := t.routes.Lookup4(ip.Dst())
	if !ok {
		b.tl[DropNoRoute]++
		return 0, split{}
	}
	switch {
	case hop == hopLocal:
		d.deliverLocal(b, ip)
		return 0, split{}
	case hop != hopTunnel:
		b.tl[DropLoop]++
		return 0, split{}
	}
	// Into the peer cluster only from the sender's own addresses: a node cannot speak for
	// another node's pods, nor for anything outside its own; the relay node (the gateway's
	// own) speaks for every node's.
	if owner, ok := t.routes.Lookup4(ip.Src()); !ok || owner != sender && !t.relays(sender, owner) {
		b.tl[DropSpoofedSource]++
		return 0, split{}
	}
	if ip.TTL() <= 1 {
		b.tl[DropTTL]++
		d.icmpToOverlay(b, ip, errTTLExceeded, slot)
		return 0, split{}
	}
	var sp split
	if len(ip) > t.tunnelMTU {
		sp = planSplit(ip, t.tunnelMTU)
		if sp.n == 0 && ip.DontFragment() {
			b.tl[DropTooBig]++
			d.icmpToOverlay(b, ip, errFragNeeded(t.tunnelMTU), slot)
			return 0, split{}
		}
	}
	if t.cfg.CompleteChecksums && sp.n == 0 {
		packet.CompleteTransportChecksum(ip)
	}
	ip.DecTTL()
	peer, own := t.in.RewriteDst(ip), nat.Matched
	if t.own != nil && peer != nat.Truncated && peer != nat.BadQuote {
		// The source itself must be presented: an ICMP error whose quote alone matches a
		// pair would otherwise cross with its real source.
		if _, ok := t.own.Map4(ip.Src()); ok {
			own = t.own.RewriteSrc(ip)
		} else {
			own = nat.NoMatch
		}
	}
	if c, drop := b.natVerdict(peer, own, uint64(max(1, sp.n))); drop {
		b.tl[c]++
		return 0, split{}
	}
	if sp.n > 0 {
		b.countSegments(len(ip), sp)
		return len(ip), sp
	}
	b.clamp(ip)
	b.tl[Forwarded]++
	b.tl[Bytes] += uint64(len(ip))
	return len(ip), split{}
}

// icmpToOverlay sends an ICMP error about orig back to the local pod that sent it, from the
// gateway's overlay IP, using the batch slot's scratch buffer.
func (d *Dataplane) icmpToOverlay(b *batch, orig packet.IPv4, e icmpError, slot int) {
	if !mayAnswer(orig) {
		return
	}
	hop, ok := b.t.routes.Lookup4(orig.Src())
	if !ok || hop < hopNode {
		return
	}
	if !d.allowICMP(b) {
		return
	}
	node := b.t.nodes[hop-hopNode]
	buf := b.scratch[slot]
	n := buildICMPError(buf[overlay.HeaderLen:], b.t.overlayIP, e.typ, e.code, e.rest, orig)
	b.t.vtep.PutHeader(buf[:overlay.HeaderLen], node.mac, packet.EtherTypeIPv4)
	b.replies = append(b.replies, Message{Head: buf[:overlay.HeaderLen], Body: buf[overlay.HeaderLen : overlay.HeaderLen+n], Addr: node.addr})
}

// icmpToOverlay6 sends an ICMPv6 error about orig back to the local pod that sent it, from the
// gateway's IPv6 overlay address, using the batch slot's scratch buffer.
func (d *Dataplane) icmpToOverlay6(b *batch, orig packet.IPv6, e icmpError, slot int) {
	if !b.t.hasOverlayIP6 || !mayAnswer6(orig, e.typ == packet.ICMPv6PacketTooBig) {
		return
	}
	hop, ok := b.t.routes.Lookup6(orig.Src())
	if !ok || hop < hopNode || !d.allowICMP(b) {
		return
	}
	node := b.t.nodes[hop-hopNode]
	buf := b.scratch[slot]
	n := buildICMPv6Error(buf[overlay.HeaderLen:], b.t.overlayIP6, e.typ, e.code, e.rest, orig)
	b.t.vtep.PutHeader(buf[:overlay.HeaderLen], node.mac, packet.EtherTypeIPv6)
	b.replies = append(b.replies, Message{Head: buf[:overlay.HeaderLen], Body: buf[overlay.HeaderLen : overlay.HeaderLen+n], Addr: node.addr})
}

// flushOverlay sends the ARP replies and ICMP errors a read batch produced.
func (d *Dataplane) flushOverlay(b *batch) {
	if len(b.replies) == 0 {
		return
	}
	n, _ := d.conn.WriteBatch(b.replies)
	b.tl[DropSend] += uint64(len(b.replies) - n)
	clear(b.replies)
	b.replies = b.replies[:0]
}
