package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// InternalNodeSpec is what the controller assigned to a node (skein's own kind).
type InternalNodeSpec struct {
	// OverlayIP is the node's address on the overlay device liqo.vxlan, from the internal CIDR.
	// +optional
	OverlayIP *IP `json:"overlayIP,omitempty"`
	// ExternalIP is the node's address in the cluster's external CIDR: traffic from the node's
	// own network namespace (host-network pods, kubelet probes) to a peer leaves with it.
	// +optional
	ExternalIP *IP `json:"externalIP,omitempty"`
	// ExternalIP6 is the node's address in the cluster's IPv6 external CIDR, in a dual-stack
	// or IPv6-only cluster: IPv6 traffic from the node's own network namespace to a peer
	// leaves with it. (In an IPv6-only cluster externalIP is unset.)
	// +optional
	ExternalIP6 *IP `json:"externalIP6,omitempty"`
}

// VTEP is a node's overlay tunnel endpoint.
type VTEP struct {
	// IP is the node's underlay address the overlay's UDP packets are sent to.
	IP IP `json:"ip"`
	// MAC is the address of the node's liqo.vxlan device.
	MAC MAC `json:"mac"`
}

// InternalNodeStatus is what the node agent observed and published.
type InternalNodeStatus struct {
	// VTEP is the node's overlay endpoint, published by the node agent.
	// +optional
	VTEP *VTEP `json:"vtep,omitempty"`
	// Conditions, written by the node agent: Ready (True: the node holds what the agent plans for
	// it, reason Programmed or NoPeering; False: reason Waiting or Error, the message says why) and
	// PodTrafficMasqueraded (True: another rule source-NATs pod traffic to peer clusters).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// InternalNode is one node of the local cluster as the fabric sees it: its overlay address and
// VTEP. It is cluster-scoped and named after the Node.
//
// +kubebuilder:object:root=true
// +kubebuilder:metadata:labels="app.kubernetes.io/part-of=skein"
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=skein,shortName=inode
// +kubebuilder:printcolumn:name="Overlay IP",type=string,JSONPath=`.spec.overlayIP`
// +kubebuilder:printcolumn:name="VTEP IP",type=string,JSONPath=`.status.vtep.ip`
// +kubebuilder:printcolumn:name="VTEP MAC",type=string,JSONPath=`.status.vtep.mac`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="External IP",type=string,JSONPath=`.spec.externalIP`,priority=1
// +kubebuilder:printcolumn:name="External IPv6",type=string,JSONPath=`.spec.externalIP6`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type InternalNode struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   InternalNodeSpec   `json:"spec,omitempty"`
	Status InternalNodeStatus `json:"status,omitempty"`
}

// InternalNodeList is a list of InternalNodes.
//
// +kubebuilder:object:root=true
type InternalNodeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []InternalNode `json:"items"`
}
