package gateway_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/skein-net/skein/control/gateway"
	"github.com/skein-net/skein/internal/apitest"
)

// TestElectionAfterHungConnections: the active replica's connections to the API server hang
// (a restarted API server whose old connections nobody closes) while a standby still reaches
// it. After the API server answers again the active replica must renew before the standby's
// LeaseDuration runs out: with the dead HTTP/2 connection reused for every renewal it did
// not (client-go notices a dead connection only after its 30 s read-idle and 15 s ping
// timeouts), and the standby took over while the old active still forwarded: in the soak,
// gaps of 9.5 s and 44.9 s after API server restarts.
func TestElectionAfterHungConnections(t *testing.T) {
	env := apitest.Start(t)
	ns := env.Namespace(t, "election")
	proxy := env.Proxy(t)
	viaProxy, err := clientcmd.BuildConfigFromFlags("", proxy.KubeconfigFile(t, env))
	apitest.Must(t, err)
	e := gateway.Election{LeaseDuration: 10 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var aActive, bActive atomic.Bool
	run := func(name string, cfgHost bool, active *atomic.Bool) chan error {
		runningPod(ctx, t, env, ns, name)
		el := e
		el.PodName = name
		cfg := env.Config
		if cfgHost {
			cfg = viaProxy
		}
		done := make(chan error, 1)
		go func() {
			done <- gateway.RunElection(ctx, cfg, ns, "gw", el, func() { active.Store(true) }, func() { active.Store(false) })
		}()
		return done
	}
	doneA := run("rep-a", true, &aActive)
	apitest.Eventually(t, "rep-a active", 10*time.Second, aActive.Load)
	doneB := run("rep-b", false, &bActive)
	time.Sleep(2 * time.Second)
	if bActive.Load() {
		t.Fatal("rep-b took over from a healthy rep-a")
	}

	proxy.Freeze()
	time.Sleep(time.Second)
	proxy.ThawHung()
	thawed := time.Now()
	for time.Since(thawed) < 15*time.Second {
		if bActive.Load() {
			t.Fatalf("rep-b took over %v after the API server answered rep-a again: rep-a did not renew in time", time.Since(thawed).Round(100*time.Millisecond))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !aActive.Load() {
		t.Error("rep-a is not active")
	}
	cancel()
	<-doneA
	<-doneB
}

// TestElectionAfterSharedOutage: both replicas lose the API server; the standby gets it back
// first (its node's kube-proxy saw the API server's endpoint again sooner) while the active
// replica, still forwarding, gets it back later. The standby does not take over from a holder
// whose pod runs within PostOutageGrace (two active replicas flapped the tunnel for up to a
// minute in the soak); it does take over at once when the holder's pod is gone.
func TestElectionAfterSharedOutage(t *testing.T) {
	env := apitest.Start(t)
	ns := env.Namespace(t, "outage")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := gateway.Election{LeaseDuration: 3 * time.Second, RenewDeadline: time.Second, RetryPeriod: 300 * time.Millisecond, PostOutageGrace: 20 * time.Second}
	type replica struct {
		proxy  *apitest.Proxy
		active atomic.Bool
		done   chan error
	}
	start := func(name string) *replica {
		r := &replica{proxy: env.Proxy(t), done: make(chan error, 1)}
		cfg, err := clientcmd.BuildConfigFromFlags("", r.proxy.KubeconfigFile(t, env))
		apitest.Must(t, err)
		runningPod(ctx, t, env, ns, name)
		el := e
		el.PodName = name
		go func() {
			r.done <- gateway.RunElection(ctx, cfg, ns, "gw", el, func() { r.active.Store(true) }, func() { r.active.Store(false) })
		}()
		return r
	}
	a := start("rep-a")
	apitest.Eventually(t, "rep-a active", 10*time.Second, a.active.Load)
	b := start("rep-b")
	time.Sleep(time.Second)

	outage := func() {
		a.proxy.Freeze()
		b.proxy.Freeze()
		time.Sleep(2 * time.Second)
		b.proxy.Thaw() // the standby's node first
	}
	outage()
	for deadline := time.Now().Add(8 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if b.active.Load() {
			t.Fatal("rep-b took over from rep-a, whose pod runs, right after an outage both had")
		}
	}
	a.proxy.Thaw()
	time.Sleep(3 * time.Second)
	if !a.active.Load() || b.active.Load() {
		t.Fatalf("after rep-a got the API server back: a active %v, b active %v", a.active.Load(), b.active.Load())
	}

	// The same outage, but rep-a's pod is gone: rep-b takes over without waiting for the grace.
	outage()
	apitest.Must(t, env.Client.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "rep-a", Namespace: ns}}))
	apitest.Eventually(t, "rep-b takes over from a holder whose pod is gone", 10*time.Second, b.active.Load)
	a.proxy.Thaw()
	cancel()
	<-a.done
	<-b.done
}

// runningPod creates a replica's pod, Running: every replica has one in a cluster, and the
// election reads the holder's.
func runningPod(ctx context.Context, t *testing.T, env *apitest.Env, ns, name string) {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "gateway", Image: "skein-gateway"}}}}
	apitest.Must(t, env.Client.Create(ctx, pod))
	pod.Status.Phase = corev1.PodRunning
	apitest.Must(t, env.Client.Status().Update(ctx, pod))
}

