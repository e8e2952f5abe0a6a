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
	Client   client.Client
	Reader   client.Reader
	Overlay  *OverlayAddresses // internal CIDR, shared with the gateways
	External *ipam.Hosts       // external CIDR

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
			if in.Spec.ExternalIP != nil {
				if a, err := netip.ParseAddr(string(*in.Spec.ExternalIP)); err == nil {
					r.External.Restore(in.Name, a)
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
		r.External.Release(req.Name)
		return ctrl.Result{}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	ov, err := r.Overlay.Assign(ctx, NodeKey(node.Name))
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("node %s overlay address: %w", node.Name, err)
	}
	ext, err := r.External.Assign(node.Name)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("node %s external address: %w", node.Name, err)
	}
	ovIP, extIP := netv1alpha1.IP(ov.String()), netv1alpha1.IP(ext.String())
	in := &netv1alpha1.InternalNode{}
	err = r.Client.Get(ctx, client.ObjectKey{Name: node.Name}, in)
	if apierrors.IsNotFound(err) {
		in = &netv1alpha1.InternalNode{
			ObjectMeta: metav1.ObjectMeta{Name: node.Name, OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}},
			Spec:       netv1alpha1.InternalNodeSpec{OverlayIP: &ovIP, ExternalIP: &extIP},
		}
		return ctrl.Result{}, r.Client.Create(ctx, in)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if in.Spec.OverlayIP == nil || *in.Spec.OverlayIP != ovIP || in.Spec.ExternalIP == nil || *in.Spec.ExternalIP != extIP {
		patch := client.MergeFrom(in.DeepCopy())
		in.Spec.OverlayIP, in.Spec.ExternalIP = &ovIP, &extIP
		return ctrl.Result{}, r.Client.Patch(ctx, in, patch)
	}
	return ctrl.Result{}, nil
}
