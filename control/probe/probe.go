// Package probe holds the connectivity checks skein-probe runs from inside a pod (or a node's
// network namespace) and the JSON document it prints about them. skeinctl test network runs
// skein-probe check in pods through the API server (exec) and reads that document, so both
// sides of the exchange use these types; the Go API is not a promise to anyone else.
//
// A check is one source talking to one target address: a TCP call and a UDP call to a
// skein-probe server (which answers with the address it saw the call come from, so the caller
// learns how the far side sees it: remapped or not), ICMP echo, a path-MTU check, and where
// the kernel routes the target (useful on a node). Every check is bounded by its Options'
// timeout; nothing retries for ever.
package probe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// The ports of skein-probe serve.
const (
	TCPPort = 7070
	UDPPort = 7071
)

// Options are the knobs of Check.
type Options struct {
	TCPPort, UDPPort int           // the target's skein-probe serve ports (0: the defaults)
	Timeout          time.Duration // per check (0: 2 s)
	Pings            int           // ICMP echo requests (0: 3; <0: no ICMP check)
	MTU              int           // the tunnel MTU to check the path against (0: no path-MTU check)
	Route            bool          // also say where this namespace's kernel routes the target
}

func (o *Options) defaults() {
	if o.TCPPort == 0 {
		o.TCPPort = TCPPort
	}
	if o.UDPPort == 0 {
		o.UDPPort = UDPPort
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Second
	}
	if o.Pings == 0 {
		o.Pings = 3
	}
}

// Result is the outcome of one check.
type Result struct {
	OK bool `json:"ok"`
	// Server is the host name the skein-probe server answered with (its pod's name).
	Server string `json:"server,omitempty"`
	// Seen is the source address the server saw the call come from.
	Seen string `json:"seen,omitempty"`
	// RTTMicros is the round trip: TCP connect, UDP call and answer, the median ICMP echo.
	RTTMicros int64 `json:"rttUs,omitempty"`
	// Detail says more: ICMP "3/3 replies", path MTU "1340 passes, 1341 gets frag-needed (mtu 1340)".
	Detail string `json:"detail,omitempty"`
	Error  string `json:"error,omitempty"`
	// PathMTU is, for the path-MTU check, the path MTU this host learned from a frag-needed
	// (Packet Too Big) when the path is narrower than the MTU checked (0 otherwise).
	PathMTU int `json:"pathMTU,omitempty"`
}

// Route is where the kernel sends a packet to the target (`ip route get`).
type Route struct {
	Device string `json:"device,omitempty"`
	Table  string `json:"table,omitempty"`
	Error  string `json:"error,omitempty"`
}

// Cell is every check from this source to one target.
type Cell struct {
	Target string  `json:"target"`
	TCP    *Result `json:"tcp,omitempty"`
	UDP    *Result `json:"udp,omitempty"`
	ICMP   *Result `json:"icmp,omitempty"`
	PMTU   *Result `json:"pmtu,omitempty"`
	Route  *Route  `json:"route,omitempty"`
}

// Report is what skein-probe check prints: who ran it and a cell per target.
type Report struct {
	Host  string `json:"host"`
	Cells []Cell `json:"cells"`
}

// Check runs every check against target. Routes is nil on platforms without route look-ups or
// when o.Route is false.
func Check(ctx context.Context, target netip.Addr, o Options) Cell {
	o.defaults()
	c := Cell{Target: target.String()}
	tcp := Call(ctx, "tcp", netip.AddrPortFrom(target, uint16(o.TCPPort)), o.Timeout)
	udp := Call(ctx, "udp", netip.AddrPortFrom(target, uint16(o.UDPPort)), o.Timeout)
	c.TCP, c.UDP = &tcp, &udp
	if o.Pings > 0 {
		r := Ping(ctx, target, o.Pings, o.Timeout)
		c.ICMP = &r
	}
	if o.MTU > 0 {
		r := PathMTU(ctx, netip.AddrPortFrom(target, uint16(o.UDPPort)), o.MTU, o.Timeout)
		c.PMTU = &r
	}
	if o.Route {
		c.Route = routeTo(target)
	}
	return c
}

// Call makes one TCP or UDP call to a skein-probe server and reads its answer, "<host> saw
// <ip>:<port>".
func Call(ctx context.Context, network string, to netip.AddrPort, timeout time.Duration) Result {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	conn, err := (&net.Dialer{}).DialContext(ctx, network, to.String())
	if err != nil {
		return Result{Error: shortErr(err)}
	}
	defer conn.Close()
	rtt := time.Since(start)
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	if network == "udp" {
		start = time.Now()
		if _, err := conn.Write(CallDatagram("call")); err != nil {
			return Result{Error: shortErr(err)}
		}
	}
	buf := make([]byte, 512)
	n, err := conn.Read(buf)
	if network == "udp" {
		rtt = time.Since(start)
	}
	if err != nil {
		return Result{Error: "no answer: " + shortErr(err)}
	}
	host, seen, ok := ParseAnswer(string(buf[:n]))
	if !ok {
		return Result{Error: fmt.Sprintf("answer %q is not skein-probe's", printable(string(buf[:n])))}
	}
	return Result{OK: true, Server: host, Seen: seen.String(), RTTMicros: rtt.Microseconds()}
}

