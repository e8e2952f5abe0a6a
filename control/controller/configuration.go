// The Configuration reconciler, the controller's IPAM: it gives every Configuration a status.remote that
// does not clash with anything local or with another peer (ipam), with a Ready condition
// that says why when it cannot.

package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/controller/ipam"
	"github.com/skein-net/skein/control/kube"
)

const (
	ipamFinalizer = "networking.liqo.io/ipam"
)

// ConfigurationReconciler maps Configurations.
type ConfigurationReconciler struct {
	Client client.Client
	// Reader reads straight from the API server (the manager's APIReader), for start-up.
	Reader client.Reader
	IPAM   *ipam.Allocator
	// MinPrefixLength and MinPrefixLength6 are the shortest IPv4 and IPv6 prefixes accepted
	// from a peer (0: the API's defaults, /8 and /32).
	MinPrefixLength, MinPrefixLength6 int
	// IPv6 maps peers' IPv6 CIDRs (remapped from the IPAM's IPv6 pools when they clash). Off
	// (skein-controller --ipv6=false, for a cluster whose nodes have no IPv6), they are refused
	// (Ready=False, InvalidCIDR), and so is the whole Configuration: half a peering routed
	// would look like a working one.
	IPv6 bool
	// Events, if set, receives a warning for every condition that is not Ready.
	Events events.EventRecorder
	// APIServerEndpoints names the EndpointSlice of the API server's addresses (default:
	// default/kubernetes): a peer's CIDR that covers one is remapped like one covering a node.
	// Read through Reader at most every apiServerAddressesTTL; unreadable (no RBAC) is logged
	// once and skipped.
	APIServerEndpoints types.NamespacedName

	restore      sync.Once
	restErr      error
	endpointsErr sync.Once

	apiMu    sync.Mutex
	apiAddrs []netip.Addr
	apiRead  time.Time // when apiAddrs was read (zero: never)
}

// apiServerAddressesTTL is how long the API server's addresses are reused before they are read
// again: they are read for every reconcile, and 1,000 peerings coming up at once made some
// 1,800 reads of an EndpointSlice that hardly ever changes.
const apiServerAddressesTTL = 30 * time.Second

// apiServerAddresses are the API server's endpoint addresses (nodes reach the API server
// there, beside the pod network).
func (r *ConfigurationReconciler) apiServerAddresses(ctx context.Context) []netip.Addr {
	if r.Reader == nil {
		return nil
	}
	r.apiMu.Lock()
	defer r.apiMu.Unlock()
	if !r.apiRead.IsZero() && time.Since(r.apiRead) < apiServerAddressesTTL {
		return r.apiAddrs
	}
	addrs, err := r.readAPIServerAddresses(ctx)
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
		// A failed read (a busy or throttled API server) is not "no addresses" for the next
		// 30 s: the Configurations mapped meanwhile are not checked again. The last addresses
		// read stand in, and the next reconcile reads again.
		return r.apiAddrs
	}
	r.apiAddrs, r.apiRead = addrs, time.Now()
	return r.apiAddrs
}

