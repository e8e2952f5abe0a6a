package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// GatewayClientSpec is the desired gateway client: the side of a peering that connects.
type GatewayClientSpec struct {
	// Endpoint is the peer's gateway server (its GatewayServer's status.endpoint).
	Endpoint Endpoint `json:"endpoint"`
	// MTU of the tunnel; the same on both sides of a peering.
	// +kubebuilder:validation:Minimum=576
	// +kubebuilder:validation:Maximum=9000
	// +kubebuilder:default=1340
	// +optional
	MTU int32 `json:"mtu,omitempty"`
	// ClientTemplateRef names the template the gateway's Deployment is rendered from, such as
	// WgGatewayClientTemplate liqo/wireguard-client.
	ClientTemplateRef TemplateRef `json:"clientTemplateRef"`
}

// GatewayClientStatus is what the controller observed of a gateway client.
type GatewayClientStatus struct {
	// InternalEndpoint is the gateway's own address inside the tunnel.
	// +optional
	InternalEndpoint *InternalEndpoint `json:"internalEndpoint,omitempty"`
	// SecretRef names the Secret holding the gateway's WireGuard key pair.
	// +optional
	SecretRef *ObjectRef `json:"secretRef,omitempty"`
	// Conditions: Ready tells whether the gateway is deployed.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// GatewayClient deploys a gateway that connects to the peer cluster's GatewayServer.
//
// +kubebuilder:object:root=true
// +kubebuilder:metadata:labels="app.kubernetes.io/part-of=skein"
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=liqo;skein,shortName=gwc
// +kubebuilder:printcolumn:name="Template Name",type=string,JSONPath=`.spec.clientTemplateRef.name`
// +kubebuilder:printcolumn:name="IP",type=string,JSONPath=`.spec.endpoint.addresses[0]`
// +kubebuilder:printcolumn:name="Port",type=integer,JSONPath=`.spec.endpoint.port`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type GatewayClient struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GatewayClientSpec   `json:"spec"`
	Status GatewayClientStatus `json:"status,omitempty"`
}

// GatewayClientList is a list of GatewayClients.
//
// +kubebuilder:object:root=true
type GatewayClientList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GatewayClient `json:"items"`
}
