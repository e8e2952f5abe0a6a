// Package agent is skein-agent's loop: it watches the node's InternalNode, every
// Configuration and every gateway, computes the node's desired state (control/agent/plan),
// reconciles the kernel to it (dataplane/kernel), publishes the node's VTEP in its
// InternalNode, and repairs drift with a periodic resync.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"github.com/skein-net/skein/control/agent/apiclient"
	"github.com/skein-net/skein/control/agent/plan"
	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/kube/restapi"
	"github.com/skein-net/skein/dataplane/kernel"
	"github.com/skein-net/skein/dataplane/overlay"
)

var errWaiting = errors.New("not there yet")

// MACAnnotation is the annotation of the agent's pod holding its overlay device's MAC.
const MACAnnotation = "net.liqo.io/vxlan.mac"

// SNAT programs (non-nil) or removes (nil) the host-network SNAT.
type SNAT func(*kernel.HostSNAT) error

// Options configure the agent.
type Options struct {
	Node plan.Node
	// PodNamespace and PodName name the agent's own pod when it runs as one; it is annotated
	// with the overlay device's MAC (MACAnnotation), as Liqo-Route does.
	PodNamespace, PodName string
	// Resync reconciles this often without events, repairing drift (default 10 s).
	Resync time.Duration
	// Monitor, if set, subscribes to kernel changes (kernel.Monitor) and calls changed for
	// each, so drift is repaired at once; it must return once subscribed.
	Monitor func(changed func(), done <-chan struct{}) error
	// Masqueraded, if set, reads the count of pod connections to peers that another rule of
	// the node source-NATed (kernel.MasqueradedConnections); ok is false when there is no
	// count (no host SNAT table). The agent reports them in its InternalNode's
	// PodTrafficMasqueraded condition.
	Masqueraded func() (n uint64, ok bool, err error)
	// LocalNetworks, if set, reads the networks the node has addresses in (the overlay device's
	// excepted) before each plan: a peer's CIDR overlapping one is not routed.
	LocalNetworks func() ([]netip.Prefix, error)
	Log           *slog.Logger
}

// Stats are the agent's counters, for metrics.
type Stats struct {
	Reconciles, Changes, DriftRepairs, Errors uint64
	Programmed                                int // peers programmed
	// Refused are remote CIDRs left unrouted because they would take this node's own traffic.
	Refused     int
	LastLatency time.Duration
	// LastSuccess is when a reconcile last ended without an error (waiting for objects the
	// controller or a gateway has yet to create counts as success: the node is as it should be).
	LastSuccess time.Time
	// Masqueraded counts pod connections to peers that left source-NATed by a rule that is not
	// skein's (Options.Masqueraded), since the agent started.
	Masqueraded uint64
}

// Agent reconciles one node.
type Agent struct {
	opts   Options
	client *apiclient.Client
	// Watch caches of InternalNodes, Configurations, GatewayServers and GatewayClients; vteps
	// holds every node's VTEP (the overlay guard's senders).
	nodes, vteps, confs, servers, clients *restapi.Informer
	k                                     kernel.Kernel
	snat                                  SNAT
	poke                                  chan struct{}
	drift                                 chan struct{}

	mu        sync.Mutex
	stats     Stats
	lastErr   string
	published string   // VTEP last written
	refused   []string // the last plan's refused CIDRs, logged when they change
	lastEvent time.Time
	started   time.Time // Run began
	masq      masqueradeWatch
	lastSNAT  *kernel.HostSNAT // the host SNAT last applied
}

