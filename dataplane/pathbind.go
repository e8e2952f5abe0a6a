package dataplane

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.zx2c4.com/wireguard/conn"
)

// Why a PathBind: a WAN whose path MTU is below the tunnel's outer packets (1340 inside + 60
// = 1400 bytes over IPv4) must slow the tunnel down at worst, never stop it. wireguard-go's
// StdNetBind stops it in two ways:
//
//   - It coalesces a batch into UDP GSO sends (UDP_SEGMENT). Once the kernel has learned a
//     smaller path MTU for the peer (fragmentation needed delivered), it refuses every GSO send
//     whose segments exceed it with EMSGSIZE ("sendmmsg: message too long"), and wireguard-go
//     falls back from GSO only on EIO: the whole batch is dropped, every time, and bulk TCP
//     stalls at 0 bytes. A single datagram is not refused: the kernel fragments it.
//   - Its IPv4 socket keeps the kernel's default, IP_PMTUDISC_WANT: every datagram leaves with
//     DF set. Where the ICMP is dropped (a path MTU black hole) a full-size datagram vanishes.
//
// Kernel WireGuard sends without DF and keeps working on such paths; a PathBind makes the
// gateway's socket behave at least as well: a batch refused with EMSGSIZE is sent again one
// datagram at a time (which the kernel fragments to the path MTU it knows), later batches with
// datagrams that large to that destination skip GSO for GSOHold, and the IPv4 socket sends
// without DF (IP_PMTUDISC_DONT), so routers fragment what is too big for the next link
// instead of dropping it. Fragments cost the receiver a reassembly, and a path of two
// fragments per packet halves the packet rate the path carries: they are the price of never
// stalling; the gateways' own path MTU discovery lowers the tunnel MTU so that they stop.
// IPv6 has no router fragmentation: the socket keeps the default (the kernel fragments at the
// source to the path MTU it learned from Packet Too Big) and a black hole is only overcome by
// the discovery.

// SendError is a kind of error the WAN socket returns.
type SendError uint8

const (
	// SendTooBig: EMSGSIZE, a datagram or GSO batch larger than the path allows.
	SendTooBig SendError = iota
	// SendNoBuffers: ENOBUFS or EAGAIN, the socket's or device's queue is full.
	SendNoBuffers
	// SendRefused: ECONNREFUSED, the peer's port answered port unreachable to an earlier
	// datagram.
	SendRefused
	// SendUnreachable: no route, host or network unreachable or down.
	SendUnreachable
	// SendNotPermitted: EPERM or EACCES, usually a firewall rule on the gateway's host.
	SendNotPermitted
	// SendGSOUnsupported: EIO, the device cannot checksum UDP GSO; wireguard-go turned GSO off
	// and sent again.
	SendGSOUnsupported
	// SendOther: anything else (a closed socket included).
	SendOther
	// NumSendErrors sizes arrays indexed by SendError.
	NumSendErrors
)

var sendErrorNames = [NumSendErrors]string{
	SendTooBig:         "message_too_long",
	SendNoBuffers:      "no_buffer_space",
	SendRefused:        "connection_refused",
	SendUnreachable:    "unreachable",
	SendNotPermitted:   "not_permitted",
	SendGSOUnsupported: "gso_unsupported",
	SendOther:          "other",
}

func (k SendError) String() string {
	if k < NumSendErrors {
		return sendErrorNames[k]
	}
	return fmt.Sprintf("SendError(%d)", uint8(k))
}

// ClassifySendError says which kind of error err is.
func ClassifySendError(err error) SendError {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return SendOther
	}
	switch errno {
	case syscall.EMSGSIZE:
		return SendTooBig
	case syscall.ENOBUFS, syscall.EAGAIN:
		return SendNoBuffers
	case syscall.ECONNREFUSED:
		return SendRefused
	case syscall.ENETUNREACH, syscall.EHOSTUNREACH, syscall.ENETDOWN, syscall.EHOSTDOWN:
		return SendUnreachable
	case syscall.EPERM, syscall.EACCES:
		return SendNotPermitted
	case syscall.EIO:
		return SendGSOUnsupported
	}
	return SendOther
}

// DefaultGSOHold is how long a PathBind sends datagrams as large as one of a refused batch
// one at a time before it tries GSO again (the path may have widened, or the kernel forgotten
// the path MTU it learned: 10 minutes by default).
const DefaultGSOHold = 10 * time.Second

// PathBind wraps the Bind wireguard-go sends to the WAN with so that a narrow path never
// drops a batch (see above). Its methods may be called from any goroutine.
type PathBind struct {
	conn.Bind
	// GSOHold: see DefaultGSOHold (0: the default). Set before use.
	GSOHold time.Duration

	errs      [NumSendErrors]atomic.Uint64
	resent    atomic.Uint64              // datagrams sent again one at a time after a refused batch
	singly    atomic.Uint64              // datagrams sent one at a time because of a GSO limit
	gsoLimit  atomic.Pointer[gsoLimit]   // nil: GSO for everything
	singlePtr sync.Pool                  // *[1][]byte
	mu        sync.Mutex                 // guards socks
	socks     []wireSocket               // the wrapped Bind's sockets (Linux), duplicated
	policy    atomic.Pointer[PathPolicy] // what Open set on them
	now       func() time.Time
	armed     atomic.Pointer[Probe] // the probe the next data datagram is (probe.go)
	sends     atomic.Uint64         // Send calls, for Read to see wireguard-go empty
}

