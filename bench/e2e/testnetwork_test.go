package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
)

// netTest is the part of skeinctl test network -o json the suite reads.
type netTest struct {
	Namespace string `json:"namespace"`
	MTU       int    `json:"mtu"`
	Pairs     []struct {
		From struct {
			Cluster, Node, Pod, IP string
			HostNetwork            bool
		} `json:"from"`
		To struct {
			Cluster, Node, Pod, IP string
		} `json:"to"`
		Address    string `json:"address"`
		Family     string `json:"family"`
		WantSource string `json:"wantSource"`
		TCP        *struct {
			OK   bool   `json:"ok"`
			Seen string `json:"seen"`
		} `json:"tcp"`
		PMTU *struct {
			OK     bool   `json:"ok"`
			Detail string `json:"detail"`
		} `json:"pathMTU"`
		OK       bool     `json:"ok"`
		Failures []string `json:"failures"`
	} `json:"pairs"`
	Passed   int `json:"passed"`
	Failed   int `json:"failed"`
	Problems []struct {
		Check, Subject, Detail, Hint string
	} `json:"problems"`
	OK bool `json:"ok"`
}

// testNetwork runs skeinctl test network -o json from cluster 0's side and returns what it
// printed, its parsed report and its exit error.
func (e *env) testNetwork(ctx context.Context, extra ...string) (string, *netTest, error) {
	args := append([]string{"skeinctl", "test", "network", "--remote-kubeconfig", e.l.Clusters[1].Kubeconfig, "-o", "json", "--timeout", "2m"}, extra...)
	cmd := e.l.Command(ctx, 0, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var rep netTest
	if jerr := json.Unmarshal(stdout.Bytes(), &rep); jerr != nil {
		return stderr.String(), nil, fmt.Errorf("%v (and no JSON report: %v)", err, jerr)
	}
	return stderr.String(), &rep, err
}

// noProbeNamespaces checks that no namespace of skeinctl test network is left in either cluster.
func (e *env) noProbeNamespaces(ctx context.Context, what string) {
	e.t.Helper()
	for i := range 2 {
		var nss corev1.NamespaceList
		if err := e.c[i].List(ctx, &nss, client.HasLabels{"skein.io/probe-run"}); err != nil {
			e.t.Fatal(err)
		}
		for _, ns := range nss.Items {
			e.t.Errorf("%s: cluster %d keeps namespace %s (phase %s)", what, i, ns.Name, ns.Status.Phase)
		}
	}
}

// testNetworkHealthy: skeinctl test network passes on the healthy peering; every pair the
// suite's own matrix knows is there, with the same remapped sources; nothing is left behind.
func (e *env) testNetworkHealthy(ctx context.Context) {
	start := time.Now()
	stderr, rep, err := e.testNetwork(ctx)
	if err != nil || rep == nil || !rep.OK {
		e.t.Fatalf("skeinctl test network on a healthy peering: %v\n%s\n%+v", err, stderr, rep)
	}
	// 2 pod probes and 2 host probes per cluster, each to the other cluster's 2 pod probes.
	if len(rep.Pairs) != 16 || rep.Failed != 0 || rep.Passed != 64 {
		e.t.Errorf("%d pairs, %d checks passed, %d failed: want 16, 64, 0", len(rep.Pairs), rep.Passed, rep.Failed)
	}
	views := [2]view{}
	externals := [2]netip.Prefix{}
	for i := range 2 {
		views[i], externals[i] = e.peerView(ctx, i)
	}
	for _, p := range rep.Pairs {
		s, d := 0, 1
		if p.From.Cluster == "remote" {
			s, d = 1, 0
		}
		wantAddr := views[s].of(netip.MustParseAddr(p.To.IP)).String()
		if p.Address != wantAddr {
			e.t.Errorf("%s -> %s: dialled %s, want %s", p.From.Pod, p.To.Pod, p.Address, wantAddr)
		}
		seen, _ := netip.ParseAddr(p.TCP.Seen)
		switch {
		case p.From.HostNetwork && !externals[d].Contains(seen):
			e.t.Errorf("host network of %s -> %s: seen as %s, outside %s", p.From.Node, p.To.Pod, seen, externals[d])
		case !p.From.HostNetwork && seen != views[d].of(netip.MustParseAddr(p.From.IP)):
			e.t.Errorf("%s -> %s: seen as %s, want %s", p.From.Pod, p.To.Pod, seen, views[d].of(netip.MustParseAddr(p.From.IP)))
		}
		if p.PMTU == nil || !strings.Contains(p.PMTU.Detail, fmt.Sprintf("%d passes", rep.MTU)) {
			e.t.Errorf("%s -> %s: path MTU %+v", p.From.Pod, p.To.Pod, p.PMTU)
		}
	}
	e.noProbeNamespaces(ctx, "after a passing run")
	e.reportf("test-network: skeinctl test network on the healthy peering: %d pairs, %d checks passed in %.1fs (path MTU %d), namespaces removed",
		len(rep.Pairs), rep.Passed, time.Since(start).Seconds(), rep.MTU)
}

// testNetworkFamilies: skeinctl test network passes on a dual-stack or IPv6-only peering and
// checks each family the clusters publish: every pair of each family, the far side seeing
// the pod's address of that family as remapped there, or (host network) an address of the
// node's cluster's external CIDR of that family as remapped there; ICMPv6 and the IPv6 path
// MTU included (a pair passes only with all four checks).
func (e *env) testNetworkFamilies(ctx context.Context, wantPairs map[string]int) {
	start := time.Now()
	stderr, rep, err := e.testNetwork(ctx)
	if err != nil || rep == nil || !rep.OK {
		e.t.Fatalf("skeinctl test network: %v\n%s\n%+v", err, stderr, rep)
	}
	got := map[string]int{}
	views := [2]view{}
	for i := range 2 {
		views[i], _ = e.peerView(ctx, i)
	}
	for _, p := range rep.Pairs {
		got[p.Family]++
		s, d := 0, 1
		if p.From.Cluster == "remote" {
			s, d = 1, 0
		}
		seen, _ := netip.ParseAddr(p.TCP.Seen)
		if p.From.HostNetwork {
			ext := func() netip.Prefix { _, x := e.peerView(ctx, d); return x }()
			if p.Family == "IPv6" {
				_, ext = e.external6Of(ctx, d, s)
			}
			if !ext.Contains(seen) {
				e.t.Errorf("%s host network of %s -> %s: seen as %s, outside %s", p.Family, p.From.Node, p.To.Pod, seen, ext)
			}
		} else if want := views[d].of(netip.MustParseAddr(p.From.IP)); seen != want {
			e.t.Errorf("%s %s -> %s: seen as %s, want %s", p.Family, p.From.Pod, p.To.Pod, seen, want)
		}
		if to := netip.MustParseAddr(p.Address); to.Is6() != (p.Family == "IPv6") {
			e.t.Errorf("%s pair %s -> %s dialled %s", p.Family, p.From.Pod, p.To.Pod, to)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(wantPairs) || rep.Failed != 0 || rep.Passed != 4*len(rep.Pairs) {
		e.t.Errorf("pairs by family %v, %d checks passed, %d failed: want %v, every check passed", got, rep.Passed, rep.Failed, wantPairs)
	}
	e.noProbeNamespaces(ctx, "after a passing run")
	e.reportf("test-network: skeinctl test network: pairs by family %v, %d checks passed in %.1fs (path MTU %d), namespaces removed",
		got, rep.Passed, time.Since(start).Seconds(), rep.MTU)
}

// testNetworkFails: skeinctl test network exits non-zero, names the cause and cleans up when
// (a) the gateway server is scaled to 0, (b) a node's table-18952 route is gone and its agent
// stopped, (c) the remote cluster's Configuration of the local one is deleted; and Ctrl-C in
// the middle leaves nothing behind.
func (e *env) testNetworkFails(ctx context.Context) {
	expect := func(what string, want func(rep *netTest) bool, extra ...string) {
		e.t.Helper()
		start := time.Now()
		stderr, rep, err := e.testNetwork(ctx, append([]string{"--check-timeout", "1s"}, extra...)...)
		switch {
		case err == nil:
			e.t.Errorf("%s: skeinctl test network exited 0", what)
		case rep == nil:
			e.t.Errorf("%s: no report: %v\n%s", what, err, stderr)
		case rep.OK || !want(rep):
			b, _ := json.MarshalIndent(rep.Problems, "", "  ")
			e.t.Errorf("%s: the report does not name the cause; problems:\n%s", what, b)
		default:
			first := rep.Problems[0]
			for _, p := range rep.Problems {
				if want(&netTest{Problems: []struct{ Check, Subject, Detail, Hint string }{p}}) {
					first = p
				}
			}
			e.reportf("test-network: %s: exit status non-zero, %d of %d checks failed in %.1fs; named: %s %s: %s", what,
				rep.Failed, rep.Failed+rep.Passed, time.Since(start).Seconds(), first.Check, first.Subject, first.Detail)
		}
		e.noProbeNamespaces(ctx, what)
	}
	names := func(check, text string) func(*netTest) bool {
		return func(rep *netTest) bool {
			for _, p := range rep.Problems {
				if p.Check == check && strings.Contains(p.Subject+" "+p.Detail, text) {
					return true
				}
			}
			return false
		}
	}

	// (a) The gateway server scaled to 0 (and kept there: the controller is stopped first, or
	// it would put the replica back).
	srv := e.gatewayDeployment(ctx)
	// Whatever happens below, the later scenarios get a whole fabric back.
	defer func() {
		if e.t.Failed() {
			_, _ = e.l.Exec(ctx, srv.c, "kubectl", "-n", "liqo", "scale", "deployment", "skein-controller", "--replicas=1")
			_, _ = e.l.Exec(ctx, srv.c, "kubectl", "-n", srv.ns, "scale", "deployment", srv.name, "--replicas=1")
			_, _ = e.l.Exec(ctx, 0, "kubectl", "-n", "liqo", "patch", "daemonset", "skein-agent", "--type", "json", "-p", `[{"op":"remove","path":"/spec/template/spec/affinity"}]`)
			_, _ = e.l.Exec(ctx, 0, "skeinctl", "network", "init", "--remote-kubeconfig", e.l.Clusters[1].Kubeconfig, "--wait")
		}
	}()
	e.scale(ctx, srv.c, "liqo", "skein-controller", 0)
	e.scale(ctx, srv.c, srv.ns, srv.name, 0)
	e.waitFor(ctx, 2*time.Minute, "the gateway server's pods gone", func() bool {
		var pods corev1.PodList
		_ = e.c[srv.c].List(ctx, &pods, client.InNamespace(srv.ns), client.MatchingLabels{"networking.liqo.io/gateway": srv.name})
		return len(pods.Items) == 0
	})
	expect("gateway server scaled to 0", names("gateway", "no gateway pod runs"))
	e.scale(ctx, srv.c, srv.ns, srv.name, 1)
	e.scale(ctx, srv.c, "liqo", "skein-controller", 1)
	e.waitConnected(ctx)

	// (b) A node of cluster 0 that does not run the gateway loses its route to the peer, and
	// its agent is not there to put it back (its DaemonSet kept off the node). (The gateway's
	// own node relays the other nodes' frames to the gateway, so its routes carry every node's
	// traffic: without them every pair fails, and no single node stands out.)
	nodeIdx := 0
	if e.l.Clusters[0].NodeName(0) == e.gatewayNodeFor(ctx, 0, 1) {
		nodeIdx = 1
	}
	node := e.l.Clusters[0].NodeName(nodeIdx)
	patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"kubernetes.io/hostname","operator":"NotIn","values":[%q]}]}]}}}}}}}`, node)
	e.run(ctx, 0, "kubectl", "-n", "liqo", "patch", "daemonset", "skein-agent", "--type", "merge", "-p", patch)
	e.waitFor(ctx, time.Minute, "no agent on "+node, func() bool {
		var pods corev1.PodList
		_ = e.c[0].List(ctx, &pods, client.InNamespace("liqo"), client.MatchingLabels{"app.kubernetes.io/component": "agent"})
		for _, p := range pods.Items {
			if p.Spec.NodeName == node {
				return false
			}
		}
		return true
	})
	nodeNS := e.l.Clusters[0].Nodes[nodeIdx].Name
	routes, _ := exec.CommandContext(ctx, "ip", "-n", nodeNS, "route", "show", "table", "18952").Output()
	deleted := 0
	for _, line := range strings.Split(strings.TrimSpace(string(routes)), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.Contains(line, "liqo.vxlan") {
			if out, err := exec.CommandContext(ctx, "ip", "-n", nodeNS, "route", "del", f[0], "table", "18952").CombinedOutput(); err != nil {
				e.t.Fatalf("ip route del %s table 18952: %v: %s", f[0], err, out)
			}
			deleted++
		}
	}
	if deleted == 0 {
		e.t.Fatalf("node %s has no route in table 18952 to delete:\n%s", node, routes)
	}
	expect(fmt.Sprintf("%d route(s) of table 18952 deleted on %s, its agent stopped", deleted, node), func(rep *netTest) bool {
		return names("route", node)(rep) && names("node", node)(rep)
	})
	e.run(ctx, 0, "kubectl", "-n", "liqo", "patch", "daemonset", "skein-agent", "--type", "json", "-p", `[{"op":"remove","path":"/spec/template/spec/affinity"}]`)
	e.waitFor(ctx, time.Minute, "the route back on "+node, func() bool {
		out, _ := exec.CommandContext(ctx, "ip", "-n", nodeNS, "route", "show", "table", "18952").Output()
		return strings.Count(string(out), "liqo.vxlan") >= deleted
	})

	// (c) The remote cluster's Configuration of the local one deleted.
	var confs netv1alpha1.ConfigurationList
	if err := e.c[1].List(ctx, &confs); err != nil || len(confs.Items) != 1 {
		e.t.Fatalf("cluster 1: want one Configuration, got %d (%v)", len(confs.Items), err)
	}
	if err := e.c[1].Delete(ctx, &confs.Items[0]); err != nil {
		e.t.Fatal(err)
	}
	expect("the remote cluster's Configuration deleted", names("configuration", "no Configuration of cluster"))
	// skeinctl network init applies it again.
	e.run(ctx, 0, "skeinctl", "network", "init", "--remote-kubeconfig", e.l.Clusters[1].Kubeconfig, "--wait")
	e.waitConnected(ctx)
	var last string
	deadline := time.Now().Add(2 * time.Minute)
	for {
		stderr, rep, err := e.testNetwork(ctx, "--host-network=false", "--check-timeout", "1s")
		if err == nil && rep != nil && rep.OK {
			break
		}
		b, _ := json.MarshalIndent(rep, "", "  ")
		last = fmt.Sprintf("%v\n%s\n%s", err, stderr, b)
		if time.Now().After(deadline) {
			e.t.Fatalf("the matrix does not pass again within 2m after skeinctl network init; the last run:\n%s", last)
		}
		time.Sleep(2 * time.Second)
	}

	// Ctrl-C while the probes are deployed: the namespaces go before skeinctl exits.
	cmd := e.l.Command(ctx, 0, "skeinctl", "test", "network", "--remote-kubeconfig", e.l.Clusters[1].Kubeconfig)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.waitFor(ctx, time.Minute, "skeinctl test network's probe namespaces", func() bool {
		var nss corev1.NamespaceList
		_ = e.c[1].List(ctx, &nss, client.HasLabels{"skein.io/probe-run"})
		return len(nss.Items) > 0
	})
	// ip netns exec runs skeinctl as its child (exec, same PID): signal it directly.
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		e.t.Fatal(err)
	}
	err := cmd.Wait()
	if err == nil {
		e.t.Errorf("skeinctl test network interrupted exited 0:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "Removing namespace") {
		e.t.Errorf("interrupted, skeinctl did not say it removes its namespaces:\n%s", out.String())
	}
	e.noProbeNamespaces(ctx, "after Ctrl-C")
	e.reportf("test-network: Ctrl-C with the probes deployed: exit non-zero, namespaces removed before exit")
}

type deployRef struct {
	c        int
	ns, name string
}

// gatewayDeployment finds the GatewayServer's Deployment (in whichever cluster runs the server).
func (e *env) gatewayDeployment(ctx context.Context) deployRef {
	for i := range 2 {
		var list netv1alpha1.GatewayServerList
		if err := e.c[i].List(ctx, &list); err == nil && len(list.Items) == 1 {
			return deployRef{i, list.Items[0].Namespace, list.Items[0].Name}
		}
	}
	e.t.Fatal("no GatewayServer in either cluster")
	return deployRef{}
}

func (e *env) scale(ctx context.Context, i int, ns, name string, n int32) {
	e.t.Helper()
	e.run(ctx, i, "kubectl", "-n", ns, "scale", "deployment", name, fmt.Sprintf("--replicas=%d", n))
}

// waitConnected waits until both clusters' Connections are Connected.
func (e *env) waitConnected(ctx context.Context) {
	e.t.Helper()
	e.waitFor(ctx, 2*time.Minute, "both Connections Connected", func() bool {
		for i := range 2 {
			var conns netv1alpha1.ConnectionList
			if err := e.c[i].List(ctx, &conns); err != nil || len(conns.Items) != 1 || conns.Items[0].Status.Value != netv1alpha1.Connected {
				return false
			}
		}
		return true
	})
}
