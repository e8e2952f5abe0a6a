package probe

import (
	"bytes"
	"fmt"
	"net"
	"time"
)

// callMagic starts every datagram to a skein-probe server's UDP call port: "skp" and the
// protocol's version. Anything else is dropped (and counted).
var callMagic = []byte("skp\x01")

// CallSize is the size of a call datagram as skein-probe's clients send it: large enough
// for any answer ("<host> saw [<IPv6>]:<port> <echo>"), since a server answers with no more
// bytes than it was sent (it is no amplifier of a spoofed source).
const CallSize = 256

// CallDatagram is a call to a skein-probe server's UDP port carrying text (at most 64 bytes
// of it are echoed), padded to CallSize.
func CallDatagram(text string) []byte {
	b := make([]byte, CallSize)
	copy(b, callMagic)
	if len(text) > 64 {
		text = text[:64]
	}
	copy(b[len(callMagic):], text)
	return b
}

// Serve answers every TCP connection on ln and every probe datagram on pc with "<host> saw
// <ip>:<port>", a datagram's answer followed by EchoText of what follows its magic (a
// stream's sequence number), under DefaultLimits. It returns when ln is closed (and closes
// pc then).
func Serve(host string, ln net.Listener, pc net.PacketConn) error {
	return NewServer(host, DefaultLimits).ServeCalls(ln, pc)
}

// ServeCalls is Serve on s.
func (s *Server) ServeCalls(ln net.Listener, pc net.PacketConn) error {
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					continue
				}
				return
			}
			if answer := s.answerCall(buf[:n], from); answer != nil {
				_, _ = pc.WriteTo(answer, from)
			}
		}
	}()
	defer pc.Close()
	return s.serveConns(ln, func(c net.Conn) {
		_ = c.SetWriteDeadline(time.Now().Add(s.limits.RequestTimeout))
		fmt.Fprintf(c, "%s saw %s\n", s.host, c.RemoteAddr())
	})
}

// answerCall is the answer to a datagram, nil (and counted) when it is not a probe call or
// too short to be answered without amplification.
func (s *Server) answerCall(dgram []byte, from net.Addr) []byte {
	if !bytes.HasPrefix(dgram, callMagic) {
		s.malformed.Add(1)
		return nil
	}
	answer := fmt.Appendf(nil, "%s saw %s %s", s.host, from, EchoText(dgram[len(callMagic):]))
	if len(answer) > len(dgram) {
		s.malformed.Add(1)
		return nil
	}
	return answer
}
