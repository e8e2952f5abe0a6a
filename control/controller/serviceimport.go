package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	svcv1alpha1 "github.com/skein-net/skein/control/api/services/v1alpha1"
	"github.com/skein-net/skein/control/controller/mcs"
	"github.com/skein-net/skein/control/kube"
	"github.com/skein-net/skein/dataplane/nat"
)

// Multi-cluster services (the MCS API, multicluster.x-k8s.io/v1alpha1). Each cluster reads what
// its peers publish of their exports (publish.go: PublishedServices and EndpointSlice copies in
// one namespace) with a read-only identity in each peer (PeerCredentialsLabel Secrets, written
// by skeinctl network connect, renewed by tokenrenew.go), and its own ServiceExports, Services
// and EndpointSlices through its own client; it publishes its own for the peers. For each
// exported namespace/name it holds a ServiceImport, a derived ClusterIP Service and
// EndpointSlices whose addresses are the exporters' endpoints as this cluster reaches them
// (mcs.Build); and it sets the Valid and Conflict conditions of its own ServiceExports.

// PeerCredentialsLabel marks a Secret holding a peer's read-only credentials (keys server,
// ca.crt, token); its liqo.io/remote-cluster-id label names the peer.
const PeerCredentialsLabel = "skein.io/peer-credentials"

// PeerCredentialsServices is PeerCredentialsLabel's value for the services reader.
const PeerCredentialsServices = "services"

// Keys of a peer credentials Secret. PeerNamespaceKey, optional, is the peer's published
// namespace (default DefaultPublishedNamespace): the only one read there.
const (
	PeerServerKey    = "server"
	PeerCAKey        = "ca.crt"
	PeerTokenKey     = "token"
	PeerNamespaceKey = "namespace"
)

// DefaultImportExcludedNamespaces are never imported into: a peer's export of a name there
// would put a Service beside the cluster's own system components.
var DefaultImportExcludedNamespaces = []string{"kube-system", "kube-public", "kube-node-lease"}

// ServiceImportReconciler imports exported services (one request per namespace/name).
type ServiceImportReconciler struct {
	Client client.Client
	// Reader reads straight from the API server (the manager's APIReader): the cache holds only
	// the Services and slices skein labelled, so an object of a name the import would create is
	// looked up here before it is written (nil: not looked up, in tests of the import alone).
	Reader client.Reader
	Events events.EventRecorder
	// ClusterID is this cluster's id; PodCIDRs its pod CIDRs (its own exports' endpoints are
	// imported as they are).
	ClusterID string
	PodCIDRs  []netip.Prefix
	// Local reads this cluster's exports (nil: no local exporter, in tests of peers alone).
	Local *rest.Config
	// Excluded namespaces are never imported into (nil: DefaultImportExcludedNamespaces).
	Excluded []string
	// Namespaces, when set, imports only into the namespaces it selects (by their labels).
	Namespaces labels.Selector
	Limits     mcs.Limits
	// RenewFraction of a peer's token lifetime passes before this cluster renews it
	// (tokenrenew.go; 0: DefaultTokenRenewFraction).
	RenewFraction float64
	// Published is the namespace this cluster publishes its exports in for its peers
	// (publish.go; "": none is published).
	Published string
	// Budget limits what each peer causes here (importbudget.go).
	Budget PeerBudget
	// Retry is how long an exporter that failed waits before it starts again (0:
	// DefaultExporterRetry).
	Retry time.Duration
	// PeerConfig turns a credentials Secret into a client configuration (nil: peerRESTConfig).
	PeerConfig func(*corev1.Secret) (*rest.Config, error)

	scheme  *runtime.Scheme
	events  chan event.GenericEvent
	mu      sync.Mutex
	byKey   map[string]*exporter // exporter by Secret namespace/name ("" for this cluster)
	started context.Context
	tally   importTally
}

// Collector is the gauges of what the budgets and the validation leave out of the imports.
func (r *ServiceImportReconciler) Collector() prometheus.Collector { return &r.tally }

