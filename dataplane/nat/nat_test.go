package nat_test

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/skein-net/skein/dataplane/nat"
	"github.com/skein-net/skein/dataplane/packet"
	pt "github.com/skein-net/skein/dataplane/packet/packettest"
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// The map of the examples: the peer's pods 10.244.0.0/16 are seen here as 10.71.0.0/16, its
// external CIDR 10.70.0.0/16 as 10.72.0.0/16, and 10.99.0.0/16 needs no remap (identity pair).
// Into the tunnel destinations go 10.71 -> 10.244 (inbound map); out of it sources go
// 10.244 -> 10.71 (its inverse).
var inbound = nat.MustPrefixMap(
	nat.Pair{From: pfx("10.71.0.0/16"), To: pfx("10.244.0.0/16")},
	nat.Pair{From: pfx("10.72.0.0/16"), To: pfx("10.70.0.0/16")},
	nat.Pair{From: pfx("10.99.0.0/16"), To: pfx("10.99.0.0/16")},
)

type direction int

const (
	dst direction = iota
	src
)

func (d direction) String() string { return [...]string{"RewriteDst", "RewriteSrc"}[d] }

func rewrite(t testing.TB, m *nat.PrefixMap, d direction, pkt []byte) (nat.Result, []byte) {
	t.Helper()
	b := append([]byte(nil), pkt...)
	ip, err := packet.ParseIPv4(b)
	if err != nil {
		t.Fatalf("test packet does not parse: %v", err)
	}
	if d == dst {
		return m.RewriteDst(ip), b
	}
	return m.RewriteSrc(ip), b
}

func tcpPkt(s, d string, data []byte) []byte {
	return pt.IPv4{Src: s, Dst: d, Proto: 6, DF: true, Payload: pt.TCP(s, d, 40000, 80, 0x18, nil, data)}.Build()
}

func udpPkt(s, d string, data []byte, zero bool) []byte {
	return pt.IPv4{Src: s, Dst: d, Proto: 17, Payload: pt.UDP(s, d, 5353, 53, data, zero)}.Build()
}

func icmpErr(s, d string, typ, code uint8, rest [4]byte, quote []byte) []byte {
	return pt.IPv4{Src: s, Dst: d, Proto: 1, Payload: pt.ICMP(typ, code, rest, quote)}.Build()
}

// gvisorProblem asks gVisor's header package, independent of ours, whether the checksums of a
// whole, unfragmented packet verify.
func gvisorProblem(pkt []byte) string {
	ip := header.IPv4(pkt)
	if !ip.IsChecksumValid() {
		return "gVisor: IPv4 header checksum"
	}
	if ip.FragmentOffset() != 0 || ip.More() {
		return ""
	}
	l4 := ip.Payload()
	s, d := ip.SourceAddress(), ip.DestinationAddress()
	switch ip.Protocol() {
	case 6:
		if len(l4) < header.TCPMinimumSize {
			return ""
		}
		seg := header.TCP(l4)
		data := l4[seg.DataOffset():]
		if !seg.IsChecksumValid(s, d, checksum.Checksum(data, 0), uint16(len(data))) {
			return "gVisor: TCP checksum"
		}
	case 17:
		if len(l4) < header.UDPMinimumSize {
			return ""
		}
		u := header.UDP(l4)
		if u.Checksum() != 0 && !u.IsChecksumValid(s, d, checksum.Checksum(u.Payload(), 0)) {
			return "gVisor: UDP checksum"
		}
	case 1:
		if len(l4) >= header.ICMPv4MinimumSize && checksum.Checksum(l4, 0) != 0xffff {
			return "gVisor: ICMP checksum"
		}
	}
	return ""
}

func addrAt(b []byte, off int) string { return netip.AddrFrom4([4]byte(b[off : off+4])).String() }

