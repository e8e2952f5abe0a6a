//go:build linux

// Package udp is the gateway's overlay socket: one unprivileged UDP socket read with recvmmsg
// and written with sendmmsg, scattering each datagram into a header and a body (and gathering
// it back) so the inner packet lands in wireguard-go's buffer without a copy. It implements
// dataplane.OverlayConn without allocating per datagram.
package udp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/skein-net/skein/dataplane"
)

// DefaultBatch is the number of datagrams moved per system call (wireguard-go's ideal batch).
const DefaultBatch = 128

// socketBuffer is the receive and send buffer size asked for; the kernel caps it at
// net.core.rmem_max / wmem_max without privileges.
const socketBuffer = 4 << 20

// Conn is a batched UDP socket. ReadBatch is for one goroutine at a time; WriteBatch, Wake and
// Close may be called from any.
type Conn struct {
	pc    *net.UDPConn
	raw   syscall.RawConn
	batch int
	gso   bool // send runs with UDP_SEGMENT; cleared if the kernel refuses
	v6    bool // an IPv6 socket: it sends to IPv6 addresses only

	r  batchState // ReadBatch's scratch
	wm sync.Mutex
	w  batchState // WriteBatch's scratch
}

// mmsghdr is struct mmsghdr of <sys/socket.h>: a msghdr and the byte count the call filled in
// (the padding makes it 64 bytes on 64-bit platforms, as the kernel lays it out).
type mmsghdr struct {
	Hdr unix.Msghdr
	Len uint32
	_   [4]byte
}

type batchState struct {
	// n is how many headers the next system call uses; done and errno are its result. They
	// live here, with the system call in a function value made once, so that a call
	// allocates no closure.
	n     int
	done  int
	errno syscall.Errno
	call  func(fd uintptr) bool
	hdrs  []mmsghdr
	iovs  [][2]unix.Iovec         // receive: head and body of each datagram
	names []unix.RawSockaddrInet6 // large enough for IPv4 and IPv6 addresses
	// Send side: the iovecs of a call's messages back to back (a GSO run uses a stretch of
	// them), a control buffer and the message count of each header.
	flat   []unix.Iovec
	ctrl   [][]byte
	groups []int
}

func newBatchState(n int) batchState {
	s := batchState{
		hdrs:   make([]mmsghdr, n),
		iovs:   make([][2]unix.Iovec, n),
		names:  make([]unix.RawSockaddrInet6, n),
		flat:   make([]unix.Iovec, 2*n),
		ctrl:   make([][]byte, n),
		groups: make([]int, n),
	}
	for i := range s.ctrl {
		s.ctrl[i] = make([]byte, unix.CmsgSpace(2))
	}
	return s
}

// Listen opens a UDP socket on addr (an IPv4 or IPv6 address and port; port 0 picks one)
// moving up to batch datagrams per call (DefaultBatch if batch <= 0). The socket is of addr's
// family alone: an IPv6 one neither sends to nor receives from IPv4 addresses.
func Listen(addr netip.AddrPort, batch int) (*Conn, error) {
	if batch <= 0 {
		batch = DefaultBatch
	}
	network := "udp4"
	switch a := addr.Addr(); {
	case !a.IsValid() || a.Is4In6():
		return nil, fmt.Errorf("overlay socket %v: want an IPv4 or IPv6 address (not IPv4-mapped)", addr)
	case a.Is6():
		network = "udp6" // IPV6_V6ONLY: Go sets it for a specific IPv6 address
	}
	pc, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(addr))
	if err != nil {
		return nil, fmt.Errorf("overlay socket: %w", err)
	}
	// Best effort: a larger buffer absorbs bursts; the kernel caps it without privileges.
	_ = pc.SetReadBuffer(socketBuffer)
	_ = pc.SetWriteBuffer(socketBuffer)
	raw, err := pc.SyscallConn()
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("overlay socket: %w", err)
	}
	c := &Conn{pc: pc, raw: raw, batch: batch, gso: true, v6: network == "udp6", r: newBatchState(batch), w: newBatchState(batch)}
	c.r.call = c.r.syscall(unix.SYS_RECVMMSG)
	c.w.call = c.w.syscall(unix.SYS_SENDMMSG)
	return c, nil
}

// LocalAddr is the address the socket is bound to.
func (c *Conn) LocalAddr() netip.AddrPort { return c.pc.LocalAddr().(*net.UDPAddr).AddrPort() }

