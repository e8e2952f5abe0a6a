package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/skein-net/skein/bench/lab"
	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// meshPairs are the three peerings of a full mesh of three clusters, as {local, remote} of
// skeinctl network connect.
var meshPairs = [][2]int{{0, 1}, {0, 2}, {1, 2}}

// TestE2EMesh peers three clusters, all on pod CIDR 10.244.0.0/16, in a full mesh: each
// cluster sees each peer's pods and nodes through a prefix of its own, the matrix passes on
// all six ordered pairs, a Service exported by two clusters is called from the third through
// its imported ClusterIP (services_test.go), and disconnecting one pair leaves the other two
// untouched and no endpoint of the disconnected peer behind.
func TestE2EMesh(t *testing.T) {
	e := setupLab(t, false, lab.Options{Clusters: 3})
	defer func() { fmt.Printf("\n=== skein end-to-end report (three-cluster mesh)\n%s\n", e.report.String()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	if !t.Run("install", func(t *testing.T) { e.t = t; e.install(ctx, 1) }) {
		return
	}
	e.probes(ctx)
	if !t.Run("connect-mesh", func(t *testing.T) { e.t = t; e.connectMesh(ctx) }) {
		return
	}
	t.Run("distinct-views", func(t *testing.T) { e.t = t; e.distinctViews(ctx) })
	t.Run("network-status", func(t *testing.T) { e.t = t; e.meshStatus(ctx) })
	var all [][2]int
	for _, p := range meshPairs {
		all = append(all, p, [2]int{p[1], p[0]})
	}
	if !t.Run("matrix", func(t *testing.T) { e.t = t; e.matrixPairs(ctx, all) }) {
		return
	}
	t.Run("services", func(t *testing.T) { e.t = t; e.services(ctx) })
	t.Run("disconnect-one-pair", func(t *testing.T) { e.t = t; e.disconnectOnePair(ctx) })
}

// connectMesh: skeinctl network connect --wait for each pair of the mesh.
func (e *env) connectMesh(ctx context.Context) {
	for _, p := range meshPairs {
		start := time.Now()
		out := e.run(ctx, p[0], "skeinctl", "network", "connect", "--remote-kubeconfig", e.l.Clusters[p[1]].Kubeconfig,
			"--server-service-type", "NodePort", "--wait", "--timeout", "3m")
		for _, side := range []string{"(local)", "(remote)"} {
			if !strings.Contains(out, side+" Connection is established") {
				e.t.Fatalf("c%d -> c%d: skeinctl network connect: no %q line in:\n%s", p[0], p[1], side+" Connection is established", out)
			}
		}
		e.reportf("mesh: skeinctl network connect c%d -> c%d: %.1fs to \"Connection is established\" on both sides", p[0], p[1], time.Since(start).Seconds())
	}
}

// distinctViews: every cluster remaps each peer's pod CIDR (they all clash with its own) and
// each peer's external CIDR to a prefix of its own: the two peers of a cluster never share one,
// and none overlaps the cluster's own pod CIDR.
func (e *env) distinctViews(ctx context.Context) {
	for i := range e.c {
		var seen []netip.Prefix
		var lines []string
		for j := range e.c {
			if j == i {
				continue
			}
			pods, external := e.viewOf(ctx, i, j)
			for _, m := range pods {
				if m.seen == m.real {
					e.t.Errorf("c%d sees c%d's pod CIDR %s unremapped, though it is its own", i, j, m.real)
				}
				seen = append(seen, m.seen)
				lines = append(lines, fmt.Sprintf("c%d's pods %s as %s", j, m.real, m.seen))
			}
			seen = append(seen, external)
			lines = append(lines, fmt.Sprintf("c%d's external CIDR as %s", j, external))
		}
		for a := range seen {
			for _, own := range e.l.PodCIDRs {
				if seen[a].Overlaps(own) {
					e.t.Errorf("c%d: a peer is seen as %s, inside its own pod CIDR %s", i, seen[a], own)
				}
			}
			for b := range a {
				if seen[a].Overlaps(seen[b]) {
					e.t.Errorf("c%d: two peers' views overlap: %s and %s (%s)", i, seen[a], seen[b], strings.Join(lines, "; "))
				}
			}
		}
		e.reportf("mesh: c%d sees %s", i, strings.Join(lines, ", "))
	}
}

// meshStatus: skeinctl network status lists both peers of each cluster, Connected, with the
// remapped CIDRs of their Configurations.
func (e *env) meshStatus(ctx context.Context) {
	for i := range e.c {
		var rows []struct {
			RemoteClusterID string `json:"remoteClusterID"`
			SeenPodCIDR     string `json:"remappedPodCIDR"`
			Connection      string `json:"connection"`
		}
		out := e.run(ctx, i, "skeinctl", "network", "status", "-o", "json")
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			e.t.Fatalf("c%d: skeinctl network status -o json: %v:\n%s", i, err, out)
		}
		var got []string
		for j := range e.c {
			if j == i {
				continue
			}
			pods, _ := e.viewOf(ctx, i, j)
			found := false
			for _, r := range rows {
				if r.RemoteClusterID == e.clusterID(ctx, j) {
					found = true
					if r.Connection != string(netv1alpha1.Connected) || r.SeenPodCIDR != pods[0].seen.String() {
						e.t.Errorf("c%d: network status row for c%d: %+v, want Connected, seen as %s", i, j, r, pods[0].seen)
					}
				}
			}
			if !found {
				e.t.Errorf("c%d: network status lists no row for c%d (%s):\n%s", i, j, e.clusterID(ctx, j), out)
			}
			got = append(got, fmt.Sprintf("c%d", j))
		}
		if len(rows) != len(e.c)-1 {
			e.t.Errorf("c%d: network status lists %d peerings, want %d:\n%s", i, len(rows), len(e.c)-1, out)
		}
		e.reportf("mesh: c%d skeinctl network status lists %s, Connected", i, strings.Join(got, " and "))
	}
}

// disconnectOnePair: UDP streams run between the pods of the pairs that stay (c0-c2 and c1-c2,
// both ways) while c0 and c1 disconnect and then reset their peering; not one datagram of
// theirs is lost, c0 no longer reaches c1's old remapped addresses, and the matrix passes on
// the four ordered pairs left.
func (e *env) disconnectOnePair(ctx context.Context) {
	const streamFor = 30 * time.Second
	type running struct {
		name string
		gap  <-chan time.Duration
		text <-chan string
	}
	var streams []running
	for _, p := range [][2]int{{0, 2}, {2, 0}, {1, 2}, {2, 1}} {
		s, d := p[0], p[1]
		src, dst := e.probePods(ctx, s)[0], e.probePods(ctx, d)[1]
		dstAs, _ := e.viewOf(ctx, s, d)
		target := dstAs.of(netip.MustParseAddr(dst.Status.PodIP)).String() + ":7071"
		gap, text := e.stream(ctx, e.podNS(s, src), target, streamFor)
		streams = append(streams, running{fmt.Sprintf("c%d %s -> c%d %s (%s)", s, src.Name, d, dst.Name, target), gap, text})
	}
	c1As, _ := e.viewOf(ctx, 0, 1)
	c1Pod := e.probePods(ctx, 1)[0]
	oldTarget := c1As.of(netip.MustParseAddr(c1Pod.Status.PodIP))
	time.Sleep(3 * time.Second)
	start := time.Now()
	e.run(ctx, 0, "skeinctl", "network", "disconnect", "--remote-kubeconfig", e.l.Clusters[1].Kubeconfig, "--wait", "--yes")
	took := time.Since(start)
	src := e.probePods(ctx, 0)[0]
	if out, err := e.probeIn(ctx, 0, src, "call", "--timeout", "2s", "tcp", oldTarget.String()+":7070"); err == nil {
		e.t.Errorf("c0 %s still reaches c1 at %s after the disconnect: %s", src.Name, oldTarget, out)
	}
	start = time.Now()
	e.run(ctx, 0, "skeinctl", "network", "reset", "--remote-kubeconfig", e.l.Clusters[1].Kubeconfig, "--wait", "--yes")
	resetTook := time.Since(start)
	for _, s := range streams {
		gap, text := <-s.gap, <-s.text
		var sent, received, longest int
		if _, err := fmt.Sscanf(lastLine(text), "sent %d received %d longest-gap-ms %d", &sent, &received, &longest); err != nil || gap < 0 {
			e.t.Errorf("stream %s: %q: %v", s.name, text, err)
			continue
		}
		if sent < int(streamFor/(20*time.Millisecond))/2 || received != sent {
			e.t.Errorf("stream %s while c0 and c1 disconnected: sent %d, received %d (longest gap %d ms)", s.name, sent, received, longest)
		}
		e.reportf("mesh: during the c0-c1 disconnect, UDP %s: sent %d, received %d, longest gap %d ms", s.name, sent, received, longest)
	}
	for i, j := range map[int]int{0: 1, 1: 0} {
		var confs netv1alpha1.ConfigurationList
		e.waitFor(ctx, 30*time.Second, fmt.Sprintf("c%d: no Configuration for c%d", i, j), func() bool {
			return e.c[i].List(ctx, &confs, client.MatchingLabels{"liqo.io/remote-cluster-id": e.clusterID(ctx, j)}) == nil && len(confs.Items) == 0
		})
	}
	e.reportf("mesh: skeinctl network disconnect c0 -> c1 --wait: %.1fs, c0 no longer reaches c1's %s; reset --wait: %.1fs", took.Seconds(), oldTarget, resetTook.Seconds())
	e.noSlicesInto(ctx, c1As)
	e.meshStatusAfterDisconnect(ctx)
	e.matrixPairs(ctx, [][2]int{{0, 2}, {2, 0}, {1, 2}, {2, 1}})
}

// meshStatusAfterDisconnect: c0 and c1 each list one peering, c2 still two.
func (e *env) meshStatusAfterDisconnect(ctx context.Context) {
	for i, want := range []int{1, 1, 2} {
		var rows []map[string]any
		out := e.run(ctx, i, "skeinctl", "network", "status", "-o", "json")
		if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != want {
			e.t.Errorf("c%d after the c0-c1 disconnect: network status lists %d peerings (%v), want %d:\n%s", i, len(rows), err, want, out)
		}
		for _, r := range rows {
			if id, _ := r["remoteClusterID"].(string); (i == 0 && id == e.clusterID(ctx, 1)) || (i == 1 && id == e.clusterID(ctx, 0)) {
				e.t.Errorf("c%d still lists the disconnected peer %s", i, id)
			}
		}
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