// SetupWithManager registers the import reconciler, the peer credentials watcher and this
// cluster's exporter.
func (r *ServiceImportReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.scheme = mgr.GetScheme()
	r.events = make(chan event.GenericEvent, 4096)
	r.byKey = map[string]*exporter{}
	if r.Excluded == nil {
		r.Excluded = DefaultImportExcludedNamespaces
	}
	if r.PeerConfig == nil {
		r.PeerConfig = peerRESTConfig
	}
	if r.Retry <= 0 {
		r.Retry = DefaultExporterRetry
	}
	r.Budget = r.Budget.withDefaults()
	if r.Published != "" {
		// Started with the manager's caches, not by the first export's reconcile.
		if _, err := mgr.GetCache().GetInformer(context.Background(), &svcv1alpha1.PublishedService{}); err != nil {
			return fmt.Errorf("published services: %w (is the services.skein.io CRD installed?)", err)
		}
	}
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		r.mu.Lock()
		r.started = ctx
		r.mu.Unlock()
		if r.Local == nil {
			<-ctx.Done()
			return nil
		}
		r.startExporter(ctx, "", r.ClusterID, "", types.NamespacedName{}, "", r.Local)
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(r.Retry):
			}
			r.mu.Lock()
			x := r.byKey[""]
			r.mu.Unlock()
			if _, err := x.state(); err != nil {
				r.stopExporter(ctx, "")
				r.startExporter(ctx, "", r.ClusterID, "", types.NamespacedName{}, "", r.Local)
			}
		}
	})); err != nil {
		return err
	}
	byImport := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if n := o.GetLabels()[mcs.ImportLabel]; n != "" {
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: n}}}
		}
		return nil
	})
	if err := ctrl.NewControllerManagedBy(mgr).Named("serviceimport").
		For(&mcsv1a1.ServiceImport{}).
		Watches(&corev1.Service{}, byImport, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()[mcs.ImportLabel] != "" }))).
		Watches(&discoveryv1.EndpointSlice{}, byImport).
		Watches(&netv1alpha1.Configuration{}, handler.EnqueueRequestsFromMapFunc(r.importsOfPeer)).
		Watches(&netv1alpha1.GatewayServer{}, handler.EnqueueRequestsFromMapFunc(r.importsOfPeer)).
		Watches(&netv1alpha1.GatewayClient{}, handler.EnqueueRequestsFromMapFunc(r.importsOfPeer)).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.exportsIn)).
		WatchesRawSource(source.Channel(r.events, &handler.EnqueueRequestForObject{})).
		Complete(r); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).Named("peercredentials").
		For(&corev1.Secret{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetLabels()[PeerCredentialsLabel] == PeerCredentialsServices
		}))).
		Complete(reconcile.Func(r.reconcileCredentials))
}

// exportsIn: a namespace came, went or changed its labels (Namespaces), so every export in it is
// computed again.
func (r *ServiceImportReconciler) exportsIn(ctx context.Context, o client.Object) []reconcile.Request {
	r.mu.Lock()
	xs := slices.Collect(maps.Values(r.byKey))
	r.mu.Unlock()
	var reqs []reconcile.Request
	for _, x := range xs {
		if ok, _ := x.state(); !ok {
			continue
		}
		if exps, err := x.exports(ctx, o.GetName()); err == nil {
			for _, e := range exps {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&e)})
			}
		}
	}
	return reqs
}

// importsOfPeer: a peering's remapped CIDRs or gateways changed, so every import listing that
// peer is computed again.
func (r *ServiceImportReconciler) importsOfPeer(ctx context.Context, o client.Object) []reconcile.Request {
	return r.importsOf(ctx, o.GetLabels()[netv1alpha1.RemoteClusterIDLabel])
}

func (r *ServiceImportReconciler) importsOf(ctx context.Context, id string) []reconcile.Request {
	if id == "" {
		return nil
	}
	var imps mcsv1a1.ServiceImportList
	if err := r.Client.List(ctx, &imps, client.MatchingLabels{ManagedByLabel: FieldOwner}); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	for _, si := range imps.Items {
		if slices.ContainsFunc(si.Status.Clusters, func(c mcsv1a1.ClusterStatus) bool { return c.Cluster == id }) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&si)})
		}
	}
	return reqs
}