// gsoLimit: datagrams of at least size bytes to to are sent one at a time until until.
type gsoLimit struct {
	to    netip.AddrPort
	size  int
	until time.Time
}

// PathPolicy is what a PathBind set on the wrapped Bind's sockets when it opened.
type PathPolicy struct {
	// Sockets is how many of the Bind's UDP sockets were found (0 for a Bind without kernel
	// sockets, such as an in-memory one).
	Sockets int
	// IPv4DF is false when IPv4 datagrams leave without DF (routers may fragment them).
	IPv4DF bool
	// Err is why a socket option could not be set ("" if all were).
	Err string
}

// NewPathBind wraps b.
func NewPathBind(b conn.Bind) *PathBind {
	return &PathBind{Bind: b, now: time.Now}
}

// Open opens the wrapped Bind and sets the DF policy on its sockets.
func (p *PathBind) Open(port uint16) ([]conn.ReceiveFunc, uint16, error) {
	fns, actual, err := p.Bind.Open(port)
	if err != nil {
		return nil, 0, err
	}
	p.mu.Lock()
	p.closeSockets()
	if _, std := p.Bind.(*conn.StdNetBind); std {
		// Only wireguard-go's own Bind is known to keep its sockets bound to the port it
		// returns; an in-memory one (bindtest) has none to find.
		p.socks = findWireSockets(actual)
	}
	pol := PathPolicy{Sockets: len(p.socks), IPv4DF: true}
	var errs []error
	for _, s := range p.socks {
		if err := s.sendWithoutDF(); err != nil {
			errs = append(errs, err)
		} else if !s.v6 {
			pol.IPv4DF = false
		}
	}
	if len(errs) > 0 {
		pol.Err = errors.Join(errs...).Error()
	}
	p.mu.Unlock()
	p.policy.Store(&pol)
	return fns, actual, nil
}

// Close closes the wrapped Bind (and the PathBind's duplicates of its sockets first, so that
// a new Open can bind the same port).
func (p *PathBind) Close() error {
	p.mu.Lock()
	p.closeSockets()
	p.mu.Unlock()
	return p.Bind.Close()
}

func (p *PathBind) closeSockets() {
	for _, s := range p.socks {
		s.close()
	}
	p.socks = nil
}

// Policy is what the last Open set on the sockets.
func (p *PathBind) Policy() PathPolicy {
	if pol := p.policy.Load(); pol != nil {
		return *pol
	}
	return PathPolicy{}
}

// Send sends bufs to ep through the wrapped Bind. A batch the socket refuses as too big is
// sent again one datagram at a time, and later batches holding datagrams that large to the
// same destination are sent one at a time for GSOHold. Every error is counted by kind.
func (p *PathBind) Send(bufs [][]byte, ep conn.Endpoint) error {
	p.sends.Add(1)
	if p.armed.Load() != nil {
		if i, pr := p.probeIndex(bufs); pr != nil {
			return p.sendAround(bufs, i, pr, ep)
		}
	}
	return p.send(bufs, ep)
}

func (p *PathBind) send(bufs [][]byte, ep conn.Endpoint) error {
	if len(bufs) == 0 {
		return nil
	}
	if len(bufs) > 1 && p.limited(bufs, ep) {
		p.singly.Add(uint64(len(bufs)))
		return p.sendEach(bufs, ep)
	}
	err := p.Bind.Send(bufs, ep)
	if err == nil {
		return nil
	}
	var gsoOff conn.ErrUDPGSODisabled
	if errors.As(err, &gsoOff) {
		// wireguard-go turned GSO off for good and sent the batch again.
		p.errs[SendGSOUnsupported].Add(1)
		if err = gsoOff.RetryErr; err == nil {
			return nil
		}
	}
	kind := ClassifySendError(err)
	p.errs[kind].Add(1)
	if kind != SendTooBig || len(bufs) < 2 {
		return err
	}
	p.limitGSO(bufs, ep)
	p.resent.Add(uint64(len(bufs)))
	// Some of the batch may have left before the refused part: sent again, the WireGuard peer
	// drops the duplicates (its replay window), which costs less than losing the rest.
	return p.sendEach(bufs, ep)
}

// arm makes the next data datagram the probe pr.
func (p *PathBind) arm(pr *Probe) { p.armed.Store(pr) }

