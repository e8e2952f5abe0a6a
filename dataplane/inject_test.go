package dataplane

import "testing"

// An idle gateway injects one packet at a time (probes and their replies); the queue must
// not give each slot of its ring a buffer in turn (a MiB held after a few hundred probes).
func TestInjectQueueTrickleHoldsOneBuffer(t *testing.T) {
	var q injectQueue
	q.init(512)
	pkt := make([]byte, 84)
	bufs, sizes := [][]byte{make([]byte, 128)}, []int{0}
	for i := range 2000 {
		pkt[0] = byte(i)
		if !q.push(pkt) {
			t.Fatalf("push %d refused", i)
		}
		if n := q.drain(bufs, sizes, 16); n != 1 || sizes[0] != len(pkt) || bufs[0][16] != byte(i) {
			t.Fatalf("drain %d: %d packets, size %d, first byte %d", i, n, sizes[0], bufs[0][16])
		}
	}
	held := 0
	for _, s := range q.slots {
		if s != nil {
			held++
		}
	}
	if held != 1 {
		t.Fatalf("%d slots hold a buffer after a trickle of packets, want 1", held)
	}
}