// Reconcile computes the import of one namespace/name from every exporter and writes it.
func (r *ServiceImportReconciler) Reconcile(ctx context.Context, req reconcile.Request) (res reconcile.Result, err error) {
	ns, name := req.Namespace, req.Name
	// This cluster's own export of the name, as read: what is published of it for the peers
	// (publish.go), whatever becomes of the import here.
	var local *mcs.Source
	localRead := false
	// A failure to publish is retried after Retry, not with the import's backoff: the import
	// here does not wait on it (nor does a missing published namespace make it fail).
	defer func() {
		if localRead && err == nil {
			if perr := r.publish(ctx, req.NamespacedName, local); perr != nil {
				log.FromContext(ctx).Error(perr, "publishing an export for the peers", "export", req.NamespacedName)
				if res.RequeueAfter == 0 || res.RequeueAfter > r.Retry {
					res.RequeueAfter = r.Retry
				}
			}
		}
	}()
	r.mu.Lock()
	xs := make([]*exporter, 0, len(r.byKey))
	for _, x := range r.byKey {
		xs = append(xs, x)
	}
	r.mu.Unlock()
	var sources []mcs.Source
	var self *mcsv1a1.ServiceExport
	overBudget := map[string]int{}
	// Exporters not read yet (starting) or not readable now (their API server unreachable):
	// what was imported from them stays as it was until they are read again. Only removing
	// their credentials (disconnect) removes it at once.
	unknown := map[string]bool{}
	for _, x := range xs {
		if synced, _ := x.state(); !synced {
			if !x.isRefused() {
				unknown[x.id] = true
			}
			if x.isOverCap() {
				if err := r.peerCondition(ctx, x, nil); err != nil {
					return reconcile.Result{}, err
				}
			}
			continue
		}
		src, over, ok, err := r.source(ctx, x, req.NamespacedName)
		if err != nil {
			return reconcile.Result{}, err
		}
		if x.id == r.ClusterID && x.published == "" {
			localRead = true
			if ok {
				local = &src
			}
		}
		if !ok {
			continue
		}
		if x.id == r.ClusterID {
			self = src.Export
		}
		overBudget[x.id] = over
		sources = append(sources, src)
	}
	importable, err := r.importable(ctx, ns)
	if err != nil {
		return reconcile.Result{}, err
	}
	if local != nil {
		c := *local // Build does not change its sources; publish reads this copy after it
		local = &c
	}
	imp := mcs.Build(ns, name, sources, r.Limits)
	for i := range imp.Sources {
		res := &imp.Sources[i]
		if n := overBudget[res.ClusterID]; n > 0 && res.Invalid == nil {
			res.OverBudget += n
			res.Dropped += n
			res.DropReasons = append(res.DropReasons, fmt.Sprintf("%d endpoint(s) over cluster %s's endpoint budget here", n, res.ClusterID))
		}
	}
	if self != nil {
		if err := r.exportConditions(ctx, self, imp); err != nil {
			return reconcile.Result{}, err
		}
	}
	if !importable {
		r.tally.setImport(req.NamespacedName, nil)
		return reconcile.Result{}, r.remove(ctx, ns, name)
	}
	kept, err := r.keptClusters(ctx, ns, name, unknown)
	if err != nil {
		return reconcile.Result{}, err
	}
	switch {
	case imp.ServiceImport == nil && len(kept) == 0:
		r.tally.setImport(req.NamespacedName, nil)
		return reconcile.Result{}, r.remove(ctx, ns, name)
	case imp.ServiceImport == nil:
		// Only exporters that cannot be read now: leave the import as it is.
		return reconcile.Result{RequeueAfter: r.Retry}, nil
	}
	for _, id := range kept {
		if !slices.ContainsFunc(imp.ServiceImport.Status.Clusters, func(c mcsv1a1.ClusterStatus) bool { return c.Cluster == id }) {
			imp.ServiceImport.Status.Clusters = append(imp.ServiceImport.Status.Clusters, mcsv1a1.ClusterStatus{Cluster: id})
		}
	}
	slices.SortFunc(imp.ServiceImport.Status.Clusters, func(a, b mcsv1a1.ClusterStatus) int { return strings.Compare(a.Cluster, b.Cluster) })
	r.tally.setImport(req.NamespacedName, &imp)
	return reconcile.Result{}, r.write(ctx, imp, unknown)
}

