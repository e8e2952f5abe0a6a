//go:build linux

// Package netnstest gives tests throwaway network namespaces: created with iproute2, removed
// (with every process and link in them) when the test ends, pass or fail. Everything a test
// configures lives inside its namespaces; nothing touches the namespace the test runs in.
package netnstest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/skein-net/skein/dataplane/kernel"
)

// RequireRoot fails the test unless it runs as root: network namespaces, veths and VXLAN
// devices need CAP_NET_ADMIN and CAP_SYS_ADMIN. SKEIN_SKIP_NETNS=1 skips such tests instead,
// root or not (make test-unit; a workstation without root); make test runs them.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Getenv("SKEIN_SKIP_NETNS") == "1" {
		t.Skip("needs network namespaces; skipped because SKEIN_SKIP_NETNS=1")
	}
	if os.Geteuid() == 0 {
		if _, err := exec.LookPath("ip"); err != nil {
			t.Fatalf("the ip command (Debian package iproute2) is needed: %v", err)
		}
		return
	}
	t.Fatal("needs root to create network namespaces (run as root, or set SKEIN_SKIP_NETNS=1 to skip)")
}

var seq atomic.Int32

// NS is a named network namespace.
type NS struct {
	Name string
}

// New creates a namespace whose name starts with "sk-" and holds role, the test process's pid
// and a counter, with its loopback up, and removes it when t ends.
func New(t testing.TB, role string) *NS {
	t.Helper()
	name := fmt.Sprintf("sk-%s-%d-%d", role, os.Getpid(), seq.Add(1))
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	ns := &NS{Name: name}
	t.Cleanup(func() { ns.remove(t) })
	ns.Run(t, "ip", "link", "set", "lo", "up")
	return ns
}

// remove kills what runs in the namespace and deletes it; links in it go with it.
func (ns *NS) remove(t testing.TB) {
	if out, err := exec.Command("ip", "netns", "pids", ns.Name).Output(); err == nil {
		for _, pid := range strings.Fields(string(out)) {
			_ = exec.Command("kill", "-9", pid).Run()
		}
	}
	if out, err := exec.Command("ip", "netns", "del", ns.Name).CombinedOutput(); err != nil {
		t.Errorf("ip netns del %s: %v: %s", ns.Name, err, out)
	}
}

// Run runs a command inside the namespace and returns its output; it fails the test on error.
func (ns *NS) Run(t testing.TB, args ...string) string {
	t.Helper()
	out, err := ns.Try(args...)
	if err != nil {
		t.Fatalf("in %s: %s: %v: %s", ns.Name, strings.Join(args, " "), err, out)
	}
	return out
}

// Try runs a command inside the namespace and returns its combined output and error.
func (ns *NS) Try(args ...string) (string, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns.Name}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Do runs fn on an OS thread switched into the namespace. Sockets fn opens belong to the
// namespace for their whole life, wherever they are used afterwards.
func (ns *NS) Do(fn func() error) error {
	return kernel.InNamespace(filepath.Join("/var/run/netns", ns.Name))(fn)
}

// VXLANNode describes a node's kernel overlay device as skein-agent programs it.
type VXLANNode struct {
	Underlay   string // the node's underlay IP (the device's local address)
	VNI, Port  int
	Address    string // the device's overlay address with prefix, such as 10.80.0.11/16
	Gateway    string // the gateway's underlay IP (FDB destination)
	GatewayMAC string
	// Offload leaves TX checksum offload (and so TSO) on.
	Offload bool
}

// AddVXLAN creates liqo.vxlan in ns as described, with TX checksum offload off, and returns
// its MAC address.
func (ns *NS) AddVXLAN(t testing.TB, v VXLANNode) string {
	t.Helper()
	ns.Run(t, "ip", "link", "add", "liqo.vxlan", "type", "vxlan", "id", fmt.Sprint(v.VNI), "dstport", fmt.Sprint(v.Port), "local", v.Underlay, "nolearning")
	ns.Run(t, "bridge", "fdb", "append", "00:00:00:00:00:00", "dev", "liqo.vxlan", "dst", v.Gateway)
	ns.Run(t, "bridge", "fdb", "append", v.GatewayMAC, "dev", "liqo.vxlan", "dst", v.Gateway)
	if !v.Offload {
		if err := ns.Do(func() error { return kernel.SetTxChecksum("liqo.vxlan", false) }); err != nil {
			t.Fatal(err)
		}
	}
	ns.Run(t, "ip", "link", "set", "liqo.vxlan", "mtu", "1450", "up")
	ns.Run(t, "ip", "addr", "add", v.Address, "dev", "liqo.vxlan")
	return strings.TrimSpace(ns.Run(t, "cat", "/sys/class/net/liqo.vxlan/address"))
}

// Veth connects a and b with a veth pair named name on both sides, addresses addrA and addrB
// (with prefix), both up. With VethGRO set, both ends have GRO on, as physical NICs do.
func Veth(t testing.TB, a, b *NS, name, addrA, addrB string) {
	t.Helper()
	a.Run(t, "ip", "link", "add", name, "type", "veth", "peer", "name", name, "netns", b.Name)
	for _, side := range []struct {
		ns   *NS
		addr string
	}{{a, addrA}, {b, addrB}} {
		side.ns.Run(t, "ip", "addr", "add", side.addr, "dev", name)
		if VethGRO {
			if err := side.ns.Do(func() error { return kernel.SetGRO(name, true) }); err != nil {
				t.Fatal(err)
			}
		}
		side.ns.Run(t, "ip", "link", "set", name, "up")
	}
}

// VethGRO makes Veth turn GRO on (SKEIN_TEST_VETH_GRO=1).
var VethGRO = os.Getenv("SKEIN_TEST_VETH_GRO") == "1"
