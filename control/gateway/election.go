package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/connrotation"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/kube/restapi"
)

// ActiveLabel marks the active replica's pod; the gateway Service selects it.
const ActiveLabel = "networking.liqo.io/active"

// Election configures active/standby among a gateway's replicas. The Lease is named after the
// gateway, in its namespace; the identity is the replica's pod name.
type Election struct {
	PodName  string
	NodeName string
	// LeaseDuration: how long a standby waits, after the Lease was last renewed, before it
	// takes over (default 6 s). RetryPeriod: how often replicas renew or check the Lease
	// (default 0.5 s). RenewDeadline: how long one renewal may take (default 4 s).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// PostOutageGrace: after the API server was unreachable for this replica too, a standby
	// does not take over from a holder whose pod still runs until this long after it reached
	// the API server again (default 60 s). The holder most likely lost the API server as well
	// and is still forwarding; nodes regain it at different times (each node's kube-proxy must
	// see the API server's endpoint again), and a takeover then leaves two active replicas
	// until the old one hears of it.
	PostOutageGrace time.Duration
	// Log, if set, hears when the API server cannot be reached and when it can again.
	Log *slog.Logger
}

func (e *Election) defaults() {
	if e.LeaseDuration == 0 {
		e.LeaseDuration = 6 * time.Second
	}
	if e.RenewDeadline == 0 {
		e.RenewDeadline = 4 * time.Second
	}
	if e.RetryPeriod == 0 {
		e.RetryPeriod = 500 * time.Millisecond
	}
	if e.PostOutageGrace == 0 {
		e.PostOutageGrace = 60 * time.Second
	}
	if e.Log == nil {
		e.Log = slog.New(slog.DiscardHandler)
	}
}

// RunElection campaigns for the gateway's Lease until ctx ends, calling onActive when this
// replica becomes the active one and onStandby when it stops being it (one at a time, in
// order, on a goroutine of their own, so a slow callback does not delay renewals).
//
// Unlike client-go's leader election, the active replica does not step down when it cannot
// renew: a data plane must survive its control plane, and while the API server is unreachable
// nobody could take over anyway. It stays active until it sees another replica hold the Lease
// (which a standby takes once the Lease has not been renewed for LeaseDuration), or until ctx
// ends; then the Lease is released at once, so a standby takes over without waiting for it to
// expire. The price: if only the active replica loses the API server, a standby that still
// reaches it takes over after LeaseDuration and both are active until the first sees it.
func RunElection(ctx context.Context, cfg *rest.Config, namespace, gateway string, e Election, onActive func(), onStandby func()) error {
	e.defaults()
	// The Lease has its own connections, all closed after a failed try: a connection to an API
	// server that restarted can hang without anyone telling the client, and client-go would
	// reuse it for every renewal until its HTTP/2 health check gives up (30 s without a frame,
	// then a 15 s ping), while a standby with a fresh connection takes over after
	// LeaseDuration. The kubelet closes its heartbeat connections the same way.
	cfg = rest.CopyConfig(cfg)
	dialer := connrotation.NewDialer((&net.Dialer{Timeout: e.RenewDeadline, KeepAlive: 30 * time.Second}).DialContext)
	cfg.Dial = dialer.DialContext
	api, err := newClients(cfg)
	if err != nil {
		return err
	}
	el := &elector{leases: leasesClient{api.coord, namespace}, pods: podGetter{api.core, namespace}, name: gateway, e: e}
	calls := make(chan func(), 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for f := range calls {
			f()
		}
	}()
	active := false
	unreachable := false
	tick := time.NewTicker(e.RetryPeriod)
	defer tick.Stop()
	for {
		attempt, cancel := context.WithTimeout(ctx, e.RenewDeadline)
		held, other, err := el.try(attempt)
		cancel()
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			dialer.CloseAll()
		}
		switch {
		case err != nil && !unreachable:
			unreachable = true
			e.Log.Warn("cannot reach the API server for the gateway's Lease; staying as we are", "active", active, "err", err)
		case err == nil && unreachable:
			unreachable = false
			e.Log.Info("the API server answers again", "active", active, "holder", other)
		}
		switch {
		case held && !active:
			active = true
			calls <- onActive
		case !held && active && other != "":
			active = false
			e.Log.Warn("another replica holds the gateway's Lease: going standby", "holder", other)
			calls <- onStandby
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
			continue
		}
		break
	}
	if active {
		release, cancel := context.WithTimeout(context.Background(), e.RenewDeadline)
		el.release(release)
		cancel()
		calls <- onStandby
	}
	close(calls)
	<-done
	return nil
}

