package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
)

// ActiveLabel marks the active replica's pod; the gateway Service selects it.
const ActiveLabel = "networking.liqo.io/active"

// Election configures active/standby among a gateway's replicas. The Lease is named after the
// gateway, in its namespace; the identity is the replica's pod name.
type Election struct {
	PodName  string
	NodeName string
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go's leader election timings;
	// defaults 6 s, 4 s and 0.5 s: a replica that dies without releasing the Lease is replaced
	// within about 6.5 s, one that stops gracefully within about 0.5 s.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
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
}

// RunElection campaigns for the gateway's Lease until ctx ends, calling onActive when this
// replica becomes the active one and onStandby when it stops being it. On ctx's end the Lease
// is released at once, so a standby takes over without waiting for it to expire.
func RunElection(ctx context.Context, cfg *rest.Config, namespace, gateway string, e Election, onActive func(), onStandby func()) error {
	e.defaults()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: namespace, Name: gateway},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: e.PodName},
	}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   e.LeaseDuration,
		RenewDeadline:   e.RenewDeadline,
		RetryPeriod:     e.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            gateway,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { onActive() },
			OnStoppedLeading: onStandby,
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	// Run returns when leadership is lost; campaign again until ctx ends.
	for ctx.Err() == nil {
		le.Run(ctx)
	}
	return nil
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
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: w.opts.Namespace, Name: e.PodName}}
	if err := w.client.Patch(ctx, pod, client.RawPatch(types.MergePatchType, podPatch)); err != nil {
		return fmt.Errorf("label pod %s/%s: %w", w.opts.Namespace, e.PodName, err)
	}
	if !active || podIP == "" {
		return nil
	}
	ie := map[string]any{"vtep": map[string]any{"ip": podIP, "mac": mac}}
	if e.NodeName != "" {
		ie["node"] = e.NodeName
	}
	statusPatch, _ := json.Marshal(map[string]any{"status": map[string]any{"internalEndpoint": ie}})
	var gw client.Object = &netv1alpha1.GatewayClient{}
	if w.opts.Server {
		gw = &netv1alpha1.GatewayServer{}
	}
	gw.SetNamespace(w.opts.Namespace)
	gw.SetName(w.opts.Name)
	if err := w.client.Status().Patch(ctx, gw, client.RawPatch(types.MergePatchType, statusPatch)); err != nil {
		return fmt.Errorf("publish the active VTEP in %s/%s: %w", w.opts.Namespace, w.opts.Name, err)
	}
	return nil
}
