// Watcher is the in-cluster gateway's view of the API: it watches the objects a
// gateway is configured from (its GatewayServer or GatewayClient, the remote cluster's
// Configuration and PublicKey, its key Secret, InternalNodes, Nodes and optionally Pods),
// translates them with FromObjects whenever one changes, hands the result to the
// gateway, and keeps the gateway's Connection object and its status current.

package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/gateway/config"
	"github.com/skein-net/skein/control/kube/restapi"
)

// Options say which gateway this is.
type Options struct {
	// Namespace and Name of the GatewayServer (Server true) or GatewayClient.
	Namespace, Name string
	Server          bool
	// Local is what the gateway knows of itself (pod IP, overlay settings, ...).
	Local Local
	// WatchPods adds /32 routes for pods outside their node's pod CIDRs; it watches every
	// Pod of the cluster, so leave it off where nodes have pod CIDRs.
	WatchPods bool
	// Resync re-reads everything this often even without events (default 30 s).
	Resync time.Duration
	// EndpointHold is how long a client's server may stay silent before the client dials the
	// next of the GatewayClient's addresses, or resolves its name again (default 30 s: longer
	// than a reconnect's 15 s, so a peer's failover is not mistaken for a dead address).
	EndpointHold time.Duration
	Log          *slog.Logger
}

// Apply receives each new configuration; an error is logged and retried at the next change
// or resync.
type Apply func(*config.Gateway) error

// Watcher watches and applies.
type Watcher struct {
	opts   Options
	api    *clients
	pods   *podWatch // with WatchPods
	podBuf []PodAddr // reused by each reconcile (they run one at a time)
	apply  Apply
	poke   chan struct{}

	// The informers of the kinds gather reads: the gateway's own kind, the Configurations,
	// PublicKeys of its namespace, its key Secret, every InternalNode and Node (slimmed).
	gateway, confs, keys, secrets, inodes, nodes *restapi.Informer

	endpoint atomic.Int64 // Local.EndpointIndex

	mu        sync.Mutex
	lastErr   string
	conn      *netv1alpha1.ConnectionStatus // last reported, to skip no-op updates
	published *published                    // the active replica's status, as last written
}

// New prepares a watcher; Run starts it.
func New(cfg *rest.Config, opts Options, apply Apply) (*Watcher, error) {
	if opts.Namespace == "" || opts.Name == "" {
		return nil, errors.New("gateway watcher: the gateway's namespace and name are required")
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Resync == 0 {
		opts.Resync = 30 * time.Second
	}
	if opts.EndpointHold == 0 {
		opts.EndpointHold = 30 * time.Second
	}
	if opts.Local.Resolve == nil {
		opts.Local.Resolve = func(host string) (netip.Addr, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip4", host)
			if err != nil {
				return netip.Addr{}, err
			}
			return addrs[0], nil
		}
	}
	api, err := newClients(cfg)
	if err != nil {
		return nil, fmt.Errorf("gateway watcher: %w", err)
	}
	w := &Watcher{opts: opts, api: api, apply: apply, poke: make(chan struct{}, 1)}
	inNS := restapi.Watch{Namespace: opts.Namespace}
	// The gateway may read its own key Secret alone (its Role names it), so it watches that one
	// Secret by name: a list or watch the Role allows by name must select the name.
	ownKey := restapi.Watch{Namespace: opts.Namespace, Fields: fields.OneTermEqualSelector("metadata.name", config.KeySecretName(opts.Name))}
	gwResource, gwObj := "gatewayclients", runtime.Object(&netv1alpha1.GatewayClient{})
	if opts.Server {
		gwResource, gwObj = "gatewayservers", &netv1alpha1.GatewayServer{}
	}
	for _, i := range []struct {
		inf      **restapi.Informer
		rc       rest.Interface
		resource string
		obj      runtime.Object
		w        restapi.Watch
	}{
		{&w.gateway, api.net, gwResource, gwObj, inNS},
		{&w.confs, api.net, "configurations", &netv1alpha1.Configuration{}, inNS},
		{&w.keys, api.net, "publickeys", &netv1alpha1.PublicKey{}, inNS},
		{&w.secrets, api.core, "secrets", &corev1.Secret{}, ownKey},
		{&w.inodes, api.net, "internalnodes", &netv1alpha1.InternalNode{}, restapi.Watch{}},
		{&w.nodes, api.core, "nodes", &corev1.Node{}, restapi.Watch{Transform: slimNode}},
	} {
		if *i.inf, err = restapi.NewInformer(i.rc, i.resource, i.obj, i.w, w.wake); err != nil {
			return nil, fmt.Errorf("gateway watcher: %w", err)
		}
	}
	if opts.WatchPods {
		pods, err := newPodsClient(cfg)
		if err != nil {
			return nil, fmt.Errorf("gateway watcher: %w", err)
		}
		w.pods = newPodWatch(pods, w.wake, opts.Log)
	}
	return w, nil
}

func (w *Watcher) wake() {
	select {
	case w.poke <- struct{}{}:
	default:
	}
}

// Run watches until ctx ends.
func (w *Watcher) Run(ctx context.Context) error {
	if w.pods != nil {
		go w.pods.run(ctx)
	}
	if err := restapi.Start(ctx, w.gateway, w.confs, w.keys, w.secrets, w.inodes, w.nodes); err != nil {
		return fmt.Errorf("gateway watcher: %w", err)
	}
	if w.pods != nil {
		// Start with every pod's route, as with the other kinds.
		if err := w.pods.waitSynced(ctx); err != nil {
			return fmt.Errorf("gateway watcher: %w", err)
		}
	}
	ticker := time.NewTicker(w.opts.Resync)
	defer ticker.Stop()
	w.wake()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		case <-w.poke:
			// Let a burst of events settle into one reconcile.
			select {
			case <-time.After(50 * time.Millisecond):
			case <-ctx.Done():
				return nil
			}
		}
		w.reconcile(ctx)
	}
}

