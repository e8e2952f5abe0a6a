package dataplane

import (
	"os"

	"github.com/skein-net/skein/dataplane/nat"
	"github.com/skein-net/skein/dataplane/overlay"
	"github.com/skein-net/skein/dataplane/packet"
)

// The direction out of the tunnel: what wireguard-go decrypted, written through Write, routed
// to the node hosting its destination, translated (source), clamped, and sent over the overlay;
// ICMP errors go back into the tunnel through the queue.

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
	b := &d.wb
	b.start(d.t.Load())
	k := 0
	for _, buf := range bufs {
		if len(buf) <= offset {
			b.tl[DropMalformedIP]++
			continue
		}
		pkt := buf[offset:]
		var (
			node nodeHop
			ip   []byte
			ok   bool
		)
		etherType := uint16(packet.EtherTypeIPv4)
		if pkt[0]>>4 == 6 {
			etherType = packet.EtherTypeIPv6
			node, ip, ok = d.fromTunnel6(b, pkt)
		} else {
			node, ip, ok = d.fromTunnel(b, pkt)
		}
		if !ok {
			continue
		}
		b.t.vtep.PutHeader(d.wheads[k][:], node.mac, etherType)
		d.wmsgs[k] = Message{Head: d.wheads[k][:], Body: ip, Addr: node.addr}
		k++
	}
	if k > 0 {
		sent, _ := d.conn.WriteBatch(d.wmsgs[:k])
		for _, m := range d.wmsgs[:sent] {
			b.tl[Bytes] += uint64(len(m.Body))
		}
		b.tl[Forwarded] += uint64(sent)
		b.tl[DropSend] += uint64(k - sent)
		clear(d.wmsgs[:k])
	}
	d.ctr.add(FromTunnel, &b.tl)
	return len(bufs), nil
}

// fromTunnel routes, checks, translates and clamps a packet out of the tunnel; ok means send
// ip to node.
func (d *Dataplane) fromTunnel(b *batch, pkt []byte) (node nodeHop, ip packet.IPv4, ok bool) {
	t := b.t
	ip, err := packet.ParseIPv4(pkt)
	if err != nil {
		b.tl[DropMalformedIP]++
		return node, nil, false
	}
	// With LocalNAT the peer addresses local pods as this site presents them: route by the
	// address the packet will have, and refuse local addresses the peer should not know.
	dst, presented := ip.Dst(), false
	if t.ownBack != nil {
		dst, presented = t.ownBack.Map4(dst)
	}
	hop, found := t.routes.Lookup4(dst)
	if found && hop >= hopNode && t.ownBack != nil && !presented {
		b.tl[DropNoRoute]++
		return node, nil, false
	}
	src := ip.Src()
	linkLocal := src[0] == 169 && src[1] == 254
	switch {
	case !found:
		b.tl[DropNoRoute]++
		return node, nil, false
	case hop == hopLocal:
		// From the tunnel, only the peer gateway speaks to this one: from its tunnel address
		// (link-local) to this gateway's. Anything else (a host behind the peer, or the
		// gateway's overlay address) would be answered by the netstack towards the raw
		// source, which may be a local pod's address when the two sites overlap.
		if !linkLocal || !t.hasTunIP || ip.Dst() != t.tunnelIP {
			b.tl[DropNoRoute]++
			return node, nil, false
		}
		d.deliverLocal(b, ip)
		return node, nil, false
	case hop == hopTunnel:
		b.tl[DropLoop]++
		return node, nil, false
	case linkLocal:
		// The peer's tunnel address (a stock peer pinging from its WireGuard interface, say)
		// has no route back from the nodes.
		b.tl[DropLinkLocalSource]++
		return node, nil, false
	}
	if ip.TTL() <= 1 {
		b.tl[DropTTL]++
		d.icmpToTunnel(b, ip, errTTLExceeded)
		return node, nil, false
	}
	if len(ip) > t.overlayMTU && ip.DontFragment() {
		b.tl[DropTooBig]++
		d.icmpToTunnel(b, ip, errFragNeeded(t.overlayMTU))
		return node, nil, false
	}
	ip.DecTTL()
	peer, own := t.out.RewriteSrc(ip), nat.Matched
	if t.ownBack != nil && peer != nat.Truncated && peer != nat.BadQuote {
		own = t.ownBack.RewriteDst(ip)
	}
	if c, drop := b.natVerdict(peer, own, 1); drop {
		b.tl[c]++
		return node, nil, false
	}
	b.clamp(ip)
	return t.nodes[hop-hopNode], ip, true
}

