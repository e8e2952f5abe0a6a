package nat_test

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/skein-net/skein/dataplane/nat"
	"github.com/skein-net/skein/dataplane/packet"
	pt "github.com/skein-net/skein/dataplane/packet/packettest"
)

// The IPv6 map of the examples: the peer's pods 2001:db8:244::/56 are seen here as
// fd71:0:0:1200::/56 (a prefix ending inside a 16-bit word), its services fd00:96::/112 as
// fd72::/112, a /64 that needs no remap (identity), and fd99:1:2:3::/64 -> fd99:1:2:3::/64's
// checksum-neutral twin fd99:1:3:2::/64 (the same words in another order, so the same sum).
var inbound6 = nat.MustPrefixMap(
	nat.Pair{From: pfx("fd71:0:0:1200::/56"), To: pfx("2001:db8:244::/56")},
	nat.Pair{From: pfx("fd72::/112"), To: pfx("fd00:96::/112")},
	nat.Pair{From: pfx("fd99:1:3:2::/64"), To: pfx("fd99:1:2:3::/64")},
	nat.Pair{From: pfx("2001:db8:77::/64"), To: pfx("2001:db8:77::/64")},
	// An IPv4 pair beside them: each family is looked up on its own.
	nat.Pair{From: pfx("10.71.0.0/16"), To: pfx("10.244.0.0/16")},
)

func rewrite6(t testing.TB, m *nat.PrefixMap, d direction, pkt []byte) (nat.Result, []byte) {
	t.Helper()
	b := append([]byte(nil), pkt...)
	ip, err := packet.ParseIPv6(b)
	if err != nil {
		t.Fatalf("test packet does not parse: %v", err)
	}
	if d == dst {
		return m.RewriteDst6(ip), b
	}
	return m.RewriteSrc6(ip), b
}

func tcp6(s, d string, data []byte) []byte {
	return pt.IPv6{Src: s, Dst: d, Next: 6, Payload: pt.TCP(s, d, 40000, 80, 0x18, nil, data)}.Build()
}

func udp6(s, d string, data []byte, zero bool) []byte {
	return pt.IPv6{Src: s, Dst: d, Next: 17, Payload: pt.UDP(s, d, 5353, 53, data, zero)}.Build()
}

func icmp6(s, d string, typ, code uint8, rest [4]byte, body []byte) []byte {
	return pt.IPv6{Src: s, Dst: d, Next: 58, Payload: pt.ICMPv6(s, d, typ, code, rest, body)}.Build()
}

func addr6At(b []byte, off int) string { return netip.AddrFrom16([16]byte(b[off : off+16])).String() }