// keptClusters are the clusters among unknown that the import lists now or has slices of.
func (r *ServiceImportReconciler) keptClusters(ctx context.Context, ns, name string, unknown map[string]bool) ([]string, error) {
	if len(unknown) == 0 {
		return nil, nil
	}
	found := map[string]bool{}
	var si mcsv1a1.ServiceImport
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &si); err == nil && si.Labels[ManagedByLabel] == FieldOwner {
		for _, c := range si.Status.Clusters {
			found[c.Cluster] = unknown[c.Cluster]
		}
	} else if client.IgnoreNotFound(err) != nil {
		return nil, err
	}
	var have discoveryv1.EndpointSliceList
	if err := r.Client.List(ctx, &have, client.InNamespace(ns), client.MatchingLabels{mcs.ImportLabel: name, discoveryv1.LabelManagedBy: mcs.ManagedBy}); err != nil {
		return nil, err
	}
	for _, sl := range have.Items {
		if id := sl.Labels[mcs.SourceClusterLabel]; unknown[id] {
			found[id] = true
		}
	}
	var out []string
	for id, ok := range found {
		if ok {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out, nil
}

// source reads one exporter's export of namespace/name, false when it exports none or a peer's
// budget leaves it out; over is how many of its endpoints the budget left out.
func (r *ServiceImportReconciler) source(ctx context.Context, x *exporter, key types.NamespacedName) (src mcs.Source, over int, ok bool, err error) {
	// This cluster's own exports have no budget but the per-source limit; a peer's share its
	// budget in the order of its exports (computed again whatever changed: an export gone
	// leaves room for the next).
	ceiling := cmp.Or(r.Limits.MaxEndpointsPerSource, 10000)
	allowance := ceiling
	if x.id != r.ClusterID {
		l, err := r.updateLedger(ctx, x, key)
		if err != nil {
			return mcs.Source{}, 0, false, err
		}
		a, admitted := l.allowance[key]
		if !admitted {
			return mcs.Source{}, 0, false, nil
		}
		allowance = min(a, ceiling)
	}
	exp, err := x.export(ctx, key)
	if apierrors.IsNotFound(err) {
		x.forget(key)
		return mcs.Source{}, 0, false, nil
	} else if err != nil {
		return mcs.Source{}, 0, false, fmt.Errorf("exporter %s: %w", x.id, err)
	}
	before := x.heldEndpoints(key)
	h, err := x.heldFor(ctx, key, allowance, ceiling)
	if err != nil {
		return mcs.Source{}, 0, false, err
	}
	if x.id != r.ClusterID && h.endpoints != before {
		// Its share of the budget changed what is left for the exports after it.
		if _, err := r.updateLedger(ctx, x, key); err != nil {
			return mcs.Source{}, 0, false, err
		}
	}
	src = mcs.Source{ClusterID: x.id, Export: exp, Service: h.svc, Slices: h.slices}
	if x.id != r.ClusterID {
		src.MaxEndpoints = &allowance // what was read already fits; Build holds to it too
	}
	if x.id == r.ClusterID {
		m, err := mcs.Identity(r.PodCIDRs...)
		if err != nil {
			return mcs.Source{}, 0, false, err
		}
		src.Map = m
		return src, h.overBudget, true, nil
	}
	m, err := r.addressMap(ctx, x.id)
	if err != nil {
		return mcs.Source{}, 0, false, err
	}
	src.Map = m
	return src, h.overBudget, true, nil
}

// addressMap is how this cluster reaches peer id's pods: its Configuration's pod CIDRs onto
// their remapped prefixes, the pairs the gateway's NAT is built from (nil while it has no
// status, when there is no peering, or no gateway towards the peer).
func (r *ServiceImportReconciler) addressMap(ctx context.Context, id string) (*nat.PrefixMap, error) {
	var confs netv1alpha1.ConfigurationList
	if err := r.Client.List(ctx, &confs, client.MatchingLabels{netv1alpha1.RemoteClusterIDLabel: id}); err != nil {
		return nil, err
	}
	// The peering is the oldest Configuration of the id, as the Configuration reconciler
	// decides (a later one is DuplicateClusterID and mapped to nothing): a second one, which
	// anyone who may write Configurations somewhere can add, neither stops this peer's imports
	// nor stands in for it.
	if len(confs.Items) == 0 {
		return nil, nil
	}
	cf := kube.Oldest(confs.Items)
	if cf.Status.Remote == nil || !meta.IsStatusConditionTrue(cf.Status.Conditions, netv1alpha1.ConditionReady) {
		return nil, nil
	}
	// No gateway towards the peer in the peering's namespace (disconnected): nothing routes to
	// its pods, so none of its endpoints is imported.
	var servers netv1alpha1.GatewayServerList
	var clients netv1alpha1.GatewayClientList
	for _, l := range []client.ObjectList{&servers, &clients} {
		if err := r.Client.List(ctx, l, client.InNamespace(cf.Namespace), client.MatchingLabels{netv1alpha1.RemoteClusterIDLabel: id}); err != nil {
			return nil, err
		}
	}
	if len(servers.Items)+len(clients.Items) == 0 {
		return nil, nil
	}
	real, seen := cf.Spec.Remote.CIDR.Pods(), cf.Status.Remote.CIDR.Pods()
	if len(real) != len(seen) {
		return nil, nil
	}
	var pairs []nat.Pair
	for i := range real {
		a, err1 := netip.ParsePrefix(string(real[i]))
		b, err2 := netip.ParsePrefix(string(seen[i]))
		if err1 != nil || err2 != nil {
			return nil, nil
		}
		pairs = append(pairs, nat.Pair{From: a, To: b})
	}
	m, err := nat.NewPrefixMap(pairs...)
	if err != nil {
		log.FromContext(ctx).Error(err, "peer's Configuration does not make an address map: its endpoints are not imported", "peer", id)
		return nil, nil
	}
	return m, nil
}

// importable: the namespace exists here, is not excluded, and is selected by Namespaces. The
// namespace this cluster publishes in and those holding a peer's credentials are excluded
// whatever the settings: every peer's reader lists the first (an import there would be
// published to the other peers), and the second hold secrets beside which no peer's name
// should appear.
func (r *ServiceImportReconciler) importable(ctx context.Context, ns string) (bool, error) {
	if slices.Contains(r.Excluded, ns) || (r.Published != "" && ns == r.Published) || r.peeringNamespace(ns) {
		return false, nil
	}
	var n corev1.Namespace
	if err := r.Client.Get(ctx, types.NamespacedName{Name: ns}, &n); apierrors.IsNotFound(err) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	return n.DeletionTimestamp == nil && (r.Namespaces == nil || r.Namespaces.Matches(labels.Set(n.Labels))), nil
}

// peeringNamespace: ns holds the credentials of one of this cluster's peers.
func (r *ServiceImportReconciler) peeringNamespace(ns string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, x := range r.byKey {
		if key != "" && x.secret.Namespace == ns {
			return true
		}
	}
	return false
}

// write applies the ServiceImport, the derived Service and the slices, and deletes the slices
// no longer wanted. Objects of those names that skein did not create are left alone.
func (r *ServiceImportReconciler) write(ctx context.Context, imp mcs.Import, unknown map[string]bool) error {
	si := imp.ServiceImport
	clusters := si.Status.Clusters // applyAndRead leaves the server's (empty) status in si
	var existing mcsv1a1.ServiceImport
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(si), &existing); err == nil && existing.Labels[ManagedByLabel] != FieldOwner {
		r.Events.Eventf(&existing, nil, corev1.EventTypeWarning, "NotImported", "Import", "ServiceImport %s/%s exists and was not created by skein: left alone", si.Namespace, si.Name)
		return nil
	} else if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	// Slices no longer wanted go first, whatever fails after: an endpoint that left (a pod
	// gone, a cluster unexported or disconnected) never stays behind a failed write.
	var have discoveryv1.EndpointSliceList
	if err := r.Client.List(ctx, &have, client.InNamespace(si.Namespace), client.MatchingLabels{mcs.ImportLabel: si.Name, discoveryv1.LabelManagedBy: mcs.ManagedBy}); err != nil {
		return err
	}
	wanted := map[string]bool{}
	for _, sl := range imp.Slices {
		wanted[sl.Name] = true
	}
	haveByName := map[string]*discoveryv1.EndpointSlice{}
	for i := range have.Items {
		sl := &have.Items[i]
		if !wanted[sl.Name] && !unknown[sl.Labels[mcs.SourceClusterLabel]] {
			if err := r.Client.Delete(ctx, sl); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("delete slice %s/%s: %w", sl.Namespace, sl.Name, err)
			}
			continue
		}
		haveByName[sl.Name] = sl
	}
	var svc corev1.Service
	svcKey := client.ObjectKeyFromObject(imp.Service)
	if err := r.Client.Get(ctx, svcKey, &svc); err == nil {
		if svc.Labels[ManagedByLabel] != FieldOwner {
			return fmt.Errorf("service %s exists and was not created by skein: ServiceImport %s/%s not written", svcKey, si.Namespace, si.Name)
		}
		if other := svc.Labels[mcs.ImportLabel]; other != si.Name {
			r.Events.Eventf(&svc, nil, corev1.EventTypeWarning, "NotImported", "Import", "ServiceImport %s/%s would share this derived Service with the import of %q: not written", si.Namespace, si.Name, other)
			return nil
		}
		if svc.Spec.ClusterIP != "" && svc.Spec.ClusterIP != corev1.ClusterIPNone && imp.Service.Spec.ClusterIP != corev1.ClusterIPNone {
			si.Spec.IPs = []string{svc.Spec.ClusterIP}
		}
	} else if !apierrors.IsNotFound(err) {
		return err
	} else if err := r.notForeign(ctx, &corev1.Service{}, svcKey, ManagedByLabel, FieldOwner); err != nil {
		return fmt.Errorf("%w: ServiceImport %s/%s not written", err, si.Namespace, si.Name)
	}
	si.Labels = withManagedBy(si.Labels)
	// Each write is skipped when the cache already holds what it would write: an endpoint
	// change rewrites only its slice.
	if existing.UID == "" || existing.Labels[ManagedByLabel] != FieldOwner || !equality.Semantic.DeepEqual(existing.Spec, si.Spec) ||
		!maps.Equal(existing.Labels, si.Labels) || !maps.Equal(existing.Annotations, si.Annotations) {
		if err := applyAndRead(ctx, r.Client, si); err != nil {
			return err
		}
	} else {
		si.UID = existing.UID
	}
	ready := metav1.Condition{Type: string(mcsv1a1.ServiceImportConditionReady), Status: metav1.ConditionTrue, Reason: string(mcsv1a1.ServiceImportReasonReady),
		Message: fmt.Sprintf("%d cluster(s) export it", len(clusters)), LastTransitionTime: conditionTime(existing.Status.Conditions, string(mcsv1a1.ServiceImportConditionReady), metav1.ConditionTrue)}
	limits := limitsCondition(imp, r.Limits)
	limits.LastTransitionTime = conditionTime(existing.Status.Conditions, limits.Type, limits.Status)
	changed := func(c metav1.Condition) bool {
		old := meta.FindStatusCondition(existing.Status.Conditions, c.Type)
		return old == nil || old.Status != c.Status || old.Reason != c.Reason || old.Message != c.Message
	}
	if changed(ready) || changed(limits) || !equality.Semantic.DeepEqual(existing.Status.Clusters, clusters) {
		if err := applyStatus(ctx, r.Client, si, map[string]any{"clusters": clusters, "conditions": []metav1.Condition{ready, limits}}); err != nil {
			return err
		}
		if old := meta.FindStatusCondition(existing.Status.Conditions, limits.Type); limits.Status == metav1.ConditionFalse && (old == nil || old.Status != limits.Status) {
			r.Events.Eventf(si, nil, corev1.EventTypeWarning, limits.Reason, "Import", "%s", limits.Message)
		}
	}
	owner := *metav1.NewControllerRef(si, schema.GroupVersionKind{Group: mcsv1a1.GroupName, Version: "v1alpha1", Kind: mcsv1a1.ServiceImportKindName})
	want := imp.Service
	want.Labels = withManagedBy(want.Labels)
	want.OwnerReferences = []metav1.OwnerReference{owner}
	if svc.UID != "" && (svc.Spec.ClusterIP == corev1.ClusterIPNone) != (want.Spec.ClusterIP == corev1.ClusterIPNone) {
		// Headless or not cannot change in place (a ClusterIP is immutable): made anew.
		if err := r.Client.Delete(ctx, &svc); client.IgnoreNotFound(err) != nil {
			return err
		}
		svc = corev1.Service{}
		return fmt.Errorf("derived Service %s recreated (headless or not changed): written again once it is gone", svcKey)
	}
	if svc.UID == "" || !sameDerivedService(&svc, want) {
		if err := applyAndRead(ctx, r.Client, want); err != nil {
			return err
		}
		svc = *want
	}
	// Each slice is written whatever became of the others: one the API server refuses does not
	// hold back the rest, nor another cluster's.
	sliceOwner := *metav1.NewControllerRef(&svc, corev1.SchemeGroupVersion.WithKind("Service"))
	var errs []error
	for _, sl := range imp.Slices {
		sl.OwnerReferences = []metav1.OwnerReference{sliceOwner}
		sl.Labels = withManagedBy(sl.Labels)
		h := haveByName[sl.Name]
		if h != nil && sameSlice(h, sl) {
			continue
		}
		if h == nil {
			if err := r.notForeign(ctx, &discoveryv1.EndpointSlice{}, client.ObjectKeyFromObject(sl), discoveryv1.LabelManagedBy, mcs.ManagedBy); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		if err := applyObject(ctx, r.Client, sl); err != nil {
			errs = append(errs, fmt.Errorf("slice %s/%s of cluster %s: %w", sl.Namespace, sl.Name, sl.Labels[mcs.SourceClusterLabel], err))
		}
	}
	return errors.Join(errs...)
}

