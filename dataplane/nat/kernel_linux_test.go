package nat_test

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skein-net/skein/dataplane/nat"
	"github.com/skein-net/skein/dataplane/packet"
	"github.com/skein-net/skein/internal/netnstest"
)

// TestKernelNAT6: the IPv6 NAT writes the same bytes as the Linux kernel's nftables prefix NAT
// ("dnat ip6 prefix to", NETMAP) for the same packets, checksums included. A namespace forwards
// between two veths with the rule in prerouting; packets go in on one side as raw frames and
// are read off the other, and each is compared with RewriteDst6 of the packet sent (the kernel
// also decrements the hop limit, which the NAT leaves to the forwarding path).
func TestKernelNAT6(t *testing.T) {
	netnstest.RequireRoot(t)
	src, router, dst := netnstest.New(t, "nat6-src"), netnstest.New(t, "nat6-nat"), netnstest.New(t, "nat6-dst")
	for _, ns := range []*netnstest.NS{src, router, dst} {
		ns.Run(t, "sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0")
	}
	router.Run(t, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
	for _, l := range []struct {
		ns   *netnstest.NS
		name string
	}{{src, "in"}, {dst, "out"}} {
		router.Run(t, "ip", "link", "add", l.name, "type", "veth", "peer", "name", l.name, "netns", l.ns.Name)
		router.Run(t, "ip", "link", "set", l.name, "up")
		l.ns.Run(t, "ip", "link", "set", l.name, "up")
	}
	router.Run(t, "ip", "-6", "addr", "add", "fd00:a::1/64", "dev", "in", "nodad")
	router.Run(t, "ip", "-6", "addr", "add", "fd00:b::1/64", "dev", "out", "nodad")
	dstMAC := strings.TrimSpace(dst.Run(t, "cat", "/sys/class/net/out/address"))
	routerMAC, err := net.ParseMAC(strings.TrimSpace(router.Run(t, "cat", "/sys/class/net/in/address")))
	if err != nil {
		t.Fatal(err)
	}
	// Everything the rule sends on goes to dst, whose MAC is known (no neighbour discovery).
	router.Run(t, "ip", "-6", "route", "add", "2001:db8:244::/56", "via", "fd00:b::2", "dev", "out")
	router.Run(t, "ip", "-6", "route", "add", "fd99:1:2:3::/64", "via", "fd00:b::2", "dev", "out")
	router.Run(t, "ip", "-6", "neigh", "replace", "fd00:b::2", "lladdr", dstMAC, "dev", "out", "nud", "permanent")
	rules := `table ip6 skein_nat6_test {
	chain pre {
		type nat hook prerouting priority dstnat; policy accept;
		ip6 daddr fd71:0:0:1200::/56 dnat ip6 prefix to 2001:db8:244::/56
		ip6 daddr fd99:1:3:2::/64 dnat ip6 prefix to fd99:1:2:3::/64
	}
}`
	if out, err := router.Try("sh", "-c", "nft -f - <<'EOF'\n"+rules+"\nEOF"); err != nil {
		if strings.Contains(out, "Could not process rule") || strings.Contains(out, "not supported") {
			t.Skipf("the kernel has no IPv6 prefix NAT (nf_nat, nft_nat with NF_NAT_RANGE_NETMAP): %s", out)
		}
		t.Fatalf("nft: %v: %s", err, out)
	}
	m := nat.MustPrefixMap(
		nat.Pair{From: pfx("fd71:0:0:1200::/56"), To: pfx("2001:db8:244::/56")},
		nat.Pair{From: pfx("fd99:1:3:2::/64"), To: pfx("fd99:1:2:3::/64")},
	)

	send := rawSocket(t, src, "in")
	recv := rawSocket(t, dst, "out")
	local, seen := "fd00:a::2", "fd71:0:0:1202::7"
	// The way back, for the ICMPv6 error: src's MAC for local, known without discovery.
	srcMAC := strings.TrimSpace(src.Run(t, "cat", "/sys/class/net/in/address"))
	router.Run(t, "ip", "-6", "neigh", "replace", local, "lladdr", srcMAC, "dev", "in", "nud", "permanent")
	routerOutMAC, err := net.ParseMAC(strings.TrimSpace(router.Run(t, "cat", "/sys/class/net/out/address")))
	if err != nil {
		t.Fatal(err)
	}
	recvIn := rawSocket(t, src, "in")
	sendBack := rawSocket(t, dst, "out")
	for i, tc := range []struct {
		name string
		pkt  []byte
	}{
		{"tcp syn", pt6TCP(local, seen, 40001, packet.TCPFlagSYN, []byte("syn with data"))},
		{"udp", udp6(local, seen, []byte("a datagram through the kernel's NAT"), false)},
		{"udp, odd length", udp6(local, seen, []byte("odd"), false)},
		{"echo request", icmp6(local, seen, packet.ICMPv6EchoRequest, 0, [4]byte{0x12, 0x34, 0, 1}, []byte("ping over IPv6"))},
		{"checksum-neutral pair", pt6TCP(local, "fd99:1:3:2::8", 40002, packet.TCPFlagSYN, nil)},
		{"host bits in the prefix's last word", udp6(local, "fd71:0:0:12ff:ffff:ffff:ffff:fffe", []byte("x"), false)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frame := append(append(append([]byte{}, routerMAC...), 2, 0, 0, 0, 0, byte(i+1)), 0x86, 0xdd)
			frame = append(frame, tc.pkt...)
			if err := unix.Sendto(send.fd, frame, 0, &unix.SockaddrLinklayer{Ifindex: send.ifindex, Halen: 6, Protocol: htons(unix.ETH_P_IPV6)}); err != nil {
				t.Fatal(err)
			}
			got := recv.next(t, tc.pkt[packet.IPv6SrcOffset:packet.IPv6SrcOffset+16])
			want := append([]byte(nil), tc.pkt...)
			ip, _ := packet.ParseIPv6(want)
			if res := m.RewriteDst6(ip); res != nat.Rewritten {
				t.Fatalf("RewriteDst6 = %v", res)
			}
			ip.SetHopLimit(ip.HopLimit() - 1)
			if !bytes.Equal(got, want) {
				t.Errorf("the kernel wrote\n% x\nRewriteDst6 wrote\n% x", got, want)
			}
		})
	}
	// An error about a translated packet comes back translated: its source, and the quoted
	// packet's destination with the quoted UDP checksum, and the ICMPv6 checksum over both.
	t.Run("destination unreachable quoting a translated datagram", func(t *testing.T) {
		got, want := icmpErrorThroughKernel(t, m, send, recv, sendBack, recvIn, routerMAC, routerOutMAC, local, seen)
		if !bytes.Equal(got, want) {
			t.Errorf("the kernel wrote\n% x\nRewriteSrc6 wrote\n% x", got, want)
		}
	})
}

