package dataplane_test

import (
	"testing"

	"github.com/skein-net/skein/dataplane"
	"github.com/skein-net/skein/dataplane/packet"
	pt "github.com/skein-net/skein/dataplane/packet/packettest"
)

// TestTunnelICMPErrorsAboutOtherFlows (found by an attack review): a pod of the peer with
// NET_RAW sends into the tunnel ICMP errors from its own address (AllowedIPs accept it) quoting
// flows of a local pod that never crossed the tunnel: its DNS query to the cluster's resolver,
// its HTTPS to the internet. Forwarded, the pod's kernel acted on them (a resolver socket failed
// with ECONNREFUSED, a path MTU was lowered). An error from the peer must quote a packet sent
// to the peer: others are dropped and counted (bad-icmp-quote); one about a flow to the peer
// still reaches the pod, translated.
func TestTunnelICMPErrorsAboutOtherFlows(t *testing.T) {
	for _, tc := range []struct {
		name      string
		typ, code uint8
		rest      [4]byte
		quoted    []byte
		forwarded bool
	}{
		{"port unreachable about the pod's DNS query", 3, 3, [4]byte{},
			pt.IPv4{Src: "10.244.1.5", Dst: "10.96.0.10", Proto: 17, TTL: 64, Payload: pt.UDP("10.244.1.5", "10.96.0.10", 45000, 53, []byte("query"), false)}.Build(), false},
		{"fragmentation needed about the pod's HTTPS to 8.8.8.8", 3, 4, [4]byte{0, 0, 0x02, 0x28},
			pt.IPv4{Src: "10.244.1.5", Dst: "8.8.8.8", Proto: 6, DF: true, TTL: 64, Payload: pt.TCP("10.244.1.5", "8.8.8.8", 40000, 443, packet.TCPFlagACK, nil, []byte("data"))}.Build(), false},
		{"port unreachable about the pod's query to the peer's pod", 3, 3, [4]byte{},
			pt.IPv4{Src: "10.244.1.5", Dst: "10.244.9.9", Proto: 17, TTL: 64, Payload: pt.UDP("10.244.1.5", "10.244.9.9", 45000, 53, []byte("query"), false)}.Build(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dp, c := newDP(t, baseConfig())
			// From a peer pod (10.244.9.9 there, 10.71.9.9 here) to local pod 10.244.1.5.
			icmp := pt.IPv4{Src: "10.244.9.9", Dst: "10.244.1.5", Proto: 1, TTL: 64, Payload: pt.ICMP(tc.typ, tc.code, tc.rest, tc.quoted)}.Build()
			write(t, dp, icmp)
			sent := c.TakeSent()
			if forwarded := len(sent) > 0; forwarded != tc.forwarded {
				t.Fatalf("forwarded %v, want %v (counters %v)", forwarded, tc.forwarded, dp.Counters()[dataplane.FromTunnel])
			}
			if tc.forwarded {
				p := decapSent(t, sent[0], node1, node1MAC)
				q := packet.ICMPv4(packet.IPv4(p).Payload()).Payload()
				if ip4(p[12:16]) != "10.71.9.9" || ip4(q[16:20]) != "10.71.9.9" {
					t.Errorf("forwarded from %s quoting a packet to %s, want both the peer pod as seen here (10.71.9.9)", ip4(p[12:16]), ip4(q[16:20]))
				}
			}
		})
	}
}