func TestRewrite(t *testing.T) {
	payload := []byte("hello, remote cluster")

	// A fragmentation-needed error from a local pod about a TCP segment the remote pod sent it;
	// the whole segment is quoted so that its checksum can be verified after translation.
	quotedTCP := tcpPkt("10.71.2.7", "10.244.1.5", payload)
	fragNeeded := icmpErr("10.244.1.5", "10.71.2.7", 3, 4, [4]byte{0, 0, 0x05, 0x3c}, quotedTCP)

	// Time exceeded quoting only the IP header and the 8 bytes of UDP header, as routers do.
	quotedUDP := udpPkt("10.71.2.7", "10.244.1.5", payload, false)
	timeExceeded := icmpErr("10.244.0.1", "10.71.2.7", 11, 0, [4]byte{}, quotedUDP[:28])

	// Time exceeded from a router in the remote cluster whose address is in no map (traceroute
	// from here): out of the tunnel only the quoted destination is translated.
	quotedOut := udpPkt("10.244.1.5", "10.244.3.3", payload, false)
	routerErr := icmpErr("192.0.2.1", "10.244.1.5", 11, 0, [4]byte{}, quotedOut[:28])

	withOptions := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 6,
		Options: []byte{7, 7, 4, 0, 0, 0, 0}, // record route, one slot
		Payload: pt.TCP("10.244.1.5", "10.71.2.7", 40000, 80, 0x02, pt.MSSOption(1460), nil)}.Build()

	full := pt.TCP("10.244.1.5", "10.71.2.7", 40000, 80, 0x18, nil, bytes.Repeat([]byte{0xa5}, 64))
	firstFrag := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 6, MF: true, Payload: full[:32]}.Build()
	laterFrag := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 6, FragOff: 32, Payload: full[32:]}.Build()

	gre := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 47, Payload: []byte{0, 0, 0x08, 0, 1, 2, 3, 4}}.Build()

	cases := []struct {
		name     string
		m        *nat.PrefixMap
		dir      direction
		pkt      []byte
		want     nat.Result
		src, dst string // outer addresses expected after the rewrite
		check    func(t *testing.T, out []byte)
	}{
		{name: "tcp", m: inbound, dir: dst, pkt: tcpPkt("10.244.1.5", "10.71.2.7", payload),
			want: nat.Rewritten, src: "10.244.1.5", dst: "10.244.2.7"},
		{name: "tcp source out of the tunnel", m: inbound.Inverse(), dir: src, pkt: tcpPkt("10.244.2.7", "10.244.1.5", payload),
			want: nat.Rewritten, src: "10.71.2.7", dst: "10.244.1.5"},
		{name: "udp", m: inbound, dir: dst, pkt: udpPkt("10.244.1.5", "10.71.2.7", payload, false),
			want: nat.Rewritten, src: "10.244.1.5", dst: "10.244.2.7"},
		{name: "udp without checksum keeps 0", m: inbound, dir: dst, pkt: udpPkt("10.244.1.5", "10.71.2.7", payload, true),
			want: nat.Rewritten, src: "10.244.1.5", dst: "10.244.2.7",
			check: func(t *testing.T, out []byte) {
				if c := binary.BigEndian.Uint16(out[26:]); c != 0 {
					t.Errorf("UDP checksum = %#04x, want 0 (none) kept", c)
				}
			}},
		{name: "icmp echo", m: inbound, dir: dst,
			pkt:  pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 1, Payload: pt.ICMP(8, 0, [4]byte{0, 1, 0, 7}, payload)}.Build(),
			want: nat.Rewritten, src: "10.244.1.5", dst: "10.244.2.7",
			check: func(t *testing.T, out []byte) {
				in := pt.ICMP(8, 0, [4]byte{0, 1, 0, 7}, payload)
				if !bytes.Equal(out[20:], in) {
					t.Errorf("echo body changed")
				}
			}},
		{name: "fragmentation needed quoting a whole tcp segment", m: inbound, dir: dst, pkt: fragNeeded,
			want: nat.Rewritten, src: "10.244.1.5", dst: "10.244.2.7",
			check: func(t *testing.T, out []byte) {
				q := out[28:]
				if got := addrAt(q, 12); got != "10.244.2.7" {
					t.Errorf("quoted source = %s, want 10.244.2.7", got)
				}
				if got := addrAt(q, 16); got != "10.244.1.5" {
					t.Errorf("quoted destination = %s, want unchanged 10.244.1.5", got)
				}
				if p := pt.Problem(q); p != "" {
					t.Errorf("quoted packet: %s", p)
				}
				if p := gvisorProblem(q); p != "" {
					t.Errorf("quoted packet: %s", p)
				}
				if mtu := binary.BigEndian.Uint16(out[26:]); mtu != 1340 {
					t.Errorf("next-hop MTU = %d, want 1340 untouched", mtu)
				}
			}},
		{name: "time exceeded quoting 8 bytes of udp", m: inbound, dir: dst, pkt: timeExceeded,
			want: nat.Rewritten, src: "10.244.0.1", dst: "10.244.2.7",
			check: func(t *testing.T, out []byte) {
				q := out[28:]
				if got := addrAt(q, 12); got != "10.244.2.7" {
					t.Errorf("quoted source = %s, want 10.244.2.7", got)
				}
				// The quoted UDP checksum covers data that is not quoted; it must equal the
				// checksum of the original datagram sent from the translated address.
				want := binary.BigEndian.Uint16(pt.UDP("10.244.2.7", "10.244.1.5", 5353, 53, payload, false)[6:])
				if got := binary.BigEndian.Uint16(q[26:]); got != want {
					t.Errorf("quoted UDP checksum = %#04x, want %#04x", got, want)
				}
			}},
		{name: "router error: outer in no map, quote translated", m: inbound.Inverse(), dir: src, pkt: routerErr,
			want: nat.Rewritten, src: "192.0.2.1", dst: "10.244.1.5",
			check: func(t *testing.T, out []byte) {
				q := out[28:]
				if got := addrAt(q, 16); got != "10.71.3.3" {
					t.Errorf("quoted destination = %s, want 10.71.3.3", got)
				}
				if got := addrAt(q, 12); got != "10.244.1.5" {
					t.Errorf("quoted source = %s, want unchanged 10.244.1.5", got)
				}
				want := binary.BigEndian.Uint16(pt.UDP("10.244.1.5", "10.71.3.3", 5353, 53, payload, false)[6:])
				if got := binary.BigEndian.Uint16(q[26:]); got != want {
					t.Errorf("quoted UDP checksum = %#04x, want %#04x", got, want)
				}
			}},
		{name: "ip options", m: inbound, dir: dst, pkt: withOptions,
			want: nat.Rewritten, src: "10.244.1.5", dst: "10.244.2.7",
			check: func(t *testing.T, out []byte) {
				if !bytes.Equal(out[20:28], withOptions[20:28]) {
					t.Errorf("options changed: % x", out[20:28])
				}
			}},
		{name: "first fragment: tcp checksum follows", m: inbound, dir: dst, pkt: firstFrag,
			want: nat.Rewritten, src: "10.244.1.5", dst: "10.244.2.7",
			check: func(t *testing.T, out []byte) {
				want := pt.TCP("10.244.1.5", "10.244.2.7", 40000, 80, 0x18, nil, bytes.Repeat([]byte{0xa5}, 64))
				if !bytes.Equal(out[20:], want[:32]) {
					t.Errorf("first fragment's TCP header is\n% x\nwant\n% x", out[20:], want[:32])
				}
			}},
		{name: "later fragment: ip header only", m: inbound, dir: dst, pkt: laterFrag,
			want: nat.Rewritten, src: "10.244.1.5", dst: "10.244.2.7",
			check: func(t *testing.T, out []byte) {
				if !bytes.Equal(out[20:], laterFrag[20:]) {
					t.Errorf("payload of a later fragment changed")
				}
			}},
		{name: "gre: ip header only", m: inbound, dir: dst, pkt: gre,
			want: nat.Rewritten, src: "10.244.1.5", dst: "10.244.2.7",
			check: func(t *testing.T, out []byte) {
				if !bytes.Equal(out[20:], gre[20:]) {
					t.Errorf("GRE payload changed")
				}
			}},
		{name: "second pair", m: inbound, dir: dst, pkt: udpPkt("10.244.1.5", "10.72.9.200", payload, false),
			want: nat.Rewritten, src: "10.244.1.5", dst: "10.70.9.200"},
		{name: "identity pair matches, changes nothing", m: inbound, dir: dst, pkt: tcpPkt("10.244.1.5", "10.99.1.1", payload),
			want: nat.Matched, src: "10.244.1.5", dst: "10.99.1.1"},
		{name: "no match", m: inbound, dir: dst, pkt: tcpPkt("10.244.1.5", "10.73.2.7", payload),
			want: nat.NoMatch, src: "10.244.1.5", dst: "10.73.2.7"},
		{name: "no match: source side is not looked at by RewriteDst", m: inbound, dir: dst, pkt: tcpPkt("10.71.2.7", "10.1.1.1", payload),
			want: nat.NoMatch, src: "10.71.2.7", dst: "10.1.1.1"},
		{name: "nil map", m: nil, dir: dst, pkt: tcpPkt("10.244.1.5", "10.71.2.7", payload),
			want: nat.NoMatch, src: "10.244.1.5", dst: "10.71.2.7"},
		{name: "truncated tcp", m: inbound, dir: dst,
			pkt:  pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 6, Payload: make([]byte, 10)}.Build(),
			want: nat.Truncated, src: "10.244.1.5", dst: "10.71.2.7"},
		{name: "truncated udp", m: inbound, dir: dst,
			pkt:  pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 17, Payload: make([]byte, 7)}.Build(),
			want: nat.Truncated, src: "10.244.1.5", dst: "10.71.2.7"},
		{name: "truncated icmp", m: inbound, dir: dst,
			pkt:  pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 1, Payload: make([]byte, 4)}.Build(),
			want: nat.Truncated, src: "10.244.1.5", dst: "10.71.2.7"},
		{name: "truncated icmp matching nothing", m: inbound, dir: dst,
			pkt:  pt.IPv4{Src: "10.244.1.5", Dst: "10.1.2.7", Proto: 1, Payload: make([]byte, 4)}.Build(),
			want: nat.NoMatch, src: "10.244.1.5", dst: "10.1.2.7"},
		{name: "icmp error with a malformed quote", m: inbound, dir: dst,
			pkt:  icmpErr("10.244.1.5", "10.71.2.7", 3, 1, [4]byte{}, []byte{0x65, 0, 0, 20, 1, 2, 3}),
			want: nat.BadQuote, src: "10.244.1.5", dst: "10.71.2.7"},
		{name: "icmp error matching nothing", m: inbound, dir: dst,
			pkt:  icmpErr("10.244.1.5", "10.1.2.7", 3, 1, [4]byte{}, udpPkt("10.1.2.7", "10.244.1.5", nil, false)),
			want: nat.NoMatch, src: "10.244.1.5", dst: "10.1.2.7"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, out := rewrite(t, tc.m, tc.dir, tc.pkt)
			if got != tc.want {
				t.Fatalf("%s = %v, want %v", tc.dir, got, tc.want)
			}
			if s, d := addrAt(out, 12), addrAt(out, 16); s != tc.src || d != tc.dst {
				t.Errorf("after %s: %s -> %s, want %s -> %s", tc.dir, s, d, tc.src, tc.dst)
			}
			if tc.want != nat.Rewritten && !bytes.Equal(out, tc.pkt) {
				t.Errorf("a %v packet was modified", got)
			}
			if p := pt.Problem(out); p != "" {
				t.Errorf("after %s: %s", tc.dir, p)
			}
			if p := gvisorProblem(out); p != "" {
				t.Errorf("after %s: %s", tc.dir, p)
			}
			if tc.check != nil {
				tc.check(t, out)
			}
			if got == nat.Rewritten {
				// The inverse map, applied in the same direction, restores every byte.
				back, restored := rewrite(t, tc.m.Inverse(), tc.dir, out)
				if back != nat.Rewritten {
					t.Errorf("inverse %s = %v, want rewritten", tc.dir, back)
				}
				if !bytes.Equal(restored, tc.pkt) {
					t.Errorf("inverse did not restore the packet:\n got % x\nwant % x", restored, tc.pkt)
				}
			}
		})
	}
}

