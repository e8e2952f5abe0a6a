package kernel_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/skein-net/skein/dataplane/kernel"
	"github.com/skein-net/skein/dataplane/overlay"
	"github.com/skein-net/skein/dataplane/packet"
	"github.com/skein-net/skein/internal/golden"
)

func desired() kernel.Desired {
	return kernel.Desired{
		Overlay: kernel.Overlay{Name: "liqo.vxlan", Kind: overlay.VXLAN, VNI: 18952, Port: 4789,
			Local: netip.MustParseAddr("192.168.77.1"), Address: netip.MustParsePrefix("10.80.0.11/16"), MTU: 1450},
		Peers: []kernel.Peer{
			{OverlayIP: netip.MustParseAddr("10.80.0.1"), MAC: packet.MAC{2, 0x5b, 0, 0, 0, 1}, VTEP: netip.MustParseAddr("10.244.1.20"),
				Routes: []netip.Prefix{netip.MustParsePrefix("10.71.0.0/16"), netip.MustParsePrefix("10.70.0.0/16")}},
			{OverlayIP: netip.MustParseAddr("10.80.0.2"), MAC: packet.MAC{2, 0x5b, 0, 0, 0, 2}, VTEP: netip.MustParseAddr("10.244.2.30"),
				Routes: []netip.Prefix{netip.MustParsePrefix("10.73.0.0/16")}},
		},
	}
}

// TestGolden records what the agent does to a fake kernel for a sequence of API states.
func TestGolden(t *testing.T) {
	f := kernel.NewFake()
	d := desired()
	steps := []struct {
		name string
		mut  func(*kernel.Desired)
	}{
		{"first", func(*kernel.Desired) {}},
		{"again", func(*kernel.Desired) {}},
		{"failover", func(d *kernel.Desired) { d.Peers[0].VTEP = netip.MustParseAddr("10.244.3.40") }},
		{"remap", func(d *kernel.Desired) { d.Peers[1].Routes = []netip.Prefix{netip.MustParsePrefix("10.74.0.0/16")} }},
		{"peer-removed", func(d *kernel.Desired) { d.Peers = d.Peers[:1] }},
		{"mtu", func(d *kernel.Desired) { d.Overlay.MTU = 1400 }},
		{"ipv6", func(d *kernel.Desired) {
			d.Overlay.Address6 = netip.MustParsePrefix("64:ff9b:1::a50:b/96")
			d.Peers[0].OverlayIP6 = netip.MustParseAddr("64:ff9b:1::a50:1")
			d.Peers[0].Routes = append(d.Peers[0].Routes, netip.MustParsePrefix("fd71::/48"))
		}},
		{"ipv6-remap", func(d *kernel.Desired) { d.Peers[0].Routes[2] = netip.MustParsePrefix("fd72::/48") }},
		{"ipv6-removed", func(d *kernel.Desired) {
			d.Overlay.Address6, d.Peers[0].OverlayIP6 = netip.Prefix{}, netip.Addr{}
			d.Peers[0].Routes = d.Peers[0].Routes[:2]
		}},
	}
	var all strings.Builder
	for _, s := range steps {
		s.mut(&d)
		ch, err := kernel.Reconcile(f, d)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		script := f.Script()
		if s.name == "again" && (script != "" || ch.Total() != 0) {
			t.Errorf("a second reconcile of the same state changed things: %d\n%s", ch.Total(), script)
		}
		all.WriteString("# " + s.name + "\n" + script)
	}
	if err := kernel.Cleanup(f, "liqo.vxlan", 18952); err != nil {
		t.Fatal(err)
	}
	all.WriteString("# cleanup\n" + f.Script())
	golden.Check(t, "reconcile", all.String())
}

func TestValidate(t *testing.T) {
	cases := []struct {
		mut  func(*kernel.Desired)
		want string
	}{
		{func(d *kernel.Desired) { d.Overlay.Name = "a-very-long-device-name" }, "1-15 characters"},
		{func(d *kernel.Desired) { d.Overlay.VNI = 0 }, "VNI 0"},
		{func(d *kernel.Desired) { d.Overlay.MTU = 100 }, "MTU 100"},
		{func(d *kernel.Desired) { d.Peers[0].OverlayIP = netip.MustParseAddr("10.99.0.1") }, "outside the overlay network"},
		{func(d *kernel.Desired) { d.Peers[1].Routes = d.Peers[0].Routes }, "routed to two gateways"},
		{func(d *kernel.Desired) {
			d.Peers[0].Routes = append(d.Peers[0].Routes, netip.MustParsePrefix("fd71::/48"))
		}, "an IPv6 route needs the gateway's IPv6 overlay address"},
		{func(d *kernel.Desired) { d.Peers[0].OverlayIP6 = netip.MustParseAddr("64:ff9b:1::a50:1") }, "outside the overlay's IPv6 network"},
		{func(d *kernel.Desired) { d.Overlay.Address6 = netip.MustParsePrefix("fe80::1/64") }, "global scope"},
		{func(d *kernel.Desired) { d.Overlay.Address6 = netip.MustParsePrefix("10.0.0.1/8") }, "global scope"},
	}
	for _, tc := range cases {
		d := desired()
		tc.mut(&d)
		f := kernel.NewFake()
		if _, err := kernel.Reconcile(f, d); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v, want an error containing %q", err, tc.want)
		}
		if len(f.Ops) != 0 {
			t.Errorf("a refused state changed the kernel: %v", f.Ops)
		}
	}
}