// BatchSize is the most datagrams one call moves.
func (c *Conn) BatchSize() int { return c.batch }

// Close closes the socket; blocked calls return net.ErrClosed.
func (c *Conn) Close() error { return c.pc.Close() }

// Wake makes a blocked ReadBatch return 0, nil: it moves the read deadline into the past.
// ReadBatch clears the deadline before returning, so the dataplane, which drains its queue
// after that, never misses a packet queued before Wake.
func (c *Conn) Wake() { _ = c.pc.SetReadDeadline(time.Unix(1, 0)) }

// ReadBatch receives up to len(msgs) datagrams (at most BatchSize), each scattered into
// msgs[i].Head then msgs[i].Body. It blocks until one arrives, Wake is called or the socket is
// closed. Transient errors (such as ICMP port unreachable reported on the socket) are retried;
// datagrams larger than Head+Body are dropped.
func (c *Conn) ReadBatch(msgs []dataplane.Message) (int, error) {
	n := min(len(msgs), c.batch)
	if n == 0 {
		return 0, nil
	}
	s := &c.r
	for {
		for i := range n {
			setIov(&s.iovs[i][0], msgs[i].Head)
			setIov(&s.iovs[i][1], msgs[i].Body)
			h := &s.hdrs[i]
			h.Hdr = unix.Msghdr{
				Name:    (*byte)(unsafe.Pointer(&s.names[i])),
				Namelen: uint32(unsafe.Sizeof(s.names[i])),
				Iov:     &s.iovs[i][0],
				Iovlen:  2,
			}
			h.Len = 0
		}
		s.n = n
		err := c.raw.Read(s.call)
		got, errno := s.done, s.errno
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			_ = c.pc.SetReadDeadline(time.Time{})
			return 0, nil
		case err != nil:
			return 0, err
		case errno == unix.EINTR || errno == unix.ECONNREFUSED || errno == unix.EHOSTUNREACH || errno == unix.ENETUNREACH:
			continue
		case errno != 0:
			return 0, fmt.Errorf("recvmmsg: %w", errno)
		}
		for i := range got {
			h := &s.hdrs[i]
			ap, ok := addrPort(&s.names[i])
			if h.Hdr.Flags&unix.MSG_TRUNC != 0 || !ok {
				// Larger than the buffers, or from a strange address family: N = 0 makes
				// the dataplane count it as malformed. Slots are never reordered, since
				// the dataplane reports packets by slot.
				msgs[i].N, msgs[i].Addr = 0, netip.AddrPort{}
				continue
			}
			msgs[i].N = int(h.Len)
			msgs[i].Addr = ap
		}
		return got, nil
	}
}

// WriteBatch sends msgs, each gathered from Head then Body, to msgs[i].Addr. It returns how
// many were sent; a datagram the kernel refuses (unreachable, too big) is skipped and the rest
// are still sent, so n < len(msgs) counts refusals.
//
// Runs of consecutive messages to one address with one size (the last may be shorter) go out
// as one UDP GSO send (UDP_SEGMENT): the kernel cuts the datagrams apart as late as it can,
// which saves most of the per-datagram cost of the send path. Where the kernel refuses GSO,
// the socket falls back to one datagram per message for good.
func (c *Conn) WriteBatch(msgs []dataplane.Message) (int, error) {
	c.wm.Lock()
	defer c.wm.Unlock()
	s := &c.w
	sent := 0
	var firstErr error
	for start := 0; start < len(msgs); {
		// Headers for up to BatchSize messages, grouped.
		h, i := 0, start
		for i < len(msgs) && i-start < c.batch {
			end := i + 1
			if c.gso {
				end = gsoRun(msgs[i:min(len(msgs), start+c.batch)]) + i
			}
			for k := i; k < end; k++ {
				setIov(&s.flat[2*(k-start)], msgs[k].Head)
				setIov(&s.flat[2*(k-start)+1], msgs[k].Body)
			}
			hdr := &s.hdrs[h].Hdr
			*hdr = unix.Msghdr{
				Name:    (*byte)(unsafe.Pointer(&s.names[h])),
				Namelen: putSockaddr(&s.names[h], msgs[i].Addr, c.v6),
				Iov:     &s.flat[2*(i-start)],
			}
			hdr.SetIovlen(2 * (end - i))
			if end-i > 1 {
				putSegmentSize(s.ctrl[h], len(msgs[i].Head)+len(msgs[i].Body))
				hdr.Control = &s.ctrl[h][0]
				hdr.SetControllen(len(s.ctrl[h]))
			}
			s.groups[h] = end - i
			h++
			i = end
		}
		s.n = h
		err := c.raw.Write(s.call)
		done, errno := s.done, s.errno
		if err != nil {
			return sent, err
		}
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			if s.groups[0] > 1 && (errno == unix.EIO || errno == unix.EINVAL || errno == unix.ENOPROTOOPT) {
				c.gso = false // this kernel or device will not segment: send one by one
				continue
			}
			// The first datagram (or run) of this call was refused: skip it.
			if firstErr == nil {
				firstErr = fmt.Errorf("sendmmsg to %v: %w", msgs[start].Addr, errno)
			}
			start += s.groups[0]
			continue
		}
		for g := range done {
			sent += s.groups[g]
			start += s.groups[g]
		}
	}
	return sent, firstErr
}