// TestUDPComputedZero finds a datagram whose updated checksum comes out as 0 and checks that
// it is sent as 0xffff (0 would mean "no checksum").
func TestUDPComputedZero(t *testing.T) {
	oldDst, newDst := netip.MustParseAddr("10.71.2.7").As4(), netip.MustParseAddr("10.244.2.7").As4()
	for w := 0; w < 1<<16; w++ {
		data := []byte{byte(w >> 8), byte(w)}
		seg := pt.UDP("10.244.1.5", "10.71.2.7", 5353, 53, data, false)
		if packet.UpdateChecksum4(binary.BigEndian.Uint16(seg[6:]), oldDst, newDst) != 0 {
			continue
		}
		pkt := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 17, Payload: seg}.Build()
		if res, out := rewrite(t, inbound, dst, pkt); res != nat.Rewritten {
			t.Fatalf("RewriteDst = %v", res)
		} else if c := binary.BigEndian.Uint16(out[26:]); c != 0xffff {
			t.Fatalf("UDP checksum = %#04x, want 0xffff for a computed 0", c)
		} else if p := pt.Problem(out); p != "" {
			t.Fatal(p)
		}
		return
	}
	t.Fatal("no 2-byte payload gives a computed UDP checksum of 0; the search is wrong")
}

