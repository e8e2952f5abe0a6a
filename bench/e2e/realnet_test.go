package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/skein-net/skein/bench/lab"
	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
)

// TestE2ERealNetworks runs the matrix where two things differ from the lab's usual network.
// Pods get addresses as CNIs with their own IPAM give them: from per-node blocks of two pools
// (10.245.0.0/16 and 10.246.0.0/16), none inside any Node's spec.podCIDRs
// (kube-controller-manager still hands those out from 10.244.0.0/16); nothing is configured
// beyond the chart's pod CIDRs, so the gateways must find out on their own that pods are not
// where the nodes' pod CIDRs say (gateway.watchPods auto), and each cluster must publish and
// map both pod CIDRs. And the gateway server is reachable only through a NAT: the router
// forwards a public address to the server's node and drops the direct path, so the client
// connects only if it dials the address `network connect --client-address` gave it.
func TestE2ERealNetworks(t *testing.T) {
	e := setupLab(t, false, lab.Options{PodBlocks: true})
	defer func() { fmt.Printf("\n=== skein end-to-end report (real networks)\n%s\n", e.report.String()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	if !t.Run("install", func(t *testing.T) { e.t = t; e.install(ctx, 1) }) {
		return
	}
	e.probes(ctx)
	if !t.Run("pods-outside-node-cidrs", func(t *testing.T) { e.t = t; e.podsOutsideNodeCIDRs(ctx) }) {
		return
	}
	if !t.Run("connect-through-nat", func(t *testing.T) { e.t = t; e.connectThroughNAT(ctx) }) {
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
	// The switch rolled the gateways out again: the matrix runs once they are back.
	took := e.waitFor(ctx, 2*time.Minute, "gateways rolled out with --watch-pods and connected", func() bool {
		for i := range 2 {
			var deps appsv1.DeploymentList
			var conns netv1alpha1.ConnectionList
			if e.c[i].List(ctx, &deps, client.MatchingLabels{"app.kubernetes.io/managed-by": "skein-controller"}) != nil ||
				e.c[i].List(ctx, &conns) != nil || len(conns.Items) != 1 || conns.Items[0].Status.Value != netv1alpha1.Connected {
				return false
			}
			for _, d := range deps.Items {
				want := int32(1)
				if d.Spec.Replicas != nil {
					want = *d.Spec.Replicas
				}
				if d.Status.ObservedGeneration != d.Generation || d.Status.UpdatedReplicas != want || d.Status.AvailableReplicas != want || d.Status.Replicas != want {
					return false
				}
			}
		}
		return true
	})
	// The Connection may still show the replaced pod's last probe: one pod-to-pod call each
	// way says the new gateways carry traffic.
	for _, dir := range [][2]int{{0, 1}, {1, 0}} {
		dstAs, _ := e.peerView(ctx, dir[0])
		src, dst := e.probePods(ctx, dir[0])[0], e.probePods(ctx, dir[1])[0]
		target := dstAs.of(netip.MustParseAddr(dst.Status.PodIP)).String() + ":7070"
		took += e.waitFor(ctx, time.Minute, fmt.Sprintf("c%d %s reaches c%d %s", dir[0], src.Name, dir[1], dst.Name), func() bool {
			_, err := e.probeIn(ctx, dir[0], src, "call", "--timeout", "2s", "tcp", target)
			return err == nil
		})
	}
	e.reportf("pod blocks: gateways rolled out with --watch-pods and carry traffic again %.1fs later", took.Seconds())
}

// The NAT in front of cluster 1: a public address (TEST-NET-2, routed only inside the lab's
// router namespace) forwarded to the server's node port.
const (
	natPublic   = "198.51.100.10"
	natNodePort = "31999"
)

// connectThroughNAT: the router DNATs natPublic:natNodePort to cluster 1's first node and
// drops whatever goes from cluster 0 to cluster 1's nodes on that port directly (the server's
// own endpoint); network connect --client-address natPublic gets the tunnel up anyway.
func (e *env) connectThroughNAT(ctx context.Context) {
	c0, c1 := e.l.Clusters[0], e.l.Clusters[1]
	rules := fmt.Sprintf(`table ip skein-e2e-nat {
	counter natted {}
	counter direct {}
	chain prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr %[1]s udp dport %[2]s dnat to %[3]s
	}
	chain forward {
		type filter hook forward priority filter; policy accept;
		ip saddr %[4]s ip daddr %[5]s udp dport %[2]s ct status dnat counter name natted accept
		ip saddr %[4]s ip daddr %[5]s udp dport %[2]s counter name direct drop
	}
}
`, natPublic, natNodePort, c1.Nodes[0].Addr, c0.Underlay, c1.Underlay)
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", e.l.Topology.Router.Name, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		e.t.Fatalf("the router's NAT: %v: %s", err, out)
	}
	start := time.Now()
	out := e.run(ctx, 0, "skeinctl", "network", "connect", "--remote-kubeconfig", c1.Kubeconfig,
		"--server-service-type", "NodePort", "--node-port", natNodePort, "--client-address", natPublic,
		"--wait", "--timeout", "3m")
	for _, side := range []string{"(local)", "(remote)"} {
		if !strings.Contains(out, side+" Connection is established") {
			e.t.Errorf("skeinctl network connect: no %q line in:\n%s", side+" Connection is established", out)
		}
	}
	var gcs netv1alpha1.GatewayClientList
	if err := e.c[0].List(ctx, &gcs); err != nil || len(gcs.Items) != 1 {
		e.t.Fatalf("want one GatewayClient in cluster 0: %d, %v", len(gcs.Items), err)
	}
	if ep := gcs.Items[0].Spec.Endpoint; len(ep.Addresses) != 1 || string(ep.Addresses[0]) != natPublic || fmt.Sprint(ep.Port) != natNodePort {
		e.t.Errorf("the client dials %v:%d, want %s:%s", ep.Addresses, ep.Port, natPublic, natNodePort)
	}
	counters, err := exec.CommandContext(ctx, "ip", "netns", "exec", e.l.Topology.Router.Name, "nft", "list", "counters", "table", "ip", "skein-e2e-nat").CombinedOutput()
	if err != nil || !regexp.MustCompile(`counter natted \{\s*packets [1-9]`).Match(counters) {
		e.t.Errorf("no packet went through the NAT: %v\n%s", err, counters)
	}
	e.reportf("real networks: network connect --client-address %s (the server's own endpoint dropped on the way) to \"Connection is established\": %.1fs",
		natPublic, time.Since(start).Seconds())
}
