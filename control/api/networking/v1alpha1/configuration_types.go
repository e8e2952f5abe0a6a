package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// ClusterConfigCIDR holds the CIDRs of one cluster.
type ClusterConfigCIDR struct {
	// Pod is the pod CIDR of the cluster.
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || cidr(self).prefixLength() > 0",message="must not be a default route (/0): it would send all of this cluster's traffic to the peer"
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || !['0.0.0.0/8', '127.0.0.0/8', '169.254.0.0/16', '224.0.0.0/4', '240.0.0.0/4'].exists(r, cidr(r).containsCIDR(cidr(self)) || cidr(self).containsCIDR(cidr(r)))",message="must not overlap 0.0.0.0/8 (this network), 127.0.0.0/8 (loopback), 169.254.0.0/16 (link-local: cloud metadata, the tunnel), 224.0.0.0/4 (multicast) or 240.0.0.0/4 (reserved)"
	Pod CIDR `json:"pod"`
	// External is the external CIDR of the cluster: the range its nodes and host-network
	// traffic are seen from by peers.
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || cidr(self).prefixLength() > 0",message="must not be a default route (/0): it would send all of this cluster's traffic to the peer"
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || !['0.0.0.0/8', '127.0.0.0/8', '169.254.0.0/16', '224.0.0.0/4', '240.0.0.0/4'].exists(r, cidr(r).containsCIDR(cidr(self)) || cidr(self).containsCIDR(cidr(r)))",message="must not overlap 0.0.0.0/8 (this network), 127.0.0.0/8 (loopback), 169.254.0.0/16 (link-local: cloud metadata, the tunnel), 224.0.0.0/4 (multicast) or 240.0.0.0/4 (reserved)"
	External CIDR `json:"external"`
}

// ClusterConfig describes the network of one cluster.
type ClusterConfig struct {
	// CIDR holds the cluster's CIDRs.
	CIDR ClusterConfigCIDR `json:"cidr"`
}

// ConfigurationSpec is the network configuration of a peer cluster, as that cluster publishes it
// (`skeinctl generate configuration` run in the peer).
type ConfigurationSpec struct {
	// Remote is the peer cluster's network, in its own addresses.
	Remote ClusterConfig `json:"remote"`
}

// ConfigurationStatus is what the local cluster made of the peer's network.
type ConfigurationStatus struct {
	// Remote is the peer's network as seen from this cluster: equal to spec.remote when it does
	// not clash with anything local, otherwise remapped to a free range of the same size.
	// +optional
	Remote *ClusterConfig `json:"remote,omitempty"`
	// Conditions: Ready tells whether the remapping is done, with a reason when it is not.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Configuration is the network configuration of one peer cluster: its pod and external CIDRs,
// and (in status) how this cluster sees them.
//
// +kubebuilder:object:root=true
// +kubebuilder:metadata:labels="app.kubernetes.io/part-of=skein"
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=liqo;skein,shortName=netcfg
// +kubebuilder:printcolumn:name="Desired Pod CIDR",type=string,JSONPath=`.spec.remote.cidr.pod`
// +kubebuilder:printcolumn:name="Remapped Pod CIDR",type=string,JSONPath=`.status.remote.cidr.pod`
// +kubebuilder:printcolumn:name="Desired External CIDR",type=string,JSONPath=`.spec.remote.cidr.external`,priority=1
// +kubebuilder:printcolumn:name="Remapped External CIDR",type=string,JSONPath=`.status.remote.cidr.external`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Configuration struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ConfigurationSpec   `json:"spec"`
	Status ConfigurationStatus `json:"status,omitempty"`
}

// ConfigurationList is a list of Configurations.
//
// +kubebuilder:object:root=true
type ConfigurationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Configuration `json:"items"`
}
