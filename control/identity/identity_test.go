package identity

import (
	"fmt"
	"regexp"
	"testing"
)

// TestPeerNameUnique: two ids whose friendly names collide get different peer names, and a
// peer name is a valid DNS label that keeps the friendly name.
func TestPeerNameUnique(t *testing.T) {
	const a, b = "4be03db0-dc25-44bd-b940-67edfe175330", "f9341c68-966b-4ea1-88be-ab134da98f1d"
	if ClusterName(a) != ClusterName(b) {
		t.Fatalf("the issue's colliding ids no longer collide: %s, %s (pick two that do)", ClusterName(a), ClusterName(b))
	}
	if PeerName(a) == PeerName(b) {
		t.Errorf("PeerName(%s) = PeerName(%s) = %s", a, b, PeerName(a))
	}
	label := regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	for _, id := range []string{a, b} {
		n := PeerName(id)
		if !label.MatchString(n) || len("liqo-tenant-"+n) > 63 || n[:len(ClusterName(id))] != ClusterName(id) || len(n) != len(ClusterName(id))+7 {
			t.Errorf("PeerName(%s) = %q: want %s-<6 hex digits>, a DNS label with room for liqo-tenant-", id, n, ClusterName(id))
		}
		if PeerName(id) != n {
			t.Errorf("PeerName(%s) is not stable", id)
		}
	}
	// Over many ids the names do not collide (24 bits of suffix: a clash among 10,000 ids
	// has a probability near 0.3%, so a fixed set is checked).
	seen := map[string]int{}
	for i := range 10000 {
		id := fmt.Sprintf("%08x-dc25-44bd-b940-%012x", i*7919, i)
		seen[PeerName(id)]++
	}
	for n, c := range seen {
		if c > 1 {
			t.Errorf("%d ids share the peer name %s", c, n)
		}
	}
}
