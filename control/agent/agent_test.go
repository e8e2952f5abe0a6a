package agent_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/skein-net/skein/control/agent"
	"github.com/skein-net/skein/control/agent/plan"
	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/dataplane/kernel"
	"github.com/skein-net/skein/internal/apitest"
)

func ipp(s string) *netv1alpha1.IP { v := netv1alpha1.IP(s); return &v }

// TestAgentReacts runs the agent against a real API server with a fake kernel: it programs a
// peering once its InternalNode, Configuration and gateway status are complete, publishes its
// VTEP, follows a gateway failover and a remapping, repairs drift on resync, and removes
// everything when the last peering goes.
func TestAgentReacts(t *testing.T) {
	env := apitest.Start(t)
	c := env.Client
	ns := env.Namespace(t, "agent")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nodeName := ns + "-n1"
	f := kernel.NewFake()
	var snatMu sync.Mutex
	var snats []*kernel.HostSNAT
	lastSNAT := func() *kernel.HostSNAT {
		snatMu.Lock()
		defer snatMu.Unlock()
		if len(snats) == 0 {
			return nil
		}
		return snats[len(snats)-1]
	}
	a, err := agent.New(env.Config, agent.Options{
		Node:         plan.Node{Name: nodeName, IP: netip.MustParseAddr("192.168.77.1"), PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}},
		PodNamespace: ns, PodName: "agent-n1",
		Resync: 300 * time.Millisecond,
		Log:    slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}, f, func(s *kernel.HostSNAT) error {
		snatMu.Lock()
		defer snatMu.Unlock()
		snats = append(snats, s)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	defer func() { stop(); <-done }()

	// wait until the fake kernel's recorded commands contain every wanted line.
	var history strings.Builder
	wait := func(what string, want ...string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			history.WriteString(f.Script())
			all := true
			for _, w := range want {
				all = all && strings.Contains(history.String(), w)
			}
			if all {
				history.Reset()
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: commands so far:\n%s\nwant lines containing %q", what, history.String(), want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	apitest.Must(t, c.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent-n1", Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "skein-agent"}}}}))
	in := &netv1alpha1.InternalNode{ObjectMeta: metav1.ObjectMeta{Name: nodeName},
		Spec: netv1alpha1.InternalNodeSpec{OverlayIP: ipp("10.80.0.11"), ExternalIP: ipp("10.70.0.11")}}
	apitest.Must(t, c.Create(ctx, in))
	t.Cleanup(func() { c.Delete(context.Background(), in) })
	conf, gs := peering(ctx, t, c, ns)
	time.Sleep(500 * time.Millisecond)
	if a.Stats().Programmed != 0 {
		t.Fatal("programmed a peering whose gateway has no active replica")
	}
	// readyIs waits until the InternalNode's Ready condition has reason and its message
	// contains msg.
	readyIs := func(reason string, status metav1.ConditionStatus, msg string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			got := &netv1alpha1.InternalNode{}
			apitest.Must(t, c.Get(ctx, client.ObjectKeyFromObject(in), got))
			cond := meta.FindStatusCondition(got.Status.Conditions, agent.ConditionReady)
			if cond != nil && cond.Reason == reason && cond.Status == status && strings.Contains(cond.Message, msg) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("InternalNode Ready condition %+v, want %s %s with %q", cond, status, reason, msg)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	readyIs("NoPeering", metav1.ConditionTrue, "gatewayserver "+ns+"/gw: no active replica published yet")
	gs.Status.InternalEndpoint = &netv1alpha1.InternalEndpoint{IP: ipp("10.80.0.1"), VTEP: &netv1alpha1.VTEP{IP: "10.244.1.20", MAC: "02:5b:7a:69:e7:c7"}}
	apitest.Must(t, c.Status().Update(ctx, gs))
	wait("first peering",
		"ip link add liqo.vxlan type vxlan id 18952 dstport 4789 local 192.168.77.1 nolearning",
		"bridge fdb replace 02:5b:7a:69:e7:c7 dev liqo.vxlan dst 10.244.1.20",
		"ip neigh replace 10.80.0.1 lladdr 02:5b:7a:69:e7:c7 dev liqo.vxlan nud permanent",
		"ip route add 10.71.0.0/16 via 10.80.0.1 dev liqo.vxlan onlink table 18952",
		"ip rule add to 10.72.0.0/16 lookup 18952 priority 1900")
	if s := lastSNAT(); s == nil || s.ExternalIP.String() != "10.70.0.11" {
		t.Errorf("host SNAT %+v", s)
	}
	readyIs("Programmed", metav1.ConditionTrue, "to 1 peering(s) are programmed")
	// The VTEP is published.
	deadline := time.Now().Add(10 * time.Second)
	for {
		apitest.Must(t, c.Get(ctx, client.ObjectKeyFromObject(in), in))
		if v := in.Status.VTEP; v != nil && v.IP == "192.168.77.1" && string(v.MAC) == "02:5a:"+string(v.MAC)[6:] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("VTEP not published: %+v", in.Status.VTEP)
		}
		time.Sleep(50 * time.Millisecond)
	}

	pod := &corev1.Pod{}
	apitest.Must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "agent-n1"}, pod))
	if got := pod.Annotations[agent.MACAnnotation]; got != string(in.Status.VTEP.MAC) {
		t.Errorf("pod annotation %s = %q, want the device MAC %s", agent.MACAnnotation, got, in.Status.VTEP.MAC)
	}

	// Failover: the active replica moves.
	apitest.Must(t, c.Get(ctx, client.ObjectKeyFromObject(gs), gs))
	gs.Status.InternalEndpoint.VTEP.IP = "10.244.2.30"
	moved := time.Now()
	apitest.Must(t, c.Status().Update(ctx, gs))
	wait("failover", "bridge fdb replace 02:5b:7a:69:e7:c7 dev liqo.vxlan dst 10.244.2.30")
	t.Logf("failover: FDB repointed %v after the status update", time.Since(moved).Round(time.Millisecond))

	// Remap.
	apitest.Must(t, c.Get(ctx, client.ObjectKeyFromObject(conf), conf))
	conf.Status.Remote.CIDR.Pod = "10.73.0.0/16"
	apitest.Must(t, c.Status().Update(ctx, conf))
	wait("remap", "ip route del 10.71.0.0/16", "ip route add 10.73.0.0/16 via 10.80.0.1 dev liqo.vxlan onlink table 18952")

	// The node's overlay address changes in its InternalNode.
	apitest.Must(t, c.Get(ctx, client.ObjectKeyFromObject(in), in))
	in.Spec.OverlayIP = ipp("10.80.0.12")
	apitest.Must(t, c.Update(ctx, in))
	wait("overlay address change", "ip addr add 10.80.0.12/16 dev liqo.vxlan", "ip addr del 10.80.0.11/16 dev liqo.vxlan")

	// Drift: a route removed behind the agent's back comes back on resync. (A reconcile an
	// event started, such as the agent's own status write, may repair it first; then again.)
	for try := 0; a.Stats().DriftRepairs == 0; try++ {
		if try == 20 {
			t.Fatal("drift repairs not counted")
		}
		apitest.Must(t, f.DelRoute("liqo.vxlan", kernel.Route{Dst: netip.MustParsePrefix("10.73.0.0/16"), Via: netip.MustParseAddr("10.80.0.1")}))
		wait("drift repair", "ip route add 10.73.0.0/16 via 10.80.0.1 dev liqo.vxlan onlink table 18952")
	}

	// The last peering goes: everything is removed.
	apitest.Must(t, c.Delete(ctx, gs))
	wait("cleanup", "ip link del liqo.vxlan")
	if lastSNAT() != nil {
		t.Error("host SNAT not removed")
	}
}

