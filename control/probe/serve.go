package probe

import (
	"fmt"
	"net"
)

// Serve answers every TCP connection on ln and every datagram on pc with "<host> saw
// <ip>:<port>", a datagram's answer followed by EchoText of it (a stream's sequence number).
// It returns when ln is closed (and closes pc then).
func Serve(host string, ln net.Listener, pc net.PacketConn) error {
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
			_, _ = pc.WriteTo([]byte(fmt.Sprintf("%s saw %s %s", host, from, EchoText(buf[:n]))), from)
		}
	}()
	defer pc.Close()
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			fmt.Fprintf(c, "%s saw %s\n", host, c.RemoteAddr())
		}()
	}
}