// notForeign checks, before the import creates an object the cache does not hold (it holds
// only what skein labelled), that no object of that key exists that skein did not create (its
// label key is not value): a force-apply would take it over, and it would go with the import.
func (r *ServiceImportReconciler) notForeign(ctx context.Context, obj client.Object, key client.ObjectKey, label, value string) error {
	if r.Reader == nil {
		return nil
	}
	if err := r.Reader.Get(ctx, key, obj); apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	if obj.GetLabels()[label] == value {
		return nil // skein's, not in the cache yet
	}
	kind := "service"
	if _, ok := obj.(*discoveryv1.EndpointSlice); ok {
		kind = "endpoint slice"
	}
	return fmt.Errorf("%s %s exists and was not created by skein: left alone", kind, key)
}

// sameDerivedService: have already holds what the import writes into want.
func sameDerivedService(have, want *corev1.Service) bool {
	if !labelsHold(have.Labels, want.Labels) || !equality.Semantic.DeepEqual(have.OwnerReferences, want.OwnerReferences) ||
		have.Spec.Type != want.Spec.Type || have.Spec.SessionAffinity != want.Spec.SessionAffinity ||
		(want.Spec.ClusterIP == corev1.ClusterIPNone) != (have.Spec.ClusterIP == corev1.ClusterIPNone) || len(have.Spec.Ports) != len(want.Spec.Ports) {
		return false
	}
	for i, p := range want.Spec.Ports {
		h := have.Spec.Ports[i]
		if h.Name != p.Name || h.Protocol != p.Protocol || h.Port != p.Port || !equality.Semantic.DeepEqual(h.AppProtocol, p.AppProtocol) {
			return false
		}
	}
	return true
}

