package dataplane_test

import (
	"testing"

	"github.com/skein-net/skein/dataplane"
	"github.com/skein-net/skein/dataplane/packet"
	pt "github.com/skein-net/skein/dataplane/packet/packettest"
)

// TestSetPathMTU lowers the tunnel MTU live, as the gateways' path MTU discovery does: SYNs
// are clamped to it, a larger DF packet is answered fragmentation needed with it, one without
// DF still passes, and the limit survives a Reconfig until it is lifted.
func TestSetPathMTU(t *testing.T) {
	dp, c := newDP(t, baseConfig())
	syn := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 6, DF: true, TTL: 64,
		Payload: pt.TCP("10.244.1.5", "10.71.2.7", 40000, 80, packet.TCPFlagSYN, pt.MSSOption(1460), nil)}.Build()
	udp := func(size int, df bool) []byte {
		return pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 17, DF: df, TTL: 64,
			Payload: pt.UDP("10.244.1.5", "10.71.2.7", 5, 6, make([]byte, size-28), false)}.Build()
	}
	// check sends a SYN, a DF and a non-DF datagram of size through the gateway and wants the
	// SYN clamped to mtu-40 and the DF one refused with mtu when it exceeds mtu.
	check := func(what string, mtu, size int) {
		t.Helper()
		if got := dp.EffectiveMTU(); got != mtu {
			t.Errorf("%s: EffectiveMTU %d, want %d", what, got, mtu)
		}
		if got, _ := dp.MTU(); got != dataplane.DefaultTunnelMTU {
			t.Errorf("%s: MTU %d, want the configured %d", what, got, dataplane.DefaultTunnelMTU)
		}
		for _, p := range [][]byte{syn, udp(size, true), udp(size, false)} {
			c.Push(vxlanFrame(gwMAC, packet.EtherTypeIPv4, p), from1)
		}
		want := 3
		if size > mtu {
			want = 2
		}
		var got [][]byte
		for len(got) < want {
			got = append(got, readPackets(t, dp)...)
		}
		if mss, _ := tcpMSS(got[0]); int(mss) != mtu-40 {
			t.Errorf("%s: SYN clamped to MSS %d, want %d", what, mss, mtu-40)
		}
		sent := c.TakeSent()
		if size <= mtu {
			if len(sent) != 0 || len(got) != 3 {
				t.Errorf("%s: %d-byte DF datagram: %d forwarded, %d errors; want it forwarded", what, size, len(got), len(sent))
			}
			return
		}
		if len(got) != 2 || len(got[1]) != size || len(sent) != 1 {
			t.Fatalf("%s: %d packets forwarded, %d errors; want the SYN and the datagram without DF forwarded, one error", what, len(got), len(sent))
		}
		if m := checkICMPError(t, decapSent(t, sent[0], node1, node1MAC), "10.80.0.1", "10.244.1.5", 3, 4, udp(size, true)); m.MTU() != uint16(mtu) {
			t.Errorf("%s: fragmentation needed with MTU %d, want %d", what, m.MTU(), mtu)
		}
	}
	check("configured", dataplane.DefaultTunnelMTU, 1320)
	dp.SetPathMTU(1312)
	check("path MTU 1312", 1312, 1320)
	cfg := baseConfig()
	cfg.ICMPRate = 500
	if err := dp.Reconfig(cfg); err != nil {
		t.Fatal(err)
	}
	check("path MTU 1312 after a Reconfig", 1312, 1328)
	dp.SetPathMTU(9000)
	check("path MTU above the configured one", dataplane.DefaultTunnelMTU, 1320)
	dp.SetPathMTU(1216)
	dp.SetPathMTU(0)
	check("limit lifted", dataplane.DefaultTunnelMTU, 1320)
}
