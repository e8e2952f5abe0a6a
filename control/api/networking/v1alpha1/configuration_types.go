package v1alpha1

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterConfigCIDR holds the CIDRs of one cluster.
type ClusterConfigCIDR struct {
	// Pod is the pod CIDR of the cluster.
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || cidr(self).prefixLength() > 0",message="must not be a default route (/0): it would send all of this cluster's traffic to the peer"
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || !['0.0.0.0/8', '127.0.0.0/8', '169.254.0.0/16', '224.0.0.0/4', '240.0.0.0/4'].exists(r, cidr(r).containsCIDR(cidr(self)) || cidr(self).containsCIDR(cidr(r)))",message="must not overlap 0.0.0.0/8 (this network), 127.0.0.0/8 (loopback), 169.254.0.0/16 (link-local: cloud metadata, the tunnel), 224.0.0.0/4 (multicast) or 240.0.0.0/4 (reserved)"
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || !['::/8', 'fe80::/10', 'ff00::/8'].exists(r, cidr(r).containsCIDR(cidr(self)) || cidr(self).containsCIDR(cidr(r)))",message="must not overlap ::/8 (unspecified, loopback, IPv4-mapped and other reserved addresses), fe80::/10 (link-local) or ff00::/8 (multicast)"
	Pod CIDR `json:"pod"`
	// External is the external CIDR of the cluster: the range its nodes and host-network
	// traffic are seen from by peers.
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || cidr(self).prefixLength() > 0",message="must not be a default route (/0): it would send all of this cluster's traffic to the peer"
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || !['0.0.0.0/8', '127.0.0.0/8', '169.254.0.0/16', '224.0.0.0/4', '240.0.0.0/4'].exists(r, cidr(r).containsCIDR(cidr(self)) || cidr(self).containsCIDR(cidr(r)))",message="must not overlap 0.0.0.0/8 (this network), 127.0.0.0/8 (loopback), 169.254.0.0/16 (link-local: cloud metadata, the tunnel), 224.0.0.0/4 (multicast) or 240.0.0.0/4 (reserved)"
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || !['::/8', 'fe80::/10', 'ff00::/8'].exists(r, cidr(r).containsCIDR(cidr(self)) || cidr(self).containsCIDR(cidr(r)))",message="must not overlap ::/8 (unspecified, loopback, IPv4-mapped and other reserved addresses), fe80::/10 (link-local) or ff00::/8 (multicast)"
	External CIDR `json:"external"`
	// AdditionalPods are the cluster's further pod CIDRs, for clusters whose pods come from more
	// than one range (a second IP pool added as the cluster grew). A field of skein's own: the
	// spec's pod is a single CIDR. Each is mapped on its own, like pod.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=15
	// +kubebuilder:validation:items:XValidation:rule="!isCIDR(self) || cidr(self).prefixLength() > 0",message="must not be a default route (/0): it would send all of this cluster's traffic to the peer"
	// +kubebuilder:validation:items:XValidation:rule="!isCIDR(self) || !['0.0.0.0/8', '127.0.0.0/8', '169.254.0.0/16', '224.0.0.0/4', '240.0.0.0/4'].exists(r, cidr(r).containsCIDR(cidr(self)) || cidr(self).containsCIDR(cidr(r)))",message="must not overlap 0.0.0.0/8 (this network), 127.0.0.0/8 (loopback), 169.254.0.0/16 (link-local: cloud metadata, the tunnel), 224.0.0.0/4 (multicast) or 240.0.0.0/4 (reserved)"
	// +kubebuilder:validation:items:XValidation:rule="!isCIDR(self) || !['::/8', 'fe80::/10', 'ff00::/8'].exists(r, cidr(r).containsCIDR(cidr(self)) || cidr(self).containsCIDR(cidr(r)))",message="must not overlap ::/8 (unspecified, loopback, IPv4-mapped and other reserved addresses), fe80::/10 (link-local) or ff00::/8 (multicast)"
	AdditionalPods []CIDR `json:"additionalPods,omitempty"`
	// AdditionalExternals are the cluster's further external CIDRs (nodes in more than one
	// range). A field of skein's own, mapped like additionalPods.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=15
	// +kubebuilder:validation:items:XValidation:rule="!isCIDR(self) || cidr(self).prefixLength() > 0",message="must not be a default route (/0): it would send all of this cluster's traffic to the peer"
	// +kubebuilder:validation:items:XValidation:rule="!isCIDR(self) || !['0.0.0.0/8', '127.0.0.0/8', '169.254.0.0/16', '224.0.0.0/4', '240.0.0.0/4'].exists(r, cidr(r).containsCIDR(cidr(self)) || cidr(self).containsCIDR(cidr(r)))",message="must not overlap 0.0.0.0/8 (this network), 127.0.0.0/8 (loopback), 169.254.0.0/16 (link-local: cloud metadata, the tunnel), 224.0.0.0/4 (multicast) or 240.0.0.0/4 (reserved)"
	// +kubebuilder:validation:items:XValidation:rule="!isCIDR(self) || !['::/8', 'fe80::/10', 'ff00::/8'].exists(r, cidr(r).containsCIDR(cidr(self)) || cidr(self).containsCIDR(cidr(r)))",message="must not overlap ::/8 (unspecified, loopback, IPv4-mapped and other reserved addresses), fe80::/10 (link-local) or ff00::/8 (multicast)"
	AdditionalExternals []CIDR `json:"additionalExternals,omitempty"`
}

// NamedCIDR is one CIDR of a ClusterConfigCIDR with the field it came from, such as
// "additionalPods[1]".
type NamedCIDR struct {
	Field string
	CIDR  CIDR
}

// All lists every CIDR in a fixed order: pod, external, additionalPods..., additionalExternals....
// Empty entries are kept, so the same index names the same field in spec and status.
func (c ClusterConfigCIDR) All() []NamedCIDR {
	out := make([]NamedCIDR, 0, 2+len(c.AdditionalPods)+len(c.AdditionalExternals))
	out = append(out, NamedCIDR{"pod", c.Pod}, NamedCIDR{"external", c.External})
	for i, p := range c.AdditionalPods {
		out = append(out, NamedCIDR{fmt.Sprintf("additionalPods[%d]", i), p})
	}
	for i, p := range c.AdditionalExternals {
		out = append(out, NamedCIDR{fmt.Sprintf("additionalExternals[%d]", i), p})
	}
	return out
}

// Pods lists pod and then additionalPods.
func (c ClusterConfigCIDR) Pods() []CIDR { return append([]CIDR{c.Pod}, c.AdditionalPods...) }

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