// sameSlice: have already holds what the import writes into want.
func sameSlice(have, want *discoveryv1.EndpointSlice) bool {
	return labelsHold(have.Labels, want.Labels) && equality.Semantic.DeepEqual(have.OwnerReferences, want.OwnerReferences) &&
		have.AddressType == want.AddressType && equality.Semantic.DeepEqual(have.Ports, want.Ports) &&
		equality.Semantic.DeepEqual(have.Endpoints, want.Endpoints)
}

// labelsHold: have carries every label of want.
func labelsHold(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// remove deletes what skein imported for namespace/name: the slices first (kube-proxy stops
// sending to them at once, not after garbage collection), the derived Service, the import.
func (r *ServiceImportReconciler) remove(ctx context.Context, ns, name string) error {
	var have discoveryv1.EndpointSliceList
	if err := r.Client.List(ctx, &have, client.InNamespace(ns), client.MatchingLabels{mcs.ImportLabel: name, discoveryv1.LabelManagedBy: mcs.ManagedBy}); err != nil {
		return err
	}
	for _, sl := range have.Items {
		if err := r.Client.Delete(ctx, &sl); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	var svc corev1.Service
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: mcs.DerivedServiceName(name)}, &svc); err == nil && svc.Labels[ManagedByLabel] == FieldOwner {
		if err := r.Client.Delete(ctx, &svc); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	var si mcsv1a1.ServiceImport
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &si); err == nil && si.Labels[ManagedByLabel] == FieldOwner {
		if err := r.Client.Delete(ctx, &si); client.IgnoreNotFound(err) != nil {
			return err
		}
	} else if client.IgnoreNotFound(err) != nil {
		return err
	}
	return nil
}