func TestNewPrefixMapErrors(t *testing.T) {
	cases := []struct {
		pairs []nat.Pair
		want  string
	}{
		{[]nat.Pair{{From: pfx("10.71.0.0/16"), To: pfx("10.244.0.0/24")}}, "same length"},
		{[]nat.Pair{{From: pfx("10.71.0.1/16"), To: pfx("10.244.0.0/16")}}, "did you mean 10.71.0.0/16"},
		{[]nat.Pair{{To: pfx("10.244.0.0/16")}}, "invalid prefix"},
		{[]nat.Pair{{From: pfx("10.71.0.0/16"), To: pfx("10.244.0.0/16")}, {From: pfx("10.71.4.0/24"), To: pfx("10.9.0.0/24")}}, "source prefixes overlap"},
		{[]nat.Pair{{From: pfx("10.71.0.0/16"), To: pfx("10.244.0.0/16")}, {From: pfx("10.72.0.0/16"), To: pfx("10.244.0.0/16")}}, "target prefixes overlap"},
	}
	for _, tc := range cases {
		_, err := nat.NewPrefixMap(tc.pairs...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewPrefixMap(%v) = %v, want an error containing %q", tc.pairs, err, tc.want)
		}
	}
	if _, err := nat.NewPrefixMap(); err != nil {
		t.Errorf("an empty map is valid: %v", err)
	}
	if _, err := nat.NewPrefixMap(nat.Pair{From: pfx("10.71.2.7/32"), To: pfx("10.244.2.7/32")}, nat.Pair{From: pfx("0.0.0.0/0"), To: pfx("0.0.0.0/0")}); err == nil {
		t.Errorf("a /0 overlaps everything and must be refused next to another pair")
	}
}