// peering creates in ns the Configuration of peer cluster-b (mapped: pods seen as
// 10.71.0.0/16, external as 10.72.0.0/16) and a GatewayServer for it without status.
func peering(ctx context.Context, t *testing.T, c client.Client, ns string) (*netv1alpha1.Configuration, *netv1alpha1.GatewayServer) {
	t.Helper()
	labels := map[string]string{netv1alpha1.RemoteClusterIDLabel: "cluster-b"}
	conf := &netv1alpha1.Configuration{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: ns, Labels: labels},
		Spec: netv1alpha1.ConfigurationSpec{Remote: netv1alpha1.ClusterConfig{CIDR: netv1alpha1.ClusterConfigCIDR{Pod: "10.244.0.0/16", External: "10.70.0.0/16"}}}}
	apitest.Must(t, c.Create(ctx, conf))
	conf.Status.Remote = &netv1alpha1.ClusterConfig{CIDR: netv1alpha1.ClusterConfigCIDR{Pod: "10.71.0.0/16", External: "10.72.0.0/16"}}
	apitest.Must(t, c.Status().Update(ctx, conf))
	gs := &netv1alpha1.GatewayServer{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: ns, Labels: labels},
		Spec: netv1alpha1.GatewayServerSpec{ServerTemplateRef: netv1alpha1.TemplateRef{Kind: "WgGatewayServerTemplate", Name: "wireguard-server"}}}
	apitest.Must(t, c.Create(ctx, gs))
	return conf, gs
}

