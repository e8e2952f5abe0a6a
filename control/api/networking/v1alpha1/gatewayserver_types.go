package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ServiceType is the type of a gateway Service, with core/v1's values. It is a type of this
// package rather than core/v1's so that readers of these kinds (the node agent) need not link
// k8s.io/api.
type ServiceType string

// The Service types a gateway server may have.
const (
	ServiceTypeNodePort     ServiceType = "NodePort"
	ServiceTypeLoadBalancer ServiceType = "LoadBalancer"
	ServiceTypeClusterIP    ServiceType = "ClusterIP"
)

// ServerEndpoint is how a gateway server is exposed to the peer cluster.
//
// +kubebuilder:validation:XValidation:rule="!has(self.nodePort) || self.nodePort == 0 || self.serviceType != 'ClusterIP'",message="nodePort can only be set when serviceType is NodePort or LoadBalancer"
// +kubebuilder:validation:XValidation:rule="!has(self.loadBalancerIP) || size(self.loadBalancerIP) == 0 || self.serviceType == 'LoadBalancer'",message="loadBalancerIP can only be set when serviceType is LoadBalancer"
type ServerEndpoint struct {
	// Port is the UDP port of the gateway Service.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +kubebuilder:default=51820
	// +optional
	Port int32 `json:"port,omitempty"`
	// ServiceType is the type of the gateway Service: NodePort, LoadBalancer or ClusterIP.
	// +kubebuilder:validation:Enum=NodePort;LoadBalancer;ClusterIP
	// +kubebuilder:default=LoadBalancer
	// +optional
	ServiceType ServiceType `json:"serviceType,omitempty"`
	// NodePort forces the node port of a NodePort or LoadBalancer Service (30000-32767);
	// 0 or absent lets Kubernetes pick one.
	// +kubebuilder:validation:XValidation:rule="self == 0 || (self >= 30000 && self <= 32767)",message="must be 0 (let Kubernetes choose) or a port in the node port range 30000-32767"
	// +optional
	NodePort *int32 `json:"nodePort,omitempty"`
	// LoadBalancerIP asks the load balancer for this address; empty lets it choose.
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="size(self) == 0 || isIP(self)",message="must be empty or an IP address such as 192.0.2.10"
	// +optional
	LoadBalancerIP *string `json:"loadBalancerIP,omitempty"`
}

// GatewayServerSpec is the desired gateway server: the side of a peering that listens.
type GatewayServerSpec struct {
	// Endpoint is how the gateway is exposed to the peer.
	// +kubebuilder:default={}
	// +optional
	Endpoint ServerEndpoint `json:"endpoint,omitempty"`
	// MTU of the tunnel; the same on both sides of a peering.
	// +kubebuilder:validation:Minimum=576
	// +kubebuilder:validation:Maximum=9000
	// +kubebuilder:default=1340
	// +optional
	MTU int32 `json:"mtu,omitempty"`
	// ServerTemplateRef names the template the gateway's Deployment and Service are rendered
	// from, such as WgGatewayServerTemplate liqo/wireguard-server.
	ServerTemplateRef TemplateRef `json:"serverTemplateRef"`
}

// GatewayServerStatus is what the controller observed of a gateway server.
type GatewayServerStatus struct {
	// Endpoint is where the peer's gateway client must connect.
	// +optional
	Endpoint *Endpoint `json:"endpoint,omitempty"`
	// InternalEndpoint is the gateway's own address inside the tunnel.
	// +optional
	InternalEndpoint *InternalEndpoint `json:"internalEndpoint,omitempty"`
	// SecretRef names the Secret holding the gateway's WireGuard key pair.
	// +optional
	SecretRef *ObjectRef `json:"secretRef,omitempty"`
	// Conditions: Ready tells whether the gateway is deployed and exposed.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// GatewayServer deploys a gateway that the peer cluster's GatewayClient connects to.
//
// +kubebuilder:object:root=true
// +kubebuilder:metadata:labels="app.kubernetes.io/part-of=skein"
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=liqo;skein,shortName=gws
// +kubebuilder:printcolumn:name="Template Name",type=string,JSONPath=`.spec.serverTemplateRef.name`
// +kubebuilder:printcolumn:name="IP",type=string,JSONPath=`.status.endpoint.addresses[0]`
// +kubebuilder:printcolumn:name="Port",type=integer,JSONPath=`.status.endpoint.port`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type GatewayServer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   GatewayServerSpec   `json:"spec"`
	Status GatewayServerStatus `json:"status,omitempty"`
}

// GatewayServerList is a list of GatewayServers.
//
// +kubebuilder:object:root=true
type GatewayServerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GatewayServer `json:"items"`
}