// New prepares an agent on kernel k; snat may be nil (no host-network SNAT).
func New(cfg *rest.Config, opts Options, k kernel.Kernel, snat SNAT) (*Agent, error) {
	if ip := opts.Node.IP; opts.Node.Name == "" || !ip.IsValid() || ip.Is4In6() || ip.Zone() != "" || ip.IsUnspecified() {
		return nil, errors.New("agent: the node's name and its IPv4 or IPv6 underlay address are required")
	}
	if opts.Resync == 0 {
		opts.Resync = 10 * time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	c, err := apiclient.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	a := &Agent{opts: opts, client: c, k: k, snat: snat, poke: make(chan struct{}, 1), drift: make(chan struct{}, 1)}
	// Only the node's own InternalNode: another node's status writes must not wake this agent.
	if a.nodes, err = c.WatchNamed("internalnodes", opts.Node.Name, &netv1alpha1.InternalNode{}, a.wake); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	// Every node's VTEP: other nodes wake this agent only when the set of addresses changes.
	if a.vteps, err = c.WatchVTEPs(a.wake); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	for _, w := range []struct {
		inf      **restapi.Informer
		resource string
		obj      runtime.Object
	}{
		{&a.confs, "configurations", &netv1alpha1.Configuration{}},
		{&a.servers, "gatewayservers", &netv1alpha1.GatewayServer{}},
		{&a.clients, "gatewayclients", &netv1alpha1.GatewayClient{}},
	} {
		if *w.inf, err = c.Watch(w.resource, w.obj, a.wake); err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
	}
	return a, nil
}

// Health reports whether the agent keeps its node programmed: an error once no reconcile has
// succeeded for two resync periods and a half (it cannot program the kernel, or cannot reach
// the API to publish what it must), with the last error. A starting agent has that long too.
func (a *Agent) Health(now time.Time) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	grace := 5 * a.opts.Resync / 2
	last := a.stats.LastSuccess
	if last.IsZero() {
		if a.started.IsZero() || now.Sub(a.started) <= grace {
			return nil
		}
		return fmt.Errorf("no successful reconcile in the %v since the agent started; last error: %s", now.Sub(a.started).Round(time.Second), a.lastErr)
	}
	if since := now.Sub(last); since > grace {
		return fmt.Errorf("no successful reconcile for %v; last error: %s", since.Round(time.Second), a.lastErr)
	}
	return nil
}

// Stats returns the counters.
func (a *Agent) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats
}

func (a *Agent) wake() {
	a.mu.Lock()
	a.lastEvent = time.Now()
	a.mu.Unlock()
	select {
	case a.poke <- struct{}{}:
	default:
	}
}

// Run reconciles until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	a.mu.Lock()
	a.started = time.Now()
	a.mu.Unlock()
	if err := restapi.Start(ctx, a.nodes, a.vteps, a.confs, a.servers, a.clients); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("agent: %w", err)
	}
	if a.opts.Monitor != nil {
		err := a.opts.Monitor(func() {
			select {
			case a.drift <- struct{}{}:
			default:
			}
		}, ctx.Done())
		if err != nil {
			a.opts.Log.Warn("kernel monitoring unavailable; drift is repaired on resync only", "err", err)
		}
	}
	tick := time.NewTicker(a.opts.Resync)
	defer tick.Stop()
	a.wake()
	for {
		resync := false
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			resync = true
		case <-a.drift:
			resync = true // a kernel change: what it changes is drift
		case <-a.poke:
		}
		a.reconcile(ctx, resync)
	}
}

// reconcile computes and applies the node's state once.
func (a *Agent) reconcile(ctx context.Context, resync bool) {
	start := time.Now()
	out, err := a.apply(ctx)
	ch, peers := out.changes, out.peers
	a.writeConditions(ctx, err, out)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stats.Reconciles++
	a.stats.Changes += uint64(ch.Total())
	if resync && ch.Total() > 0 {
		a.stats.DriftRepairs++
		a.opts.Log.Warn("repaired drift in the kernel", "changes", ch.Total())
	}
	if !a.lastEvent.IsZero() && !resync {
		a.stats.LastLatency = time.Since(a.lastEvent)
	} else {
		a.stats.LastLatency = time.Since(start)
	}
	a.stats.Programmed = peers
	msg := ""
	waiting := errors.Is(err, errWaiting) || errors.Is(err, plan.ErrNoOverlayIP)
	if err != nil {
		a.stats.Errors++
		msg = err.Error()
	}
	if err == nil || waiting {
		a.stats.LastSuccess = time.Now()
	}
	if msg != a.lastErr {
		switch {
		case waiting:
			a.opts.Log.Info("waiting", "for", msg)
		case err != nil:
			a.opts.Log.Error("reconcile", "err", msg)
		default:
			a.opts.Log.Info("node programmed", "peers", peers)
		}
		a.lastErr = msg
	}
}

