package controller

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/controller/mcs"
)

// What one peer may cost this cluster through multi-cluster services. Each name a peer exports
// in a namespace that imports becomes a Service here (a ClusterIP, a unit of the tenant's
// ResourceQuota), its endpoints EndpointSlices, and all of it memory in skein-controller: a
// peer gets at most MaxImports imports and MaxEndpoints endpoints across them, shared out in the
// order of its exports (oldest first, then namespace/name), so that what it already has is not
// taken away by what it exports next. What is left out is said by the condition
// ServicesWithinBudget on the peer's Configuration and WithinLimits on the ServiceImport, by an
// event on each, and by the gauges skein_controller_import_limited and
// skein_controller_import_invalid.

// Defaults of PeerBudget.
const (
	DefaultMaxImportsPerPeer   = 200
	DefaultMaxEndpointsPerPeer = 20000
	DefaultMaxObjectsPerPeer   = 50000
)

// PeerBudget limits what one peer causes here (zero values: the defaults).
type PeerBudget struct {
	// MaxImports: names of the peer imported (the rest of its exports are not).
	MaxImports int
	// MaxEndpoints: endpoints of the peer imported, across its imports.
	MaxEndpoints int
	// MaxObjects: PublishedServices and EndpointSlice copies of the peer's published namespace
	// the controller's informers hold (trimmed); past it the peer is not read (its imports go)
	// and read again DefaultExporterRetry later.
	MaxObjects int
}

func (b PeerBudget) withDefaults() PeerBudget {
	if b.MaxImports <= 0 {
		b.MaxImports = DefaultMaxImportsPerPeer
	}
	if b.MaxEndpoints <= 0 {
		b.MaxEndpoints = DefaultMaxEndpointsPerPeer
	}
	if b.MaxObjects <= 0 {
		b.MaxObjects = DefaultMaxObjectsPerPeer
	}
	return b
}

// Condition types and reasons of the budgets.
const (
	// ConditionServicesWithinBudget, on a peer's Configuration: every export of the peer in a
	// namespace that imports is imported, with all its endpoints.
	ConditionServicesWithinBudget = "ServicesWithinBudget"
	// ConditionWithinLimits, on a ServiceImport: every valid endpoint and port of every
	// exporter is imported.
	ConditionWithinLimits = "WithinLimits"

	ReasonWithinBudget   = "WithinBudget"
	ReasonOverBudget     = "OverBudget"
	ReasonTooManyObjects = "TooManyObjects"
	// ReasonResponseTooLarge: the peer's API server answered a list or watch with more than
	// MaxPeerResponseBytes.
	ReasonResponseTooLarge = "ResponseTooLarge"
	ReasonWithinLimits     = "WithinLimits"
	ReasonOverLimits       = "OverLimits"
)

// budgetFieldOwner writes the peer's condition on its Configuration (whose other conditions the
// Configuration reconciler writes).
const budgetFieldOwner = FieldOwner + "-imports"

// ledger is how a peer's budget is shared out among its exports now.
type ledger struct {
	// allowance is the endpoints each admitted name may hold.
	allowance map[types.NamespacedName]int
	// refused are the exports beyond MaxImports, in order; exported counts the exports in
	// namespaces that import.
	refused  []types.NamespacedName
	exported int
	// overBudget: endpoints read and left out over the budget, across the admitted names.
	overBudget int
}

