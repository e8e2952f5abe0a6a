package v1alpha1

const (
	// RemoteClusterIDLabel names the peer cluster an object belongs to. Every Configuration,
	// GatewayServer, GatewayClient and PublicKey carries it.
	RemoteClusterIDLabel = "liqo.io/remote-cluster-id"
	// GatewayResourceLabel marks a PublicKey as meant for a gateway (value "true").
	GatewayResourceLabel = "networking.liqo.io/gateway-resource"

	// ConditionReady is the condition type every reconciled kind reports.
	ConditionReady = "Ready"
)

// CIDR is an IP network in CIDR notation with the host bits zero, such as 10.243.0.0/16.
//
// +kubebuilder:validation:MaxLength=49
// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="must be a CIDR such as 10.243.0.0/16"
// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || cidr(self).ip() == cidr(self).masked().ip()",message="must be a network address with the host bits zero, such as 10.243.0.0/16"
type CIDR string

// IP is a single IPv4 or IPv6 address, such as 10.42.3.54.
//
// +kubebuilder:validation:MaxLength=45
// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address such as 10.42.3.54"
type IP string

// Address is where a gateway can be reached: an IP address or a DNS name (as load balancers of
// some clouds publish).
//
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=253
// +kubebuilder:validation:XValidation:rule="isIP(self) || self.matches('^([a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?[.])*[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$')",message="must be an IP address such as 10.42.3.54 or a DNS name such as gw.example.com"
type Address string

// MAC is an Ethernet address written as six colon-separated hex bytes.
//
// +kubebuilder:validation:Pattern=`^([0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}$`
type MAC string

// Protocol is the transport protocol of a gateway endpoint. WireGuard runs over UDP only.
//
// +kubebuilder:validation:Enum=UDP
type Protocol string

// ProtocolUDP is the only protocol a WireGuard gateway speaks.
const ProtocolUDP Protocol = "UDP"

// TemplateRef points at the template a gateway is rendered from, such as the
// WgGatewayServerTemplate "wireguard-server" in namespace "liqo".
type TemplateRef struct {
	// APIVersion of the template, such as networking.liqo.io/v1alpha1.
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
	// Kind of the template, such as WgGatewayServerTemplate.
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind"`
	// Name of the template.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Namespace of the template; empty means the namespace of the gateway resource.
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// ObjectRef names an object by namespace and name.
type ObjectRef struct {
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// Endpoint is where a gateway server listens, as seen from the peer cluster.
type Endpoint struct {
	// Addresses of the gateway server: IPs or DNS names.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	Addresses []Address `json:"addresses"`
	// Port is the UDP port of the gateway server.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
	// Protocol is the transport protocol; UDP is the only one WireGuard speaks.
	// +kubebuilder:default=UDP
	// +optional
	Protocol Protocol `json:"protocol,omitempty"`
}

// InternalEndpoint is where the nodes of this cluster reach the gateway over the overlay: its
// overlay address (from the internal CIDR, assigned by the controller; nodes route the peer's
// CIDRs via it) and, published by the active replica, its VTEP.
type InternalEndpoint struct {
	// IP is the gateway's overlay address.
	// +optional
	IP *IP `json:"ip,omitempty"`
	// Node is the node that runs the active gateway replica.
	// +optional
	Node *string `json:"node,omitempty"`
	// VTEP is the active replica's overlay endpoint: its pod IP and overlay MAC. Node agents
	// point their FDB and neighbour entries at it.
	// +optional
	VTEP *VTEP `json:"vtep,omitempty"`
	// NodeVTEP is the overlay endpoint of the node that runs the active replica (its
	// InternalNode's status.vtep: underlay address and liqo.vxlan MAC), published by the
	// gateway. Agents of the other nodes send the gateway's frames there, and that node
	// forwards them to the gateway pod over its own veth: the node-to-gateway leg then crosses
	// the underlay as plain VXLAN, not VXLAN inside the pod network's own tunnel (which makes
	// the kernel cut every GSO packet into MTU-sized ones). Unset: agents send to VTEP.
	// +optional
	NodeVTEP *VTEP `json:"nodeVTEP,omitempty"`
}