// elector reads and writes one Lease for one replica.
type elector struct {
	leases leasesClient
	pods   podGetter
	name   string
	e      Election
	// graceUntil: after a read failed, no takeover from a running holder before then.
	graceUntil time.Time
	// The record last seen and when (by this replica's clock: replicas' clocks may differ),
	// to tell when the holder stopped renewing. blind: the last read failed, so the time
	// since seenAt says nothing (the holder could not renew either); the next record read
	// starts the count again.
	seen   string
	seenAt time.Time
	blind  bool
	// selfFound: this replica's own pod was found by name in the Lease's namespace, so a
	// holder's pod that is not found there is gone (see trusted).
	selfFound, selfWarned bool
}

// try acquires or renews the Lease. held: this replica holds it now; other: the holder when
// another replica does (and has renewed within LeaseDuration); err: the API server did not
// answer, so nothing is known.
func (el *elector) try(ctx context.Context) (held bool, other string, err error) {
	now := time.Now()
	me := el.e.PodName
	lease, err := el.leases.Get(ctx, el.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: el.name}, Spec: el.spec(nil, now)}
		if _, err := el.leases.Create(ctx, lease, metav1.CreateOptions{}); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return false, "", nil // another replica created it first; the next try reads who
			}
			return false, "", err
		}
		return true, "", nil
	}
	if err != nil {
		el.blind = true
		return false, "", err
	}
	holder := ""
	if lease.Spec.HolderIdentity != nil {
		holder = *lease.Spec.HolderIdentity
	}
	record := holder + "@" + lease.ResourceVersion
	if el.blind {
		el.graceUntil = now.Add(el.e.PostOutageGrace)
	}
	unchanged := record == el.seen && !el.blind
	if !unchanged {
		el.seen, el.seenAt, el.blind = record, now, false
	}
	if holder != "" && holder != me {
		// A holder that did not renew since the last try and whose pod no longer exists
		// cannot be forwarding: take over now instead of after LeaseDuration. This is the
		// Lease a deleted gateway's pod left behind (a disconnect removes its RBAC before
		// it can release the Lease), found by the next connect's replica. A live holder
		// renews every RetryPeriod, so the pod is read only when a renewal is late.
		if unchanged && el.gone(ctx, holder) {
			el.e.Log.Info("the gateway's Lease is held by a pod that no longer exists: taking over", "holder", holder)
		} else if now.Before(el.seenAt.Add(el.e.LeaseDuration)) {
			return false, holder, nil
		}
		if now.Before(el.graceUntil) && el.running(ctx, holder) {
			return false, holder, nil
		}
	}
	// Ours to renew, released, or expired: write ourselves in. A conflict means another
	// replica wrote first; the next try reads who.
	lease.Spec = el.spec(&lease.Spec, now)
	if _, err := el.leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsConflict(err) {
			return false, "", nil
		}
		return false, "", err
	}
	return true, "", nil
}

// gone reports whether the holder's pod does not exist (when unsure: false).
func (el *elector) gone(ctx context.Context, holder string) bool {
	_, err := el.pods.Get(ctx, holder, metav1.GetOptions{})
	return apierrors.IsNotFound(err) && el.trusted(ctx)
}

// running reports whether the holder's pod still exists and runs (when unsure: true).
func (el *elector) running(ctx context.Context, holder string) bool {
	pod, err := el.pods.Get(ctx, holder, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return !el.trusted(ctx)
	case err != nil:
		return true
	}
	return pod.DeletionTimestamp == nil && pod.Status.Phase == corev1.PodRunning
}

// trusted reports whether a holder's pod that is not found is gone: only when this replica
// finds its own pod the same way, by its identity in the Lease's namespace. A replica whose
// identity is not its pod's name (--pod-name set to something else, a host name) or whose pods
// run in another namespace than --gateway-namespace would find no holder's pod, and take over
// from a live holder each time a renewal came a little late (a try that took longer than
// RetryPeriod is followed by one at once): two active replicas, back and forth.
func (el *elector) trusted(ctx context.Context) bool {
	if el.selfFound {
		return true
	}
	_, err := el.pods.Get(ctx, el.e.PodName, metav1.GetOptions{})
	switch {
	case err == nil:
		el.selfFound = true
	case apierrors.IsNotFound(err) && !el.selfWarned:
		el.selfWarned = true
		el.e.Log.Warn("this replica's pod is not found under its identity in the Lease's namespace: a holder whose pod is not found either is waited for (LeaseDuration) as if it still ran", "identity", el.e.PodName)
	}
	return el.selfFound
}

