package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/skein-net/skein/bench/lab"
)

// TestE2EBlocks runs the matrix on the pod network of CNIs with their own IPAM: pods get
// addresses from per-node blocks of two pools (10.245.0.0/16 and 10.246.0.0/16), none inside
// any Node's spec.podCIDRs (kube-controller-manager still hands those out from 10.244.0.0/16).
// Nothing is configured beyond the chart's pod CIDRs: the gateways must find out on their own
// that pods are not where the nodes' pod CIDRs say (gateway.watchPods auto), and each cluster
// must publish and map both pod CIDRs.
func TestE2EBlocks(t *testing.T) {
	e := setupLab(t, false, lab.Options{PodBlocks: true})
	defer func() { fmt.Printf("\n=== skein end-to-end report (pod blocks)\n%s\n", e.report.String()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	if !t.Run("install", func(t *testing.T) { e.t = t; e.install(ctx, 1) }) {
		return
	}
	e.probes(ctx)
	if !t.Run("pods-outside-node-cidrs", func(t *testing.T) { e.t = t; e.podsOutsideNodeCIDRs(ctx) }) {
		return
	}
	if !t.Run("connect", func(t *testing.T) { e.t = t; e.connect(ctx) }) {
		return
	}
	t.Run("both-pod-cidrs-mapped", func(t *testing.T) { e.t = t; e.bothPodCIDRsMapped(ctx) })
	t.Run("gateways-watch-pods", func(t *testing.T) { e.t = t; e.gatewaysWatchPods(ctx) })
	t.Run("matrix", func(t *testing.T) { e.t = t; e.matrix(ctx) })
}

// podsOutsideNodeCIDRs: the lab's premise holds (each probe pod is in a pool, outside its
// node's pod CIDRs, and the two nodes use different pools), or the test proves nothing.
func (e *env) podsOutsideNodeCIDRs(ctx context.Context) {
	for i := range 2 {
		pools := map[netip.Prefix]bool{}
		for _, p := range e.probePods(ctx, i) {
			ip := netip.MustParseAddr(p.Status.PodIP)
			node := &corev1.Node{}
			if err := e.c[i].Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, node); err != nil {
				e.t.Fatal(err)
			}
			for _, s := range node.Spec.PodCIDRs {
				if netip.MustParsePrefix(s).Contains(ip) {
					e.t.Errorf("cluster %d: pod %s (%s) is inside its node's pod CIDR %s", i, p.Name, ip, s)
				}
			}
			for _, pool := range lab.BlockPools {
				if pool.Contains(ip) {
					pools[pool] = true
				}
			}
		}
		if len(pools) != 2 {
			e.t.Errorf("cluster %d: the probe pods use pools %v, want both of %v", i, pools, lab.BlockPools)
		}
	}
	e.reportf("pod blocks: every probe pod outside its node's spec.podCIDRs, the two nodes of each cluster in different pools")
}

// bothPodCIDRsMapped: each cluster maps both of the peer's pod CIDRs, to distinct prefixes
// (the peer's pools clash with its own).
func (e *env) bothPodCIDRsMapped(ctx context.Context) {
	for i := range 2 {
		pods, _ := e.peerView(ctx, i)
		if len(pods) != 2 {
			e.t.Fatalf("cluster %d sees %d pod CIDRs of its peer, want 2", i, len(pods))
		}
		for _, m := range pods {
			if m.seen == m.real || !slices.Contains(lab.BlockPools, m.real) {
				e.t.Errorf("cluster %d: the peer's %v seen as %v, want one of the pools, remapped", i, m.real, m.seen)
			}
		}
		e.reportf("pod blocks: cluster %d sees the peer's %v as %v and %v as %v", i, pods[0].real, pods[0].seen, pods[1].real, pods[1].seen)
	}
}

// gatewaysWatchPods: skein-controller noticed (gateway.watchPods auto) and every gateway runs
// with --watch-pods, with the event that says why.
func (e *env) gatewaysWatchPods(ctx context.Context) {
	for i := range 2 {
		var deps appsv1.DeploymentList
		if err := e.c[i].List(ctx, &deps, client.MatchingLabels{"app.kubernetes.io/managed-by": "skein-controller"}); err != nil {
			e.t.Fatal(err)
		}
		if len(deps.Items) == 0 {
			e.t.Fatalf("cluster %d: no gateway Deployment", i)
		}
		for _, d := range deps.Items {
			for _, c := range d.Spec.Template.Spec.Containers {
				if c.Name == "gateway" && !slices.Contains(c.Args, "--watch-pods") {
					e.t.Errorf("cluster %d: gateway %s/%s runs without --watch-pods: %q", i, d.Namespace, d.Name, c.Args)
				}
			}
		}
		var events corev1.EventList
		if err := e.c[i].List(ctx, &events); err != nil {
			e.t.Fatal(err)
		}
		found := ""
		for _, ev := range events.Items {
			if ev.Reason == "PodRoutes" {
				found = ev.Message
			}
		}
		if !strings.Contains(found, "outside the pod CIDRs of its node") {
			e.t.Errorf("cluster %d: no PodRoutes event saying why gateways watch pods (got %q)", i, found)
		}
		e.reportf("pod blocks: cluster %d gateways watch pods: %s", i, found)
	}
}
