package lab_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/skein-net/skein/bench/lab"
	"github.com/skein-net/skein/dataplane/kernel"
)

// udpReach sends a datagram from namespace from to addr:port where namespace to listens, and
// reports whether it arrived.
func udpReach(t *testing.T, from, to string, addr string) bool {
	t.Helper()
	var srv *net.UDPConn
	if err := kernel.InNamespace("/var/run/netns/" + to)(func() (err error) {
		srv, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(addr), Port: 7777})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if err := kernel.InNamespace("/var/run/netns/" + from)(func() error {
		c, err := net.Dial("udp4", addr+":7777")
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("hello"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	srv.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 16)
	n, _, err := srv.ReadFromUDP(buf)
	return err == nil && string(buf[:n]) == "hello"
}

func hostLinks(t *testing.T) string {
	out, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func TestTopology(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root to create network namespaces")
	}
	prefix := fmt.Sprintf("skt%d", os.Getpid())
	before := hostLinks(t)
	topo, err := lab.Up(lab.Options{Prefix: prefix, Clusters: 2, Nodes: 2})
	t.Cleanup(func() { lab.Down(prefix) })
	if err != nil {
		t.Fatal(err)
	}
	if names, _ := lab.Namespaces(prefix); len(names) != 2+2*3 {
		t.Errorf("namespaces %v", names)
	}
	c0, c1 := topo.Clusters[0], topo.Clusters[1]
	for _, tc := range []struct{ from, to, addr string }{
		{topo.Workstation.Name, c0.ControlPlane.Name, c0.ControlPlane.Addr.String()},
		{topo.Workstation.Name, c1.ControlPlane.Name, c1.ControlPlane.Addr.String()},
		{c0.Nodes[0].Name, c0.Nodes[1].Name, c0.Nodes[1].Addr.String()},
		{c0.Nodes[1].Name, c1.Nodes[0].Name, c1.Nodes[0].Addr.String()},
	} {
		if !udpReach(t, tc.from, tc.to, tc.addr) {
			t.Errorf("%s cannot reach %s at %s", tc.from, tc.to, tc.addr)
		}
	}
	if err := lab.Down(prefix); err != nil {
		t.Fatal(err)
	}
	if names, _ := lab.Namespaces(prefix); len(names) != 0 {
		t.Errorf("left behind: %v", names)
	}
	if after := hostLinks(t); after != before {
		t.Errorf("the machine's own links changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if err := lab.Down(prefix); err != nil {
		t.Errorf("a second Down: %v", err)
	}
}
