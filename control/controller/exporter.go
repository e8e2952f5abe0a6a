package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	svcv1alpha1 "github.com/skein-net/skein/control/api/services/v1alpha1"
	"github.com/skein-net/skein/control/kube"
)

// An exporter is one peer as the import sees it: its credentials (a PeerCredentialsLabel
// Secret), a cache of what it publishes, and its state; reconcileCredentials starts and stops
// them as the Secrets come and go.

// exporter is one cluster whose exports are read: this one (creds nil) or a peer.
type exporter struct {
	id string
	// published is the namespace a peer publishes its exports in, the only one read there
	// ("" for this cluster, read whole with its own identity).
	published string
	secret    types.NamespacedName
	rv        string // the Secret's resourceVersion the cache was started from
	cache     cache.Cache
	cancel    context.CancelFunc
	since     time.Time

	// direct reads the exporter's API server without a cache: the Services and slices of the
	// names imported (peercache.go), and now and then a check of the credentials (a watch
	// that is open keeps working after the peer revoked them, or after they expired).
	direct client.Client
	// objects is how many objects its informers hold (peers: up to PeerBudget.MaxObjects).
	objects atomic.Int64

	mu     sync.Mutex
	synced bool
	err    error
	// held: the Services and slices of the names imported from it (peercache.go); ledger:
	// how its budget is shared out (importbudget.go; nil for this cluster, or before the
	// first reconcile).
	held   map[types.NamespacedName]*heldExport
	ledger *ledger
	// overCap: its informers grew past PeerBudget.MaxObjects; tooLarge: a list or watch of
	// its API server answered more than MaxPeerResponseBytes.
	overCap, tooLarge bool
	// refused: the peer's API server refused the credentials (401, 403): what was imported
	// from it goes, as after a disconnect, instead of staying as last read.
	refused bool
}

func (x *exporter) state() (bool, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.synced, x.err
}

func (x *exporter) isRefused() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.refused
}

func (x *exporter) isOverCap() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.overCap
}

// refusedError: the API server said the credentials are not (or no longer) good.
func refusedError(err error) bool { return apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) }

