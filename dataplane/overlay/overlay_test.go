package overlay_test

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"github.com/skein-net/skein/dataplane/overlay"
	"github.com/skein-net/skein/dataplane/packet"
	pt "github.com/skein-net/skein/dataplane/packet/packettest"
)

var (
	gwMAC   = packet.MAC{0x02, 0x5e, 0x00, 0x00, 0x00, 0x01}
	nodeMAC = packet.MAC{0x02, 0x5e, 0x00, 0x00, 0x00, 0x42}
	gwIP    = netip.MustParseAddr("10.80.0.1")
	node1   = netip.MustParseAddr("192.168.10.11")
	node2   = netip.MustParseAddr("192.168.10.12")
	vni     = uint32(18952)
)

func vtep(t testing.TB, kind overlay.Kind) *overlay.VTEP {
	t.Helper()
	v, err := overlay.New(overlay.Config{Kind: kind, VNI: vni, MAC: gwMAC, IP: gwIP, Peers: []netip.Addr{node1, node2}})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// frame builds a datagram as a node would send it: overlay header (by hand, independent of
// PutHeader), Ethernet, payload.
func frame(kind overlay.Kind, vni uint32, dst, src packet.MAC, etherType uint16, payload []byte) []byte {
	b := make([]byte, 8, 8+14+len(payload))
	if kind == overlay.Geneve {
		binary.BigEndian.PutUint16(b[2:], 0x6558)
	} else {
		b[0] = 0x08
	}
	binary.BigEndian.PutUint32(b[4:], vni<<8)
	b = append(b, dst[:]...)
	b = append(b, src[:]...)
	b = binary.BigEndian.AppendUint16(b, etherType)
	return append(b, payload...)
}

func arpRequest(target string) []byte {
	b := make([]byte, packet.ARPLen)
	packet.PutARP(b, packet.ARPRequest, nodeMAC, netip.MustParseAddr("10.80.0.7").As4(), packet.MAC{}, netip.MustParseAddr(target).As4())
	return b
}

func decap(v *overlay.VTEP, src netip.Addr, d []byte) ([]byte, overlay.Result) {
	if len(d) < overlay.HeaderLen {
		return v.Decap(src, d, nil)
	}
	return v.Decap(src, d[:overlay.HeaderLen], d[overlay.HeaderLen:])
}

func TestDecap(t *testing.T) {
	ip := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 17, Payload: pt.UDP("10.244.1.5", "10.71.2.7", 1, 2, []byte("x"), false)}.Build()
	for _, kind := range []overlay.Kind{overlay.VXLAN, overlay.Geneve} {
		t.Run(kind.String(), func(t *testing.T) {
			v := vtep(t, kind)
			cases := []struct {
				name string
				src  netip.Addr
				d    []byte
				want overlay.Result
			}{
				{"ipv4 to our mac", node1, frame(kind, vni, gwMAC, nodeMAC, packet.EtherTypeIPv4, ip), overlay.Deliver},
				{"second node", node2, frame(kind, vni, gwMAC, nodeMAC, packet.EtherTypeIPv4, ip), overlay.Deliver},
				{"unknown vtep", netip.MustParseAddr("192.168.10.99"), frame(kind, vni, gwMAC, nodeMAC, packet.EtherTypeIPv4, ip), overlay.DropUnknownPeer},
				{"wrong vni", node1, frame(kind, vni+1, gwMAC, nodeMAC, packet.EtherTypeIPv4, ip), overlay.DropVNI},
				{"another mac", node1, frame(kind, vni, nodeMAC, nodeMAC, packet.EtherTypeIPv4, ip), overlay.DropNotForUs},
				{"broadcast ipv4", node1, frame(kind, vni, packet.Broadcast, nodeMAC, packet.EtherTypeIPv4, ip), overlay.DropNotForUs},
				{"ipv6", node1, frame(kind, vni, gwMAC, nodeMAC, packet.EtherTypeIPv6, ip), overlay.Deliver},
				{"ipv6 multicast (neighbour discovery)", node1, frame(kind, vni, packet.MAC{0x33, 0x33, 0xff, 0, 0, 1}, nodeMAC, packet.EtherTypeIPv6, ip), overlay.DropNotForUs},
				{"another ethertype", node1, frame(kind, vni, gwMAC, nodeMAC, 0x88cc, make([]byte, 40)), overlay.DropEtherType},
				{"truncated", node1, frame(kind, vni, gwMAC, nodeMAC, packet.EtherTypeIPv4, nil)[:20], overlay.DropMalformed},
				{"arp for us", node1, frame(kind, vni, packet.Broadcast, nodeMAC, packet.EtherTypeARP, arpRequest("10.80.0.1")), overlay.Reply},
				{"arp for us, unicast", node1, frame(kind, vni, gwMAC, nodeMAC, packet.EtherTypeARP, arpRequest("10.80.0.1")), overlay.Reply},
				{"arp for another ip", node1, frame(kind, vni, packet.Broadcast, nodeMAC, packet.EtherTypeARP, arpRequest("10.80.0.2")), overlay.DropNotForUs},
				{"arp truncated", node1, frame(kind, vni, packet.Broadcast, nodeMAC, packet.EtherTypeARP, arpRequest("10.80.0.1")[:20]), overlay.DropARP},
			}
			if kind == overlay.VXLAN {
				noI := frame(kind, vni, gwMAC, nodeMAC, packet.EtherTypeIPv4, ip)
				noI[0] = 0
				cases = append(cases, struct {
					name string
					src  netip.Addr
					d    []byte
					want overlay.Result
				}{"vxlan without I flag", node1, noI, overlay.DropMalformed})
			} else {
				oam := frame(kind, vni, gwMAC, nodeMAC, packet.EtherTypeIPv4, ip)
				oam[1] = 0x80
				crit := frame(kind, vni, gwMAC, nodeMAC, packet.EtherTypeIPv4, ip)
				crit[1] = 0x40
				v1 := frame(kind, vni, gwMAC, nodeMAC, packet.EtherTypeIPv4, ip)
				v1[0] = 0x40
				ipProto := frame(kind, vni, gwMAC, nodeMAC, packet.EtherTypeIPv4, ip)
				binary.BigEndian.PutUint16(ipProto[2:], 0x0800)
				for _, c := range []struct {
					name string
					d    []byte
					want overlay.Result
				}{{"geneve oam", oam, overlay.DropGeneveControl}, {"geneve critical", crit, overlay.DropGeneveControl}, {"geneve version 1", v1, overlay.DropMalformed}, {"geneve ip payload", ipProto, overlay.DropEtherType}} {
					cases = append(cases, struct {
						name string
						src  netip.Addr
						d    []byte
						want overlay.Result
					}{c.name, node1, c.d, c.want})
				}
			}
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					orig := append([]byte(nil), tc.d...)
					out, got := decap(v, tc.src, tc.d)
					if got != tc.want {
						t.Fatalf("Decap = %v, want %v", got, tc.want)
					}
					switch got {
					case overlay.Deliver:
						if !bytes.Equal(out, ip) {
							t.Errorf("inner packet % x, want % x", out, ip)
						}
					case overlay.Reply:
						checkARPReply(t, kind, tc.d[:overlay.HeaderLen], out)
					default:
						if out != nil || !bytes.Equal(tc.d, orig) {
							t.Errorf("a dropped datagram was changed or returned")
						}
					}
				})
			}
		})
	}
}

