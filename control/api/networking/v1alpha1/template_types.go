package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// GatewayTemplateSpec is the body of a gateway template. Template is free-form: the controller
// renders it for each gateway, replacing every string written '{{ .Name }}', '{{ .Namespace }}',
// '{{ .Spec.Mtu }}', '{{ .ClusterID }}', '{{ .SecretName }}', '{{ .GatewayUID }}' (and the other
// fields of the gateway resource) with the values of the GatewayServer or GatewayClient it
// renders for.
type GatewayTemplateSpec struct {
	// Template is the gateway's resources before rendering.
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	Template runtime.RawExtension `json:"template"`
}

// WgGatewayServerTemplate is the template GatewayServers using WireGuard are rendered from.
//
// +kubebuilder:object:root=true
// +kubebuilder:metadata:labels="app.kubernetes.io/part-of=skein"
// +kubebuilder:resource:categories=liqo;skein,shortName=wgst
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type WgGatewayServerTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec GatewayTemplateSpec `json:"spec"`
}

// WgGatewayServerTemplateList is a list of WgGatewayServerTemplates.
//
// +kubebuilder:object:root=true
type WgGatewayServerTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []WgGatewayServerTemplate `json:"items"`
}

// WgGatewayClientTemplate is the template GatewayClients using WireGuard are rendered from.
//
// +kubebuilder:object:root=true
// +kubebuilder:metadata:labels="app.kubernetes.io/part-of=skein"
// +kubebuilder:resource:categories=liqo;skein,shortName=wgct
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type WgGatewayClientTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec GatewayTemplateSpec `json:"spec"`
}

// WgGatewayClientTemplateList is a list of WgGatewayClientTemplates.
//
// +kubebuilder:object:root=true
type WgGatewayClientTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []WgGatewayClientTemplate `json:"items"`
}
