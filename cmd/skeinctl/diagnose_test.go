package main

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/skein-net/skein/control/agent/plan"
	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/buildinfo"
	"github.com/skein-net/skein/control/identity"
	"github.com/skein-net/skein/dataplane/kernel"
	"github.com/skein-net/skein/dataplane/overlay"
	"github.com/skein-net/skein/internal/apitest"
	"github.com/skein-net/skein/internal/netnstest"
)

// diagnoseLines runs skeinctl diagnose with args and returns its output and whether it
// reported a problem (exit status 1).
func diagnoseLines(t *testing.T, kc string, args ...string) (string, bool) {
	t.Helper()
	out, err := run(t, append([]string{"--kubeconfig", kc, "--timeout", "20s", "diagnose"}, args...)...)
	if err != nil && !errors.Is(err, errProblems) {
		t.Fatalf("diagnose: %v\n%s", err, out)
	}
	return out, err != nil
}

// wantLines checks that out has, for each want, a line starting with the level and containing
// the text.
func wantLines(t *testing.T, out string, wants ...[2]string) {
	t.Helper()
	for _, w := range wants {
		found := false
		for _, l := range strings.Split(out, "\n") {
			found = found || (strings.HasPrefix(l, strings.ToUpper(w[0])) && strings.Contains(l, w[1]))
		}
		if !found {
			t.Errorf("diagnose:\n%s\nwant a %s line containing %q", out, w[0], w[1])
		}
	}
}

