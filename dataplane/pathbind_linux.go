package dataplane

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// wireSocket is a duplicate of one of wireguard-go's UDP sockets: socket options set on it
// are the socket's. wireguard-go's StdNetBind does not hand its sockets out on Linux
// (PeekLookAtSocketFd is Android's), so findWireSockets finds them by the port they are bound
// to; the duplicate is closed before the Bind closes, so the port is free for the next Open.
type wireSocket struct {
	fd int
	v6 bool
}

// findWireSockets duplicates the process's UDP sockets bound to port on the unspecified
// address (wireguard-go's IPv4 and IPv6 sockets).
func findWireSockets(port uint16) []wireSocket {
	if port == 0 {
		return nil
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil
	}
	var found []wireSocket
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || typ != unix.SOCK_DGRAM {
			continue
		}
		if proto, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL); err != nil || proto != unix.IPPROTO_UDP {
			continue
		}
		sa, err := unix.Getsockname(fd)
		if err != nil {
			continue
		}
		var v6 bool
		switch a := sa.(type) {
		case *unix.SockaddrInet4:
			if a.Port != int(port) || a.Addr != [4]byte{} {
				continue
			}
		case *unix.SockaddrInet6:
			if a.Port != int(port) || a.Addr != [16]byte{} {
				continue
			}
			v6 = true
		default:
			continue
		}
		found = append(found, wireSocket{fd: fd, v6: v6})
	}
	// Duplicated only now: a duplicate made in the loop could take the number of a
	// descriptor listed but closed since (the directory's own) and be found again.
	var out []wireSocket
	for _, s := range found {
		if dup, err := unix.FcntlInt(uintptr(s.fd), unix.F_DUPFD_CLOEXEC, 0); err == nil {
			out = append(out, wireSocket{fd: dup, v6: s.v6})
		}
	}
	return out
}

// sendWithoutDF has IPv4 datagrams leave without DF: IP_MTU_DISCOVER IP_PMTUDISC_DONT (as
// kernel WireGuard sends). The kernel still fragments a datagram at the source to a path MTU
// it knows, and routers fragment the rest. An IPv6 socket keeps its default (IPv6 routers do
// not fragment).
func (s wireSocket) sendWithoutDF() error {
	if s.v6 {
		return nil
	}
	if err := unix.SetsockoptInt(s.fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DONT); err != nil {
		return fmt.Errorf("IP_MTU_DISCOVER IP_PMTUDISC_DONT: %w", err)
	}
	return nil
}

// setDF switches the socket to send with DF whatever the path MTU it knows
// (IP_PMTUDISC_PROBE, IPV6_PMTUDISC_PROBE), for a path MTU probe, or back.
func (s wireSocket) setDF(on bool) error {
	if s.v6 {
		v := unix.IPV6_PMTUDISC_WANT // the default
		if on {
			v = unix.IPV6_PMTUDISC_PROBE
		}
		return unix.SetsockoptInt(s.fd, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, v)
	}
	v := unix.IP_PMTUDISC_DONT
	if on {
		v = unix.IP_PMTUDISC_PROBE
	}
	return unix.SetsockoptInt(s.fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, v)
}

func (s wireSocket) close() { unix.Close(s.fd) }
