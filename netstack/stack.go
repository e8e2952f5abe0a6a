package netstack

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/waiter"
)

const nicID = 1

// Stack is a gVisor network stack holding the gateway's own addresses. Packets for them come
// in through DeliverLocal (the dataplane's local handler); everything the stack sends goes out
// through the function given to New (the dataplane's Inject). It answers ICMP and ICMPv6 echo
// on every address and runs the connection prober.
type Stack struct {
	s      *stack.Stack
	ep     *channel.Endpoint
	out    func(pkt []byte) error
	handle *channel.NotificationHandle
	// v4, v6: the families the stack has addresses of (and protocols for).
	v4, v6 bool

	delivered, sent, sendErrors atomic.Uint64
	closeOnce                   sync.Once

	// idle holds the echo endpoint of a finished ping by source address, for the next one
	// (an endpoint a probe: gVisor's endpoint and route were most of an idle gateway's garbage).
	// One per address: a second one, of pings that overlapped, would never be read again and
	// could sit on a queue of stale replies.
	mu     sync.Mutex
	idle   map[netip.Addr]*echoEndpoint
	closed bool
}

// New builds a stack owning addrs (IPv4 and IPv6, each once), with link MTU mtu, sending
// through out. out is called synchronously from whichever goroutine made the stack send
// (often the dataplane's, inside DeliverLocal); it must not block. The IPv6 protocol is there
// only with an IPv6 address, and sends nothing of its own: no duplicate address detection,
// router solicitation or MLD (the dataplane routes; there is no link to discover).
func New(addrs []netip.Addr, mtu int, out func(pkt []byte) error) (*Stack, error) {
	if len(addrs) == 0 {
		return nil, errors.New("netstack: no addresses")
	}
	st := &Stack{out: out, idle: map[netip.Addr]*echoEndpoint{}}
	seen := map[netip.Addr]bool{}
	for _, a := range addrs {
		switch {
		case !a.IsValid() || a.Is4In6() || a.Zone() != "" || a.IsUnspecified() || a.IsMulticast():
			return nil, fmt.Errorf("netstack: address %v: want a unicast IPv4 or IPv6 address", a)
		case seen[a]:
			return nil, fmt.Errorf("netstack: address %v given twice", a)
		}
		seen[a] = true
		st.v4, st.v6 = st.v4 || a.Is4(), st.v6 || a.Is6()
	}
	if mtu < header.IPv4MinimumMTU || mtu > 1<<16 || mtu < header.IPv6MinimumMTU && st.v6 {
		return nil, fmt.Errorf("netstack: MTU %d: want %d-65536 (IPv6: at least %d)", mtu, header.IPv4MinimumMTU, header.IPv6MinimumMTU)
	}
	var opts stack.Options
	var routes []tcpip.Route
	if st.v4 {
		opts.NetworkProtocols = append(opts.NetworkProtocols, ipv4.NewProtocol)
		opts.TransportProtocols = append(opts.TransportProtocols, icmp.NewProtocol4)
		routes = append(routes, tcpip.Route{Destination: header.IPv4EmptySubnet, NIC: nicID})
	}
	if st.v6 {
		opts.NetworkProtocols = append(opts.NetworkProtocols, ipv6.NewProtocol)
		opts.TransportProtocols = append(opts.TransportProtocols, icmp.NewProtocol6)
		routes = append(routes, tcpip.Route{Destination: header.IPv6EmptySubnet, NIC: nicID})
	}
	st.s = stack.New(opts)
	st.ep = channel.New(256, uint32(mtu), "")
	st.handle = st.ep.AddNotify(st)
	if err := st.s.CreateNIC(nicID, st.ep); err != nil {
		st.Close()
		return nil, fmt.Errorf("netstack: create NIC: %v", err)
	}
	for _, a := range addrs {
		pa := tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber, AddressWithPrefix: tcpip.AddrFromSlice(a.AsSlice()).WithPrefix()}
		if a.Is6() {
			pa.Protocol = ipv6.ProtocolNumber
		}
		if err := st.s.AddProtocolAddress(nicID, pa, stack.AddressProperties{}); err != nil {
			st.Close()
			return nil, fmt.Errorf("netstack: add address %v: %v", a, err)
		}
	}
	// Everything leaves through the one NIC: the dataplane routes it.
	st.s.SetRouteTable(routes)
	return st, nil
}