// probeIndex finds the armed probe in bufs: the first data datagram, if its length is the
// probe's (else the probe is void and disarmed). It returns -1 and nil if bufs holds none.
func (p *PathBind) probeIndex(bufs [][]byte) (int, *Probe) {
	for i, b := range bufs {
		if !isData(b, len(b)) {
			continue
		}
		pr := p.armed.Swap(nil)
		if pr == nil || len(b) != pr.wireLen {
			return -1, nil
		}
		return i, pr
	}
	return -1, nil
}

// sendAround sends bufs[i], the probe, alone with DF, and the rest as usual around it.
func (p *PathBind) sendAround(bufs [][]byte, i int, pr *Probe, ep conn.Endpoint) error {
	err := p.send(bufs[:i], ep)
	if dfErr := p.sendDF(bufs[i], ep); dfErr == nil {
		pr.sentDF.Store(true)
	} else if errors.Is(dfErr, errNoDF) {
		// No socket to set DF on: the probe is void, its datagram leaves as usual.
		if err2 := p.send(bufs[i:i+1], ep); err == nil {
			err = err2
		}
	} else {
		// Counted, not returned. A probe too large for the gateway's own link is refused
		// (EMSGSIZE): that is an answer (it does not pass); any other error makes it void.
		kind := ClassifySendError(dfErr)
		p.errs[kind].Add(1)
		if kind == SendTooBig {
			pr.sentDF.Store(true)
		}
	}
	if err2 := p.send(bufs[i+1:], ep); err == nil {
		err = err2
	}
	return err
}

// sendDF sends b alone with DF: the socket of its family is switched to IP_PMTUDISC_PROBE
// (IPV6_PMTUDISC_PROBE: DF, the interface MTU rather than a learned path MTU, no fragments)
// for the one send and back. Only the goroutine sending data sends meanwhile (this one);
// a handshake or keepalive sent by another in these microseconds leaves with DF, which
// their size never minds.
func (p *PathBind) sendDF(b []byte, ep conn.Endpoint) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	is6 := ep.DstIP().Is6() && !ep.DstIP().Is4In6()
	for _, s := range p.socks {
		if s.v6 != is6 {
			continue
		}
		if err := s.setDF(true); err != nil {
			return errNoDF
		}
		one := [1][]byte{b}
		err := p.Bind.Send(one[:], ep)
		s.setDF(false)
		return err
	}
	return errNoDF
}

var errNoDF = errors.New("no socket to send with DF")

// limited reports whether a GSO limit for ep covers the largest datagram of bufs.
func (p *PathBind) limited(bufs [][]byte, ep conn.Endpoint) bool {
	l := p.gsoLimit.Load()
	if l == nil || largest(bufs) < l.size || !samePeer(endpointOf(ep), l.to) {
		return false
	}
	if p.now().After(l.until) {
		p.gsoLimit.CompareAndSwap(l, nil)
		return false
	}
	return true
}

// limitGSO sends datagrams as large as the largest of a refused batch to ep one at a time.
func (p *PathBind) limitGSO(bufs [][]byte, ep conn.Endpoint) {
	hold := p.GSOHold
	if hold <= 0 {
		hold = DefaultGSOHold
	}
	size := largest(bufs)
	if l := p.gsoLimit.Load(); l != nil && samePeer(endpointOf(ep), l.to) && l.size < size && p.now().Before(l.until) {
		size = l.size
	}
	p.gsoLimit.Store(&gsoLimit{to: endpointOf(ep), size: size, until: p.now().Add(hold)})
}

// sendEach sends the datagrams one at a time (the wrapped Bind sends a batch of one without
// GSO); it returns the first error, after trying them all.
func (p *PathBind) sendEach(bufs [][]byte, ep conn.Endpoint) error {
	one, _ := p.singlePtr.Get().(*[1][]byte)
	if one == nil {
		one = new([1][]byte)
	}
	var first error
	for _, b := range bufs {
		one[0] = b
		if err := p.Bind.Send(one[:], ep); err != nil {
			p.errs[ClassifySendError(err)].Add(1)
			if first == nil {
				first = err
			}
		}
	}
	one[0] = nil
	p.singlePtr.Put(one)
	return first
}

func largest(bufs [][]byte) int {
	n := 0
	for _, b := range bufs {
		n = max(n, len(b))
	}
	return n
}

// PathStats is a snapshot of a PathBind's counters.
type PathStats struct {
	// Errors counts the errors the socket returned, by kind (a refused batch is one).
	Errors [NumSendErrors]uint64
	// Resent counts datagrams sent again one at a time after their batch was refused.
	Resent uint64
	// Singly counts datagrams sent one at a time, without GSO, because an earlier batch that
	// large was refused.
	Singly uint64
}

// Stats returns a snapshot of the counters.
func (p *PathBind) Stats() PathStats {
	var s PathStats
	for i := range p.errs {
		s.Errors[i] = p.errs[i].Load()
	}
	s.Resent, s.Singly = p.resent.Load(), p.singly.Load()
	return s
}

var _ conn.Bind = (*PathBind)(nil)