// NextEndpoint makes a client dial the next of its GatewayClient's addresses (the first
// again after the last), resolving a name again, at once: the server has not answered at the
// one it dials (a NAT's address that changed, a load balancer's address that moved, one of
// several addresses unreachable from here).
func (w *Watcher) NextEndpoint() {
	n := w.endpoint.Add(1)
	w.opts.Log.Warn("the gateway server does not answer: dialing its next address (or resolving its name again)", "endpointIndex", n)
	w.wake()
}

// EndpointHold is Options.EndpointHold with its default.
func (w *Watcher) EndpointHold() time.Duration { return w.opts.EndpointHold }

// reconcile reads everything from the cache, translates and applies.
func (w *Watcher) reconcile(ctx context.Context) {
	o, err := w.gather(ctx)
	var g *config.Gateway
	if err == nil {
		local := w.opts.Local
		local.EndpointIndex = int(w.endpoint.Load())
		g, err = FromObjects(o, local)
	}
	if err == nil {
		err = w.apply(g)
	}
	if err == nil {
		err = w.ensureConnection(ctx, gatewayMeta(o))
	}
	w.republish(ctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg != w.lastErr {
		switch {
		case err == nil:
			w.opts.Log.Info("gateway configured from the API")
		case errors.Is(err, ErrNotReady):
			w.opts.Log.Info("waiting", "for", msg)
		default:
			w.opts.Log.Error("cannot configure the gateway", "err", msg)
		}
		w.lastErr = msg
	}
}

// gather collects the objects for FromObjects from the informers' caches. What it hands on is
// the caches' own, and FromObjects only reads it: Nodes are shallow copies (5,000 Nodes at the
// scalability limits).
func (w *Watcher) gather(ctx context.Context) (Objects, error) {
	var o Objects
	key := w.opts.Namespace + "/" + w.opts.Name
	var meta *metav1.ObjectMeta
	var secretRef *netv1alpha1.ObjectRef
	if w.opts.Server {
		gs := restapi.Get[netv1alpha1.GatewayServer](w.gateway, key)
		if gs == nil {
			return o, fmt.Errorf("%w: GatewayServer %s does not exist", ErrNotReady, key)
		}
		o.Server, meta, secretRef = gs, &gs.ObjectMeta, gs.Status.SecretRef
	} else {
		gc := restapi.Get[netv1alpha1.GatewayClient](w.gateway, key)
		if gc == nil {
			return o, fmt.Errorf("%w: GatewayClient %s does not exist", ErrNotReady, key)
		}
		o.Client, meta, secretRef = gc, &gc.ObjectMeta, gc.Status.SecretRef
	}
	remote := meta.Labels[netv1alpha1.RemoteClusterIDLabel]
	if remote == "" {
		return o, fmt.Errorf("%s has no %s label: which peer is it for?", key, netv1alpha1.RemoteClusterIDLabel)
	}
	byRemote := labels.SelectorFromSet(labels.Set{netv1alpha1.RemoteClusterIDLabel: remote})
	confs := matching(restapi.List[netv1alpha1.Configuration](w.confs), byRemote)
	switch len(confs) {
	case 0:
	case 1:
		o.Configuration = confs[0]
	default:
		return o, fmt.Errorf("%d Configurations for cluster %s in %s; there must be one", len(confs), remote, w.opts.Namespace)
	}
	peerKeys := labels.SelectorFromSet(labels.Set{netv1alpha1.RemoteClusterIDLabel: remote, netv1alpha1.GatewayResourceLabel: "true"})
	keys := matching(restapi.List[netv1alpha1.PublicKey](w.keys), peerKeys)
	switch len(keys) {
	case 0:
	case 1:
		o.PeerKey = keys[0]
	default:
		return o, fmt.Errorf("%d PublicKeys for cluster %s in %s; there must be one", len(keys), remote, w.opts.Namespace)
	}
	if secretRef != nil {
		ns := secretRef.Namespace
		if ns == "" {
			ns = w.opts.Namespace
		}
		if ns != w.opts.Namespace || secretRef.Name != config.KeySecretName(w.opts.Name) {
			// The gateway watches its own key Secret only (its RBAC grants that one by name).
			return o, fmt.Errorf("the gateway's key Secret %s/%s is not %s/%s, the only Secret the gateway may read",
				ns, secretRef.Name, w.opts.Namespace, config.KeySecretName(w.opts.Name))
		}
		o.Secret = restapi.Get[corev1.Secret](w.secrets, ns+"/"+secretRef.Name)
	}
	inodes := restapi.List[netv1alpha1.InternalNode](w.inodes)
	o.InternalNodes = make([]netv1alpha1.InternalNode, len(inodes))
	for i, n := range inodes {
		o.InternalNodes[i] = *n
	}
	nodes := restapi.List[corev1.Node](w.nodes)
	o.Nodes = make([]corev1.Node, len(nodes))
	for i, n := range nodes {
		o.Nodes[i] = *n
	}
	if w.pods != nil {
		w.podBuf = w.pods.appendTo(w.podBuf[:0])
		o.Pods = w.podBuf
	}
	return o, nil
}

// matching returns the objects whose labels sel selects.
func matching[T any, P interface {
	*T
	metav1.Object
}](objs []P, sel labels.Selector) []P {
	var out []P
	for _, o := range objs {
		if sel.Matches(labels.Set(o.GetLabels())) {
			out = append(out, o)
		}
	}
	return out
}

// gatewayMeta is the metadata of the gateway the objects configure (gather set one of them).
func gatewayMeta(o Objects) *metav1.ObjectMeta {
	if o.Server != nil {
		return &o.Server.ObjectMeta
	}
	return &o.Client.ObjectMeta
}

// ensureConnection creates the gateway's Connection (same name and namespace) if missing, and
// puts back its spec, peer label and owner when they are not the gateway's: any account that
// may create Connections in the namespace (another gateway's) may have made it first.
func (w *Watcher) ensureConnection(ctx context.Context, gw *metav1.ObjectMeta) error {
	existing, err := w.getConnection(ctx)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	c := w.connection(gw)
	if err == nil {
		if equality.Semantic.DeepEqual(existing.Spec, c.Spec) && equality.Semantic.DeepEqual(existing.OwnerReferences, c.OwnerReferences) &&
			existing.Labels[netv1alpha1.RemoteClusterIDLabel] == c.Labels[netv1alpha1.RemoteClusterIDLabel] {
			return nil
		}
		existing.Spec, existing.OwnerReferences = c.Spec, c.OwnerReferences
		if existing.Labels == nil {
			existing.Labels = map[string]string{}
		}
		delete(existing.Labels, netv1alpha1.RemoteClusterIDLabel)
		maps.Copy(existing.Labels, c.Labels)
		err := w.api.net.Put().Namespace(w.opts.Namespace).Resource("connections").Name(w.opts.Name).Body(existing).Timeout(30 * time.Second).Do(ctx).Error()
		if err != nil {
			return fmt.Errorf("correct Connection %s/%s: %w", w.opts.Namespace, w.opts.Name, err)
		}
		return nil
	}
	err = w.api.net.Post().Namespace(w.opts.Namespace).Resource("connections").Body(c).Timeout(30 * time.Second).Do(ctx).Error()
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create Connection %s/%s: %w", w.opts.Namespace, w.opts.Name, err)
	}
	return w.writeStatus(ctx, netv1alpha1.ConnectionStatus{Value: netv1alpha1.Connecting})
}

