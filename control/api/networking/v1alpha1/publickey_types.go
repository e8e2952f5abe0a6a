package v1alpha1

import (
	"encoding/base64"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PublicKeySpec carries the peer gateway's WireGuard public key.
type PublicKeySpec struct {
	// PublicKey is the peer gateway's WireGuard public key: 32 bytes, base64-encoded as
	// `wg pubkey` prints it (44 characters ending in '='). It is a string rather than bytes
	// because the API server's CEL view of `format: byte` rejects standard base64 with '+'.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=$')",message="must be a WireGuard public key: 32 bytes, base64-encoded (44 characters ending in '=', as 'wg pubkey' prints it)"
	PublicKey string `json:"publicKey"`
}

// PublicKeyStatus is what the controller made of a PublicKey.
type PublicKeyStatus struct {
	// Conditions: Ready tells whether the key is usable by a gateway (labels and key checked).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PublicKey is the WireGuard public key of the peer cluster's gateway, labelled with the peer's
// cluster id (liqo.io/remote-cluster-id) and networking.liqo.io/gateway-resource=true.
//
// +kubebuilder:object:root=true
// +kubebuilder:metadata:labels="app.kubernetes.io/part-of=skein"
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=liqo;skein,shortName=pubkey
// +kubebuilder:printcolumn:name="Remote Cluster ID",type=string,JSONPath=`.metadata.labels.liqo\.io/remote-cluster-id`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PublicKey struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PublicKeySpec   `json:"spec"`
	Status PublicKeyStatus `json:"status,omitempty"`
}

// PublicKeyList is a list of PublicKeys.
//
// +kubebuilder:object:root=true
type PublicKeyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PublicKey `json:"items"`
}

// Key decodes PublicKey into the 32 bytes WireGuard uses.
func (s PublicKeySpec) Key() ([32]byte, error) {
	var k [32]byte
	b, err := base64.StdEncoding.DecodeString(s.PublicKey)
	if err != nil {
		return k, fmt.Errorf("public key %q: %w", s.PublicKey, err)
	}
	if len(b) != len(k) {
		return k, fmt.Errorf("public key %q: %d bytes, want %d", s.PublicKey, len(b), len(k))
	}
	copy(k[:], b)
	return k, nil
}