// ParseAnswer reads a skein-probe server's answer: "<host> saw <ip>:<port>[ <echo>]".
func ParseAnswer(s string) (host string, seen netip.Addr, ok bool) {
	f := strings.Fields(s)
	if len(f) < 3 || f[1] != "saw" {
		return "", netip.Addr{}, false
	}
	ap, err := netip.ParseAddrPort(f[2])
	if err != nil {
		return "", netip.Addr{}, false
	}
	return f[0], ap.Addr().Unmap(), true
}

// Ping sends count ICMP (ICMPv6 for an IPv6 address) echo requests, one every 100 ms, and
// waits for their replies. It uses an unprivileged ICMP socket where net.ipv4.ping_group_range
// allows it (containerd's pods have it; it governs ICMPv6 ping sockets too) and a raw socket
// (CAP_NET_RAW) otherwise. OK means at least one reply came back; Detail says how many.
func Ping(ctx context.Context, to netip.Addr, count int, timeout time.Duration) Result {
	to = to.Unmap()
	if !to.IsValid() || to.Zone() != "" {
		return Result{Error: fmt.Sprintf("cannot ping %v", to)}
	}
	dgram, rawNet, wildcard, proto := "udp4", "ip4:icmp", "0.0.0.0", 1
	var echo, reply icmp.Type = ipv4.ICMPTypeEcho, ipv4.ICMPTypeEchoReply
	if to.Is6() {
		dgram, rawNet, wildcard, proto = "udp6", "ip6:ipv6-icmp", "::", 58
		echo, reply = ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply
	}
	privileged := false
	conn, err := icmp.ListenPacket(dgram, wildcard)
	if err != nil {
		privileged = true
		if conn, err = icmp.ListenPacket(rawNet, wildcard); err != nil {
			return Result{Error: "no ICMP socket: neither net.ipv4.ping_group_range nor CAP_NET_RAW allows one here"}
		}
	}
	defer conn.Close()
	id := os.Getpid() & 0xffff
	var dst net.Addr = &net.UDPAddr{IP: to.AsSlice()}
	if privileged {
		dst = &net.IPAddr{IP: to.AsSlice()}
	}
	var mu sync.Mutex // sent and rtts, shared with the reader
	sent := map[int]time.Time{}
	var rtts []time.Duration
	replies := func() int { mu.Lock(); defer mu.Unlock(); return len(rtts) }
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, from, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			m, err := icmp.ParseMessage(proto, buf[:n])
			if err != nil || m.Type != reply {
				continue
			}
			e, ok := m.Body.(*icmp.Echo)
			if !ok || (privileged && e.ID != id) || !sameIP(from, to) {
				continue
			}
			mu.Lock()
			if t, ok := sent[e.Seq]; ok && !t.IsZero() {
				rtts = append(rtts, time.Since(t))
				sent[e.Seq] = time.Time{}
			}
			mu.Unlock()
		}
	}()
	stop := time.Now().Add(timeout + time.Duration(count-1)*100*time.Millisecond)
	if d, ok := ctx.Deadline(); ok && d.Before(stop) {
		stop = d
	}
	_ = conn.SetReadDeadline(stop)
	payload := []byte("skein-probe ping")
	for seq := range count {
		// The kernel fills in the ICMPv6 checksum (it covers the addresses, which Marshal
		// without a pseudo-header does not know).
		msg := icmp.Message{Type: echo, Body: &icmp.Echo{ID: id, Seq: seq, Data: payload}}
		b, _ := msg.Marshal(nil)
		mu.Lock()
		sent[seq] = time.Now()
		mu.Unlock()
		if _, err := conn.WriteTo(b, dst); err != nil {
			conn.Close()
			<-done
			return Result{Error: shortErr(err)}
		}
		if seq < count-1 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	// Wait for the outstanding replies until the deadline, but no longer than needed.
	for time.Now().Before(stop) && replies() < count {
		time.Sleep(10 * time.Millisecond)
	}
	conn.Close()
	<-done
	r := Result{Detail: fmt.Sprintf("%d/%d replies", len(rtts), count)}
	if len(rtts) == 0 {
		r.Error = "no echo reply"
		return r
	}
	slices.Sort(rtts)
	r.OK, r.RTTMicros = true, rtts[len(rtts)/2].Microseconds()
	return r
}

func sameIP(a net.Addr, b netip.Addr) bool {
	var ip net.IP
	switch v := a.(type) {
	case *net.UDPAddr:
		ip = v.IP
	case *net.IPAddr:
		ip = v.IP
	}
	x, ok := netip.AddrFromSlice(ip)
	return ok && x.Unmap() == b
}

// pmtuPayload starts every path-MTU datagram: a probe call whose echo is "pmtu" (the server
// echoes what comes before the first NUL byte only, so its answer stays small).
var pmtuPayload = append(append([]byte(nil), callMagic...), "pmtu"...)

