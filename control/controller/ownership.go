package controller

import (
	"context"
	"fmt"
	"slices"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// The controller touches only what it created: an object of a gateway's name that it did not
// create (a user's Service "web" beside GatewayServer "web") is neither taken over nor deleted.

// isOwned reports whether existing belongs to owner: controlled by it (an ownerReference with
// controller: true), or, for the cluster-scoped ClusterRoleBinding that a namespaced owner
// cannot own, marked by skein-controller and bound to the gateway's ServiceAccount.
func isOwned(owner, existing client.Object) bool {
	switch o := existing.(type) {
	case *rbacv1.ClusterRoleBinding:
		want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: owner.GetName(), Namespace: owner.GetNamespace()}}
		return o.Labels[ManagedByLabel] == FieldOwner && slices.Equal(o.Subjects, want)
	case *netv1alpha1.Connection:
		// The gateway's own pods create its Connection, naming the gateway.
		return o.Spec.GatewayRef.Name == owner.GetName() && o.Spec.GatewayRef.Namespace == owner.GetNamespace()
	}
	return metav1.IsControlledBy(existing, owner)
}

// lookup reads the object of obj's kind and key: from the cache, which holds what the
// controller labelled, then (on a miss) from the API server around it. It returns nil when
// there is none.
func (r *GatewayReconciler) lookup(ctx context.Context, obj client.Object) (client.Object, error) {
	existing, err := r.fromCache(ctx, obj)
	if err != nil || existing != nil || r.Reader == nil {
		return existing, err
	}
	if existing, err = r.empty(obj); err != nil {
		return nil, err
	}
	if err := r.Reader.Get(ctx, client.ObjectKeyFromObject(obj), existing); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return existing, nil
}

// fromCache is the cache's half of lookup: obj's namesake as the cache holds it, nil when the
// cache does not hold it (or does not cache obj's kind).
func (r *GatewayReconciler) fromCache(ctx context.Context, obj client.Object) (client.Object, error) {
	// Connections are written by the gateways and not cached here (reading one through the
	// cache would start an informer the controller's role does not allow).
	if _, uncached := obj.(*netv1alpha1.Connection); uncached {
		return nil, nil
	}
	existing, err := r.empty(obj)
	if err != nil {
		return nil, err
	}
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(obj), existing); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return existing, nil
}

// empty is a new, empty object of obj's kind.
func (r *GatewayReconciler) empty(obj client.Object) (client.Object, error) {
	gvk, err := apiutil.GVKForObject(obj, r.Client.Scheme())
	if err != nil {
		return nil, err
	}
	o, err := r.Client.Scheme().New(gvk)
	if err != nil {
		return nil, err
	}
	return o.(client.Object), nil
}

// claim returns a conflictError when an object of obj's kind and key exists and is not owner's.
func (r *GatewayReconciler) claim(ctx context.Context, owner, obj client.Object) error {
	existing, err := r.lookup(ctx, obj)
	if err != nil || existing == nil || isOwned(owner, existing) {
		return err
	}
	kind := fmt.Sprintf("%T", obj)
	if gvk, err := apiutil.GVKForObject(obj, r.Client.Scheme()); err == nil {
		kind = gvk.Kind
	}
	name := obj.GetName()
	if obj.GetNamespace() != "" {
		name = obj.GetNamespace() + "/" + name
	}
	return &conflictError{fmt.Sprintf("%s %s exists and does not belong to this gateway: skein does not take over objects it did not create; remove or rename it", kind, name)}
}

// deleteIfOwned deletes obj's namesake if it is owner's, with its UID as a precondition so a
// namesake created in between is not deleted either.
func (r *GatewayReconciler) deleteIfOwned(ctx context.Context, owner, obj client.Object) error {
	existing, err := r.lookup(ctx, obj)
	if err != nil || existing == nil || !isOwned(owner, existing) {
		return err
	}
	uid := existing.GetUID()
	err = r.Client.Delete(ctx, existing, client.Preconditions{UID: &uid})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}