// DeliverLocal hands a packet addressed to one of the stack's addresses to the stack. The
// packet is copied. It implements the dataplane's LocalHandler. The stack speaks ICMP only, so
// it refuses anything else: a packet of a family it has no address of, another protocol, IPv6
// extension headers, and fragments, whose reassembly would hold up to megabytes of memory for a
// minute on behalf of whoever sends them (attack review).
func (st *Stack) DeliverLocal(pkt []byte) bool {
	if len(pkt) == 0 {
		return false
	}
	var proto tcpip.NetworkProtocolNumber
	switch v := pkt[0] >> 4; {
	case v == 4 && st.v4 && len(pkt) >= header.IPv4MinimumSize:
		ip := header.IPv4(pkt)
		if ip.Protocol() != uint8(header.ICMPv4ProtocolNumber) || ip.More() || ip.FragmentOffset() != 0 {
			return false
		}
		proto = ipv4.ProtocolNumber
	case v == 6 && st.v6 && len(pkt) >= header.IPv6MinimumSize:
		if header.IPv6(pkt).NextHeader() != uint8(header.ICMPv6ProtocolNumber) {
			return false
		}
		proto = ipv6.ProtocolNumber
	default:
		return false
	}
	pb := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(pkt)})
	st.ep.InjectInbound(proto, pb)
	pb.DecRef()
	st.delivered.Add(1)
	return true
}

// WriteNotify is called by the link endpoint when the stack queued a packet: send it.
func (st *Stack) WriteNotify() {
	for {
		pb := st.ep.Read()
		if pb == nil {
			return
		}
		v := pb.ToView()
		pb.DecRef()
		if err := st.out(v.AsSlice()); err != nil {
			st.sendErrors.Add(1)
		} else {
			st.sent.Add(1)
		}
		v.Release()
	}
}

// Stats are the stack's packet counts.
type Stats struct {
	Delivered, Sent, SendErrors uint64
}

// Stats returns the packet counts.
func (st *Stack) Stats() Stats {
	return Stats{Delivered: st.delivered.Load(), Sent: st.sent.Load(), SendErrors: st.sendErrors.Load()}
}

// Close stops the stack.
func (st *Stack) Close() {
	st.closeOnce.Do(func() {
		st.mu.Lock()
		st.closed = true
		for _, e := range st.idle {
			e.close()
		}
		st.idle = nil
		st.mu.Unlock()
		if st.handle != nil {
			st.ep.RemoveNotify(st.handle)
		}
		st.s.Close()
		st.ep.Close()
		st.s.Wait()
	})
}

// echoEndpoint is an ICMP or ICMPv6 endpoint bound to one of the stack's addresses, with
// what waits for its replies. One ping uses it at a time.
type echoEndpoint struct {
	ep    tcpip.Endpoint
	wq    waiter.Queue
	entry waiter.Entry
	ready chan struct{}
	src   netip.Addr
}

func (e *echoEndpoint) close() {
	e.wq.EventUnregister(&e.entry)
	e.ep.Close()
}

// echoEndpoint returns an idle endpoint bound to src, or a new one.
func (st *Stack) echoEndpoint(src netip.Addr) (*echoEndpoint, error) {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return nil, errors.New("netstack: closed")
	}
	if e := st.idle[src]; e != nil {
		delete(st.idle, src)
		st.mu.Unlock()
		return e, nil
	}
	st.mu.Unlock()
	e := &echoEndpoint{src: src}
	var terr tcpip.Error
	switch {
	case src.Is4() && st.v4:
		e.ep, terr = st.s.NewEndpoint(icmp.ProtocolNumber4, ipv4.ProtocolNumber, &e.wq)
	case src.Is6() && st.v6:
		e.ep, terr = st.s.NewEndpoint(icmp.ProtocolNumber6, ipv6.ProtocolNumber, &e.wq)
	default:
		return nil, fmt.Errorf("%v: the stack has no address of its family", src)
	}
	if terr != nil {
		return nil, fmt.Errorf("endpoint: %v", terr)
	}
	if terr := e.ep.Bind(tcpip.FullAddress{NIC: nicID, Addr: tcpip.AddrFromSlice(src.AsSlice())}); terr != nil {
		e.ep.Close()
		return nil, fmt.Errorf("bind %v: %v", src, terr)
	}
	// Replies are 16 bytes: a few KiB hold hundreds, and bound what a flood of stale or forged
	// ones can queue (gVisor counts the payload only: its default of 208 KiB held some 20 MiB of
	// packet buffers; attack review).
	e.ep.SocketOptions().SetReceiveBufferSize(echoReceiveBuffer, false)
	e.entry, e.ready = waiter.NewChannelEntry(waiter.EventIn)
	e.wq.EventRegister(&e.entry)
	// Close may have taken gVisor's list of endpoints to abort before this one was made: then
	// nobody would abort it, and a ping on it would wait out its timeout.
	st.mu.Lock()
	closed := st.closed
	st.mu.Unlock()
	if closed {
		e.close()
		return nil, errors.New("netstack: closed")
	}
	return e, nil
}

// echoReceiveBuffer is an echo endpoint's receive buffer, in bytes of ICMP messages.
const echoReceiveBuffer = 4 << 10