// checkARPReply decodes the reply with gopacket, an independent decoder.
func checkARPReply(t *testing.T, kind overlay.Kind, head, arp []byte) {
	t.Helper()
	d := append(append([]byte(nil), head...), arp...)
	first := layers.LayerTypeVXLAN
	if kind == overlay.Geneve {
		first = layers.LayerTypeGeneve
	}
	p := gopacket.NewPacket(d, first, gopacket.Default)
	if el := p.ErrorLayer(); el != nil {
		t.Fatalf("gopacket: %v", el.Error())
	}
	eth, _ := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	a, _ := p.Layer(layers.LayerTypeARP).(*layers.ARP)
	if eth == nil || a == nil {
		t.Fatalf("gopacket found no Ethernet/ARP in % x", d)
	}
	if !bytes.Equal(eth.DstMAC, nodeMAC[:]) || !bytes.Equal(eth.SrcMAC, gwMAC[:]) {
		t.Errorf("reply Ethernet %s -> %s, want %s -> %s", eth.SrcMAC, eth.DstMAC, overlay.MACString(gwMAC), overlay.MACString(nodeMAC))
	}
	if a.Operation != layers.ARPReply || !bytes.Equal(a.SourceHwAddress, gwMAC[:]) || !bytes.Equal(a.SourceProtAddress, gwIP.AsSlice()) ||
		!bytes.Equal(a.DstHwAddress, nodeMAC[:]) || net.IP(a.DstProtAddress).String() != "10.80.0.7" {
		t.Errorf("reply ARP %+v", a)
	}
}