// TestElectionLeaseOfDeletedPod: a disconnect deletes the gateway (its pods and RBAC) but not
// the Lease, whose holder, a pod that no longer exists, could not release it; the next connect
// recreates the gateway under the same name. Its replica takes the Lease over as soon as it
// sees nobody renews it, not after LeaseDuration (connect waited 6 s for it on each side).
// A holder whose pod exists but stopped renewing still gets its LeaseDuration.
func TestElectionLeaseOfDeletedPod(t *testing.T) {
	env := apitest.Start(t)
	ns := env.Namespace(t, "leftover")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const leaseDuration = 30 * time.Second
	e := gateway.Election{LeaseDuration: leaseDuration, RenewDeadline: 2 * time.Second, RetryPeriod: 300 * time.Millisecond}
	leftover := func(name, holder string) {
		now := metav1.NewMicroTime(time.Now())
		secs := int32(leaseDuration / time.Second)
		apitest.Must(t, env.Client.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now}}))
	}
	elect := func(gw, pod string) (*atomic.Bool, chan error) {
		runningPod(ctx, t, env, ns, pod)
		var active atomic.Bool
		el := e
		el.PodName = pod
		done := make(chan error, 1)
		go func() {
			done <- gateway.RunElection(ctx, env.Config, ns, gw, el, func() { active.Store(true) }, func() { active.Store(false) })
		}()
		return &active, done
	}

	leftover("gw-new", "gw-old-pod-deleted")
	start := time.Now()
	active, done := elect("gw-new", "gw-new-pod")
	apitest.Eventually(t, "the new replica holds the Lease its deleted predecessor left", leaseDuration/3, active.Load)
	t.Logf("took over the Lease of a deleted pod in %v (LeaseDuration %v)", time.Since(start).Round(10*time.Millisecond), leaseDuration)

	// The holder's pod exists (it may still be forwarding): no early takeover.
	runningPod(ctx, t, env, ns, "gw-silent-pod")
	leftover("gw-silent", "gw-silent-pod")
	other, otherDone := elect("gw-silent", "gw-standby-pod")
	time.Sleep(3 * time.Second)
	if other.Load() {
		t.Error("a standby took the Lease of a holder whose pod exists before LeaseDuration")
	}
	cancel()
	<-done
	<-otherDone
}

// TestElectionNoEarlyTakeoverWhenUnsure: a standby takes a silent holder's Lease before
// LeaseDuration only when the holder's pod is surely gone. The holder's identity is a string
// anyone who may write the Lease sets; a NotFound is proof only when the standby finds its own
// pod the same way; a forbidden or malformed read is no proof at all. Otherwise a replica that
// takes over whenever a live holder's renewal is late makes two active gateways. Each case
// gets its own Lease and standby, LeaseDuration 30 s; none may take over within 3 s, while a
// standby whose holder's pod is gone (the control) does.
func TestElectionNoEarlyTakeoverWhenUnsure(t *testing.T) {
	env := apitest.Start(t)
	ns := env.Namespace(t, "unsure")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const leaseDuration = 30 * time.Second
	e := gateway.Election{LeaseDuration: leaseDuration, RenewDeadline: 2 * time.Second, RetryPeriod: 300 * time.Millisecond}
	leftover := func(name, holder string) {
		now := metav1.NewMicroTime(time.Now())
		secs := int32(leaseDuration / time.Second)
		apitest.Must(t, env.Client.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now}}))
	}
	var dones []chan error
	elect := func(gw, pod string, cfg *rest.Config) *atomic.Bool {
		var active atomic.Bool
		el := e
		el.PodName = pod
		done := make(chan error, 1)
		dones = append(dones, done)
		go func() {
			done <- gateway.RunElection(ctx, cfg, ns, gw, el, func() { active.Store(true) }, func() { active.Store(false) })
		}()
		return &active
	}

	// A standby that may read Leases but not Pods: every holder's pod is Forbidden.
	noPods := rest.CopyConfig(env.Config)
	noPods.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":no-pods"}
	apitest.Must(t, env.Client.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "leases-only", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}}}}))
	apitest.Must(t, env.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "leases-only", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "leases-only"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: noPods.Impersonate.UserName}}}))
	// A holder whose pod is being deleted (held by a finalizer): it may still be forwarding.
	terminating := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "gw-terminating-pod", Namespace: ns, Finalizers: []string{"skein.test/hold"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "gateway", Image: "skein-gateway"}}}}
	apitest.Must(t, env.Client.Create(ctx, terminating))
	apitest.Must(t, env.Client.Delete(ctx, terminating))
	t.Cleanup(func() {
		terminating.Finalizers = nil
		_ = env.Client.Patch(context.Background(), terminating, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	})

	unsure := map[string]*atomic.Bool{}
	for _, c := range []struct {
		what, holder, standby string
		standbyPod            bool
		cfg                   *rest.Config
	}{
		{"a standby that may not read pods", "gw-gone-pod-1", "gw-standby-1", true, noPods},
		{"a holder named with a namespace (ns/pod)", "other-ns/gw-pod", "gw-standby-2", true, env.Config},
		{"a holder whose pod is being deleted", terminating.Name, "gw-standby-3", true, env.Config},
		{"a standby whose identity is not its pod's name", "gw-gone-pod-4", "node-4.example", false, env.Config},
	} {
		gw := fmt.Sprintf("gw-%d", len(unsure)+1)
		leftover(gw, c.holder)
		if c.standbyPod {
			runningPod(ctx, t, env, ns, c.standby)
		}
		unsure[c.what] = elect(gw, c.standby, c.cfg)
	}
	leftover("gw-control", "gw-gone-pod-control")
	runningPod(ctx, t, env, ns, "gw-standby-control")
	control := elect("gw-control", "gw-standby-control", env.Config)

	start := time.Now()
	apitest.Eventually(t, "the control takes over from a holder whose pod is gone", 10*time.Second, control.Load)
	time.Sleep(max(0, 3*time.Second-time.Since(start)))
	for what, active := range unsure {
		if active.Load() {
			t.Errorf("%s: took over a silent holder's Lease before LeaseDuration", what)
		}
	}
	cancel()
	for _, d := range dones {
		<-d
	}
}