// fromTunnel6 is fromTunnel for IPv6.
func (d *Dataplane) fromTunnel6(b *batch, pkt []byte) (node nodeHop, ip packet.IPv6, ok bool) {
	t := b.t
	ip, err := packet.ParseIPv6(pkt)
	if err != nil {
		b.tl[DropMalformedIP]++
		return node, nil, false
	}
	dst, presented := ip.Dst(), false
	if t.ownBack != nil {
		dst, presented = t.ownBack.Map6(dst)
	}
	hop, found := t.routes.Lookup6(dst)
	switch {
	case found && hop == hopLocal:
		// As in fromTunnel: only the peer gateway speaks to this one, to its tunnel address.
		// IPv6 has no link-local tunnel network, so the source must be an address routed
		// back into the tunnel (the peer's tunnel address is): the netstack's reply to any
		// other source, raw as the peer sent it, could reach a local pod of the same address.
		if back, ok := t.routes.Lookup6(ip.Src()); !ok || back != hopTunnel || !t.hasTunnelIP6 || ip.Dst() != t.tunnelIP6 {
			b.tl[DropNoRoute]++
			return node, nil, false
		}
		d.deliverLocal(b, ip)
		return node, nil, false
	case !found, hop >= hopNode && t.ownBack != nil && !presented:
		b.tl[DropNoRoute]++
		return node, nil, false
	case hop == hopTunnel:
		b.tl[DropLoop]++
		return node, nil, false
	case isLinkLocal6(ip.Src()):
		b.tl[DropLinkLocalSource]++
		return node, nil, false
	}
	if ip.HopLimit() <= 1 {
		b.tl[DropTTL]++
		d.icmpToTunnel6(b, ip, errHopLimitExceeded)
		return node, nil, false
	}
	if len(ip) > t.overlayMTU {
		b.tl[DropTooBig]++
		d.icmpToTunnel6(b, ip, errPacketTooBig(t.overlayMTU))
		return node, nil, false
	}
	ip.SetHopLimit(ip.HopLimit() - 1)
	peer, own := t.out.RewriteSrc6(ip), nat.Matched
	if t.ownBack != nil && peer != nat.Truncated && peer != nat.BadQuote && peer != nat.Unsupported {
		own = t.ownBack.RewriteDst6(ip)
	}
	if c, drop := b.natVerdict(peer, own, 1); drop {
		b.tl[c]++
		return node, nil, false
	}
	b.clamp6(ip)
	return t.nodes[hop-hopNode], ip, true
}

// icmpToTunnel queues an ICMP error about orig back into the tunnel, from the gateway's tunnel
// address.
func (d *Dataplane) icmpToTunnel(b *batch, orig packet.IPv4, e icmpError) {
	if !b.t.hasTunIP || !mayAnswer(orig) || !d.allowICMP(b) {
		return
	}
	n := buildICMPError(b.scratch[0], b.t.tunnelIP, e.typ, e.code, e.rest, orig)
	d.queueToTunnel(b, b.scratch[0][:n])
}

// queueToTunnel queues an error the gateway built into the tunnel and wakes the reader.
func (d *Dataplane) queueToTunnel(b *batch, pkt []byte) {
	if !d.queue.push(pkt) {
		b.tl[DropQueueFull]++
		return
	}
	d.conn.Wake()
}

// icmpToTunnel6 queues an ICMPv6 error about orig back into the tunnel, from the gateway's
// IPv6 tunnel address. orig is as it came from the tunnel, before any translation: the error
// quotes what the peer sent.
func (d *Dataplane) icmpToTunnel6(b *batch, orig packet.IPv6, e icmpError) {
	if !b.t.hasTunnelIP6 || !mayAnswer6(orig, e.typ == packet.ICMPv6PacketTooBig) || !d.allowICMP(b) {
		return
	}
	n := buildICMPv6Error(b.scratch[0], b.t.tunnelIP6, e.typ, e.code, e.rest, orig)
	d.queueToTunnel(b, b.scratch[0][:n])
}