// TestDiagnose builds up an installation and a peering object by object (statuses written by
// hand, no controller running) and checks that diagnose names what is missing at each step and
// nothing once all is in place; then, on a real kernel in a network namespace programmed as
// the agent would, that --node finds a rule that takes a peer's traffic first and a missing
// forwarding entry.
func TestDiagnose(t *testing.T) {
	env := apitest.Start(t)
	c := env.Client
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kc := env.KubeconfigFile(t)
	ns := env.Namespace(t, "diag")

	// Nothing installed.
	out, bad := diagnoseLines(t, kc, "-l", ns)
	if !bad {
		t.Errorf("no problem reported with nothing installed:\n%s", out)
	}
	wantLines(t, out, [2]string{"ok", "API server"}, [2]string{"ok", "CRDs networking.liqo.io/v1alpha1: all 8 kinds served"},
		[2]string{"problem", "cluster identity"}, [2]string{"problem", "skein-controller: no Deployment of skein's chart in namespace " + ns})

	// The chart's objects, the identity, a node with its InternalNode.
	p := netip.MustParsePrefix
	apitest.Must(t, c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: identity.ClusterIDConfigMap, Namespace: ns},
		Data: map[string]string{identity.ClusterIDKey: "cluster-a"}}))
	apitest.Must(t, identity.PublishNetwork(ctx, c, ns, identity.Network{PodCIDRs: []netip.Prefix{p("10.244.0.0/16")}, ServiceCIDRs: []netip.Prefix{p("10.96.0.0/12")},
		ExternalCIDR: p("10.70.0.0/16"), InternalCIDR: p("10.80.0.0/16")}))
	labels := func(comp string) map[string]string {
		return map[string]string{"app.kubernetes.io/name": "skein", "app.kubernetes.io/component": comp, "app.kubernetes.io/part-of": "skein"}
	}
	podSpec := func(comp, image string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels(comp)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: comp, Image: image}}}}
	}
	v := buildinfo.Get().Version
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "skein-controller", Namespace: ns, Labels: labels("controller")},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels("controller")}, Template: podSpec("controller", "ghcr.io/skein-net/skein-controller:"+v)}}
	apitest.Must(t, c.Create(ctx, dep))
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "skein-agent", Namespace: ns, Labels: labels("agent")},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels("agent")}, Template: podSpec("agent", "ghcr.io/skein-net/skein-agent:"+v)}}
	apitest.Must(t, c.Create(ctx, ds))
	ds.Status = appsv1.DaemonSetStatus{DesiredNumberScheduled: 1, NumberReady: 0}
	apitest.Must(t, c.Status().Update(ctx, ds))
	node := ns + "-n1"
	apitest.Must(t, c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}))
	t.Cleanup(func() { c.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}) })

	out, _ = diagnoseLines(t, kc, "-l", ns)
	wantLines(t, out, [2]string{"ok", "cluster identity cluster-a"},
		[2]string{"problem", "skein-controller " + ns + "/skein-controller: 0 of 1 replicas ready"},
		[2]string{"problem", "skein-agent " + ns + "/skein-agent: ready on 0 of 1 nodes"},
		[2]string{"problem", "node " + node + ": no InternalNode"},
		[2]string{"ok", "peerings: none yet"})

	dep.Status = appsv1.DeploymentStatus{ReadyReplicas: 1, Replicas: 1}
	apitest.Must(t, c.Status().Update(ctx, dep))
	ds.Status.NumberReady = 1
	apitest.Must(t, c.Status().Update(ctx, ds))
	in := &netv1alpha1.InternalNode{ObjectMeta: metav1.ObjectMeta{Name: node},
		Spec: netv1alpha1.InternalNodeSpec{OverlayIP: ipPtr("10.80.0.11"), ExternalIP: ipPtr("10.70.0.11")}}
	apitest.Must(t, c.Create(ctx, in))
	t.Cleanup(func() { c.Delete(context.Background(), in) })
	out, _ = diagnoseLines(t, kc, "-l", ns)
	wantLines(t, out, [2]string{"ok", "skein-controller " + ns + "/skein-controller: 1 of 1 replicas ready"},
		[2]string{"ok", "skein-agent " + ns + "/skein-agent: ready on 1 of 1 nodes"},
		[2]string{"warning", "node " + node + ": its agent has not reported"})
	setCondition := func(obj client.Object, conds *[]metav1.Condition, typ string, status metav1.ConditionStatus, reason, msg string) {
		t.Helper()
		meta.SetStatusCondition(conds, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg})
		apitest.Must(t, c.Status().Update(ctx, obj))
	}
	in.Status.VTEP = &netv1alpha1.VTEP{IP: "192.168.77.1", MAC: netv1alpha1.MAC(overlay.MACString(overlay.NodeMAC(netip.MustParseAddr("192.168.77.1"))))}
	setCondition(in, &in.Status.Conditions, "PodTrafficMasqueraded", metav1.ConditionTrue, "MasqueradedByAnotherRule", "set agent.masqueradeBypass=true")
	apitest.Must(t, c.Get(ctx, client.ObjectKeyFromObject(in), in))
	setCondition(in, &in.Status.Conditions, netv1alpha1.ConditionReady, metav1.ConditionFalse, "Error", "ip link add liqo.vxlan: operation not supported")
	out, _ = diagnoseLines(t, kc, "-l", ns)
	wantLines(t, out, [2]string{"problem", "node " + node + ": not programmed (Error): ip link add liqo.vxlan: operation not supported"},
		[2]string{"problem", "node " + node + ": pod traffic to peers is source-NATed by another rule (MasqueradedByAnotherRule)"})
	apitest.Must(t, c.Get(ctx, client.ObjectKeyFromObject(in), in))
	in.Status.Conditions = nil
	setCondition(in, &in.Status.Conditions, netv1alpha1.ConditionReady, metav1.ConditionTrue, "Programmed", "the overlay device, the routes and the rules to 1 peering(s) are programmed")

	// A peering: a Configuration not mapped yet, a GatewayServer without pods or address.
	tenant := env.Namespace(t, "tenant")
	peer := map[string]string{netv1alpha1.RemoteClusterIDLabel: "cluster-b"}
	conf := &netv1alpha1.Configuration{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: tenant, Labels: peer},
		Spec: netv1alpha1.ConfigurationSpec{Remote: netv1alpha1.ClusterConfig{CIDR: netv1alpha1.ClusterConfigCIDR{Pod: "10.244.0.0/16", External: "10.70.0.0/16"}}}}
	apitest.Must(t, c.Create(ctx, conf))
	gs := &netv1alpha1.GatewayServer{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: tenant, Labels: peer},
		Spec: netv1alpha1.GatewayServerSpec{ServerTemplateRef: netv1alpha1.TemplateRef{Kind: "WgGatewayServerTemplate", Name: "wireguard-server"}}}
	apitest.Must(t, c.Create(ctx, gs))
	out, bad = diagnoseLines(t, kc, "-l", ns)
	if !bad {
		t.Errorf("no problem reported for an unmapped peering:\n%s", out)
	}
	wantLines(t, out, [2]string{"ok", "node " + node + ": the overlay device"},
		[2]string{"problem", "configuration " + tenant + "/b: not mapped yet"},
		[2]string{"problem", "gateway gatewayserver " + tenant + "/gw: no gateway pod runs"},
		[2]string{"problem", "gateway gatewayserver " + tenant + "/gw: no address for peers yet"},
		[2]string{"problem", "connection gatewayserver " + tenant + "/gw: no Connection"})

	// Everything in place: mapped, an active running replica, an address, Connected.
	conf.Status.Remote = &netv1alpha1.ClusterConfig{CIDR: netv1alpha1.ClusterConfigCIDR{Pod: "10.71.0.0/16", External: "10.72.0.0/16"}}
	setCondition(conf, &conf.Status.Conditions, netv1alpha1.ConditionReady, metav1.ConditionTrue, "Mapped", "")
	gwMAC := overlay.GatewayMAC(netip.MustParseAddr("10.80.0.1"))
	gs.Status.Endpoint = &netv1alpha1.Endpoint{Addresses: []netv1alpha1.Address{"192.0.2.10"}, Port: 31820}
	gs.Status.InternalEndpoint = &netv1alpha1.InternalEndpoint{IP: ipPtr("10.80.0.1"), VTEP: &netv1alpha1.VTEP{IP: "192.168.77.2", MAC: netv1alpha1.MAC(overlay.MACString(gwMAC))}}
	setCondition(gs, &gs.Status.Conditions, netv1alpha1.ConditionReady, metav1.ConditionTrue, "Deployed", "")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "gw-0", Namespace: tenant,
		Labels: map[string]string{"networking.liqo.io/component": "gateway", "networking.liqo.io/gateway": "gw", "networking.liqo.io/active": "true"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "gateway", Image: "ghcr.io/skein-net/skein-gateway:" + v}}}}
	apitest.Must(t, c.Create(ctx, pod))
	pod.Status.Phase = corev1.PodRunning
	apitest.Must(t, c.Status().Update(ctx, pod))
	conn := &netv1alpha1.Connection{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: tenant, Labels: peer},
		Spec: netv1alpha1.ConnectionSpec{Type: netv1alpha1.ConnectionTypeServer, GatewayRef: netv1alpha1.ObjectRef{Name: "gw", Namespace: tenant}}}
	apitest.Must(t, c.Create(ctx, conn))
	conn.Status.Value = netv1alpha1.Connecting
	apitest.Must(t, c.Status().Update(ctx, conn))
	out, _ = diagnoseLines(t, kc, "-l", ns)
	wantLines(t, out, [2]string{"problem", "connection gatewayserver " + tenant + "/gw: Connecting (endpoint 192.0.2.10:31820)"})
	conn.Status.Value = netv1alpha1.Connected
	apitest.Must(t, c.Status().Update(ctx, conn))
	out, bad = diagnoseLines(t, kc, "-l", ns)
	if bad || !strings.Contains(out, "0 problem(s), 0 warning(s)") {
		t.Errorf("problems or warnings with everything in place:\n%s", out)
	}
	wantLines(t, out, [2]string{"ok", "configuration " + tenant + "/b: peer cluster-b: pods 10.244.0.0/16 seen as 10.71.0.0/16"},
		[2]string{"ok", "connection gatewayserver " + tenant + "/gw: Connected to cluster-b"})
	jsonOut, err := run(t, "--kubeconfig", kc, "diagnose", "-l", ns, "-o", "json")
	if err != nil || !strings.Contains(jsonOut, `"level": "ok"`) {
		t.Errorf("diagnose -o json: %v\n%s", err, jsonOut)
	}

	// The controller scaled to 0 and the gateway's pod gone: both named, and the Connection's
	// last word is not taken for the tunnel's state.
	zero := int32(0)
	dep.Spec.Replicas = &zero
	apitest.Must(t, c.Update(ctx, dep))
	apitest.Must(t, c.Delete(ctx, pod, client.GracePeriodSeconds(0)))
	out, _ = diagnoseLines(t, kc, "-l", ns)
	wantLines(t, out, [2]string{"problem", "skein-controller " + ns + "/skein-controller: scaled to 0 replicas"},
		[2]string{"problem", "gateway gatewayserver " + tenant + "/gw: no gateway pod runs"},
		[2]string{"problem", "connection gatewayserver " + tenant + "/gw: says Connected, but no gateway pod runs"})
	if strings.Contains(out, "OK       connection") {
		t.Errorf("a Connected connection without a gateway pod reported OK:\n%s", out)
	}

	// The node's kernel, programmed as the agent plans it.
	netnstest.RequireRoot(t)
	nodeNS := netnstest.New(t, "diag")
	var confs netv1alpha1.ConfigurationList
	var servers netv1alpha1.GatewayServerList
	apitest.Must(t, c.List(ctx, &confs))
	apitest.Must(t, c.List(ctx, &servers))
	apitest.Must(t, c.Get(ctx, client.ObjectKeyFromObject(in), in))
	pl, err := plan.FromObjects(plan.Node{Name: node, IP: netip.MustParseAddr("192.168.77.1"), PodCIDRs: []netip.Prefix{p("10.244.0.0/16")}, Kind: overlay.VXLAN},
		plan.Objects{InternalNode: in, Configurations: confs.Items, Servers: servers.Items})
	apitest.Must(t, err)
	k, err := kernel.NewNetlink("/var/run/netns/"+nodeNS.Name, nodeNS.Do)
	apitest.Must(t, err)
	defer k.Close()
	if _, err := kernel.Reconcile(k, pl.Kernel); err != nil {
		t.Fatal(err)
	}
	nodeArgs := []string{"-l", ns, "--node", "--node-name", node, "--netns", "/var/run/netns/" + nodeNS.Name}
	out, bad = diagnoseLines(t, kc, nodeArgs...)
	if !bad {
		t.Errorf("the missing nftables table is not a problem:\n%s", out)
	}
	wantLines(t, out, [2]string{"ok", "kernel " + node + ": overlay device liqo.vxlan up, vxlan"},
		[2]string{"ok", "kernel " + node + " gateway 10.80.0.1: 10.71.0.0/16, 10.72.0.0/16 routed through liqo.vxlan to the active replica at 192.168.77.2"},
		// No host SNAT table: the test did not program it.
		[2]string{"problem", "kernel " + node + ": no nftables table ip skein-agent"},
		[2]string{"warning", "kernel " + node + ": no overlay guard: liqo.vxlan takes the overlay's frames from any sender"})
	// The agent's tables, guard included: reported as on.
	if pl.SNAT == nil || pl.SNAT.Guard == nil {
		t.Fatalf("the plan has no overlay guard: %+v", pl.SNAT)
	}
	nsFile, err := os.Open("/var/run/netns/" + nodeNS.Name)
	apitest.Must(t, err)
	defer nsFile.Close()
	apitest.Must(t, kernel.EnsureHostSNAT(int(nsFile.Fd()), *pl.SNAT))
	out, _ = diagnoseLines(t, kc, nodeArgs...)
	wantLines(t, out, [2]string{"ok", "kernel " + node + ": overlay guard on: nothing dropped"})

	// A rule before skein's takes a peer CIDR; a forwarding entry points at an old replica.
	nodeNS.Run(t, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth1")
	nodeNS.Run(t, "ip", "addr", "add", "192.168.50.1/24", "dev", "eth0")
	nodeNS.Run(t, "ip", "link", "set", "eth0", "up")
	nodeNS.Run(t, "ip", "route", "add", "10.72.0.0/16", "via", "192.168.50.9", "table", "100")
	nodeNS.Run(t, "ip", "rule", "add", "to", "10.72.0.0/16", "lookup", "100", "priority", "100")
	nodeNS.Run(t, "bridge", "fdb", "replace", overlay.MACString(gwMAC), "dev", "liqo.vxlan", "dst", "192.168.77.99")
	out, bad = diagnoseLines(t, kc, nodeArgs...)
	if !bad {
		t.Errorf("no problem reported:\n%s", out)
	}
	t.Logf("diagnose --node with a rule before skein's and a stale forwarding entry:\n%s", out)
	wantLines(t, out, [2]string{"problem", "kernel " + node + " 10.72.0.0/16: a packet to 10.72.0.1 leaves through eth0 (routing table 100), not the overlay: the rule `100: from all to 10.72.0.0/16 lookup 100` comes before skein's at 1900"},
		[2]string{"", "set the chart's agent.rulePriority to a number below 100"},
		[2]string{"problem", "the forwarding entry for the gateway's MAC " + overlay.MACString(gwMAC) + " points at 192.168.77.99, not at the active replica 192.168.77.2"})
}

