package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// ConnectionType is the role of the local gateway in a peering.
//
// +kubebuilder:validation:Enum=Server;Client
type ConnectionType string

const (
	ConnectionTypeServer ConnectionType = "Server"
	ConnectionTypeClient ConnectionType = "Client"
)

// ConnectionStatusValue is the state of a tunnel as the gateway's prober sees it.
//
// +kubebuilder:validation:Enum=Connecting;Connected;Error
type ConnectionStatusValue string

const (
	// Connecting: no probe answered yet.
	Connecting ConnectionStatusValue = "Connecting"
	// Connected: the last probe through the tunnel was answered.
	Connected ConnectionStatusValue = "Connected"
	// ConnectionError: several probes in a row were lost.
	ConnectionError ConnectionStatusValue = "Error"
)

// ConnectionSpec names the gateway whose tunnel this Connection reports on.
type ConnectionSpec struct {
	// Type is the role of the local gateway: Server or Client.
	Type ConnectionType `json:"type"`
	// GatewayRef names the local GatewayServer or GatewayClient.
	GatewayRef ObjectRef `json:"gatewayRef"`
}

// ConnectionLatency is the round-trip time of the last answered probe.
type ConnectionLatency struct {
	// Value is the round-trip time, such as "1.2ms".
	Value metav1.Duration `json:"value"`
	// Timestamp is when it was measured.
	Timestamp metav1.Time `json:"timestamp"`
}

// ConnectionStatus is the tunnel's state as measured from inside it.
type ConnectionStatus struct {
	// Value is Connecting, Connected or Error.
	// +optional
	Value ConnectionStatusValue `json:"value,omitempty"`
	// Latency of the tunnel, from the gateway's probes to the peer gateway.
	// +optional
	Latency *ConnectionLatency `json:"latency,omitempty"`
	// Conditions with the detail behind Value.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Connection shows the state of the tunnel between this cluster and one peer.
//
// +kubebuilder:object:root=true
// +kubebuilder:metadata:labels="app.kubernetes.io/part-of=skein"
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=liqo;skein,shortName=conn
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.value`
// +kubebuilder:printcolumn:name="Latency",type=string,JSONPath=`.status.latency.value`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Connection struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ConnectionSpec   `json:"spec"`
	Status ConnectionStatus `json:"status,omitempty"`
}

// ConnectionList is a list of Connections.
//
// +kubebuilder:object:root=true
type ConnectionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Connection `json:"items"`
}