func TestMap(t *testing.T) {
	m := nat.MustPrefixMap(nat.Pair{From: pfx("10.71.2.7/32"), To: pfx("10.244.9.9/32")}, nat.Pair{From: pfx("192.168.0.0/16"), To: pfx("172.20.0.0/16")})
	for in, want := range map[string]string{
		"10.71.2.7":       "10.244.9.9",
		"192.168.255.254": "172.20.255.254",
		"10.71.2.8":       "",
	} {
		got, ok := m.Map(netip.MustParseAddr(in))
		if want == "" {
			if ok || got.String() != in {
				t.Errorf("Map(%s) = %s, %v; want unchanged, false", in, got, ok)
			}
			continue
		}
		if !ok || got.String() != want {
			t.Errorf("Map(%s) = %s, %v; want %s, true", in, got, ok, want)
		}
	}
	if got := m.Inverse().Pairs(); got[0].From != pfx("10.244.9.9/32") || got[1].To != pfx("192.168.0.0/16") {
		t.Errorf("Inverse().Pairs() = %v", got)
	}
}

func TestZeroAllocs(t *testing.T) {
	pkts := [][]byte{
		tcpPkt("10.244.1.5", "10.71.2.7", []byte("x")),
		icmpErr("10.244.1.5", "10.71.2.7", 3, 4, [4]byte{0, 0, 5, 0x3c}, tcpPkt("10.71.2.7", "10.244.1.5", nil)),
	}
	inv := inbound.Inverse()
	for _, b := range pkts {
		ip, _ := packet.ParseIPv4(b)
		if n := testing.AllocsPerRun(1000, func() {
			inbound.RewriteDst(ip)
			inv.RewriteDst(ip)
		}); n != 0 {
			t.Errorf("%v allocations per rewrite, want 0", n)
		}
	}
}

// sameModuloZero reports whether a and b are equal except for 16-bit words where one holds
// 0x0000 and the other 0xffff: the two forms of one's complement zero, which a checksum field
// with arbitrary (fuzzed) contents may switch between after an update and its inverse.
func sameModuloZero(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if a[i] == b[i] {
			continue
		}
		j := i &^ 1
		if j+1 >= len(a) {
			return false
		}
		x, y := binary.BigEndian.Uint16(a[j:]), binary.BigEndian.Uint16(b[j:])
		if x^y != 0xffff || (x != 0 && y != 0) {
			return false
		}
		i = j + 1
	}
	return true
}

