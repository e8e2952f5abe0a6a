// The InternalNode reconciler keeps one InternalNode per Node, with the node's overlay address (from the
// internal CIDR) and its address in the external CIDR allocated once and kept, and removes it
// with the Node.

package controller

import (
	"context"
	"fmt"
	"net/netip"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/controller/ipam"
)

// InternalNodeReconciler manages InternalNodes.
type InternalNodeReconciler struct {
	Client  client.Client
	Reader  client.Reader
	Overlay *OverlayAddresses // internal CIDR, shared with the gateways
	// External and External6 hand out the nodes' addresses in the IPv4 and IPv6 external
	// CIDRs; nil for a family the cluster has no pod CIDR of.
	External, External6 *ipam.Hosts

	once    sync.Once
	onceErr error
}

// SetupWithManager watches Nodes and InternalNodes (one reconcile at a time).
func (r *InternalNodeReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&corev1.Node{}).
		Watches(&netv1alpha1.InternalNode{}, &handler.EnqueueRequestForObject{}).
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: 1}).
		Named("internalnode").
		Complete(r)
}

func (r *InternalNodeReconciler) restore(ctx context.Context) error {
	r.once.Do(func() {
		var list netv1alpha1.InternalNodeList
		if err := r.Reader.List(ctx, &list); err != nil {
			r.onceErr = fmt.Errorf("restore node addresses: %w", err)
			return
		}
		for _, in := range list.Items {
			for _, x := range []struct {
				ip    *netv1alpha1.IP
				hosts *ipam.Hosts
			}{{in.Spec.ExternalIP, r.External}, {in.Spec.ExternalIP6, r.External6}} {
				if x.ip == nil || x.hosts == nil {
					continue
				}
				if a, err := netip.ParseAddr(string(*x.ip)); err == nil {
					x.hosts.Restore(in.Name, a) // kept only when inside the CIDR
				}
			}
		}
	})
	return r.onceErr
}

// Reconcile makes the InternalNode named like the Node match it.
func (r *InternalNodeReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if err := r.restore(ctx); err != nil {
		return ctrl.Result{}, err
	}
	node := &corev1.Node{}
	err := r.Client.Get(ctx, req.NamespacedName, node)
	if apierrors.IsNotFound(err) {
		in := &netv1alpha1.InternalNode{ObjectMeta: metav1.ObjectMeta{Name: req.Name}}
		if err := r.Client.Delete(ctx, in); err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("delete InternalNode %s of a removed Node: %w", req.Name, err)
		}
		r.Overlay.Release(NodeKey(req.Name))
		for _, h := range []*ipam.Hosts{r.External, r.External6} {
			if h != nil {
				h.Release(req.Name)
			}
		}
		return ctrl.Result{}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	ov, err := r.Overlay.Assign(ctx, NodeKey(node.Name))
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("node %s overlay address: %w", node.Name, err)
	}
	var want netv1alpha1.InternalNodeSpec
	ovIP := netv1alpha1.IP(ov.String())
	want.OverlayIP = &ovIP
	for _, x := range []struct {
		hosts *ipam.Hosts
		dst   **netv1alpha1.IP
		what  string
	}{{r.External, &want.ExternalIP, "external address"}, {r.External6, &want.ExternalIP6, "IPv6 external address"}} {
		if x.hosts == nil {
			continue
		}
		a, err := x.hosts.Assign(node.Name)
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("node %s %s: %w", node.Name, x.what, err)
		}
		ip := netv1alpha1.IP(a.String())
		*x.dst = &ip
	}
	in := &netv1alpha1.InternalNode{}
	err = r.Client.Get(ctx, client.ObjectKey{Name: node.Name}, in)
	if apierrors.IsNotFound(err) {
		in = &netv1alpha1.InternalNode{
			ObjectMeta: metav1.ObjectMeta{Name: node.Name, OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}},
			Spec:       want,
		}
		return ctrl.Result{}, r.Client.Create(ctx, in)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if !equalIP(in.Spec.OverlayIP, want.OverlayIP) || !equalIP(in.Spec.ExternalIP, want.ExternalIP) || !equalIP(in.Spec.ExternalIP6, want.ExternalIP6) {
		patch := client.MergeFrom(in.DeepCopy())
		in.Spec = want
		return ctrl.Result{}, r.Client.Patch(ctx, in, patch)
	}
	return ctrl.Result{}, nil
}

// equalIP reports whether two optional addresses are both unset or equal.
func equalIP(a, b *netv1alpha1.IP) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}
