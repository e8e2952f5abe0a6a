package main

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/skein-net/skein/control/probe"
	"github.com/skein-net/skein/internal/apitest"
)

func TestRemapAddr(t *testing.T) {
	for _, tc := range []struct{ a, to, want string }{
		{"10.244.1.5", "10.71.0.0/16", "10.71.1.5"},
		{"10.244.1.5", "10.71.0.0/24", "10.71.0.5"},
		{"10.244.1.5", "10.72.128.0/17", "10.72.129.5"},
		{"10.244.1.5", "192.168.0.0/30", "192.168.0.1"},
		{"fd00::1:5", "fd10::/64", "fd10::1:5"},
	} {
		if got := remapAddr(netip.MustParseAddr(tc.a), netip.MustParsePrefix(tc.to)); got.String() != tc.want {
			t.Errorf("remapAddr(%s, %s) = %s, want %s", tc.a, tc.to, got, tc.want)
		}
	}
	if got := remapAddr(netip.MustParseAddr("10.0.0.1"), netip.MustParsePrefix("fd00::/64")); got.IsValid() {
		t.Errorf("mixed families remapped to %s", got)
	}
}

// TestEvaluate: a pair passes only with every check OK and the far side seeing the remapped
// source; each other case fails with a reason that says what was wrong.
func TestEvaluate(t *testing.T) {
	p := netip.MustParsePrefix
	// How the local cluster sees the remote one, and the other way round.
	localView := view{configured: true, seen: true, pods: []mapping{{p("10.244.0.0/16"), p("10.71.0.0/16")}},
		external: mapping{p("10.70.0.0/16"), p("10.73.0.0/16")}}
	localView.externals = []mapping{localView.external}
	remoteView := view{configured: true, seen: true, pods: []mapping{{p("10.244.0.0/16"), p("10.72.0.0/16")}},
		external: mapping{p("10.70.0.0/16"), p("10.74.0.0/16")}}
	remoteView.externals = []mapping{remoteView.external}
	ok := func(seen string) *probe.Result { return &probe.Result{OK: true, Seen: seen, RTTMicros: 300} }
	cell := func(seen string) map[string]probe.Cell {
		return map[string]probe.Cell{"10.71.2.7": {Target: "10.71.2.7", TCP: ok(seen), UDP: ok(seen), ICMP: ok(""), PMTU: ok("")}}
	}
	// dual6 adds the peer's IPv6 pod CIDR fd00:244::/56 and external CIDR fd00:70::/112 to v,
	// seen as pods and ext.
	dual6 := func(v view, pods, ext string) view {
		v.pods = append(slices.Clone(v.pods), mapping{p("fd00:244::/56"), p(pods)})
		v.externals = append(slices.Clone(v.externals), mapping{p("fd00:70::/112"), p(ext)})
		return v
	}
	cell6 := func(seen string) map[string]probe.Cell {
		return map[string]probe.Cell{"fd00:0:244::2:7": {Target: "fd00:0:244::2:7", TCP: ok(seen), UDP: ok(seen), ICMP: ok(""), PMTU: ok("")}}
	}
	pair := func(host bool) *pairResult {
		return &pairResult{From: endpointRef{Cluster: "local", IP: "10.244.1.5", HostNetwork: host},
			To: endpointRef{Cluster: "remote", IP: "10.244.2.7"}, Address: "10.71.2.7", Family: "IPv4"}
	}
	for _, tc := range []struct {
		name     string
		host     bool
		src, dst view
		cells    map[string]probe.Cell
		execErr  error
		address  string
		ipv6     bool     // the pair is IPv6 (dual6 views)
		want     []string // substrings of the failures, in order; none: the pair passes
		warn     []string // substrings of the warnings, in order
	}{
		// The WAN narrower than the tunnel: the gateway answered frag-needed with the MTU it
		// lowered the tunnel to; the pair passes with the path named and the fix.
		{name: "path narrower than the tunnel", src: localView, dst: remoteView, cells: map[string]probe.Cell{"10.71.2.7": {TCP: ok("10.72.1.5"), UDP: ok("10.72.1.5"), ICMP: ok(""),
			PMTU: &probe.Result{Error: "a 1340-byte packet with Don't Fragment got frag-needed: the path carries 1312 bytes", PathMTU: 1312}}},
			warn: []string{"path-mtu: the WAN's path MTU forces the tunnel down from 1340 to 1312: traffic flows; to avoid the search after every reconnect set --mtu 1312 on connect"}},
		// A path MTU black hole: small calls pass, the tunnel MTU's packet vanishes.
		{name: "path MTU black hole", src: localView, dst: remoteView, cells: map[string]probe.Cell{"10.71.2.7": {TCP: ok("10.72.1.5"), UDP: ok("10.72.1.5"), ICMP: ok(""),
			PMTU: &probe.Result{Error: "a 1340-byte packet with Don't Fragment got no answer: timed out"}}},
			want: []string{"path-mtu: a 1340-byte packet with Don't Fragment got no answer: timed out: small packets pass but packets of the tunnel MTU are lost: the path between the clusters is narrower than the tunnel's packets and drops ICMP (a path MTU black hole)"}},
		// Nothing passes: not the path MTU.
		{name: "no answer at all", src: localView, dst: remoteView, cells: map[string]probe.Cell{"10.71.2.7": {TCP: &probe.Result{Error: "timed out"}, UDP: &probe.Result{Error: "timed out"},
			ICMP: &probe.Result{Error: "no echo reply"}, PMTU: &probe.Result{Error: "a 1340-byte packet with Don't Fragment got no answer: timed out"}}},
			want: []string{"tcp: timed out", "udp: timed out", "icmp: no echo reply", "path-mtu: a 1340-byte packet with Don't Fragment got no answer: timed out"}},
		// A dual-stack peering checked over IPv6: the pod seen as remapped, the host network
		// from the remapped IPv6 external CIDR.
		{name: "healthy over IPv6", ipv6: true, src: dual6(localView, "fd00:0:244::/56", "fd00::73:0/112"), dst: dual6(remoteView, "fd00:1:244::/56", "fd00::74:0/112"),
			cells: cell6("fd00:1:244::1:5")},
		{name: "host network over IPv6", ipv6: true, host: true, src: dual6(localView, "fd00:0:244::/56", "fd00::73:0/112"), dst: dual6(remoteView, "fd00:1:244::/56", "fd00::74:0/112"),
			cells: cell6("fd00::74:2")},
		{name: "host network over IPv6 seen from the IPv4 external CIDR", ipv6: true, host: true, src: dual6(localView, "fd00:0:244::/56", "fd00::73:0/112"), dst: dual6(remoteView, "fd00:1:244::/56", "fd00::74:0/112"),
			cells: cell6("10.74.0.9"), want: []string{"want fd00::74:0/112", "udp: "}},
		{name: "healthy", src: localView, dst: remoteView, cells: cell("10.72.1.5")},
		{name: "host network in the remapped external CIDR", host: true, src: localView, dst: remoteView, cells: cell("10.74.0.9")},
		{name: "not remapped", src: localView, dst: remoteView, cells: cell("10.244.1.5"),
			want: []string{"tcp: the far side saw the call come from 10.244.1.5, want 10.72.1.5 (the source was not remapped)", "udp: "}},
		{name: "masqueraded to a node", src: localView, dst: remoteView, cells: cell("192.168.10.20"),
			want: []string{"tcp: the far side saw the call come from 192.168.10.20, want 10.72.1.5", "udp: "}},
		{name: "host network outside the external CIDR", host: true, src: localView, dst: remoteView, cells: cell("10.72.1.5"),
			want: []string{"want 10.74.0.0/16", "udp: "}},
		// The remote cluster's view without the local cluster's external CIDR of the pair's
		// family (IPv6 here: the local controller predates --external-cidr6).
		{name: "host network without an external CIDR of the family", host: true, src: localView,
			dst: view{configured: true, seen: true, pods: remoteView.pods, externals: []mapping{{p("fd00:70::/112"), p("fd00::70:0/112")}}}, cells: cell("10.74.0.9"),
			want: []string{"tcp: the remote cluster has no IPv4 external CIDR of the local cluster, so IPv4 host-network traffic has no address to leave with", "udp:", "icmp:", "path-mtu:"}},
		{name: "no Configuration here", src: view{}, dst: remoteView, cells: cell("10.72.1.5"),
			want: []string{"tcp: the local cluster has no Configuration of the remote cluster", "udp:", "icmp:", "path-mtu:"}},
		{name: "not mapped yet", src: view{configured: true}, dst: remoteView,
			want: []string{"tcp: the local cluster's Configuration of the remote cluster is not mapped yet", "udp:", "icmp:", "path-mtu:"}},
		{name: "no Configuration there", src: localView, dst: view{}, cells: cell("10.72.1.5"),
			want: []string{"tcp: the far side saw 10.72.1.5, but the remote cluster has no Configuration of the local cluster", "udp:"}},
		{name: "exec failed", src: localView, dst: remoteView, execErr: errors.New("exec refused"),
			want: []string{"tcp: exec refused", "udp: exec refused", "icmp: exec refused", "path-mtu: exec refused"}},
		{name: "target outside the published CIDRs", src: localView, dst: remoteView, address: "-",
			want: []string{"tcp: pod IP 10.244.2.7 is outside the pod CIDRs the remote cluster published", "udp:", "icmp:", "path-mtu:"}},
		{name: "checks failed", src: localView, dst: remoteView, cells: map[string]probe.Cell{"10.71.2.7": {TCP: &probe.Result{Error: "timed out"},
			UDP: ok("10.72.1.5"), ICMP: &probe.Result{Error: "no echo reply"}, PMTU: &probe.Result{Error: "black hole"}}},
			want: []string{"tcp: timed out", "icmp: no echo reply", "path-mtu: black hole"}},
		{name: "a probe that printed nothing for the target", src: localView, dst: remoteView, cells: map[string]probe.Cell{},
			want: []string{"tcp: skein-probe check reported nothing for 10.71.2.7", "udp:", "icmp:", "path-mtu:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr := pair(tc.host)
			if tc.address == "-" {
				pr.Address = ""
			}
			if tc.ipv6 {
				pr.From.IP, pr.To.IP, pr.Address, pr.Family = "fd00:244::1:5", "fd00:244::2:7", "fd00:0:244::2:7", "IPv6"
			}
			evaluate(pr, tc.src, tc.dst, tc.cells, tc.execErr, 1340)
			if len(pr.Warnings) != len(tc.warn) {
				t.Errorf("warnings %q, want %d like %q", pr.Warnings, len(tc.warn), tc.warn)
			}
			for i, w := range tc.warn {
				if i < len(pr.Warnings) && !strings.Contains(pr.Warnings[i], w) {
					t.Errorf("warning %d: %q, want %q in it", i, pr.Warnings[i], w)
				}
			}
			if len(tc.want) == 0 {
				if !pr.OK || len(pr.Failures) > 0 {
					t.Fatalf("want a pass, got %q", pr.Failures)
				}
				return
			}
			if pr.OK || len(pr.Failures) != len(tc.want) {
				t.Fatalf("failures %q, want %d like %q", pr.Failures, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(pr.Failures[i], w) {
					t.Errorf("failure %d: %q, want %q in it", i, pr.Failures[i], w)
				}
			}
			if strings.HasPrefix(tc.name, "no answer") && strings.Contains(strings.Join(pr.Failures, ";"), "black hole") {
				t.Errorf("a path that answers nothing taken for a path MTU black hole: %q", pr.Failures)
			}
		})
	}
}

// TestPrintPathMTU: a narrow path shows as such in the table and its warning once, however
// many pairs saw it, and the report passes; a pair that failed only the path-MTU check is no
// node's fault.
func TestPrintPathMTU(t *testing.T) {
	narrow := &probe.Result{Error: "frag-needed", PathMTU: 1312}
	pair := func(node string) pairResult {
		p := pairResult{From: endpointRef{Cluster: "local", Node: node, IP: "10.244.1.5"}, To: endpointRef{Cluster: "remote", Node: "r1"}, Address: "10.71.2.7",
			TCP: &probe.Result{OK: true}, UDP: &probe.Result{OK: true}, ICMP: &probe.Result{OK: true}, PMTU: narrow, OK: true}
		p.Warnings = []string{"path-mtu: " + narrowPath(1312, 1340)}
		return p
	}
	rep := &netReport{MTU: 1340, Pairs: []pairResult{pair("n1"), pair("n2")}, Passed: 8, OK: true}
	var b strings.Builder
	rep.print(&b)
	out := b.String()
	if n := strings.Count(out, "forces the tunnel down from 1340 to 1312"); n != 1 {
		t.Errorf("the narrow path said %d times, want once:\n%s", n, out)
	}
	if !strings.Contains(out, "narrow") || !strings.Contains(out, "set --mtu 1312 on connect") || !strings.Contains(out, "PASS:") {
		t.Errorf("report:\n%s", out)
	}
	failed := pair("n1")
	failed.Warnings, failed.OK, failed.Failures = nil, false, []string{"path-mtu: a 1340-byte packet got no answer"}
	if !pathMTUOnly(failed) {
		t.Error("a pair that failed only the path-MTU check is not pathMTUOnly")
	}
	failed.Failures = append(failed.Failures, "tcp: timed out")
	if pathMTUOnly(failed) || pathMTUOnly(pair("n2")) {
		t.Error("pathMTUOnly for a pair with another failure, or with none")
	}
}

func TestJoinFailures(t *testing.T) {
	got := joinFailures([]string{"tcp: timed out", "udp: no answer: timed out", "icmp: no echo reply", "path-mtu: timed out"})
	if want := "tcp, path-mtu: timed out; udp: no answer: timed out; icmp: no echo reply"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestTestNetworkCleansUp: against real API servers without nodes (no probe pod can start),
// test network says why it cannot check, exits non-zero and removes its namespaces; bad flags
// are refused before anything is created.
func TestTestNetworkCleansUp(t *testing.T) {
	const idA, idB = "ef7a1f41-c753-4a0e-83e5-bed013e7fe4f", "506f88d4-9918-4848-ab74-2a75ae32647f"
	a, kcA := cluster(t, idA)
	b, kcB := cluster(t, idB)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-o", "yaml"}, `--output "yaml": want table or json`},
		{[]string{"--mtu", "100"}, "--mtu 100"},
		{[]string{"--check-timeout", "1h"}, "--check-timeout 1h0m0s"},
	} {
		_, err := run(t, append([]string{"test", "network", "--kubeconfig", kcA, "--remote-kubeconfig", kcB}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	if _, err := run(t, "test", "network", "--kubeconfig", kcA); err == nil || !strings.Contains(err.Error(), "--remote-kubeconfig is required") {
		t.Errorf("without a remote: %v", err)
	}
	start := time.Now()
	out, err := run(t, "test", "network", "--kubeconfig", kcA, "--remote-kubeconfig", kcB, "--timeout", "3s", "--cleanup-wait", "0", "--probe-image", "registry.invalid/skein-probe:x")
	if err == nil || !strings.Contains(err.Error(), "no probe pod became ready within 3s") {
		t.Fatalf("no nodes: %v\n%s", err, out)
	}
	ctx := context.Background()
	for _, env := range []*apitest.Env{a, b} {
		// The API server has no namespace controller to finish a deletion: the namespaces must
		// at least be terminating.
		var nss corev1.NamespaceList
		apitest.Must(t, env.Client.List(ctx, &nss, client.HasLabels{probeRunLabel}))
		if len(nss.Items) != 1 {
			t.Fatalf("%d probe namespaces, want the one of the run", len(nss.Items))
		}
		ns := nss.Items[0]
		if ns.DeletionTimestamp == nil {
			t.Errorf("namespace %s is not being deleted", ns.Name)
		}
		if ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" || !strings.HasPrefix(ns.Name, probeNSPrefix) { // host-network probes
			t.Errorf("namespace %s labels %v", ns.Name, ns.Labels)
		}
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("took %s", d)
	}
}

// TestPrintEscapes: what the clusters and the probes say (node names, the source a probe saw,
// findings) reaches the terminal escaped: a peer cannot retitle it or hide lines.
func TestPrintEscapes(t *testing.T) {
	esc := "\x1b]0;PWNED\a"
	rep := &netReport{MTU: 1340, Pairs: []pairResult{{
		From:    endpointRef{Cluster: "local", Node: "a1" + esc, IP: "10.244.1.5"},
		To:      endpointRef{Cluster: "remote", Node: "b1" + esc},
		Address: "10.71.2.7", TCP: &probe.Result{OK: true, Seen: "10.72.1.5" + esc},
		Failures: []string{"udp: " + esc},
	}}, Problems: []finding{{Level: levelProblem, Check: "route", Subject: "(remote) b1" + esc, Detail: "leaves through " + esc, Hint: esc}}}
	var b strings.Builder
	rep.print(&b)
	if strings.ContainsAny(b.String(), "\x1b\a") {
		t.Errorf("control characters reached the output:\n%q", b.String())
	}
	if !strings.Contains(b.String(), `\x1b]0;PWNED\a`) {
		t.Errorf("the escaped text is missing:\n%s", b.String())
	}
}

// TestReadyTrustsOnlyItsOwnPods: the probe namespace admits privileged pods; a pod someone
// else put there, labelled like a probe, is not one.
func TestReadyTrustsOnlyItsOwnPods(t *testing.T) {
	env := apitest.Start(t)
	ctx := context.Background()
	ns := probeNSPrefix + "0badc0de"
	apitest.Must(t, env.EnsureNamespace(ctx, ns))
	labels := map[string]string{probeRunLabel: "0badc0de", probeKindLabel: "pod"}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "probe-pod", Namespace: ns, Labels: labels},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: "x"}}}}}}
	apitest.Must(t, env.Client.Create(ctx, ds))
	mkPod := func(name, ip string, owned bool) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
			Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "probe", Image: "x"}}}}
		if owned {
			pod.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(ds, appsv1.SchemeGroupVersion.WithKind("DaemonSet"))}
		}
		apitest.Must(t, env.Client.Create(ctx, pod))
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		apitest.Must(t, env.Client.Status().Update(ctx, pod))
	}
	mkPod("ours", "10.244.1.5", true)
	mkPod("planted", "10.244.1.6", false)
	pr := &probeRun{label: "local", c: env.Client, cfg: env.Config, ns: ns}
	pods, _, err := pr.ready(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 1 || pods[0].Name != "ours" {
		t.Errorf("ready pods %+v, want only the DaemonSet's", pods)
	}
}
