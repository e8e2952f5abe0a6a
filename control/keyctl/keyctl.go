// Package keyctl checks the PublicKeys a peer hands over and builds the PublicKey of a local
// gateway for the peer (what `skeinctl generate publickey` prints).
package keyctl

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/gwconfig"
	"github.com/skein-net/skein/control/kube"
)

// Reconciler sets a Ready condition on every PublicKey: the key decodes to 32 bytes, the
// labels name a remote cluster and mark it for a gateway, and no older PublicKey in the same
// namespace claims the same cluster.
type Reconciler struct {
	Client client.Client
}

// SetupWithManager registers the reconciler.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&netv1alpha1.PublicKey{}).Named("publickey").Complete(r)
}

// Reconcile checks one PublicKey.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
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
		if _, err := gwconfig.ParseKey(pk.Spec.PublicKey); err != nil {
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
	meta.SetStatusCondition(&pk.Status.Conditions, metav1.Condition{Type: "Ready", Status: status, Reason: reason, Message: msg, ObservedGeneration: pk.Generation})
	return ctrl.Result{}, r.Client.Status().Patch(ctx, pk, patch)
}

// ForPeer builds the PublicKey the peer cluster applies for this cluster's gateway whose key
// pair is in secret: named after this cluster, labelled with this cluster's id.
func ForPeer(secret *corev1.Secret, localClusterID, namespace string) (*netv1alpha1.PublicKey, error) {
	pub := string(secret.Data[gwconfig.SecretPublicKey])
	if pub == "" {
		priv, err := gwconfig.ParseKey(string(secret.Data[gwconfig.SecretPrivateKey]))
		if err != nil {
			return nil, fmt.Errorf("secret %s/%s: %w", secret.Namespace, secret.Name, err)
		}
		pub = priv.Public().String()
	}
	if _, err := gwconfig.ParseKey(pub); err != nil {
		return nil, fmt.Errorf("secret %s/%s %s: %w", secret.Namespace, secret.Name, gwconfig.SecretPublicKey, err)
	}
	return &netv1alpha1.PublicKey{
		TypeMeta: metav1.TypeMeta{APIVersion: netv1alpha1.SchemeGroupVersion.String(), Kind: "PublicKey"},
		ObjectMeta: metav1.ObjectMeta{Name: localClusterID, Namespace: namespace, Labels: map[string]string{
			netv1alpha1.RemoteClusterIDLabel: localClusterID, netv1alpha1.GatewayResourceLabel: "true"}},
		Spec: netv1alpha1.PublicKeySpec{PublicKey: pub},
	}, nil
}