// connection is the gateway's Connection as the gateway makes it.
func (w *Watcher) connection(gw *metav1.ObjectMeta) *netv1alpha1.Connection {
	typ := netv1alpha1.ConnectionTypeClient
	if w.opts.Server {
		typ = netv1alpha1.ConnectionTypeServer
	}
	c := &netv1alpha1.Connection{
		ObjectMeta: metav1.ObjectMeta{Name: w.opts.Name, Namespace: w.opts.Namespace},
		Spec:       netv1alpha1.ConnectionSpec{Type: typ, GatewayRef: netv1alpha1.ObjectRef{Name: w.opts.Name, Namespace: w.opts.Namespace}},
	}
	if id := gw.Labels[netv1alpha1.RemoteClusterIDLabel]; id != "" {
		c.Labels = map[string]string{netv1alpha1.RemoteClusterIDLabel: id}
	}
	kind := "GatewayClient"
	if w.opts.Server {
		kind = "GatewayServer"
	}
	c.OwnerReferences = []metav1.OwnerReference{{APIVersion: netv1alpha1.SchemeGroupVersion.String(), Kind: kind, Name: gw.Name, UID: gw.UID}}
	return c
}

// ReportConnection writes the prober's view into the Connection's status. The latency is
// written on every state change and at most every 10 s otherwise.
func (w *Watcher) ReportConnection(ctx context.Context, value netv1alpha1.ConnectionStatusValue, rtt time.Duration) error {
	st := netv1alpha1.ConnectionStatus{Value: value}
	if rtt > 0 {
		st.Latency = &netv1alpha1.ConnectionLatency{Value: metav1.Duration{Duration: rtt}, Timestamp: metav1.Now()}
	}
	w.mu.Lock()
	last := w.conn
	w.mu.Unlock()
	if last != nil && last.Value == value && (rtt == 0 || last.Latency != nil && time.Since(last.Latency.Timestamp.Time) < 10*time.Second) {
		return nil
	}
	return w.writeStatus(ctx, st)
}

func (w *Watcher) writeStatus(ctx context.Context, st netv1alpha1.ConnectionStatus) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c, err := w.getConnection(ctx)
		if err != nil {
			return err
		}
		c.Status.Value = st.Value
		if st.Latency != nil {
			c.Status.Latency = st.Latency
		}
		return w.api.net.Put().Namespace(w.opts.Namespace).Resource("connections").Name(w.opts.Name).SubResource("status").
			Body(c).Timeout(30 * time.Second).Do(ctx).Error()
	})
	if err == nil {
		w.mu.Lock()
		w.conn = &st
		w.mu.Unlock()
	}
	return err
}

// getConnection reads the gateway's Connection (same name and namespace) from the API server.
func (w *Watcher) getConnection(ctx context.Context) (*netv1alpha1.Connection, error) {
	c := &netv1alpha1.Connection{}
	err := w.api.net.Get().Namespace(w.opts.Namespace).Resource("connections").Name(w.opts.Name).Timeout(30 * time.Second).Do(ctx).Into(c)
	return c, err
}