// icmpErrorThroughKernel sends a UDP datagram from local to seen through the kernel's NAT,
// then from the real pod behind it an ICMPv6 destination unreachable quoting the datagram as it
// arrived, and returns what the kernel forwards back and what RewriteSrc6 of the inverse map
// makes of the same error.
func icmpErrorThroughKernel(t *testing.T, m *nat.PrefixMap, send, recvOut, sendBack, recvIn rawSock, routerIn, routerOut net.HardwareAddr, local, seen string) (got, want []byte) {
	t.Helper()
	dgram := udp6(local, seen, []byte("to a closed port"), false)
	frame := append(append(append([]byte{}, routerIn...), 2, 0, 0, 0, 0, 0x10), 0x86, 0xdd)
	if err := unix.Sendto(send.fd, append(frame, dgram...), 0, &unix.SockaddrLinklayer{Ifindex: send.ifindex, Halen: 6, Protocol: htons(unix.ETH_P_IPV6)}); err != nil {
		t.Fatal(err)
	}
	arrived := recvOut.next(t, dgram[packet.IPv6SrcOffset:packet.IPv6SrcOffset+16])
	real := packet.IPv6(arrived).DstAddr().String()
	unreach := icmp6(real, local, packet.ICMPv6DestUnreach, 4, [4]byte{}, arrived)
	frame = append(append(append([]byte{}, routerOut...), 2, 0, 0, 0, 0, 0x11), 0x86, 0xdd)
	if err := unix.Sendto(sendBack.fd, append(frame, unreach...), 0, &unix.SockaddrLinklayer{Ifindex: sendBack.ifindex, Halen: 6, Protocol: htons(unix.ETH_P_IPV6)}); err != nil {
		t.Fatal(err)
	}
	seenAddr := netip.MustParseAddr(seen).As16()
	got = recvIn.next(t, seenAddr[:])
	want = append([]byte(nil), unreach...)
	ip, _ := packet.ParseIPv6(want)
	if res := m.Inverse().RewriteSrc6(ip); res != nat.Rewritten {
		t.Fatalf("RewriteSrc6 = %v", res)
	}
	ip.SetHopLimit(ip.HopLimit() - 1)
	return got, want
}

func pt6TCP(s, d string, sport uint16, flags uint8, data []byte) []byte {
	b := tcp6(s, d, data)
	// tcp6 builds a PSH/ACK from port 40000; conntrack takes a new connection from a SYN.
	l4 := b[packet.IPv6HeaderLen:]
	binary.BigEndian.PutUint16(l4[0:], sport)
	old := binary.BigEndian.Uint16(l4[12:])
	l4[13] = flags
	c := packet.UpdateChecksum2(binary.BigEndian.Uint16(l4[16:]), 40000, sport)
	c = packet.UpdateChecksum2(c, old, binary.BigEndian.Uint16(l4[12:]))
	binary.BigEndian.PutUint16(l4[16:], c)
	return b
}

type rawSock struct {
	fd, ifindex int
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// rawSocket opens an AF_PACKET socket for IPv6 frames on the link name in ns, closed when t
// ends.
func rawSocket(t *testing.T, ns *netnstest.NS, name string) rawSock {
	t.Helper()
	var s rawSock
	if err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(name)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_IPV6)))
		if err != nil {
			return err
		}
		s = rawSock{fd: fd, ifindex: ifi.Index}
		tv := unix.NsecToTimeval(int64(200 * time.Millisecond))
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Ifindex: ifi.Index, Protocol: htons(unix.ETH_P_IPV6)})
	}); err != nil {
		t.Fatalf("raw socket on %s: %v", name, err)
	}
	t.Cleanup(func() { unix.Close(s.fd) })
	return s
}

// next returns the next IPv6 packet from source address from (its Ethernet header stripped),
// skipping other traffic (neighbour discovery, MLD); it fails after 5 s.
func (s rawSock) next(t *testing.T, from []byte) []byte {
	t.Helper()
	buf := make([]byte, 65536)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		n, _, err := unix.Recvfrom(s.fd, buf, 0)
		if err != nil {
			continue // the receive timeout
		}
		if n < 14+packet.IPv6HeaderLen || !bytes.Equal(buf[14+packet.IPv6SrcOffset:14+packet.IPv6SrcOffset+16], from) {
			continue
		}
		return append([]byte(nil), buf[14:n]...)
	}
	t.Fatalf("nothing from %x came through the kernel's NAT in 5 s", from)
	return nil
}
