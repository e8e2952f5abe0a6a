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
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/waiter"
)

const nicID = 1

// Stack is a gVisor network stack holding the gateway's own addresses. Packets for them come
// in through DeliverLocal (the dataplane's local handler); everything the stack sends goes out
// through the function given to New (the dataplane's Inject). It answers ICMP echo on every
// address and runs the connection prober.
type Stack struct {
	s      *stack.Stack
	ep     *channel.Endpoint
	out    func(pkt []byte) error
	handle *channel.NotificationHandle

	delivered, sent, sendErrors atomic.Uint64
	closeOnce                   sync.Once
}

// New builds a stack owning addrs (IPv4), with link MTU mtu, sending through out. out is
// called synchronously from whichever goroutine made the stack send (often the dataplane's,
// inside DeliverLocal); it must not block.
func New(addrs []netip.Addr, mtu int, out func(pkt []byte) error) (*Stack, error) {
	if len(addrs) == 0 {
		return nil, errors.New("netstack: no addresses")
	}
	st := &Stack{
		s: stack.New(stack.Options{
			NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol},
			TransportProtocols: []stack.TransportProtocolFactory{icmp.NewProtocol4},
		}),
		ep:  channel.New(256, uint32(mtu), ""),
		out: out,
	}
	st.handle = st.ep.AddNotify(st)
	if err := st.s.CreateNIC(nicID, st.ep); err != nil {
		st.Close()
		return nil, fmt.Errorf("netstack: create NIC: %v", err)
	}
	for _, a := range addrs {
		if !a.Is4() {
			st.Close()
			return nil, fmt.Errorf("netstack: address %v: only IPv4 so far", a)
		}
		pa := tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber, AddressWithPrefix: tcpip.AddrFrom4(a.As4()).WithPrefix()}
		if err := st.s.AddProtocolAddress(nicID, pa, stack.AddressProperties{}); err != nil {
			st.Close()
			return nil, fmt.Errorf("netstack: add address %v: %v", a, err)
		}
	}
	// Everything leaves through the one NIC: the dataplane routes it.
	st.s.SetRouteTable([]tcpip.Route{{Destination: header.IPv4EmptySubnet, NIC: nicID}})
	return st, nil
}

// DeliverLocal hands a packet addressed to one of the stack's addresses to the stack. The
// packet is copied. It implements the dataplane's LocalHandler.
func (st *Stack) DeliverLocal(pkt []byte) bool {
	if len(pkt) == 0 || pkt[0]>>4 != 4 {
		return false
	}
	pb := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(pkt)})
	st.ep.InjectInbound(ipv4.ProtocolNumber, pb)
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
		if st.handle != nil {
			st.ep.RemoveNotify(st.handle)
		}
		st.s.Close()
		st.ep.Close()
		st.s.Wait()
	})
}

// Ping sends one ICMP echo request from src to dst and waits up to timeout for the reply; it
// returns the round-trip time.
func (st *Stack) Ping(ctx context.Context, src, dst netip.Addr, seq uint16, timeout time.Duration) (time.Duration, error) {
	var wq waiter.Queue
	ep, terr := st.s.NewEndpoint(icmp.ProtocolNumber4, ipv4.ProtocolNumber, &wq)
	if terr != nil {
		return 0, fmt.Errorf("ping: endpoint: %v", terr)
	}
	defer ep.Close()
	if terr := ep.Bind(tcpip.FullAddress{NIC: nicID, Addr: tcpip.AddrFrom4(src.As4())}); terr != nil {
		return 0, fmt.Errorf("ping: bind %v: %v", src, terr)
	}
	entry, ready := waiter.NewChannelEntry(waiter.EventIn)
	wq.EventRegister(&entry)
	defer wq.EventUnregister(&entry)

	var msg [header.ICMPv4MinimumSize + 8]byte
	icmpv4 := header.ICMPv4(msg[:])
	icmpv4.SetType(header.ICMPv4Echo)
	icmpv4.SetSequence(seq)
	start := time.Now()
	binary.BigEndian.PutUint64(msg[header.ICMPv4MinimumSize:], uint64(start.UnixNano()))
	to := tcpip.FullAddress{NIC: nicID, Addr: tcpip.AddrFrom4(dst.As4())}
	if _, terr := ep.Write(bytes.NewReader(msg[:]), tcpip.WriteOptions{To: &to}); terr != nil {
		return 0, fmt.Errorf("ping %v: %v", dst, terr)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var reply [128]byte
	for {
		w := tcpip.SliceWriter(reply[:])
		res, terr := ep.Read(&w, tcpip.ReadOptions{NeedRemoteAddr: true})
		if terr == nil {
			r := header.ICMPv4(reply[:res.Count])
			if res.Count >= len(msg) && r.Type() == header.ICMPv4EchoReply && r.Sequence() == seq &&
				bytes.Equal(r[header.ICMPv4MinimumSize:len(msg)], msg[header.ICMPv4MinimumSize:]) {
				return time.Since(start), nil
			}
			continue // a stale reply
		}
		if _, wouldBlock := terr.(*tcpip.ErrWouldBlock); !wouldBlock {
			return 0, fmt.Errorf("ping %v: %v", dst, terr)
		}
		select {
		case <-ready:
		case <-timer.C:
			return 0, fmt.Errorf("ping %v: no reply within %v", dst, timeout)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}
