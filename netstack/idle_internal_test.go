package netstack

import (
	"context"
	"encoding/binary"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// echoReply builds an IPv4 echo reply from src to dst with the given identifier and sequence.
func echoReply(src, dst netip.Addr, ident, seq uint16) []byte {
	b := make([]byte, header.IPv4MinimumSize+header.ICMPv4MinimumSize+8)
	ip := header.IPv4(b)
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(b)), TTL: 64, Protocol: uint8(header.ICMPv4ProtocolNumber),
		SrcAddr: tcpip.AddrFrom4(src.As4()), DstAddr: tcpip.AddrFrom4(dst.As4())})
	ip.SetChecksum(^ip.CalculateChecksum())
	icmp := header.ICMPv4(b[header.IPv4MinimumSize:])
	icmp.SetType(header.ICMPv4EchoReply)
	icmp.SetIdent(ident)
	icmp.SetSequence(seq)
	binary.BigEndian.PutUint64(icmp[header.ICMPv4MinimumSize:], 42)
	icmp.SetChecksum(^checksum.Checksum(icmp, 0))
	return b
}

// TestIdleEndpointsBounded: pings that overlapped leave one idle endpoint per source address,
// not one each, and a flood of forged replies to it queues a few KiB, not megabytes (attack
// review: two idle endpoints, the deeper never read again, held 17-20 MiB of replies).
func TestIdleEndpointsBounded(t *testing.T) {
	a, b := netip.MustParseAddr("169.254.100.1"), netip.MustParseAddr("169.254.100.2")
	var stA, stB *Stack
	var err error
	if stB, err = New([]netip.Addr{b}, 1340, func(p []byte) error { go stA.DeliverLocal(append([]byte(nil), p...)); return nil }); err != nil {
		t.Fatal(err)
	}
	defer stB.Close()
	if stA, err = New([]netip.Addr{a}, 1340, func(p []byte) error { go stB.DeliverLocal(append([]byte(nil), p...)); return nil }); err != nil {
		t.Fatal(err)
	}
	defer stA.Close()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			if _, err := stA.Ping(context.Background(), a, b, uint16(i), 5*time.Second); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	stA.mu.Lock()
	idle := stA.idle[a]
	n := len(stA.idle)
	stA.mu.Unlock()
	if idle == nil || n != 1 {
		t.Fatalf("%d idle endpoints (of %d addresses), want the one of %v", n, len(stA.idle), a)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	// The endpoint's identifier is its bound port: replies to it queue there.
	local, terr := idle.ep.GetLocalAddress()
	if terr != nil {
		t.Fatal(terr)
	}
	for i := range 40_000 {
		stA.DeliverLocal(echoReply(b, a, local.Port, uint16(i)))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 2<<20 {
		t.Errorf("40,000 forged replies left the heap %d KiB larger, want at most 2 MiB", grew>>10)
	}
	if _, err := stA.Ping(context.Background(), a, b, 99, 5*time.Second); err != nil {
		t.Errorf("a ping after the flood: %v", err)
	}
}