func TestRewrite6(t *testing.T) {
	payload := []byte("hello, remote cluster, over IPv6")
	local, remote, seen := "2001:db8:244:1::5", "2001:db8:244:2::7", "fd71:0:0:1202::7"
	// A Packet Too Big from a local pod about a segment the remote pod sent it; whole, so that
	// the quoted checksum can be verified after translation.
	tooBig := icmp6(local, seen, packet.ICMPv6PacketTooBig, 0, [4]byte{0, 0, 0x05, 0x00}, tcp6(seen, local, payload))
	// Time exceeded about an echo request, quoting it whole: the quoted ICMPv6 checksum covers
	// the quoted addresses too.
	echoQuoted := icmp6("2001:db8:1::1", local, packet.ICMPv6TimeExceeded, 0, [4]byte{},
		icmp6(local, seen, packet.ICMPv6EchoRequest, 0, [4]byte{0, 1, 0, 1}, []byte("ping")))
	hbh := pt.IPv6{Src: local, Dst: seen, Proto: 17,
		Ext:     [][]byte{pt.ExtHeader(packet.ProtoHopByHop, 8), pt.ExtHeader(packet.ProtoDestOpts, 16)},
		Payload: pt.UDP(local, seen, 1, 2, payload, false)}
	first := pt.IPv6{Src: local, Dst: seen, Next: packet.ProtoFragment, Proto: 6,
		Ext: [][]byte{pt.FragmentHeader(0, true, 7)}, Payload: pt.TCP(local, seen, 1, 2, 0x10, nil, payload)}
	later := pt.IPv6{Src: local, Dst: seen, Next: packet.ProtoFragment, Proto: 6,
		Ext: [][]byte{pt.FragmentHeader(64, false, 7)}, Payload: payload}
	routed := pt.IPv6{Src: local, Dst: seen, Next: packet.ProtoRouting, Proto: 17,
		Ext: [][]byte{pt.RoutingHeader(1, "2001:db8:9::9")}, Payload: pt.UDP(local, "2001:db8:9::9", 1, 2, payload, false)}
	routedDone := routed
	routedDone.Ext = [][]byte{pt.RoutingHeader(0, "2001:db8:9::9")}
	routedDone.Payload = pt.UDP(local, seen, 1, 2, payload, false)
	deep := pt.IPv6{Src: local, Dst: seen, Proto: 17, Payload: pt.UDP(local, seen, 1, 2, nil, false)}
	for range packet.MaxIPv6ExtHeaders + 1 {
		deep.Ext = append(deep.Ext, pt.ExtHeader(packet.ProtoDestOpts, 8))
	}

	for _, tc := range []struct {
		name     string
		d        direction
		pkt      []byte
		want     nat.Result
		src, dst string // addresses expected after the rewrite ("" = unchanged)
		quoted   string // the quoted packet's translated address, if any
	}{
		{name: "tcp into the tunnel", d: dst, pkt: tcp6(local, seen, payload), want: nat.Rewritten, dst: remote},
		{name: "udp", d: dst, pkt: udp6(local, seen, payload, false), want: nat.Rewritten, dst: remote},
		{name: "udp without checksum keeps none", d: dst, pkt: udp6(local, seen, payload, true), want: nat.Rewritten, dst: remote},
		{name: "echo request: the ICMPv6 checksum covers the address", d: dst,
			pkt: icmp6(local, seen, packet.ICMPv6EchoRequest, 0, [4]byte{0, 9, 0, 1}, []byte("ping")), want: nat.Rewritten, dst: remote},
		{name: "service /112", d: dst, pkt: tcp6(local, "fd72::53", nil), want: nat.Rewritten, dst: "fd00:96::53"},
		{name: "checksum-neutral pair", d: dst, pkt: tcp6(local, "fd99:1:3:2::8", payload), want: nat.Rewritten, dst: "fd99:1:2:3::8"},
		{name: "identity pair passes", d: dst, pkt: tcp6(local, "2001:db8:77::1", nil), want: nat.Matched},
		{name: "no pair", d: dst, pkt: tcp6(local, "2001:db8:5::1", nil), want: nat.NoMatch},
		{name: "out of the tunnel: source", d: src, pkt: tcp6(remote, local, payload), want: nat.Rewritten, src: seen},
		{name: "extension headers walked", d: dst, pkt: hbh.Build(), want: nat.Rewritten, dst: remote},
		{name: "first fragment", d: dst, pkt: first.Build(), want: nat.Rewritten, dst: remote},
		{name: "later fragment: address only", d: dst, pkt: later.Build(), want: nat.Rewritten, dst: remote},
		{name: "routing header with segments left: refused", d: dst, pkt: routed.Build(), want: nat.Unsupported},
		{name: "routing header done", d: dst, pkt: routedDone.Build(), want: nat.Rewritten, dst: remote},
		{name: "too many extension headers", d: dst, pkt: deep.Build(), want: nat.Unsupported},
		{name: "truncated tcp", d: dst, pkt: pt.IPv6{Src: local, Dst: seen, Next: 6, Payload: pt.TCP(local, seen, 1, 2, 0, nil, nil)[:10]}.Build(), want: nat.Truncated},
		{name: "packet too big: quoted source too", d: dst, pkt: tooBig, want: nat.Rewritten, dst: remote, quoted: remote},
		{name: "time exceeded quoting an echo (other direction)", d: src,
			pkt:  icmp6("2001:db8:1::1", local, packet.ICMPv6TimeExceeded, 0, [4]byte{}, icmp6(local, remote, packet.ICMPv6EchoRequest, 0, [4]byte{0, 1, 0, 1}, []byte("ping"))),
			want: nat.Rewritten, quoted: seen},
		{name: "error quoting a packet with no pair", d: src, pkt: echoQuoted, want: nat.NoMatch},
		{name: "error with a quote too short", d: dst,
			pkt: icmp6(local, seen, packet.ICMPv6DestUnreach, 0, [4]byte{}, []byte("short")), want: nat.BadQuote},
		{name: "quote cut inside its TCP header", d: dst,
			pkt: icmp6(local, seen, packet.ICMPv6DestUnreach, 4, [4]byte{}, tcp6(seen, local, nil)[:50]), want: nat.Rewritten, dst: remote, quoted: remote},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := inbound6
			if tc.d == src {
				m = inbound6.Inverse()
			}
			res, out := rewrite6(t, m, tc.d, tc.pkt)
			if res != tc.want {
				t.Fatalf("%v = %v, want %v", tc.d, res, tc.want)
			}
			if res != nat.Rewritten {
				if !bytes.Equal(out, tc.pkt) {
					t.Fatalf("%v packet changed", res)
				}
				return
			}
			wantSrc, wantDst := addr6At(tc.pkt, 8), addr6At(tc.pkt, 24)
			if tc.src != "" {
				wantSrc = tc.src
			}
			if tc.dst != "" {
				wantDst = tc.dst
			}
			if s, d := addr6At(out, 8), addr6At(out, 24); s != wantSrc || d != wantDst {
				t.Errorf("%s -> %s, want %s -> %s", s, d, wantSrc, wantDst)
			}
			if tc.quoted != "" {
				off := 40 + 8 + 8 // the quoted source, for an outer destination rewrite
				if tc.d == src {
					off = 40 + 8 + 24
				}
				if q := addr6At(out, off); q != tc.quoted {
					t.Errorf("quoted address %s, want %s", q, tc.quoted)
				}
			}
			if pt.Problem6(tc.pkt) == "" {
				if p := pt.Problem6(out); p != "" {
					t.Errorf("after the rewrite: %s", p)
				}
			}
			if back, restored := rewrite6(t, m.Inverse(), tc.d, out); back != nat.Rewritten || !bytes.Equal(restored, tc.pkt) {
				t.Errorf("the inverse map (%v) did not restore the packet", back)
			}
		})
	}
}