// reconcileCredentials starts, restarts (new credentials) or stops a peer's exporter.
func (r *ServiceImportReconciler) reconcileCredentials(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	key := req.String()
	var s corev1.Secret
	err := r.Client.Get(ctx, req.NamespacedName, &s)
	if err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	r.mu.Lock()
	old := r.byKey[key]
	started := r.started
	r.mu.Unlock()
	if started == nil {
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	gone := apierrors.IsNotFound(err) || s.DeletionTimestamp != nil || s.Labels[PeerCredentialsLabel] != PeerCredentialsServices
	if old != nil && !gone && old.rv == s.ResourceVersion {
		// Running on these credentials: started anew when it failed (the peer's API server
		// was unreachable when it started, say), else checked again later.
		if synced, err := old.state(); err == nil {
			if synced && old.direct != nil && old.id != r.ClusterID {
				if err := old.direct.List(ctx, &svcv1alpha1.PublishedServiceList{}, client.InNamespace(old.published), client.Limit(1)); refusedError(err) {
					old.mu.Lock()
					old.err, old.synced, old.refused = err, false, true
					old.mu.Unlock()
					r.Events.Eventf(&s, nil, corev1.EventTypeWarning, "CredentialsRefused", "Import", "cluster %s refuses these credentials (%v): what was imported from it is removed; skeinctl network rotate-credentials issues new ones", old.id, err)
					r.enqueueAll(ctx, old.id)
				} else if err == nil {
					if _, err := r.renewToken(ctx, old, &s); err != nil {
						r.Events.Eventf(&s, nil, corev1.EventTypeWarning, "TokenNotRenewed", "Import", "%v", err)
					}
				}
			}
			return reconcile.Result{RequeueAfter: r.Retry}, nil
		}
		if time.Since(old.since) < r.Retry {
			return reconcile.Result{RequeueAfter: r.Retry - time.Since(old.since)}, nil
		}
	}
	if old != nil {
		r.stopExporter(ctx, key)
	}
	if gone {
		return reconcile.Result{}, nil
	}
	id := s.Labels[netv1alpha1.RemoteClusterIDLabel]
	if id == "" || id == r.ClusterID {
		r.Events.Eventf(&s, nil, corev1.EventTypeWarning, "InvalidCredentials", "Import", "peer credentials need the label %s naming the peer (not this cluster)", netv1alpha1.RemoteClusterIDLabel)
		return reconcile.Result{}, nil
	}
	// Only the peering's own namespace holds its credentials: a Secret someone planted
	// elsewhere, naming a peer, must not make this cluster import anything in its name.
	// The peering is the oldest Configuration of the id (a later one elsewhere is
	// DuplicateClusterID): credentials beside a later one are not the peering's.
	var confs netv1alpha1.ConfigurationList
	if err := r.Client.List(ctx, &confs, client.MatchingLabels{netv1alpha1.RemoteClusterIDLabel: id}); err != nil {
		return reconcile.Result{}, err
	}
	if first := kube.Oldest(confs.Items); first == nil || first.Namespace != s.Namespace {
		r.Events.Eventf(&s, nil, corev1.EventTypeWarning, "InvalidCredentials", "Import", "no Configuration of cluster %s in namespace %s, or an older one elsewhere: a peer's credentials are used only in the namespace of its peering", id, s.Namespace)
		return reconcile.Result{}, nil
	}
	r.mu.Lock()
	var other string
	for k, x := range r.byKey {
		if x.id == id && k != key {
			other = k
		}
	}
	r.mu.Unlock()
	if other != "" {
		r.Events.Eventf(&s, nil, corev1.EventTypeWarning, "InvalidCredentials", "Import", "cluster %s is already read with the credentials in Secret %s: these are not used", id, other)
		return reconcile.Result{}, nil
	}
	cfg, err := r.PeerConfig(&s)
	if err != nil {
		r.Events.Eventf(&s, nil, corev1.EventTypeWarning, "InvalidCredentials", "Import", "%v", err)
		return reconcile.Result{}, nil
	}
	published := cmp.Or(string(s.Data[PeerNamespaceKey]), DefaultPublishedNamespace)
	if errs := validation.IsDNS1123Label(published); len(errs) > 0 {
		r.Events.Eventf(&s, nil, corev1.EventTypeWarning, "InvalidCredentials", "Import", "key %s: %q is no namespace name: %s", PeerNamespaceKey, published, strings.Join(errs, "; "))
		return reconcile.Result{}, nil
	}
	r.startExporter(started, key, id, published, req.NamespacedName, s.ResourceVersion, cfg)
	return reconcile.Result{RequeueAfter: r.Retry}, nil
}

// DefaultExporterRetry is how long an exporter that failed to start (its API server was
// unreachable, its credentials refused) waits before it tries again.
const DefaultExporterRetry = 30 * time.Second

// startExporter starts a cache of one cluster's exports (this cluster's ServiceExports,
// Services and EndpointSlices, not the slices skein itself writes; a peer's published
// namespace; peercache.go) whose events enqueue the namespace/name. A peer's cache that grows past Budget.MaxObjects is stopped.
func (r *ServiceImportReconciler) startExporter(ctx context.Context, key, id, published string, secret types.NamespacedName, rv string, cfg *rest.Config) {
	x := &exporter{id: id, published: published, secret: secret, rv: rv, since: time.Now(), held: map[types.NamespacedName]*heldExport{}}
	parent := ctx // outlives the exporter: what it imported is computed again after it stops
	ctx, x.cancel = context.WithCancel(ctx)
	r.mu.Lock()
	r.byKey[key] = x
	r.mu.Unlock()
	logger := log.FromContext(ctx).WithValues("exporter", id)
	fail := func(err error) {
		x.mu.Lock()
		x.err, x.synced = err, false
		x.refused = x.refused || refusedError(err)
		x.mu.Unlock()
		logger.Error(err, "reading exported services")
		r.enqueueAll(parent, id)
	}
	direct, err := client.New(cfg, client.Options{Scheme: r.scheme})
	if err != nil {
		fail(err)
		return
	}
	x.direct = direct
	peer := id != r.ClusterID
	count := func(d int64) {
		if n := x.objects.Add(d); peer && n > int64(r.Budget.MaxObjects) {
			x.mu.Lock()
			first := !x.overCap
			x.overCap, x.refused = true, true
			x.mu.Unlock()
			if first {
				// What it holds goes with the cache; what was imported from it goes too, as
				// when its credentials are refused, until it is read again within the cap.
				r.tally.setPeer(id, 0, 0, true)
				fail(fmt.Errorf("cluster %s publishes more than %d objects (PublishedServices and EndpointSlices; --max-objects-per-peer): not read; read again in %s", id, r.Budget.MaxObjects, r.Retry))
				x.cancel()
				go func() {
					if err := r.peerCondition(parent, x, nil); err != nil {
						logger.Error(err, "writing the peer's condition")
					}
				}()
			}
		}
	}
	// A peer whose answers exceed MaxPeerResponseBytes is not read (its informers would list it
	// again and again, each time decoding up to the bound: what it publishes, not this
	// cluster, would decide the controller's memory), as one past the object cap; read again
	// after Retry.
	tooLarge := func(err error) {
		x.mu.Lock()
		first := !x.tooLarge
		x.tooLarge, x.refused = true, true
		x.mu.Unlock()
		if !first {
			return
		}
		r.tally.setPeer(id, 0, 0, true)
		fail(fmt.Errorf("cluster %s: %w; read again in %s", id, err, r.Retry))
		x.cancel()
		go func() {
			if err := r.peerCondition(parent, x, nil); err != nil {
				logger.Error(err, "writing the peer's condition")
			}
		}()
	}
	go func() {
		opts := exporterCacheOptions(cache.Options{Scheme: r.scheme})
		if x.published != "" {
			opts = publishedCacheOptions(cache.Options{Scheme: r.scheme}, x.published)
		}
		if peer {
			opts.DefaultWatchErrorHandler = func(ctx context.Context, rf *toolscache.Reflector, err error) {
				if responseTooLarge(err) {
					tooLarge(err)
					return
				}
				toolscache.DefaultWatchErrorHandler(ctx, rf, err)
			}
		}
		c, err := cache.New(cfg, opts)
		if err != nil {
			fail(err)
			return
		}
		x.cache = c
		for _, w := range x.watched() {
			inf, err := c.GetInformer(ctx, w.o)
			if err != nil {
				fail(fmt.Errorf("%s: %w (is the MCS API installed there, and skein's services.skein.io API?)", w.o.GetObjectKind().GroupVersionKind().Kind, err))
				return
			}
			name := w.key
			if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
				AddFunc:    func(o any) { count(1); r.enqueueObject(o, name) },
				UpdateFunc: func(_, o any) { r.enqueueObject(o, name) },
				DeleteFunc: func(o any) {
					if t, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
						o = t.Obj
					}
					count(-1)
					r.enqueueObject(o, name)
				},
			}); err != nil {
				fail(err)
				return
			}
		}
		go func() {
			if err := c.Start(ctx); err != nil {
				fail(err)
			}
		}()
		if !c.WaitForCacheSync(ctx) {
			if ctx.Err() == nil {
				fail(errors.New("cache did not sync"))
			}
			return
		}
		x.mu.Lock()
		x.synced = x.err == nil
		x.mu.Unlock()
		logger.Info("reading exported services")
		r.enqueueAll(ctx, id)
	}()
}

