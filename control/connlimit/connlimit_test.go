package connlimit_test

import (
	"net"
	"testing"
	"time"

	"github.com/skein-net/skein/control/connlimit"
)

// TestBounds: connections over the per-source bound are closed at once and counted; a closed
// connection gives its place back.
func TestBounds(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := connlimit.Wrap(ln, 8, 3)
	defer l.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	var clients []net.Conn
	for range 5 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	var served []net.Conn
	deadline := time.After(3 * time.Second)
	for len(served) < 3 {
		select {
		case c := <-accepted:
			served = append(served, c)
		case <-deadline:
			t.Fatalf("%d connections accepted, want 3", len(served))
		}
	}
	for start := time.Now(); l.Refused() < 2 && time.Since(start) < 3*time.Second; {
		time.Sleep(10 * time.Millisecond)
	}
	if l.Refused() != 2 {
		t.Errorf("refused %d, want 2", l.Refused())
	}
	select {
	case c := <-accepted:
		t.Errorf("a fourth connection from one source accepted: %v", c.RemoteAddr())
	case <-time.After(200 * time.Millisecond):
	}
	served[0].Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case <-accepted:
	case <-time.After(3 * time.Second):
		t.Error("no place given back by a closed connection")
	}
	for _, c := range append(clients, served...) {
		c.Close()
	}
}