// outcome is what one apply did and found, for the counters and the InternalNode's conditions.
type outcome struct {
	changes kernel.Changes
	peers   int               // peerings programmed
	masq    *metav1.Condition // PodTrafficMasqueraded (nil: no reading)
	// The plan's peerings not programmed yet and remote CIDRs left unrouted.
	waiting, refused []string
}

// apply computes the node's plan and programs it.
func (a *Agent) apply(ctx context.Context) (outcome, error) {
	var out outcome
	in := restapi.Get[netv1alpha1.InternalNode](a.nodes, a.opts.Node.Name)
	if in == nil {
		return out, fmt.Errorf("%w: InternalNode %s (created by skein-controller)", errWaiting, a.opts.Node.Name)
	}
	o := plan.Objects{InternalNode: in}
	for _, n := range restapi.List[netv1alpha1.InternalNode](a.vteps) {
		o.Nodes = append(o.Nodes, *n)
	}
	for _, c := range restapi.List[netv1alpha1.Configuration](a.confs) {
		o.Configurations = append(o.Configurations, *c)
	}
	for _, g := range restapi.List[netv1alpha1.GatewayServer](a.servers) {
		o.Servers = append(o.Servers, *g)
	}
	for _, g := range restapi.List[netv1alpha1.GatewayClient](a.clients) {
		o.Clients = append(o.Clients, *g)
	}
	node := a.opts.Node
	if a.opts.LocalNetworks != nil {
		nets, err := a.opts.LocalNetworks()
		if err != nil {
			return out, fmt.Errorf("reading the node's networks: %w", err)
		}
		node.LocalNetworks = nets
	}
	plan, err := plan.FromObjects(node, o)
	if err != nil {
		return out, err
	}
	a.noteRefused(plan.Refused)
	out.waiting, out.refused = plan.Waiting, plan.Refused
	if len(plan.Kernel.Peers) == 0 {
		// No active peering: nothing of ours belongs on the node.
		if l, _ := a.k.Link(plan.Kernel.Overlay.Name); l != nil {
			out.changes.Links++
		}
		err := kernel.Cleanup(a.k, plan.Kernel.Overlay.Name, plan.Kernel.Overlay.VNI)
		if a.snat != nil {
			err = errors.Join(err, a.snat(nil))
		}
		return out, err
	}
	// The nftables tables first: they hold the overlay guard, and a device that takes frames
	// must never be up without it (a kernel that refuses the guard's rules leaves the node
	// unprogrammed, and the error says why). They name the device, which need not exist yet.
	if a.snat != nil {
		if err := a.snat(plan.SNAT); err != nil {
			return out, err
		}
		a.mu.Lock()
		if !reflect.DeepEqual(plan.SNAT, a.lastSNAT) {
			a.masq.replaced() // another table, another count
			a.lastSNAT = plan.SNAT
		}
		a.mu.Unlock()
	}
	if out.changes, err = kernel.Reconcile(a.k, plan.Kernel); err != nil {
		return out, err
	}
	out.peers = len(plan.Kernel.Peers)
	if err := a.publish(ctx, plan.Kernel.Overlay); err != nil {
		return out, err
	}
	out.masq, err = a.watchMasquerade(plan.SNAT != nil && plan.SNAT.MasqueradeBypass)
	return out, err
}

// ConditionReady is the InternalNode condition the agent reports: True when the node holds
// what the plan says (reason Programmed, or NoPeering when there is nothing to program),
// False while the agent waits for an object (Waiting) or failed to program the node (Error).
// Its message lists the remote CIDRs the plan left unrouted.
const ConditionReady = netv1alpha1.ConditionReady

