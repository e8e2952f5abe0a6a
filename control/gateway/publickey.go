package gateway

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/gateway/config"
)

// PeerPublicKey builds the PublicKey the peer cluster applies for this cluster's gateway whose key
// pair is in secret: named after this cluster, labelled with this cluster's id.
func PeerPublicKey(secret *corev1.Secret, localClusterID, namespace string) (*netv1alpha1.PublicKey, error) {
	pub := string(secret.Data[config.SecretPublicKey])
	if pub == "" {
		priv, err := config.ParseKey(string(secret.Data[config.SecretPrivateKey]))
		if err != nil {
			return nil, fmt.Errorf("secret %s/%s: %w", secret.Namespace, secret.Name, err)
		}
		pub = priv.Public().String()
	}
	if _, err := config.ParseKey(pub); err != nil {
		return nil, fmt.Errorf("secret %s/%s %s: %w", secret.Namespace, secret.Name, config.SecretPublicKey, err)
	}
	return &netv1alpha1.PublicKey{
		TypeMeta: metav1.TypeMeta{APIVersion: netv1alpha1.SchemeGroupVersion.String(), Kind: "PublicKey"},
		ObjectMeta: metav1.ObjectMeta{Name: localClusterID, Namespace: namespace, Labels: map[string]string{
			netv1alpha1.RemoteClusterIDLabel: localClusterID, netv1alpha1.GatewayResourceLabel: "true"}},
		Spec: netv1alpha1.PublicKeySpec{PublicKey: pub},
	}, nil
}