func (r *ConfigurationReconciler) readAPIServerAddresses(ctx context.Context) ([]netip.Addr, error) {
	key := r.APIServerEndpoints
	if key.Name == "" {
		key = types.NamespacedName{Namespace: metav1.NamespaceDefault, Name: "kubernetes"}
	}
	var es discoveryv1.EndpointSlice
	if err := r.Reader.Get(ctx, key, &es); err != nil {
		r.endpointsErr.Do(func() {
			ctrl.LoggerFrom(ctx).Info("the API server's addresses are not protected from peers' CIDRs (list them in ipam.nodeCIDRs)", "endpointSlice", key, "err", err.Error())
		})
		return nil, err
	}
	var out []netip.Addr
	for _, e := range es.Endpoints {
		for _, a := range e.Addresses {
			if ip, err := netip.ParseAddr(a); err == nil {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out, nil
}

// keyOf names one CIDR of a Configuration in the allocator: "namespace/name/pod",
// ".../external", ".../additionalPods[0]"...
func keyOf(c *netv1alpha1.Configuration, which string) string {
	return ownerOf(c.Namespace, c.Name) + which
}

// cidrKey names one of a Configuration's CIDRs (from its spec) in the allocator: pod and
// external by field, the additional ones by kind and CIDR ("additionalPods/10.245.0.0/16"),
// so that reordering or removing entries of a list never hands one range's prefix to another.
func cidrKey(c *netv1alpha1.Configuration, f netv1alpha1.NamedCIDR) string {
	if kind, _, ok := strings.Cut(f.Field, "["); ok {
		return keyOf(c, kind+"/"+string(f.CIDR))
	}
	return keyOf(c, f.Field)
}

// ownerOf is the prefix of every key of one Configuration.
func ownerOf(namespace, name string) string { return namespace + "/" + name + "/" }

// Restore rebuilds the allocator from every Configuration's status. Reconcile calls it once,
// before its first allocation, so a replica that becomes leader late starts from the API's
// state, not from its own start-up.
func (r *ConfigurationReconciler) Restore(ctx context.Context) error {
	r.restore.Do(func() { r.restErr = r.restoreNow(ctx) })
	return r.restErr
}

func (r *ConfigurationReconciler) restoreNow(ctx context.Context) error {
	var list netv1alpha1.ConfigurationList
	if err := r.Reader.List(ctx, &list); err != nil {
		return fmt.Errorf("restore IPAM: %w", err)
	}
	for i := range list.Items {
		c := &list.Items[i]
		if c.Status.Remote == nil {
			continue
		}
		// Status entries pair with the spec's by position when the status was computed for
		// this spec (Ready for its generation); pod and external always pair by name.
		spec, seen := c.Spec.Remote.CIDR.All(), c.Status.Remote.CIDR.All()
		cond := meta.FindStatusCondition(c.Status.Conditions, netv1alpha1.ConditionReady)
		current := cond != nil && cond.Status == metav1.ConditionTrue && cond.ObservedGeneration == c.Generation && len(spec) == len(seen)
		for i, s := range seen {
			if i >= 2 && (!current || spec[i].Field != s.Field) {
				continue // reassigned at the next reconcile
			}
			real := s
			if i < len(spec) {
				real.CIDR = spec[i].CIDR
			}
			if p, err := netip.ParsePrefix(string(s.CIDR)); err == nil {
				r.IPAM.Restore(cidrKey(c, real), p)
			}
		}
	}
	return nil
}

// SetupWithManager registers the reconciler; reconciles run one at a time so allocations are
// serialised.
func (r *ConfigurationReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&netv1alpha1.Configuration{}).
		// A node's addresses are never inside a peer's CIDR as seen here: every Configuration is
		// checked again when a node joins or its addresses change.
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.allConfigurations), builder.WithPredicates(nodeAddressesChanged)).
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: 1}).
		Named("configuration").
		Complete(r)
}

// nodeAddressesChanged passes node creations, deletions and address changes.
var nodeAddressesChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*corev1.Node)
		n, ok2 := e.ObjectNew.(*corev1.Node)
		return !ok1 || !ok2 || !slices.Equal(o.Status.Addresses, n.Status.Addresses)
	},
}

func (r *ConfigurationReconciler) allConfigurations(ctx context.Context, _ client.Object) []reconcile.Request {
	var list netv1alpha1.ConfigurationList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, c := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}})
	}
	return reqs
}

// nodeAddresses are every address of every node (internal and external).
func (r *ConfigurationReconciler) nodeAddresses(ctx context.Context) ([]netip.Addr, error) {
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes); err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, n := range nodes.Items {
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
				continue
			}
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out, nil
}

// refuse says why a peer's CIDR cannot be routed here at all (remapping does not help): it
// overlaps a special range, or it is larger than the bound.
func (r *ConfigurationReconciler) refuse(which string, p netip.Prefix) string {
	if f, ok := netv1alpha1.ForbiddenRange(p); ok {
		return fmt.Sprintf("spec.remote.cidr.%s %v overlaps %s (%s)", which, p, f.Prefix, f.Why)
	}
	minLen, flag := cmp.Or(r.MinPrefixLength, netv1alpha1.DefaultMinRemotePrefixLength), "--min-remote-prefix-length"
	if p.Addr().Is6() {
		minLen, flag = cmp.Or(r.MinPrefixLength6, netv1alpha1.DefaultMinRemotePrefixLength6), "--min-remote-prefix-length6"
	}
	if p.Bits() < minLen {
		return fmt.Sprintf("spec.remote.cidr.%s %v is larger than a /%d (the controller's %s)", which, p, minLen, flag)
	}
	return ""
}