// Limits of one UDP GSO send.
const (
	maxGSOSegments = 64
	maxGSOBytes    = 65507 // the largest UDP payload over IPv4
)

// gsoRun returns how many messages from the start of msgs can go out as one GSO send: same
// address and size, the last possibly shorter.
func gsoRun(msgs []dataplane.Message) int {
	size := len(msgs[0].Head) + len(msgs[0].Body)
	n, total := 1, size
	for n < len(msgs) && n < maxGSOSegments {
		m := &msgs[n]
		l := len(m.Head) + len(m.Body)
		if m.Addr != msgs[0].Addr || l > size || total+l > maxGSOBytes {
			break
		}
		n++
		total += l
		if l < size {
			break
		}
	}
	return n
}

// putSegmentSize writes a UDP_SEGMENT control message for segments of size bytes.
func putSegmentSize(b []byte, size int) {
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level = unix.SOL_UDP
	h.Type = unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	*(*uint16)(unsafe.Pointer(&b[unix.CmsgLen(0)])) = uint16(size)
}

// syscall returns the function raw.Read or raw.Write runs: recvmmsg or sendmmsg on s's first
// n headers, non-blocking; false on EAGAIN makes the runtime wait for the socket.
func (s *batchState) syscall(trap uintptr) func(fd uintptr) bool {
	return func(fd uintptr) bool {
		r, _, e := unix.Syscall6(trap, fd, uintptr(unsafe.Pointer(&s.hdrs[0])), uintptr(s.n), unix.MSG_DONTWAIT, 0, 0)
		if e == unix.EAGAIN {
			return false
		}
		s.done, s.errno = int(r), e
		return true
	}
}

func setIov(v *unix.Iovec, b []byte) {
	v.SetLen(len(b))
	if len(b) == 0 {
		v.Base = nil
		return
	}
	v.Base = &b[0]
}

// addrPort reads the sender out of a sockaddr filled in by recvmmsg.
func addrPort(sa *unix.RawSockaddrInet6) (netip.AddrPort, bool) {
	switch sa.Family {
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), ntohs(sa4.Port)), true
	case unix.AF_INET6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), ntohs(sa.Port)), true
	}
	return netip.AddrPort{}, false
}

// putSockaddr writes ap as an IPv4 sockaddr, or as an IPv6 one on an IPv6 socket (an IPv4
// address there comes out IPv4-mapped, which the IPv6-only socket refuses), and returns its
// length.
func putSockaddr(sa *unix.RawSockaddrInet6, ap netip.AddrPort, v6 bool) uint32 {
	if v6 {
		*sa = unix.RawSockaddrInet6{Family: unix.AF_INET6, Port: ntohs(ap.Port()), Addr: ap.Addr().As16()}
		return unix.SizeofSockaddrInet6
	}
	sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
	*sa4 = unix.RawSockaddrInet4{Family: unix.AF_INET, Port: ntohs(ap.Port()), Addr: ap.Addr().Unmap().As4()}
	return unix.SizeofSockaddrInet4
}

// ntohs converts a port between network byte order, as stored in a sockaddr, and a number.
func ntohs(p uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(&p))
	return binary.BigEndian.Uint16(b[:])
}

var _ dataplane.OverlayConn = (*Conn)(nil)