// readyCondition is the Ready condition for the outcome of one reconcile.
func readyCondition(err error, peers int, waiting, refused []string) metav1.Condition {
	c := metav1.Condition{Type: ConditionReady}
	switch {
	case errors.Is(err, errWaiting) || errors.Is(err, plan.ErrNoOverlayIP):
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, "Waiting", "waiting for "+err.Error()
	case err != nil:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, "Error", err.Error()
	case peers == 0:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, "NoPeering", "no active peering: nothing of skein's on the node"
	default:
		c.Status, c.Reason = metav1.ConditionTrue, "Programmed"
		c.Message = fmt.Sprintf("the overlay device, the routes and the rules to %d peering(s) are programmed", peers)
	}
	if err == nil && len(waiting) > 0 {
		c.Message += "; not programmed yet: " + strings.Join(waiting, "; ")
	}
	if len(refused) > 0 {
		c.Message += "; left unrouted because they would take the node's own traffic: " + strings.Join(refused, "; ")
	}
	if len(c.Message) > maxMessage {
		c.Message = c.Message[:maxMessage-3] + "..."
	}
	return c
}

// maxMessage bounds a condition's message (the API allows 32768 bytes; a cluster with many
// peerings would otherwise write them all on every change).
const maxMessage = 4096

// writeConditions writes the Ready condition for this reconcile's outcome and its
// PodTrafficMasqueraded condition (when read) into the InternalNode's status, in one patch and
// only when one of them changed.
func (a *Agent) writeConditions(ctx context.Context, err error, out outcome) {
	in := restapi.Get[netv1alpha1.InternalNode](a.nodes, a.opts.Node.Name)
	if in == nil {
		return
	}
	wants := []metav1.Condition{readyCondition(err, out.peers, out.waiting, out.refused)}
	if out.masq != nil {
		wants = append(wants, *out.masq)
	}
	conds := append([]metav1.Condition(nil), in.Status.Conditions...)
	changed := false
	for _, want := range wants {
		if old := meta.FindStatusCondition(conds, want.Type); old != nil && old.Status == want.Status && old.Reason == want.Reason &&
			old.Message == want.Message && old.ObservedGeneration == in.Generation {
			continue
		}
		want.ObservedGeneration = in.Generation
		meta.SetStatusCondition(&conds, want)
		changed = true
	}
	if !changed {
		return
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": conds}})
	if err := a.client.PatchStatus(ctx, "internalnodes", a.opts.Node.Name, patch); err != nil {
		a.opts.Log.Warn("writing the InternalNode's conditions", "err", err)
	}
}

// noteRefused counts the CIDRs the plan refused and logs them when the list changes.
func (a *Agent) noteRefused(refused []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stats.Refused = len(refused)
	if slices.Equal(refused, a.refused) {
		return
	}
	a.refused = slices.Clone(refused)
	for _, r := range refused {
		a.opts.Log.Warn("not routing a remote CIDR: it would take this node's own traffic", "cidr", r)
	}
}

// publish writes the node's VTEP (underlay IP, device MAC) into its InternalNode's status.
func (a *Agent) publish(ctx context.Context, o kernel.Overlay) error {
	l, err := a.k.Link(o.Name)
	if err != nil || l == nil {
		return fmt.Errorf("reading %s to publish the VTEP: %v", o.Name, err)
	}
	vtep := netv1alpha1.VTEP{IP: netv1alpha1.IP(o.Local.String()), MAC: netv1alpha1.MAC(overlay.MACString(l.MAC))}
	key := string(vtep.IP) + " " + string(vtep.MAC)
	a.mu.Lock()
	same := a.published == key
	a.mu.Unlock()
	if same {
		return nil
	}
	// The pod's annotation first: whoever sees the VTEP in the InternalNode sees it too.
	if a.opts.PodName != "" && a.opts.PodNamespace != "" {
		ann, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{MACAnnotation: string(vtep.MAC)}}})
		if err := a.client.PatchPod(ctx, a.opts.PodNamespace, a.opts.PodName, ann); err != nil {
			return fmt.Errorf("annotate pod %s/%s with the overlay MAC: %w", a.opts.PodNamespace, a.opts.PodName, err)
		}
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"vtep": vtep}})
	if err := a.client.PatchStatus(ctx, "internalnodes", a.opts.Node.Name, patch); err != nil {
		return fmt.Errorf("publish VTEP in InternalNode %s: %w", a.opts.Node.Name, err)
	}
	a.mu.Lock()
	a.published = key
	a.mu.Unlock()
	return nil
}
