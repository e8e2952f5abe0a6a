package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/skein-net/skein/control/agent"
	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
)

// TestE2EMasquerade installs skein with agent.masqueradeBypass=false on the real node stack,
// whose flannel (--ip-masq, nftables mode) masquerades everything pods send outside the
// cluster's pod CIDR, whatever the device, so pod traffic to the peer leaves through the
// overlay with the node's address. Without the bypass a pod does not reach the peer as itself,
// and every node's agent says why in its InternalNode; with the bypass (the chart's default)
// the whole matrix passes.
func TestE2EMasquerade(t *testing.T) {
	e := setup(t, false)
	e.installSets = []string{"agent.masqueradeBypass=false"}
	defer func() {
		fmt.Printf("\n=== skein end-to-end report (masquerading pod network)\n%s\n", e.report.String())
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	if !t.Run("install", func(t *testing.T) { e.t = t; e.install(ctx, 1) }) {
		return
	}
	e.probes(ctx)
	if !t.Run("connect", func(t *testing.T) { e.t = t; e.connect(ctx) }) {
		return
	}
	if !t.Run("masqueraded", func(t *testing.T) { e.t = t; e.masqueraded(ctx) }) {
		return
	}
	if !t.Run("bypass", func(t *testing.T) { e.t = t; e.bypass(ctx) }) {
		return
	}
	t.Run("matrix", func(t *testing.T) { e.t = t; e.matrix(ctx) })
}

// masqueraded: a pod's connection to the peer does not arrive from the pod, and the agent of
// its node reports the masquerade.
func (e *env) masqueraded(ctx context.Context) {
	dstAs, _ := e.peerView(ctx, 0)
	seenAs, _ := e.peerView(ctx, 1)
	src, dst := e.probePods(ctx, 0)[0], e.probePods(ctx, 1)[0]
	target := dstAs.of(netip.MustParseAddr(dst.Status.PodIP)).String() + ":7070"
	wantSrc := seenAs.of(netip.MustParseAddr(src.Status.PodIP)).String()
	out, err := e.probeIn(ctx, 0, src, "call", "--timeout", "3s", "tcp", target)
	if err == nil && strings.HasPrefix(out, dst.Name+" saw "+wantSrc+":") {
		e.t.Fatalf("c0 %s reached c1 %s as itself (%s) although the pod network masquerades: the lab does not test what it should", src.Name, dst.Name, out)
	}
	e.reportf("masquerade: c0 %s -> c1 %s without the bypass: %v %s", src.Name, target, err, out)
	node := src.Spec.NodeName
	took := e.waitFor(ctx, 30*time.Second, "PodTrafficMasqueraded True on "+node, func() bool {
		return e.masqueradeReason(ctx, 0, node) == "MasqueradedByAnotherRule"
	})
	e.reportf("masquerade: InternalNode %s says MasqueradedByAnotherRule %.1fs after the connection", node, took.Seconds())
}

// masqueradeReason is the reason of node's PodTrafficMasqueraded condition in cluster i.
func (e *env) masqueradeReason(ctx context.Context, i int, node string) string {
	in := &netv1alpha1.InternalNode{}
	if err := e.c[i].Get(ctx, clientKey(node), in); err != nil {
		return ""
	}
	if c := meta.FindStatusCondition(in.Status.Conditions, agent.ConditionMasqueraded); c != nil {
		return c.Reason
	}
	return ""
}

// bypass: helm upgrade --set agent.masqueradeBypass=true in both clusters; every node says
// Bypassed.
func (e *env) bypass(ctx context.Context) {
	chart, err := filepath.Abs("../../deploy/chart")
	if err != nil {
		e.t.Fatal(err)
	}
	start := time.Now()
	for i := range 2 {
		e.run(ctx, i, e.helm, "upgrade", "skein", chart, "--namespace", "liqo", "--reuse-values",
			"--set", "agent.masqueradeBypass=true", "--wait", "--timeout", "3m")
	}
	for i := range 2 {
		for j := range e.l.Clusters[i].Nodes {
			node := e.l.Clusters[i].NodeName(j)
			e.waitFor(ctx, time.Minute, fmt.Sprintf("c%d %s PodTrafficMasqueraded Bypassed", i, node), func() bool {
				return e.masqueradeReason(ctx, i, node) == "Bypassed"
			})
		}
	}
	e.reportf("masquerade: helm upgrade --set agent.masqueradeBypass=true: every node Bypassed %.1fs later", time.Since(start).Seconds())
}

// clientKey is the key of a cluster-scoped object.
func clientKey(name string) client.ObjectKey { return client.ObjectKey{Name: name} }