// TestChecksumNeutral: a neutral pair rewrites addresses and no checksum byte; ChecksumNeutral
// tells such pairs apart.
func TestChecksumNeutral(t *testing.T) {
	for _, tc := range []struct {
		p    nat.Pair
		want bool
	}{
		{nat.Pair{From: pfx("fd99:1:3:2::/64"), To: pfx("fd99:1:2:3::/64")}, true},
		{nat.Pair{From: pfx("fd71:0:0:1200::/56"), To: pfx("2001:db8:244::/56")}, false},
		{nat.Pair{From: pfx("2001:db8:77::/64"), To: pfx("2001:db8:77::/64")}, true},
		// 0xfffe + 0x0001 = 0xffff, one's complement 0: the same sum as 0x0000.
		{nat.Pair{From: pfx("fffe:1::/32"), To: pfx("::/32")}, true},
		{nat.Pair{From: pfx("10.71.0.0/16"), To: pfx("10.244.0.0/16")}, false},
	} {
		if got := nat.ChecksumNeutral(tc.p); got != tc.want {
			t.Errorf("ChecksumNeutral(%v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	pkt := tcp6("2001:db8:244:1::5", "fd99:1:3:2::8", []byte("data"))
	res, out := rewrite6(t, inbound6, dst, pkt)
	if res != nat.Rewritten {
		t.Fatal(res)
	}
	if !bytes.Equal(out[40:], pkt[40:]) {
		t.Error("a checksum-neutral rewrite changed the TCP segment")
	}
}

func TestNewPrefixMap6Errors(t *testing.T) {
	for _, tc := range []struct {
		pairs []nat.Pair
		says  string
	}{
		{[]nat.Pair{{From: pfx("fd00::/64"), To: pfx("10.0.0.0/8")}}, "IPv4 prefix cannot be mapped onto an IPv6"},
		{[]nat.Pair{{From: pfx("::ffff:10.0.0.0/104"), To: pfx("::ffff:10.1.0.0/104")}}, "IPv4-mapped"},
		{[]nat.Pair{{From: pfx("fd00::1/64"), To: pfx("fd01::/64")}}, "host bits"},
		{[]nat.Pair{{From: pfx("fd00::/64"), To: pfx("fd01::/48")}}, "same length"},
		{[]nat.Pair{{From: pfx("fd00::/64"), To: pfx("fd01::/64")}, {From: pfx("fd00::/48"), To: pfx("fd02::/48")}}, "source prefixes overlap"},
	} {
		_, err := nat.NewPrefixMap(tc.pairs...)
		if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.says)) {
			t.Errorf("%v: %v, want an error saying %q", tc.pairs, err, tc.says)
		}
	}
}

func TestMap6(t *testing.T) {
	for in, want := range map[string]string{
		"fd71::1234:5678:9abc:def0:1": "2001:db8:244:34:5678:9abc:def0:1", // the /56 ends inside the 4th word
		"fd72::ffff":                  "fd00:96::ffff",
		"2001:db8:77::9":              "2001:db8:77::9",
	} {
		got, ok := inbound6.Map(netip.MustParseAddr(in))
		if !ok || got.String() != want {
			t.Errorf("Map(%s) = %s %v, want %s", in, got, ok, want)
		}
		back, ok := inbound6.Inverse().Map(got)
		if !ok || back.String() != netip.MustParseAddr(in).String() {
			t.Errorf("inverse of %s = %s %v, want %s", got, back, ok, in)
		}
	}
	if _, ok := inbound6.Map(netip.MustParseAddr("fd71::1300:0:0:1")); ok {
		t.Error("fd71:0:0:1300::1 is outside fd71:0:0:1200::/56 but was mapped")
	}
}

func TestZeroAllocs6(t *testing.T) {
	local, seen := "2001:db8:244:1::5", "fd71:0:0:1202::7"
	inv := inbound6.Inverse()
	for _, b := range [][]byte{
		tcp6(local, seen, []byte("x")),
		icmp6(local, seen, packet.ICMPv6PacketTooBig, 0, [4]byte{0, 0, 5, 0}, tcp6(seen, local, nil)),
	} {
		ip, _ := packet.ParseIPv6(b)
		if n := testing.AllocsPerRun(1000, func() {
			inbound6.RewriteDst6(ip)
			inv.RewriteDst6(ip)
		}); n != 0 {
			t.Errorf("%v allocations per rewrite, want 0", n)
		}
	}
}

// FuzzRewrite6 is FuzzRewrite for IPv6: nothing panics, a packet not rewritten is untouched, a
// rewritten one is restored by the inverse map, and checksums that verified still verify.
func FuzzRewrite6(f *testing.F) {
	local, seen := "2001:db8:244:1::5", "fd71:0:0:1202::7"
	f.Add(tcp6(local, seen, []byte("seed")), false)
	f.Add(udp6("2001:db8:244:2::7", local, []byte("seed"), false), true)
	f.Add(icmp6(local, seen, packet.ICMPv6PacketTooBig, 0, [4]byte{0, 0, 5, 0}, tcp6(seen, local, nil)), false)
	f.Add(pt.IPv6{Src: local, Dst: seen, Next: packet.ProtoFragment, Proto: 6, Ext: [][]byte{pt.FragmentHeader(64, false, 1)}, Payload: []byte("later")}.Build(), false)
	f.Add(pt.IPv6{Src: local, Dst: seen, Next: packet.ProtoRouting, Proto: 17, Ext: [][]byte{pt.RoutingHeader(0, seen)}, Payload: pt.UDP(local, seen, 1, 2, nil, false)}.Build(), false)
	outbound := inbound6.Inverse()
	f.Fuzz(func(t *testing.T, b []byte, srcDir bool) {
		if len(b) >= 40 {
			b[0] = 0x60 | b[0]&0x0f
			binary.BigEndian.PutUint16(b[4:], uint16(min(len(b)-40, 0xffff)))
		}
		if _, err := packet.ParseIPv6(append([]byte(nil), b...)); err != nil {
			return
		}
		b = b[:40+int(binary.BigEndian.Uint16(b[4:]))]
		m, d := inbound6, dst
		if srcDir {
			m, d = outbound, src
		}
		res, out := rewrite6(t, m, d, b)
		if res >= nat.NumResults {
			t.Fatalf("result %d out of range", res)
		}
		if res != nat.Rewritten {
			if !bytes.Equal(out, b) {
				t.Fatalf("%v packet modified", res)
			}
			return
		}
		if pt.Problem6(b) == "" {
			if p := pt.Problem6(out); p != "" {
				t.Fatalf("checksums verified before %s, not after: %s", d, p)
			}
		}
		if roundTrips6(m, d, b) {
			if back, restored := rewrite6(t, m.Inverse(), d, out); back != nat.Rewritten || !sameModuloZero(restored, b) {
				t.Fatalf("inverse = %v, did not restore:\n got % x\nwant % x", back, restored, b)
			}
		}
	})
}

// roundTrips6 is roundTrips for IPv6.
func roundTrips6(m *nat.PrefixMap, d direction, pkt []byte) bool {
	outer, quoted := packet.IPv6DstOffset, packet.IPv6SrcOffset
	if d == src {
		outer, quoted = quoted, outer
	}
	addrs := []netip.Addr{netip.AddrFrom16([16]byte(pkt[outer : outer+16]))}
	ip, _ := packet.ParseIPv6(pkt)
	if up, err := ip.Upper(); err == nil && up.Proto == packet.ProtoICMPv6 && !(up.Fragmented && up.FragmentOffset != 0) && len(ip) >= up.Offset+8 {
		if msg := packet.ICMPv6(ip[up.Offset:]); msg.IsError() {
			if q, err := packet.ParseIPv6Header(msg.Payload()); err == nil {
				addrs = append(addrs, netip.AddrFrom16([16]byte(q[quoted:quoted+16])))
			}
		}
	}
	for _, a := range addrs {
		if _, ok := m.Map(a); ok {
			continue
		}
		if _, ok := m.Inverse().Map(a); ok {
			return false
		}
	}
	return true
}

// BenchmarkRewriteDst6 is BenchmarkRewriteDst for IPv6, beside the IPv4 figures.
func BenchmarkRewriteDst6(b *testing.B) {
	local, seen := "2001:db8:244:1::5", "fd71:0:0:1202::7"
	for _, bc := range []struct {
		name string
		pkt  []byte
	}{
		{"tcp", tcp6(local, seen, make([]byte, 1300))},
		{"udp", udp6(local, seen, make([]byte, 1300), false)},
		{"tcp-neutral", tcp6(local, "fd99:1:3:2::8", make([]byte, 1300))},
		{"icmp-packet-too-big", icmp6(local, seen, packet.ICMPv6PacketTooBig, 0, [4]byte{0, 0, 5, 0}, tcp6(seen, local, make([]byte, 512)))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ip, err := packet.ParseIPv6(bc.pkt)
			if err != nil {
				b.Fatal(err)
			}
			inv := inbound6.Inverse()
			b.ReportAllocs()
			for b.Loop() {
				inbound6.RewriteDst6(ip)
				inv.RewriteDst6(ip)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/rewrite")
			if res := inbound6.RewriteDst6(ip); res != nat.Rewritten || pt.Problem6(ip) != "" {
				b.Fatalf("after the loop: %v %s", res, pt.Problem6(ip))
			}
		})
	}
}
