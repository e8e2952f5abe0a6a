package agent_test

import (
	"context"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/skein-net/skein/control/agent"
	"github.com/skein-net/skein/control/agent/plan"
	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/dataplane/kernel"
	"github.com/skein-net/skein/internal/apitest"
)

// TestMasqueradeCondition: the agent turns the kernel's count of masqueraded pod connections
// into its InternalNode's PodTrafficMasqueraded condition (NotSeen, then True when the count
// grows, also after the table was replaced and the count restarted), counts them for the
// metric, and with the bypass asks the kernel for it and says Bypassed.
func TestMasqueradeCondition(t *testing.T) {
	env := apitest.Start(t)
	c := env.Client
	ns := env.Namespace(t, "masq")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	_, gs := peering(ctx, t, c, ns)
	gs.Status.InternalEndpoint = &netv1alpha1.InternalEndpoint{IP: ipp("10.80.0.1"), VTEP: &netv1alpha1.VTEP{IP: "10.244.1.20", MAC: "02:5b:7a:69:e7:c7"}}
	apitest.Must(t, c.Status().Update(ctx, gs))

	run := func(node string, bypass bool, count *atomic.Uint64) (*agent.Agent, func() *kernel.HostSNAT) {
		in := &netv1alpha1.InternalNode{ObjectMeta: metav1.ObjectMeta{Name: node},
			Spec: netv1alpha1.InternalNodeSpec{OverlayIP: ipp("10.80.0.11"), ExternalIP: ipp("10.70.0.11")}}
		apitest.Must(t, c.Create(ctx, in))
		t.Cleanup(func() { c.Delete(context.Background(), in) })
		var snat atomic.Pointer[kernel.HostSNAT]
		a, err := agent.New(env.Config, agent.Options{
			Node: plan.Node{Name: node, IP: netip.MustParseAddr("192.168.77.1"), PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
				MasqueradeBypass: bypass},
			Resync:      200 * time.Millisecond,
			Log:         slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
			Masqueraded: func() (uint64, bool, error) { return count.Load(), true, nil },
		}, kernel.NewFake(), func(s *kernel.HostSNAT) error { snat.Store(s); return nil })
		apitest.Must(t, err)
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- a.Run(runCtx) }()
		t.Cleanup(func() { stop(); <-done })
		return a, snat.Load
	}
	condition := func(node, reason string) *metav1.Condition {
		t.Helper()
		var cond *metav1.Condition
		apitest.Eventually(t, node+": condition "+reason, 20*time.Second, func() bool {
			in := &netv1alpha1.InternalNode{}
			if c.Get(ctx, client.ObjectKey{Name: node}, in) != nil {
				return false
			}
			cond = meta.FindStatusCondition(in.Status.Conditions, agent.ConditionMasqueraded)
			return cond != nil && cond.Reason == reason
		})
		return cond
	}

	var count atomic.Uint64
	count.Store(7) // what the table counted before this agent started: history, not news
	plain, snat := run(ns+"-n1", false, &count)
	if cond := condition(ns+"-n1", "NotSeen"); cond.Status != metav1.ConditionFalse {
		t.Errorf("no masqueraded connection yet: %+v", cond)
	}
	if n := plain.Stats().Masqueraded; n != 0 {
		t.Errorf("the table's count at start (7) counted as %d new connections", n)
	}
	if s := snat(); s == nil || s.MasqueradeBypass {
		t.Errorf("host SNAT %+v, want one without the bypass", s)
	}
	count.Store(10)
	cond := condition(ns+"-n1", "MasqueradedByAnotherRule")
	if cond.Status != metav1.ConditionTrue || !strings.Contains(cond.Message, "agent.masqueradeBypass=true") {
		t.Errorf("after 3 masqueraded connections: %+v", cond)
	}
	apitest.Eventually(t, "3 counted", 10*time.Second, func() bool { return plain.Stats().Masqueraded == 3 })
	count.Store(2) // the table was replaced: its counter started again and saw 2 more
	apitest.Eventually(t, "5 counted", 10*time.Second, func() bool { return plain.Stats().Masqueraded == 5 })

	var none atomic.Uint64
	_, snat = run(ns+"-n2", true, &none)
	if cond := condition(ns+"-n2", "Bypassed"); cond.Status != metav1.ConditionFalse {
		t.Errorf("with the bypass: %+v", cond)
	}
	if s := snat(); s == nil || !s.MasqueradeBypass {
		t.Errorf("host SNAT %+v, want the bypass", s)
	}
	none.Store(4) // the bypass does not stop it (an earlier NAT rule, eBPF)
	if cond := condition(ns+"-n2", "MasqueradedDespiteBypass"); cond.Status != metav1.ConditionTrue {
		t.Errorf("masqueraded with the bypass on: %+v", cond)
	}
}