// computeLedger shares x's budget out among its exports in namespaces that import.
func (r *ServiceImportReconciler) computeLedger(ctx context.Context, x *exporter) (ledger, error) {
	exps, err := x.exports(ctx, "")
	if err != nil {
		return ledger{}, fmt.Errorf("exporter %s: %w", x.id, err)
	}
	ok := map[string]bool{}
	var keys []*mcsv1a1.ServiceExport
	for i := range exps {
		e := &exps[i]
		imp, seen := ok[e.Namespace]
		if !seen {
			var err error
			if imp, err = r.importable(ctx, e.Namespace); err != nil {
				return ledger{}, err
			}
			ok[e.Namespace] = imp
		}
		if imp {
			keys = append(keys, e)
		}
	}
	slices.SortFunc(keys, func(a, b *mcsv1a1.ServiceExport) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	l := ledger{allowance: map[types.NamespacedName]int{}, exported: len(keys)}
	left := r.Budget.MaxEndpoints
	for i, e := range keys {
		k := client.ObjectKeyFromObject(e)
		if i >= r.Budget.MaxImports {
			l.refused = append(l.refused, k)
			continue
		}
		l.allowance[k] = left
		left = max(0, left-x.heldEndpoints(k))
	}
	x.mu.Lock()
	for k, h := range x.held {
		if _, ok := l.allowance[k]; ok {
			l.overBudget += h.overBudget
		}
	}
	x.mu.Unlock()
	return l, nil
}

// updateLedger computes x's ledger again, enqueues the names whose admission or allowance
// changed (but skip, being reconciled), drops what is held of names no longer admitted, and
// writes the peer's condition when it changed.
func (r *ServiceImportReconciler) updateLedger(ctx context.Context, x *exporter, skip types.NamespacedName) (ledger, error) {
	l, err := r.computeLedger(ctx, x)
	if err != nil {
		return l, err
	}
	x.mu.Lock()
	old := x.ledger
	x.ledger = &l
	for k := range x.held {
		if _, ok := l.allowance[k]; !ok {
			delete(x.held, k)
		}
	}
	x.mu.Unlock()
	if old != nil {
		for k, a := range l.allowance {
			if b, ok := old.allowance[k]; (!ok || a != b) && k != skip {
				r.enqueue(k)
			}
		}
		for k := range old.allowance {
			if _, ok := l.allowance[k]; !ok && k != skip {
				r.enqueue(k)
			}
		}
	}
	r.tally.setPeer(x.id, len(l.refused), l.overBudget, false)
	return l, r.peerCondition(ctx, x, &l)
}

// peerCondition writes ServicesWithinBudget on the peer's Configuration (in the namespace of
// its credentials) and an event when it changes. l nil: the peer has more objects than
// MaxObjects, or answered more than MaxPeerResponseBytes.
func (r *ServiceImportReconciler) peerCondition(ctx context.Context, x *exporter, l *ledger) error {
	var confs netv1alpha1.ConfigurationList
	if err := r.Client.List(ctx, &confs, client.InNamespace(x.secret.Namespace), client.MatchingLabels{netv1alpha1.RemoteClusterIDLabel: x.id}); err != nil {
		return err
	}
	if len(confs.Items) != 1 {
		return nil
	}
	conf := &confs.Items[0]
	c := metav1.Condition{Type: ConditionServicesWithinBudget, Status: metav1.ConditionTrue, Reason: ReasonWithinBudget, ObservedGeneration: conf.Generation}
	x.mu.Lock()
	tooLarge := x.tooLarge
	x.mu.Unlock()
	switch {
	case l == nil && tooLarge:
		c.Status, c.Reason = metav1.ConditionFalse, ReasonResponseTooLarge
		c.Message = fmt.Sprintf("cluster %s's API server answered with more than %d bytes at once (its published namespace is too large: huge PublishedServices or slices): nothing is imported from it; it is read again every %s", x.id, MaxPeerResponseBytes, r.Retry)
	case l == nil:
		c.Status, c.Reason = metav1.ConditionFalse, ReasonTooManyObjects
		c.Message = fmt.Sprintf("cluster %s publishes more than %d objects (PublishedServices and EndpointSlices; --max-objects-per-peer): nothing is imported from it; it is read again every %s", x.id, r.Budget.MaxObjects, r.Retry)
	case len(l.refused) > 0 || l.overBudget > 0:
		c.Status, c.Reason = metav1.ConditionFalse, ReasonOverBudget
		var parts []string
		if len(l.refused) > 0 {
			names := make([]string, 0, 5)
			for _, k := range l.refused[:min(5, len(l.refused))] {
				names = append(names, k.String())
			}
			more := ""
			if len(l.refused) > 5 {
				more = fmt.Sprintf(" and %d more", len(l.refused)-5)
			}
			parts = append(parts, fmt.Sprintf("%d of its %d exports imported (--max-imports-per-peer %d), the newest left out: %s%s",
				l.exported-len(l.refused), l.exported, r.Budget.MaxImports, strings.Join(names, ", "), more))
		}
		if l.overBudget > 0 {
			parts = append(parts, fmt.Sprintf("%d endpoint(s) left out over the budget of %d (--max-endpoints-per-peer)", l.overBudget, r.Budget.MaxEndpoints))
		}
		c.Message = fmt.Sprintf("cluster %s: %s", x.id, strings.Join(parts, "; "))
	default:
		c.Message = fmt.Sprintf("cluster %s: its %d exports in namespaces that import are imported", x.id, l.exported)
	}
	old := meta.FindStatusCondition(conf.Status.Conditions, c.Type)
	if old != nil && old.Status == c.Status && old.Reason == c.Reason && old.Message == c.Message && old.ObservedGeneration == c.ObservedGeneration {
		return nil
	}
	c.LastTransitionTime = conditionTime(conf.Status.Conditions, c.Type, c.Status)
	if c.Status == metav1.ConditionFalse && (old == nil || old.Status != c.Status || old.Reason != c.Reason) {
		r.Events.Eventf(conf, nil, corev1.EventTypeWarning, c.Reason, "Import", "%s", c.Message)
	}
	return applyStatusAs(ctx, r.Client, conf, budgetFieldOwner, map[string]any{"conditions": []metav1.Condition{c}})
}

// limitsCondition is a ServiceImport's WithinLimits condition from what became of its sources.
func limitsCondition(imp mcs.Import, lim mcs.Limits) metav1.Condition {
	c := metav1.Condition{Type: ConditionWithinLimits, Status: metav1.ConditionTrue, Reason: ReasonWithinLimits,
		Message: "every valid endpoint and port of every exporter is imported"}
	var parts []string
	for _, s := range imp.Sources {
		var what []string
		if s.OverBudget > 0 {
			what = append(what, fmt.Sprintf("%d endpoint(s) over its endpoint budget (--max-endpoints-per-peer)", s.OverBudget))
		}
		if s.PortsOverLimit > 0 {
			what = append(what, fmt.Sprintf("%d port(s) over the limit of %d per import (--max-ports-per-import)", s.PortsOverLimit, cmp.Or(lim.MaxPortsPerImport, mcs.DefaultMaxPortsPerImport)))
		}
		if s.InvalidHostname > 0 {
			what = append(what, fmt.Sprintf("%d endpoint(s) whose hostname is not a DNS-1123 label", s.InvalidHostname))
		}
		if s.InvalidPorts > 0 {
			what = append(what, fmt.Sprintf("%d invalid port(s)", s.InvalidPorts))
		}
		if len(what) > 0 {
			parts = append(parts, fmt.Sprintf("cluster %s: %s", s.ClusterID, strings.Join(what, ", ")))
		}
	}
	if len(parts) > 0 {
		c.Status, c.Reason = metav1.ConditionFalse, ReasonOverLimits
		c.Message = capMessage("left out: " + strings.Join(parts, "; "))
	}
	return c
}

// capMessage keeps a condition message within what the API accepts (32,768 bytes).
func capMessage(m string) string {
	const most = 4096
	if len(m) <= most {
		return m
	}
	return m[:most-len(" (cut)")] + " (cut)"
}

// importTally is what the budgets and the validation leave out now, for the gauges.
type importTally struct {
	mu sync.Mutex
	// byImport: per import, per reason, over its sources.
	byImport map[types.NamespacedName]map[string]int
	// byPeer: exports refused, endpoints over budget, over the object cap (1 or 0).
	byPeer map[string][3]int
}

func (t *importTally) setImport(k types.NamespacedName, imp *mcs.Import) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byImport == nil {
		t.byImport = map[types.NamespacedName]map[string]int{}
	}
	if imp == nil {
		delete(t.byImport, k)
		return
	}
	m := map[string]int{}
	for _, s := range imp.Sources {
		m["ports"] += s.PortsOverLimit
		m["hostname"] += s.InvalidHostname
		m["port"] += s.InvalidPorts
	}
	t.byImport[k] = m
}