// PathMTU checks the path to a skein-probe server's UDP port against the tunnel MTU: a
// datagram that makes an IP packet of exactly mtu bytes, sent with Don't Fragment (IPv6 is
// never fragmented on the way), must be answered; one of mtu+1 bytes must not get through,
// and the kernel must learn from an ICMP frag-needed or ICMPv6 Packet Too Big that the path
// MTU is at most mtu (a path that drops it silently is a black hole for TCP without MSS
// clamping). When this host's own route has a smaller MTU than mtu, that one is checked
// instead and Detail says so.
func PathMTU(ctx context.Context, to netip.AddrPort, mtu int, timeout time.Duration) Result {
	to = netip.AddrPortFrom(to.Addr().Unmap(), to.Port())
	network, headers, level, discover, probeDo, mtuOpt, minMTU := "udp4", 20+8, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO, unix.IP_MTU, 68
	if to.Addr().Is6() {
		network, headers, level, discover, probeDo, mtuOpt, minMTU = "udp6", 40+8, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO, unix.IPV6_MTU, 1280
	}
	if mtu < minMTU || mtu > 65535 {
		return Result{Error: fmt.Sprintf("mtu %d out of range", mtu)}
	}
	conn, err := net.DialUDP(network, nil, net.UDPAddrFromAddrPort(to))
	if err != nil {
		return Result{Error: shortErr(err)}
	}
	defer conn.Close()
	raw, err := conn.SyscallConn()
	if err != nil {
		return Result{Error: err.Error()}
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), level, discover, probeDo)
	}); err != nil || serr != nil {
		return Result{Error: fmt.Sprintf("set path MTU discovery on: %v", errors.Join(err, serr))}
	}
	pathMTU := func() int {
		v := 0
		_ = raw.Control(func(fd uintptr) { v, _ = unix.GetsockoptInt(int(fd), level, mtuOpt) })
		return v
	}
	note := ""
	if local := pathMTU(); local > 0 && local < mtu {
		// This host's route (or what it already learned) is below the tunnel MTU: the pod's
		// own interface is then the limit, which is fine, and the tunnel is not what we see.
		note = fmt.Sprintf("; this host's route allows %d only, checked that", local)
		mtu = local
	}
	send := func(size int) (answered bool, err error) {
		dgram := make([]byte, size-headers)
		copy(dgram, pmtuPayload)
		deadline := time.Now().Add(timeout)
		if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
		_ = conn.SetDeadline(deadline)
		if _, err := conn.Write(dgram); err != nil {
			return false, err
		}
		buf := make([]byte, 512)
		n, err := conn.Read(buf)
		if err != nil {
			return false, err
		}
		_, _, ok := ParseAnswer(string(buf[:n]))
		return ok, nil
	}
	start := time.Now()
	ok, err := send(mtu)
	if !ok {
		if learned := pathMTU(); learned > 0 && learned < mtu {
			return Result{Error: fmt.Sprintf("a %d-byte packet with Don't Fragment got frag-needed: the path carries %d bytes%s", mtu, learned, note), PathMTU: learned}
		}
		return Result{Error: fmt.Sprintf("a %d-byte packet with Don't Fragment got no answer: %s%s", mtu, errText(err), note)}
	}
	rtt := time.Since(start)
	ok, err = send(mtu + 1)
	learned := pathMTU()
	switch {
	case ok:
		return Result{Error: fmt.Sprintf("a %d-byte packet with Don't Fragment got through: the path is wider than the tunnel MTU %d, so the MTU is set wrong on one side%s", mtu+1, mtu, note)}
	case errors.Is(err, syscall.EMSGSIZE) || (learned > 0 && learned <= mtu):
		return Result{OK: true, RTTMicros: rtt.Microseconds(),
			Detail: fmt.Sprintf("%d passes, %d gets frag-needed (path MTU %d)%s", mtu, mtu+1, learned, note)}
	default:
		return Result{Error: fmt.Sprintf("a %d-byte packet with Don't Fragment was dropped without an ICMP frag-needed (path MTU black hole; %s)%s", mtu+1, errText(err), note)}
	}
}

func errText(err error) string {
	if err == nil {
		return "no error"
	}
	return shortErr(err)
}

// shortErr drops the "dial udp 1.2.3.4:5->6.7.8.9:10: " prefix net errors carry.
func shortErr(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
			return "timed out"
		}
		return op.Err.Error()
	}
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return "timed out"
	}
	return err.Error()
}

// printable cuts s and escapes what a terminal would interpret.
func printable(s string) string {
	if len(s) > 80 {
		s = s[:80]
	}
	return strings.ToValidUTF8(fmt.Sprintf("%q", s), "?")
}

// EchoText is what a skein-probe server echoes of a datagram after "<host> saw <addr>": the
// text before the first NUL byte, at most 64 bytes.
func EchoText(dgram []byte) string {
	if i := bytes.IndexByte(dgram, 0); i >= 0 {
		dgram = dgram[:i]
	}
	if len(dgram) > 64 {
		dgram = dgram[:64]
	}
	return strings.TrimSpace(string(dgram))
}