// TestGeneveOptions: a Geneve datagram with options (non-critical) is decapsulated; the inner
// packet is moved to the start of body.
func TestGeneveOptions(t *testing.T) {
	v := vtep(t, overlay.Geneve)
	ip := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 1, Payload: pt.ICMP(8, 0, [4]byte{}, []byte("ping"))}.Build()
	for _, words := range []int{1, 3, 4, 5, 16} {
		opts := make([]byte, 4*words)
		binary.BigEndian.PutUint16(opts, 0x0102) // class
		opts[2] = 0x03                           // type, not critical
		opts[3] = byte(words - 1)                // length in words
		d := frame(overlay.Geneve, vni, gwMAC, nodeMAC, packet.EtherTypeIPv4, ip)
		d = append(d[:8], append(opts, d[8:]...)...)
		d[0] = byte(words)
		pristine := append([]byte(nil), d...)
		// gopacket agrees this is well formed.
		p := gopacket.NewPacket(d, layers.LayerTypeGeneve, gopacket.Default)
		if el := p.ErrorLayer(); el != nil {
			t.Fatalf("%d option words: gopacket: %v", words, el.Error())
		}
		out, res := decap(v, node1, d)
		if res != overlay.Deliver || !bytes.Equal(out, ip) {
			t.Errorf("%d option words: %v, inner % x, want deliver % x", words, res, out, ip)
		}
		arp := frame(overlay.Geneve, vni, packet.Broadcast, nodeMAC, packet.EtherTypeARP, arpRequest("10.80.0.1"))
		arp = append(arp[:8], append(append([]byte(nil), opts...), arp[8:]...)...)
		arp[0] = byte(words)
		out, res = decap(v, node1, arp)
		if res != overlay.Reply {
			t.Fatalf("%d option words: ARP %v", words, res)
		}
		checkARPReply(t, overlay.Geneve, arp[:overlay.HeaderLen], out)
		if short := pristine[:overlay.HeaderLen+4*words-15]; words > 4 {
			if _, res := decap(v, node1, short); res != overlay.DropMalformed {
				t.Errorf("%d option words, truncated: %v", words, res)
			}
		}
	}
}

