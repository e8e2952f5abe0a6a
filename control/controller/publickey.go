// The PublicKey reconciler checks the PublicKeys a peer hands over: a valid key, the
// remote cluster id label, one PublicKey per peer.

package controller

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/gateway/config"
	"github.com/skein-net/skein/control/kube"
)

// PublicKeyReconciler sets a Ready condition on every PublicKey: the key decodes to 32 bytes, the
// labels name a remote cluster and mark it for a gateway, and no older PublicKey in the same
// namespace claims the same cluster.
type PublicKeyReconciler struct {
	Client client.Client
}

// SetupWithManager registers the reconciler.
func (r *PublicKeyReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&netv1alpha1.PublicKey{}).Named("publickey").Complete(r)
}

// Reconcile checks one PublicKey.
func (r *PublicKeyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pk := &netv1alpha1.PublicKey{}
	if err := r.Client.Get(ctx, req.NamespacedName, pk); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	status, reason, msg := metav1.ConditionTrue, "Valid", "usable by the gateway of cluster "+pk.Labels[netv1alpha1.RemoteClusterIDLabel]
	id := pk.Labels[netv1alpha1.RemoteClusterIDLabel]
	switch {
	case id == "":
		status, reason, msg = metav1.ConditionFalse, "MissingClusterID", "label "+netv1alpha1.RemoteClusterIDLabel+" must name the peer cluster"
	case pk.Labels[netv1alpha1.GatewayResourceLabel] != "true":
		status, reason, msg = metav1.ConditionFalse, "NotForAGateway", "label "+netv1alpha1.GatewayResourceLabel+"=true is missing"
	default:
		if _, err := config.ParseKey(pk.Spec.PublicKey); err != nil {
			status, reason, msg = metav1.ConditionFalse, "InvalidKey", "spec.publicKey: "+err.Error()
			break
		}
		var same netv1alpha1.PublicKeyList
		if err := r.Client.List(ctx, &same, client.InNamespace(pk.Namespace), client.MatchingLabels{netv1alpha1.RemoteClusterIDLabel: id, netv1alpha1.GatewayResourceLabel: "true"}); err != nil {
			return ctrl.Result{}, err
		}
		if first := kube.Oldest(same.Items); len(same.Items) > 1 && first.Name != pk.Name {
			status, reason, msg = metav1.ConditionFalse, "DuplicateClusterID",
				fmt.Sprintf("publickey %s already holds the key of cluster %s; delete one of them", first.Name, id)
		}
	}
	patch := client.MergeFrom(pk.DeepCopy())
	meta.SetStatusCondition(&pk.Status.Conditions, metav1.Condition{Type: netv1alpha1.ConditionReady, Status: status, Reason: reason, Message: msg, ObservedGeneration: pk.Generation})
	return ctrl.Result{}, r.Client.Status().Patch(ctx, pk, patch)
}