// spec is the Lease held by this replica from now, after old (nil for a new Lease).
func (el *elector) spec(old *coordinationv1.LeaseSpec, now time.Time) coordinationv1.LeaseSpec {
	me := el.e.PodName
	secs := int32(el.e.LeaseDuration.Round(time.Second) / time.Second)
	t := metav1.NewMicroTime(now)
	s := coordinationv1.LeaseSpec{HolderIdentity: &me, LeaseDurationSeconds: &secs, AcquireTime: &t, RenewTime: &t}
	if old == nil {
		return s
	}
	transitions := int32(0)
	if old.LeaseTransitions != nil {
		transitions = *old.LeaseTransitions
	}
	if old.HolderIdentity != nil && *old.HolderIdentity == me {
		s.AcquireTime = old.AcquireTime
	} else {
		transitions++
	}
	s.LeaseTransitions = &transitions
	return s
}

// release hands the Lease back (holder cleared) if this replica holds it, so a standby takes
// over at its next try.
func (el *elector) release(ctx context.Context) {
	lease, err := el.leases.Get(ctx, el.name, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != el.e.PodName {
		return
	}
	lease.Spec.HolderIdentity = nil
	one := int32(1)
	lease.Spec.LeaseDurationSeconds = &one
	_, _ = el.leases.Update(ctx, lease, metav1.UpdateOptions{})
}

// PublishActive labels this replica's pod as the active one and writes its VTEP (pod IP and
// overlay MAC) and node into the gateway's status.internalEndpoint; active false removes the
// label. It patches only those fields, so the controller's writes to the same status survive.
func (w *Watcher) PublishActive(ctx context.Context, e Election, active bool, podIP, mac string) error {
	label := map[string]any{ActiveLabel: nil}
	if active {
		label[ActiveLabel] = "true"
	}
	podPatch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": label}})
	if err := mergePatch(ctx, w.api.core, w.opts.Namespace, "pods", e.PodName, "", podPatch); err != nil {
		return fmt.Errorf("label pod %s/%s: %w", w.opts.Namespace, e.PodName, err)
	}
	if !active || podIP == "" {
		if !active {
			w.mu.Lock()
			w.published = nil
			w.mu.Unlock()
		}
		return nil
	}
	ie := map[string]any{"vtep": map[string]any{"ip": podIP, "mac": mac}}
	var node *netv1alpha1.VTEP
	if e.NodeName != "" {
		ie["node"] = e.NodeName
		// The node's own overlay endpoint, for the other nodes to relay through (null
		// removes one published before, when the node has none now).
		ie["nodeVTEP"] = nil
		if node = w.nodeVTEP(e.NodeName); node != nil {
			ie["nodeVTEP"] = map[string]any{"ip": node.IP, "mac": node.MAC}
		}
	}
	statusPatch, _ := json.Marshal(map[string]any{"status": map[string]any{"internalEndpoint": ie}})
	resource := "gatewayclients"
	if w.opts.Server {
		resource = "gatewayservers"
	}
	if err := mergePatch(ctx, w.api.net, w.opts.Namespace, resource, w.opts.Name, "status", statusPatch); err != nil {
		return fmt.Errorf("publish the active VTEP in %s/%s: %w", w.opts.Namespace, w.opts.Name, err)
	}
	w.mu.Lock()
	w.published = &published{e: e, podIP: podIP, mac: mac, node: node}
	w.mu.Unlock()
	return nil
}

// published is what PublishActive last wrote of an active replica.
type published struct {
	e          Election
	podIP, mac string
	node       *netv1alpha1.VTEP
}

// nodeVTEP is the overlay endpoint the agent of node name published (its InternalNode's
// status.vtep), nil when there is none yet.
func (w *Watcher) nodeVTEP(name string) *netv1alpha1.VTEP {
	if w.inodes == nil {
		return nil
	}
	n := restapi.Get[netv1alpha1.InternalNode](w.inodes, name)
	if n == nil || n.Status.VTEP == nil {
		return nil
	}
	v := *n.Status.VTEP
	return &v
}

// republish writes the active replica's status again when its node's overlay endpoint
// changed since it was published (the node's agent published it after the gateway became
// active, or the node's address changed).
func (w *Watcher) republish(ctx context.Context) {
	w.mu.Lock()
	p := w.published
	w.mu.Unlock()
	if p == nil {
		return
	}
	now := w.nodeVTEP(p.e.NodeName)
	if now == nil && p.node == nil || now != nil && p.node != nil && *now == *p.node {
		return
	}
	if err := w.PublishActive(ctx, p.e, true, p.podIP, p.mac); err != nil {
		w.opts.Log.Error("publishing the node's overlay endpoint", "err", err)
	}
}