// TestQuietWhenNothingChanges: agents whose Ready message lists several peerings not
// programmed yet settle: once their conditions are written, nothing is written again and
// nothing reconciles while no object changes (one agent's status write must not wake the
// others, and a message must not change with the order the watch cache lists objects in).
func TestQuietWhenNothingChanges(t *testing.T) {
	env := apitest.Start(t)
	c := env.Client
	ns := env.Namespace(t, "quiet")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := range 8 {
		apitest.Must(t, c.Create(ctx, &netv1alpha1.Configuration{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c%d", i), Namespace: ns,
			Labels: map[string]string{netv1alpha1.RemoteClusterIDLabel: fmt.Sprintf("cluster-%d", i)}},
			Spec: netv1alpha1.ConfigurationSpec{Remote: netv1alpha1.ClusterConfig{CIDR: netv1alpha1.ClusterConfigCIDR{Pod: "10.244.0.0/16", External: "10.70.0.0/16"}}}}))
	}
	var agents []*agent.Agent
	var nodes []*netv1alpha1.InternalNode
	for i := range 3 {
		in := &netv1alpha1.InternalNode{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-n%d", ns, i)},
			Spec: netv1alpha1.InternalNodeSpec{OverlayIP: ipp(fmt.Sprintf("10.80.0.%d", 11+i))}}
		apitest.Must(t, c.Create(ctx, in))
		t.Cleanup(func() { c.Delete(context.Background(), in) })
		nodes = append(nodes, in)
		a, err := agent.New(env.Config, agent.Options{
			Node:   plan.Node{Name: in.Name, IP: netip.AddrFrom4([4]byte{192, 168, 77, byte(1 + i)}), PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}},
			Resync: time.Hour,
			Log:    slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		}, kernel.NewFake(), nil)
		apitest.Must(t, err)
		agents = append(agents, a)
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- a.Run(runCtx) }()
		defer func() { stop(); <-done }()
	}
	// versions waits until every node's Ready condition lists the 8 waiting peerings, then
	// returns the nodes' resourceVersions and the agents' reconcile count.
	versions := func() (string, uint64) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			var rvs []string
			all := true
			for _, in := range nodes {
				got := &netv1alpha1.InternalNode{}
				apitest.Must(t, c.Get(ctx, client.ObjectKeyFromObject(in), got))
				cond := meta.FindStatusCondition(got.Status.Conditions, agent.ConditionReady)
				all = all && cond != nil && strings.Count(cond.Message, "not mapped yet") == 8
				rvs = append(rvs, got.ResourceVersion)
			}
			var n uint64
			for _, a := range agents {
				n += a.Stats().Reconciles
			}
			if all {
				return strings.Join(rvs, ","), n
			}
			if time.Now().After(deadline) {
				t.Fatal("the agents did not report the 8 peerings waiting")
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	versions()
	time.Sleep(time.Second) // the last writes' events arrive
	rv0, r0 := versions()
	time.Sleep(3 * time.Second)
	rv1, r1 := versions()
	if rv0 != rv1 || r1 != r0 {
		t.Errorf("with nothing changing, in 3 s: InternalNode versions %s -> %s, %d reconciles", rv0, rv1, r1-r0)
	}
}