// TestEncapDecodesIndependently: what PutHeader writes in front of a packet is read back by
// gopacket as the right VNI, MACs and inner packet, and by our own Decap as the same packet.
func TestEncapDecodesIndependently(t *testing.T) {
	ip := pt.IPv4{Src: "10.72.1.5", Dst: "10.244.2.7", Proto: 6, Payload: pt.TCP("10.72.1.5", "10.244.2.7", 1, 2, 0x02, pt.MSSOption(1300), nil)}.Build()
	for _, kind := range []overlay.Kind{overlay.VXLAN, overlay.Geneve} {
		v := vtep(t, kind)
		buf := make([]byte, 64+len(ip))
		copy(buf[64:], ip)
		v.PutHeader(buf[64-overlay.HeaderLen:64], nodeMAC, packet.EtherTypeIPv4)
		d := buf[64-overlay.HeaderLen:]

		first := layers.LayerTypeVXLAN
		if kind == overlay.Geneve {
			first = layers.LayerTypeGeneve
		}
		p := gopacket.NewPacket(d, first, gopacket.Default)
		if el := p.ErrorLayer(); el != nil {
			t.Fatalf("%v: gopacket: %v", kind, el.Error())
		}
		switch kind {
		case overlay.VXLAN:
			vx := p.Layer(layers.LayerTypeVXLAN).(*layers.VXLAN)
			if !vx.ValidIDFlag || vx.VNI != vni {
				t.Errorf("VXLAN header %+v", vx)
			}
		case overlay.Geneve:
			g := p.Layer(layers.LayerTypeGeneve).(*layers.Geneve)
			if g.Version != 0 || g.VNI != vni || g.Protocol != layers.EthernetTypeTransparentEthernetBridging || g.OAMPacket || g.CriticalOption || g.OptionsLength != 0 {
				t.Errorf("Geneve header %+v", g)
			}
		}
		eth := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
		if !bytes.Equal(eth.SrcMAC, gwMAC[:]) || !bytes.Equal(eth.DstMAC, nodeMAC[:]) || eth.EthernetType != layers.EthernetTypeIPv4 {
			t.Errorf("%v: Ethernet %s -> %s type %v", kind, eth.SrcMAC, eth.DstMAC, eth.EthernetType)
		}
		l4, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		if l4 == nil || l4.SrcIP.String() != "10.72.1.5" || l4.DstIP.String() != "10.244.2.7" {
			t.Errorf("%v: inner IPv4 %+v", kind, l4)
		}

		// The receiving side of another VTEP (the node's, with the roles swapped) decaps it.
		node, err := overlay.New(overlay.Config{Kind: kind, VNI: vni, MAC: nodeMAC, IP: netip.MustParseAddr("10.80.0.7"), Peers: []netip.Addr{gwIP}})
		if err != nil {
			t.Fatal(err)
		}
		if out, res := decap(node, gwIP, d); res != overlay.Deliver || !bytes.Equal(out, ip) {
			t.Errorf("%v: decap of our own encap: %v", kind, res)
		}
	}
}

func TestNewErrors(t *testing.T) {
	good := overlay.Config{Kind: overlay.VXLAN, VNI: 1, MAC: gwMAC, IP: gwIP}
	cases := []struct {
		mut  func(*overlay.Config)
		want string
	}{
		{func(c *overlay.Config) { c.Kind = 0 }, "want vxlan or geneve"},
		{func(c *overlay.Config) { c.VNI = 1 << 24 }, "24 bits"},
		{func(c *overlay.Config) { c.IP = netip.Addr{} }, "IPv4"},
		{func(c *overlay.Config) { c.MAC = packet.MAC{} }, "non-zero unicast"},
		{func(c *overlay.Config) { c.MAC = packet.Broadcast }, "non-zero unicast"},
		{func(c *overlay.Config) { c.Peers = []netip.Addr{{}} }, "not a plain IP"},
	}
	for _, tc := range cases {
		c := good
		tc.mut(&c)
		if _, err := overlay.New(c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want error containing %q", c, err, tc.want)
		}
	}
	if _, err := overlay.New(good); err != nil {
		t.Errorf("New(%+v): %v", good, err)
	}
	if k, err := overlay.ParseKind("Geneve"); err != nil || k != overlay.Geneve || k.DefaultPort() != 6081 {
		t.Errorf("ParseKind(Geneve) = %v, %v", k, err)
	}
	if _, err := overlay.ParseKind("gre"); err == nil {
		t.Errorf("ParseKind(gre) accepted")
	}
	if m, err := overlay.ParseMAC("02:5E:00:00:00:01"); err != nil || m != gwMAC {
		t.Errorf("ParseMAC = %v, %v", m, err)
	}
	for _, bad := range []string{"02:5e:00:00:00", "00:00:00:00:fe:80:00:00:00:00:00:00:02:00:5e:10", "zz:5e:00:00:00:01"} {
		if _, err := overlay.ParseMAC(bad); err == nil {
			t.Errorf("ParseMAC(%q) accepted", bad)
		}
	}
}