// exportConditions sets the Valid and Conflict conditions of this cluster's own ServiceExport.
func (r *ServiceImportReconciler) exportConditions(ctx context.Context, exp *mcsv1a1.ServiceExport, imp mcs.Import) error {
	var res *mcs.SourceResult
	for i := range imp.Sources {
		if imp.Sources[i].ClusterID == r.ClusterID {
			res = &imp.Sources[i]
		}
	}
	if res == nil {
		return nil
	}
	valid := metav1.Condition{Type: string(mcsv1a1.ServiceExportConditionValid), Status: metav1.ConditionTrue,
		Reason: string(mcsv1a1.ServiceExportReasonValid), Message: "the Service is exported"}
	if res.Invalid != nil {
		valid.Status, valid.Reason, valid.Message = metav1.ConditionFalse, string(res.Invalid.Reason), res.Invalid.Message
	}
	conflict := metav1.Condition{Type: string(mcsv1a1.ServiceExportConditionConflict), Status: metav1.ConditionFalse,
		Reason: string(mcsv1a1.ServiceExportReasonNoConflicts), Message: "no conflict with the other clusters' exports"}
	if len(res.Conflicts) > 0 {
		conflict.Status, conflict.Reason = metav1.ConditionTrue, string(res.Conflicts[0].Reason)
		var msgs []string
		for _, c := range res.Conflicts {
			msgs = append(msgs, c.Message)
		}
		conflict.Message = capMessage(strings.Join(msgs, "; "))
	}
	if len(res.DropReasons) > 0 && res.Invalid == nil {
		valid.Message = capMessage(fmt.Sprintf("the Service is exported; %d endpoint(s) not: %s", res.Dropped, strings.Join(res.DropReasons, "; ")))
	}
	conds := []metav1.Condition{valid, conflict}
	for i := range conds {
		conds[i].ObservedGeneration = exp.Generation
		conds[i].LastTransitionTime = conditionTime(exp.Status.Conditions, conds[i].Type, conds[i].Status)
	}
	same := true
	for _, c := range conds {
		old := meta.FindStatusCondition(exp.Status.Conditions, c.Type)
		if old == nil || old.Status != c.Status || old.Reason != c.Reason || old.Message != c.Message || old.ObservedGeneration != c.ObservedGeneration {
			same = false
		}
	}
	if same {
		return nil
	}
	return applyStatus(ctx, r.Client, exp, map[string]any{"conditions": conds})
}