// release keeps e for the next ping from its address, with nothing queued, unless one is kept
// already.
func (st *Stack) release(e *echoEndpoint) {
	e.drain()
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed || st.idle[e.src] != nil {
		e.close()
		return
	}
	st.idle[e.src] = e
}

// drain discards what e's queue holds (late replies).
func (e *echoEndpoint) drain() {
	var buf [64]byte
	for range echoReceiveBuffer / header.ICMPv4MinimumSize {
		w := tcpip.SliceWriter(buf[:])
		if _, terr := e.ep.Read(&w, tcpip.ReadOptions{}); terr != nil {
			return
		}
	}
}

// echoLen is an echo request's length: the ICMP header and 8 bytes of payload (the send time).
const echoLen = header.ICMPv4MinimumSize + 8

// Ping sends one ICMP echo request (ICMPv6 when src and dst are IPv6) from src, one of the
// stack's addresses, to dst and waits up to timeout for the reply; it returns the round-trip
// time. Pings may run concurrently.
func (st *Stack) Ping(ctx context.Context, src, dst netip.Addr, seq uint16, timeout time.Duration) (time.Duration, error) {
	return st.PingSize(ctx, src, dst, seq, 0, timeout)
}

// PingSize is Ping with an echo request padded so that its IP packet is size bytes (0, or a
// size too small for the request: unpadded); the reply is as large. Path MTU probes use it.
func (st *Stack) PingSize(ctx context.Context, src, dst netip.Addr, seq uint16, size int, timeout time.Duration) (time.Duration, error) {
	if src.Is4() != dst.Is4() || !dst.IsValid() || src.Is4In6() || dst.Is4In6() || src.Zone() != "" || dst.Zone() != "" {
		return 0, fmt.Errorf("ping %v from %v: want two addresses of one family (neither IPv4-mapped nor zoned)", dst, src)
	}
	e, err := st.echoEndpoint(src)
	if err != nil {
		return 0, fmt.Errorf("ping %v: %w", dst, err)
	}
	msgLen := echoLen
	if hdr := header.IPv4MinimumSize; size > 0 {
		if dst.Is6() {
			hdr = header.IPv6MinimumSize
		}
		msgLen = max(echoLen, size-hdr)
	}
	rtt, reuse, err := e.ping(ctx, dst, seq, msgLen, timeout)
	if reuse {
		st.release(e)
	} else {
		e.close()
	}
	return rtt, err
}

// ping is one echo on e; reuse says whether e is fit for the next one.
func (e *echoEndpoint) ping(ctx context.Context, dst netip.Addr, seq uint16, msgLen int, timeout time.Duration) (_ time.Duration, reuse bool, _ error) {
	var small [echoLen]byte
	msg := small[:]
	if msgLen > echoLen {
		msg = make([]byte, msgLen)
	}
	request, reply := uint8(header.ICMPv4Echo), uint8(header.ICMPv4EchoReply)
	if dst.Is6() {
		request, reply = uint8(header.ICMPv6EchoRequest), uint8(header.ICMPv6EchoReply)
	}
	// The identifier is the endpoint's (gVisor fills it in); the type, code and sequence sit
	// at the same offsets in ICMP and ICMPv6.
	icmpv4 := header.ICMPv4(msg[:])
	icmpv4.SetType(header.ICMPv4Type(request))
	icmpv4.SetSequence(seq)
	start := time.Now()
	binary.BigEndian.PutUint64(msg[header.ICMPv4MinimumSize:], uint64(start.UnixNano()))
	to := tcpip.FullAddress{NIC: nicID, Addr: tcpip.AddrFromSlice(dst.AsSlice())}
	if _, terr := e.ep.Write(bytes.NewReader(msg), tcpip.WriteOptions{To: &to}); terr != nil {
		return 0, false, fmt.Errorf("ping %v: %v", dst, terr)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var inSmall [128]byte
	in := inSmall[:]
	if len(msg) > len(in) {
		in = make([]byte, len(msg))
	}
	for {
		w := tcpip.SliceWriter(in)
		res, terr := e.ep.Read(&w, tcpip.ReadOptions{})
		if terr == nil {
			r := header.ICMPv4(in[:res.Count])
			if res.Count >= len(msg) && uint8(r.Type()) == reply && r.Sequence() == seq &&
				bytes.Equal(r[header.ICMPv4MinimumSize:echoLen], msg[header.ICMPv4MinimumSize:echoLen]) {
				return time.Since(start), true, nil
			}
			continue // a stale reply (of an earlier ping that timed out)
		}
		if _, wouldBlock := terr.(*tcpip.ErrWouldBlock); !wouldBlock {
			return 0, false, fmt.Errorf("ping %v: %v", dst, terr)
		}
		select {
		case <-e.ready:
		case <-timer.C:
			return 0, true, fmt.Errorf("ping %v: no reply within %v", dst, timeout)
		case <-ctx.Done():
			return 0, true, ctx.Err()
		}
	}
}
