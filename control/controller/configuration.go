// The Configuration reconciler, the controller's IPAM: it gives every Configuration a status.remote that
// does not clash with anything local or with another peer (ipam), with a Ready condition
// that says why when it cannot.

package controller

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

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
	// Events, if set, receives a warning for every condition that is not Ready.
	Events events.EventRecorder

	restore sync.Once
	restErr error
}

func keyOf(c *netv1alpha1.Configuration, which string) string {
	return c.Namespace + "/" + c.Name + "/" + which
}

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
		for which, s := range map[string]netv1alpha1.CIDR{"pod": c.Status.Remote.CIDR.Pod, "external": c.Status.Remote.CIDR.External} {
			if p, err := netip.ParsePrefix(string(s)); err == nil {
				r.IPAM.Restore(keyOf(c, which), p)
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
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: 1}).
		Named("configuration").
		Complete(r)
}

// Reconcile maps one Configuration.
func (r *ConfigurationReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if err := r.Restore(ctx); err != nil {
		return ctrl.Result{}, err
	}
	c := &netv1alpha1.Configuration{}
	if err := r.Client.Get(ctx, req.NamespacedName, c); err != nil {
		if apierrors.IsNotFound(err) {
			r.IPAM.Release(req.Namespace + "/" + req.Name + "/pod")
			r.IPAM.Release(req.Namespace + "/" + req.Name + "/external")
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !c.DeletionTimestamp.IsZero() {
		r.IPAM.Release(keyOf(c, "pod"))
		r.IPAM.Release(keyOf(c, "external"))
		if controllerutil.RemoveFinalizer(c, ipamFinalizer) {
			return ctrl.Result{}, r.Client.Update(ctx, c)
		}
		return ctrl.Result{}, nil
	}
	if controllerutil.AddFinalizer(c, ipamFinalizer) {
		if err := r.Client.Update(ctx, c); err != nil {
			return ctrl.Result{}, err
		}
	}

	// One Configuration per remote cluster: the oldest wins.
	if id := c.Labels[netv1alpha1.RemoteClusterIDLabel]; id != "" {
		var same netv1alpha1.ConfigurationList
		if err := r.Client.List(ctx, &same, client.MatchingLabels{netv1alpha1.RemoteClusterIDLabel: id}); err != nil {
			return ctrl.Result{}, err
		}
		if first := kube.Oldest(same.Items); len(same.Items) > 1 && (first.Namespace != c.Namespace || first.Name != c.Name) {
			return ctrl.Result{}, r.notReady(ctx, c, "DuplicateClusterID",
				fmt.Sprintf("configuration %s/%s already describes cluster %s; delete one of them", first.Namespace, first.Name, id))
		}
	}

	var errs []string
	var out netv1alpha1.ClusterConfigCIDR
	remapped := false
	for _, f := range []struct {
		which string
		want  netv1alpha1.CIDR
		set   *netv1alpha1.CIDR
	}{{"pod", c.Spec.Remote.CIDR.Pod, &out.Pod}, {"external", c.Spec.Remote.CIDR.External, &out.External}} {
		want, err := netip.ParsePrefix(string(f.want))
		if err != nil || !want.Addr().Is4() {
			errs = append(errs, fmt.Sprintf("spec.remote.cidr.%s %q is not an IPv4 CIDR", f.which, f.want))
			continue
		}
		got, err := r.IPAM.Assign(keyOf(c, f.which), want)
		if err != nil {
			if errors.Is(err, ipam.ErrExhausted) {
				return ctrl.Result{}, r.notReady(ctx, c, "PoolExhausted", fmt.Sprintf("no free /%d in the remap pools for the %s CIDR %s", want.Bits(), f.which, want))
			}
			errs = append(errs, err.Error())
			continue
		}
		*f.set = netv1alpha1.CIDR(got.String())
		remapped = remapped || got != want.Masked()
	}
	if len(errs) > 0 {
		return ctrl.Result{}, r.notReady(ctx, c, "InvalidCIDR", strings.Join(errs, "; "))
	}
	reason, msg := "NoRemapNeeded", "the remote CIDRs clash with nothing here and are used as they are"
	if remapped {
		reason, msg = "Remapped", fmt.Sprintf("seen here as pod %s, external %s", out.Pod, out.External)
	}
	patch := client.MergeFrom(c.DeepCopy())
	c.Status.Remote = &netv1alpha1.ClusterConfig{CIDR: out}
	meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: netv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: reason, Message: msg, ObservedGeneration: c.Generation})
	return ctrl.Result{}, r.Client.Status().Patch(ctx, c, patch)
}

func (r *ConfigurationReconciler) notReady(ctx context.Context, c *netv1alpha1.Configuration, reason, msg string) error {
	if r.Events != nil {
		r.Events.Eventf(c, nil, corev1.EventTypeWarning, reason, "Map", "%s", msg)
	}
	patch := client.MergeFrom(c.DeepCopy())
	meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: netv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason, Message: msg, ObservedGeneration: c.Generation})
	return r.Client.Status().Patch(ctx, c, patch)
}
