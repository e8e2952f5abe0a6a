package connlimit_test

import (
	"errors"
	"net"
	"syscall"
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
	lim := connlimit.New(8, 3)
	l := lim.Listener(ln)
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
		if errors.Is(err, syscall.ECONNRESET) {
			continue // refused, and reset before the dial returned (loopback is that fast)
		}
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
	for start := time.Now(); lim.Refused() < 2 && time.Since(start) < 3*time.Second; {
		time.Sleep(10 * time.Millisecond)
	}
	if lim.Refused() != 2 {
		t.Errorf("refused %d, want 2", lim.Refused())
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

// TestSharedBudget: two listeners wrapped by one Limiter share its bound, and Open counts the
// places held.
func TestSharedBudget(t *testing.T) {
	lim := connlimit.New(2, 2)
	var ls []net.Listener
	accepted := make(chan net.Conn, 8)
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		l := lim.Listener(ln)
		defer l.Close()
		ls = append(ls, l)
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				accepted <- c
			}
		}()
	}
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for _, l := range append(ls, ls[0]) { // three connections, over two listeners
		c, err := net.Dial("tcp", l.Addr().String())
		if errors.Is(err, syscall.ECONNRESET) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for start := time.Now(); lim.Refused() < 1 && time.Since(start) < 3*time.Second; {
		time.Sleep(10 * time.Millisecond)
	}
	if lim.Refused() != 1 || lim.Open() != 2 {
		t.Errorf("refused %d, open %d; want 1 and 2 (one budget of 2 over both listeners)", lim.Refused(), lim.Open())
	}
	for range 2 {
		(<-accepted).Close()
	}
	if lim.Open() != 0 {
		t.Errorf("open %d after closing both, want 0", lim.Open())
	}
}