// conditionTime keeps a condition's transition time while its status stays.
func conditionTime(conds []metav1.Condition, typ string, status metav1.ConditionStatus) metav1.Time {
	if old := meta.FindStatusCondition(conds, typ); old != nil && old.Status == status {
		return old.LastTransitionTime
	}
	return metav1.Now()
}

// applyStatus server-side applies status fields of obj as FieldOwner.
func applyStatus(ctx context.Context, c client.Client, obj client.Object, status map[string]any) error {
	return applyStatusAs(ctx, c, obj, FieldOwner, status)
}

// applyStatusAs server-side applies status fields of obj as owner.
func applyStatusAs(ctx context.Context, c client.Client, obj client.Object, owner string, status map[string]any) error {
	gvk, err := c.GroupVersionKindFor(obj)
	if err != nil {
		return err
	}
	st, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&struct {
		Status map[string]any `json:"status"`
	}{status})
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: map[string]any{"status": st["status"]}}
	u.SetGroupVersionKind(gvk)
	u.SetNamespace(obj.GetNamespace())
	u.SetName(obj.GetName())
	if err := c.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(owner), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply status of %s %s/%s: %w", gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

// RemoveImports deletes everything skein imported in this cluster: its EndpointSlices, derived
// Services and ServiceImports. skein-controller runs it when multi-cluster services are turned
// off, so that no import keeps pointing at endpoints nobody updates any more.
func RemoveImports(ctx context.Context, c client.Client) (int, error) {
	n := 0
	var sls discoveryv1.EndpointSliceList
	if err := c.List(ctx, &sls, client.MatchingLabels{discoveryv1.LabelManagedBy: mcs.ManagedBy}); err != nil {
		return n, err
	}
	for i := range sls.Items {
		if sls.Items[i].Labels[mcs.ImportLabel] == "" {
			continue
		}
		if err := c.Delete(ctx, &sls.Items[i]); client.IgnoreNotFound(err) != nil {
			return n, err
		}
		n++
	}
	var svcs corev1.ServiceList
	if err := c.List(ctx, &svcs, client.MatchingLabels{ManagedByLabel: FieldOwner}, client.HasLabels{mcs.ImportLabel}); err != nil {
		return n, err
	}
	for i := range svcs.Items {
		if err := c.Delete(ctx, &svcs.Items[i]); client.IgnoreNotFound(err) != nil {
			return n, err
		}
		n++
	}
	var imps mcsv1a1.ServiceImportList
	if err := c.List(ctx, &imps, client.MatchingLabels{ManagedByLabel: FieldOwner}); err != nil {
		return n, err
	}
	for i := range imps.Items {
		if err := c.Delete(ctx, &imps.Items[i]); client.IgnoreNotFound(err) != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