func (t *importTally) setPeer(id string, refused, overBudget int, overCap bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byPeer == nil {
		t.byPeer = map[string][3]int{}
	}
	c := 0
	if overCap {
		c = 1
	}
	t.byPeer[id] = [3]int{refused, overBudget, c}
}

func (t *importTally) forgetPeer(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.byPeer, id)
}

var (
	descImportLimited = prometheus.NewDesc("skein_controller_import_limited", "What the per-peer budgets leave out of the imports now: exports not imported (limit imports), endpoints (endpoints), ports (ports), peers not read for having too many objects (objects).", []string{"limit"}, nil)
	descImportInvalid = prometheus.NewDesc("skein_controller_import_invalid", "What peers export that is invalid and left out of the imports now: endpoints whose hostname is not a DNS-1123 label (hostname), ports with a bad number, protocol or name (port).", []string{"what"}, nil)
)

func (t *importTally) Describe(ch chan<- *prometheus.Desc) {
	ch <- descImportLimited
	ch <- descImportInvalid
}

func (t *importTally) Collect(ch chan<- prometheus.Metric) {
	t.mu.Lock()
	sum := map[string]int{}
	for _, m := range t.byImport {
		for k, v := range m {
			sum[k] += v
		}
	}
	for _, p := range t.byPeer {
		sum["imports"] += p[0]
		sum["endpoints"] += p[1]
		sum["objects"] += p[2]
	}
	t.mu.Unlock()
	for _, l := range []string{"imports", "endpoints", "ports", "objects"} {
		ch <- prometheus.MustNewConstMetric(descImportLimited, prometheus.GaugeValue, float64(sum[l]), l)
	}
	for _, w := range []string{"hostname", "port"} {
		ch <- prometheus.MustNewConstMetric(descImportInvalid, prometheus.GaugeValue, float64(sum[w]), w)
	}
}

// ParseNamespaceSelector parses a label selector of the namespaces that import (--import-namespace-selector):
// "" is nil, every namespace.
func ParseNamespaceSelector(s string) (labels.Selector, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	sel, err := labels.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("namespace selector %q: %w (want a label selector, such as skein.io/import=true)", s, err)
	}
	return sel, nil
}