func TestVersionSkew(t *testing.T) {
	pod := func(name, image string, deleting bool) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "liqo"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Image: image}}}}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		}
		return p
	}
	pods := []corev1.Pod{pod("a1", "ghcr.io/skein-net/skein-agent:v0.2.0", false), pod("c1", "reg:5000/skein-controller:v0.2.0@sha256:00", false),
		pod("g1", "ghcr.io/skein-net/skein-gateway@sha256:00", false), pod("a0", "ghcr.io/skein-net/skein-agent:v0.1.0", true)}
	if got := versionSkew("v0.2.0", pods); got != "" {
		t.Errorf("all at v0.2.0 (or by digest, or terminating): %q", got)
	}
	pods = append(pods, pod("a2", "ghcr.io/skein-net/skein-agent:v0.1.0", false), pod("a3", "ghcr.io/skein-net/skein-agent:v0.1.0", false))
	if got, want := versionSkew("v0.2.0", pods), "skeinctl is v0.2.0; pods run ghcr.io/skein-net/skein-agent:v0.1.0 (2 pods, such as liqo/a2)"; got != want {
		t.Errorf("versionSkew = %q, want %q", got, want)
	}
	if got := versionSkew("dev", pods); got != "" {
		t.Errorf("a development skeinctl: %q", got)
	}
}

func ipPtr(s string) *netv1alpha1.IP { v := netv1alpha1.IP(s); return &v }

// TestPrintable: what objects say cannot add lines to a report or hide them.
func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, ünïcode ok":                   "plain text, ünïcode ok",
		"forged\nOK       connection x: Connected": `forged\nOK       connection x: Connected`,
		"hide\x1b[1A\x1b[2Kme":                     `hide\x1b[1A\x1b[2Kme`,
		"bidi \u202eevil":                          `bidi \u202eevil`,
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %q, want %q", in, got, want)
		}
	}
	if got := printable(strings.Repeat("x", 5000)); len(got) != maxField+3 {
		t.Errorf("a 5000-byte message printed as %d bytes", len(got))
	}
	r := &report{}
	r.problem("node", "n1", "not programmed\n0 problem(s), 0 warning(s)", "")
	var b strings.Builder
	r.print(&b)
	if n := strings.Count(b.String(), "\n"); n != 2 {
		t.Errorf("one finding printed as %d lines:\n%s", n, b.String())
	}
}