// Reconcile maps one Configuration.
func (r *ConfigurationReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if err := r.Restore(ctx); err != nil {
		return ctrl.Result{}, err
	}
	c := &netv1alpha1.Configuration{}
	if err := r.Client.Get(ctx, req.NamespacedName, c); err != nil {
		if apierrors.IsNotFound(err) {
			r.IPAM.ReleaseOwner(ownerOf(req.Namespace, req.Name))
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !c.DeletionTimestamp.IsZero() {
		r.IPAM.ReleaseOwner(ownerOf(c.Namespace, c.Name))
		// Earlier versions put a finalizer on every Configuration; it held nothing the
		// release above (or Restore, after a restart) does not, and cost a write per peering.
		if controllerutil.RemoveFinalizer(c, ipamFinalizer) {
			return ctrl.Result{}, r.Client.Update(ctx, c)
		}
		return ctrl.Result{}, nil
	}

	// One Configuration per remote cluster: the oldest wins.
	if id := c.Labels[netv1alpha1.RemoteClusterIDLabel]; id != "" {
		var same netv1alpha1.ConfigurationList
		if err := r.Client.List(ctx, &same, client.MatchingLabels{netv1alpha1.RemoteClusterIDLabel: id}); err != nil {
			return ctrl.Result{}, err
		}
		if first := kube.Oldest(same.Items); len(same.Items) > 1 && (first.Namespace != c.Namespace || first.Name != c.Name) {
			return ctrl.Result{}, r.unmap(ctx, c, "DuplicateClusterID",
				fmt.Sprintf("configuration %s/%s already describes cluster %s; delete one of them", first.Namespace, first.Name, id))
		}
	}

	nodes, err := r.nodeAddresses(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	r.IPAM.SetNodes(append(nodes, r.apiServerAddresses(ctx)...))

	var errs, refused, why []string
	wants := c.Spec.Remote.CIDR.All()
	got := make([]netip.Prefix, len(wants))
	remapped := false
	// Keys of CIDRs the spec no longer lists (an additional CIDR removed) are freed first.
	r.IPAM.ReleaseOwnerExcept(ownerOf(c.Namespace, c.Name), keysOf(c, wants))
	for i, f := range wants {
		want, err := netip.ParsePrefix(string(f.CIDR))
		if err != nil || want.Addr().Is4In6() {
			errs = append(errs, fmt.Sprintf("spec.remote.cidr.%s %q is not an IPv4 or IPv6 CIDR", f.Field, f.CIDR))
			continue
		}
		want = want.Masked()
		if why := r.refuse(f.Field, want); why != "" {
			refused = append(refused, why)
			continue
		}
		if want.Addr().Is6() && !r.IPv6 {
			errs = append(errs, fmt.Sprintf("spec.remote.cidr.%s %v is IPv6, and this cluster's controller maps IPv4 only (skein-controller --ipv6=false, chart value ipam.ipv6)", f.Field, want))
			continue
		}
		// The peer's own CIDRs must not overlap each other: a packet to an address in both
		// could not be told apart.
		if j := slices.IndexFunc(wants[:i], func(o netv1alpha1.NamedCIDR) bool {
			p, err := netip.ParsePrefix(string(o.CIDR))
			return err == nil && p.Masked().Overlaps(want)
		}); j >= 0 {
			errs = append(errs, fmt.Sprintf("spec.remote.cidr.%s %v overlaps spec.remote.cidr.%s %s", f.Field, want, wants[j].Field, wants[j].CIDR))
			continue
		}
		if clash := r.IPAM.Clash(cidrKey(c, f), want); clash != "" {
			why = append(why, fmt.Sprintf("the %s CIDR %v clashes with %s", f.Field, want, clash))
		}
		g, err := r.IPAM.Assign(cidrKey(c, f), want)
		if err != nil {
			if errors.Is(err, ipam.ErrExhausted) {
				// Unmapped: some of its prefixes may already be freed for others.
				return ctrl.Result{}, r.unmap(ctx, c, "PoolExhausted", fmt.Sprintf("no free /%d in the remap pools for the %s CIDR %s", want.Bits(), f.Field, want))
			}
			errs = append(errs, err.Error())
			continue
		}
		got[i] = g
		remapped = remapped || g != want
	}
	if len(refused) > 0 {
		return ctrl.Result{}, r.unmap(ctx, c, "ForbiddenCIDR", strings.Join(refused, "; ")+": not routed here")
	}
	if len(errs) > 0 {
		return ctrl.Result{}, r.unmap(ctx, c, "InvalidCIDR", strings.Join(errs, "; "))
	}
	out := seenAs(wants, got)
	reason, msg := "NoRemapNeeded", "the remote CIDRs clash with nothing here and are used as they are"
	if remapped {
		var seen []string
		for _, s := range out.All() {
			if s.CIDR != "" {
				seen = append(seen, s.Field+" "+string(s.CIDR))
			}
		}
		reason, msg = "Remapped", fmt.Sprintf("seen here as %s (%s)", strings.Join(seen, ", "), strings.Join(why, "; "))
	}
	before := c.DeepCopy()
	c.Status.Remote = &netv1alpha1.ClusterConfig{CIDR: out}
	meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: netv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: reason, Message: msg, ObservedGeneration: c.Generation})
	return ctrl.Result{}, r.patchStatus(ctx, before, c)
}

// patchStatus writes c's status as changed from before's, and nothing when it has not changed
// (an empty patch is still a request, and every status write wakes this reconciler again).
// The patch carries before's resourceVersion: a merge patch replaces the whole conditions list,
// so one made from a copy older than another writer's condition (the import's
// ServicesWithinBudget) would erase it; it fails with a conflict instead and the reconcile runs
// again on the current object.
func (r *ConfigurationReconciler) patchStatus(ctx context.Context, before, c *netv1alpha1.Configuration) error {
	if equality.Semantic.DeepEqual(before.Status, c.Status) {
		return nil
	}
	return r.Client.Status().Patch(ctx, c, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
}

// unmap takes a Configuration out of use: its prefixes released, status.remote removed (the
// node agents withdraw its routes), Ready false with the reason.
func (r *ConfigurationReconciler) unmap(ctx context.Context, c *netv1alpha1.Configuration, reason, msg string) error {
	r.IPAM.ReleaseOwner(ownerOf(c.Namespace, c.Name))
	before := c.DeepCopy()
	c.Status.Remote = nil
	return r.notReady(ctx, before, c, reason, msg)
}

// notReady sets c's Ready condition false with the reason, and writes c's status as changed
// from before's.
func (r *ConfigurationReconciler) notReady(ctx context.Context, before, c *netv1alpha1.Configuration, reason, msg string) error {
	if r.Events != nil {
		r.Events.Eventf(c, nil, corev1.EventTypeWarning, reason, "Map", "%s", msg)
	}
	meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: netv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason, Message: msg, ObservedGeneration: c.Generation})
	return r.patchStatus(ctx, before, c)
}

// keysOf are the allocator keys of the given CIDRs of c.
func keysOf(c *netv1alpha1.Configuration, cidrs []netv1alpha1.NamedCIDR) map[string]bool {
	keys := make(map[string]bool, len(cidrs))
	for _, f := range cidrs {
		keys[cidrKey(c, f)] = true
	}
	return keys
}

// seenAs builds status.remote.cidr from the allocations, in the order of All: pod, external,
// additionalPods, additionalExternals.
func seenAs(wants []netv1alpha1.NamedCIDR, got []netip.Prefix) netv1alpha1.ClusterConfigCIDR {
	var out netv1alpha1.ClusterConfigCIDR
	str := func(i int) netv1alpha1.CIDR {
		if !got[i].IsValid() {
			return ""
		}
		return netv1alpha1.CIDR(got[i].String())
	}
	out.Pod, out.External = str(0), str(1)
	for i := 2; i < len(wants); i++ {
		if strings.HasPrefix(wants[i].Field, "additionalPods") {
			out.AdditionalPods = append(out.AdditionalPods, str(i))
		} else {
			out.AdditionalExternals = append(out.AdditionalExternals, str(i))
		}
	}
	return out
}
