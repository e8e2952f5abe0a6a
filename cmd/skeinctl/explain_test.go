package main

import (
	"context"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/skein-net/skein/control/kube"
)

// TestExplainPathMTU: pairs that failed only the path-MTU check are named as the path MTU
// with the fix, and their nodes are not blamed, while a node whose pairs fail everything is.
func TestExplainPathMTU(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(kube.Scheme()).Build()
	l := &side{label: "local", c: c, id: "a", liqo: "liqo"}
	r := &side{label: "remote", c: c, id: "b", liqo: "liqo", peer: l}
	l.peer = r
	pair := func(node string, failures ...string) pairResult {
		return pairResult{From: endpointRef{Cluster: "local", Node: node}, To: endpointRef{Cluster: "remote", Node: "r1"}, OK: len(failures) == 0, Failures: failures}
	}
	rep := &netReport{MTU: 1340, Pairs: []pairResult{
		pair("n1", "path-mtu: a 1340-byte packet with Don't Fragment got no answer: timed out: small packets pass ..."),
		pair("n2", "path-mtu: a 1340-byte packet with Don't Fragment got no answer: timed out: small packets pass ..."),
	}}
	g := &globals{}
	text := func(fs []finding) string {
		var b strings.Builder
		for _, f := range fs {
			b.WriteString(f.Check + " " + f.Subject + ": " + f.Detail + " -> " + f.Hint + "\n")
		}
		return b.String()
	}
	out := text(g.explain(context.Background(), l, r, rep))
	if !strings.Contains(out, "path MTU : 2 pair(s) failed only the path-MTU check: packets of the tunnel MTU 1340 do not cross the path between the clusters while smaller ones do; no node is to blame") ||
		!strings.Contains(out, "--mtu set to the path MTU minus 60") || strings.Contains(out, "node (") {
		t.Errorf("explain, every pair failing the path MTU alone:\n%s", out)
	}
	// Another node's pairs fail everything while n1's pass: n3 is blamed, n2 is not.
	rep.Pairs = []pairResult{pair("n1"), rep.Pairs[1], pair("n3", "tcp: timed out", "udp: timed out", "icmp: no echo reply", "path-mtu: no answer")}
	out = text(g.explain(context.Background(), l, r, rep))
	if !strings.Contains(out, "node (local) n3: all 1 pairs") || strings.Contains(out, "node (local) n2") || !strings.Contains(out, "path MTU : 1 pair(s)") {
		t.Errorf("explain, a broken node beside a narrow path:\n%s", out)
	}
}