// FuzzRewrite feeds arbitrary packets (with their IPv4 header checksum fixed so they get past
// parsing) to both directions: nothing may panic; a packet not rewritten is untouched; a
// rewritten one is restored by the inverse map; and if its checksums verified before, they
// verify after.
func FuzzRewrite(f *testing.F) {
	f.Add(tcpPkt("10.244.1.5", "10.71.2.7", []byte("seed")), false)
	f.Add(udpPkt("10.244.2.7", "10.244.1.5", []byte("seed"), false), true)
	f.Add(icmpErr("10.244.1.5", "10.71.2.7", 3, 4, [4]byte{0, 0, 5, 0x3c}, tcpPkt("10.71.2.7", "10.244.1.5", nil)), false)
	f.Add(icmpErr("192.0.2.1", "10.244.1.5", 11, 0, [4]byte{}, udpPkt("10.244.1.5", "10.244.3.3", nil, false)[:28]), true)
	f.Add(pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 6, FragOff: 64, Payload: []byte("later")}.Build(), false)
	outbound := inbound.Inverse()
	f.Fuzz(func(t *testing.T, b []byte, srcDir bool) {
		if len(b) >= 20 && b[0]>>4 == 4 {
			hl := int(b[0]&0x0f) * 4
			if hl >= 20 && hl <= len(b) {
				b[10], b[11] = 0, 0
				binary.BigEndian.PutUint16(b[10:], packet.Checksum(b[:hl]))
			}
		}
		if _, err := packet.ParseIPv4(append([]byte(nil), b...)); err != nil {
			return
		}
		m, d := inbound, dst
		if srcDir {
			m, d = outbound, src
		}
		res, out := rewrite(t, m, d, b)
		if res >= nat.NumResults {
			t.Fatalf("result %d out of range", res)
		}
		if res != nat.Rewritten {
			if !bytes.Equal(out, b) {
				t.Fatalf("%v packet modified", res)
			}
			return
		}
		if pt.Problem(b) == "" {
			if p := pt.Problem(out); p != "" {
				t.Fatalf("checksums verified before %s, not after: %s", d, p)
			}
		}
		if roundTrips(m, d, b) {
			if back, restored := rewrite(t, m.Inverse(), d, out); back != nat.Rewritten || !sameModuloZero(restored, b) {
				t.Fatalf("inverse = %v, did not restore:\n got % x\nwant % x", back, restored, b)
			}
		}
	})
}

// roundTrips reports whether the inverse of m must restore pkt after m rewrote it: not when an
// address m left alone (matched by no pair of m) is one the inverse maps, as it then maps an
// address m never produced.
func roundTrips(m *nat.PrefixMap, d direction, pkt []byte) bool {
	outer, quoted := 16, 12
	if d == src {
		outer, quoted = 12, 16
	}
	addrs := []netip.Addr{netip.AddrFrom4([4]byte(pkt[outer : outer+4]))}
	ip, _ := packet.ParseIPv4(pkt)
	if ip.Protocol() == packet.ProtoICMP && ip.FragmentOffset() == 0 && len(ip.Payload()) >= 8 {
		if msg := packet.ICMPv4(ip.Payload()); msg.IsError() {
			if q, err := packet.ParseIPv4Header(msg.Payload()); err == nil {
				addrs = append(addrs, netip.AddrFrom4([4]byte(q[quoted:quoted+4])))
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

// BenchmarkRewriteDst translates a TCP packet's destination and back (two rewrites per
// iteration, reported per rewrite).
func BenchmarkRewriteDst(b *testing.B) {
	for _, bc := range []struct {
		name string
		pkt  []byte
	}{
		{"tcp", tcpPkt("10.244.1.5", "10.71.2.7", make([]byte, 1300))},
		{"udp", udpPkt("10.244.1.5", "10.71.2.7", make([]byte, 1300), false)},
		{"icmp-frag-needed", icmpErr("10.244.1.5", "10.71.2.7", 3, 4, [4]byte{0, 0, 5, 0x3c}, tcpPkt("10.71.2.7", "10.244.1.5", make([]byte, 512)))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ip, err := packet.ParseIPv4(bc.pkt)
			if err != nil {
				b.Fatal(err)
			}
			inv := inbound.Inverse()
			b.ReportAllocs()
			for b.Loop() {
				inbound.RewriteDst(ip)
				inv.RewriteDst(ip)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/rewrite")
			if res := inbound.RewriteDst(ip); res != nat.Rewritten || pt.Problem(ip) != "" {
				b.Fatalf("after the loop: %v %s", res, pt.Problem(ip))
			}
		})
	}
}