func TestDecapAllocs(t *testing.T) {
	ip := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 17, Payload: pt.UDP("10.244.1.5", "10.71.2.7", 1, 2, make([]byte, 1372), false)}.Build()
	for _, kind := range []overlay.Kind{overlay.VXLAN, overlay.Geneve} {
		v := vtep(t, kind)
		d := frame(kind, vni, gwMAC, nodeMAC, packet.EtherTypeIPv4, ip)
		arp := frame(kind, vni, packet.Broadcast, nodeMAC, packet.EtherTypeARP, arpRequest("10.80.0.1"))
		if n := testing.AllocsPerRun(1000, func() {
			decap(v, node1, d)
			v.PutHeader(d[:overlay.HeaderLen], gwMAC, packet.EtherTypeIPv4)
			decap(v, node1, arp)
		}); n != 0 {
			t.Errorf("%v: %v allocations per decap/encap", kind, n)
		}
	}
}

// FuzzDecap: arbitrary datagrams never panic; a delivered packet lies within the datagram;
// an encapsulated packet decapsulates to itself.
func FuzzDecap(f *testing.F) {
	ip := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 17, Payload: pt.UDP("10.244.1.5", "10.71.2.7", 1, 2, []byte("x"), false)}.Build()
	for _, kind := range []overlay.Kind{overlay.VXLAN, overlay.Geneve} {
		f.Add(frame(kind, vni, gwMAC, nodeMAC, packet.EtherTypeIPv4, ip), kind == overlay.Geneve)
		f.Add(frame(kind, vni, packet.Broadcast, nodeMAC, packet.EtherTypeARP, arpRequest("10.80.0.1")), kind == overlay.Geneve)
	}
	vx, gn := vtep(f, overlay.VXLAN), vtep(f, overlay.Geneve)
	f.Fuzz(func(t *testing.T, d []byte, geneve bool) {
		v := vx
		if geneve {
			v = gn
		}
		d = append([]byte(nil), d...)
		out, res := decap(v, node1, d)
		if res >= overlay.NumResults {
			t.Fatalf("result %d", res)
		}
		if (res == overlay.Deliver || res == overlay.Reply) && len(out) > len(d) {
			t.Fatalf("returned %d bytes from a %d-byte datagram", len(out), len(d))
		}
		if res == overlay.Reply && len(out) != packet.ARPLen {
			t.Fatalf("ARP reply of %d bytes", len(out))
		}
		// Encap then decap is the identity on any payload.
		buf := make([]byte, overlay.HeaderLen+len(d))
		copy(buf[overlay.HeaderLen:], d)
		v.PutHeader(buf[:overlay.HeaderLen], gwMAC, packet.EtherTypeIPv4)
		if out, res := decap(v, node2, buf); res != overlay.Deliver || !bytes.Equal(out, d) {
			t.Fatalf("encap+decap = %v, % x; want deliver % x", res, out, d)
		}
	})
}

func BenchmarkDecap(b *testing.B) {
	ip := pt.IPv4{Src: "10.244.1.5", Dst: "10.71.2.7", Proto: 17, Payload: pt.UDP("10.244.1.5", "10.71.2.7", 1, 2, make([]byte, 1372), false)}.Build()
	for _, kind := range []overlay.Kind{overlay.VXLAN, overlay.Geneve} {
		b.Run(kind.String(), func(b *testing.B) {
			v := vtep(b, kind)
			d := frame(kind, vni, gwMAC, nodeMAC, packet.EtherTypeIPv4, ip)
			b.ReportAllocs()
			for b.Loop() {
				if _, res := v.Decap(node1, d[:overlay.HeaderLen], d[overlay.HeaderLen:]); res != overlay.Deliver {
					b.Fatal(res)
				}
			}
		})
	}
}

func BenchmarkEncap(b *testing.B) {
	for _, kind := range []overlay.Kind{overlay.VXLAN, overlay.Geneve} {
		b.Run(kind.String(), func(b *testing.B) {
			v := vtep(b, kind)
			head := make([]byte, overlay.HeaderLen)
			b.ReportAllocs()
			for b.Loop() {
				v.PutHeader(head, nodeMAC, packet.EtherTypeIPv4)
			}
		})
	}
}