// stopExporter stops a peer's cache; the imports that listed it are computed again without it.
func (r *ServiceImportReconciler) stopExporter(ctx context.Context, key string) {
	r.mu.Lock()
	x := r.byKey[key]
	delete(r.byKey, key)
	r.mu.Unlock()
	if x == nil {
		return
	}
	x.cancel()
	r.tally.forgetPeer(x.id)
	r.enqueueAll(ctx, x.id)
}

// enqueueAll enqueues every import listing cluster id and every export the cluster has.
func (r *ServiceImportReconciler) enqueueAll(ctx context.Context, id string) {
	for _, req := range r.importsOf(ctx, id) {
		r.enqueue(req.NamespacedName)
	}
	r.mu.Lock()
	var xs []*exporter
	for _, x := range r.byKey {
		if x.id == id {
			xs = append(xs, x)
		}
	}
	r.mu.Unlock()
	for _, x := range xs {
		if ok, _ := x.state(); !ok {
			continue
		}
		if exps, err := x.exports(ctx, ""); err == nil {
			for _, e := range exps {
				r.enqueue(client.ObjectKeyFromObject(&e))
			}
		}
	}
}

// enqueueObject enqueues the namespace/name an exporter's object is of (keyOf it).
func (r *ServiceImportReconciler) enqueueObject(o any, keyOf func(client.Object) types.NamespacedName) {
	obj, ok := o.(client.Object)
	if !ok {
		return
	}
	if k := keyOf(obj); k.Namespace != "" && k.Name != "" {
		r.enqueue(k)
	}
}

func (r *ServiceImportReconciler) enqueue(k types.NamespacedName) {
	r.events <- event.GenericEvent{Object: &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}}}
}
