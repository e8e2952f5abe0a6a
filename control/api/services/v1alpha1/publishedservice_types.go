package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels of a PublishedService and of the EndpointSlice copies published with it: the
// namespace and name of the exported Service they are of.
const (
	SourceNamespaceLabel = "services.skein.io/source-namespace"
	SourceServiceLabel   = "services.skein.io/source-service"
)

// PublishedPort is one port of the exported Service.
type PublishedPort struct {
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name,omitempty"`
	// +optional
	Protocol corev1.Protocol `json:"protocol,omitempty"`
	Port     int32           `json:"port"`
	// +optional
	// +kubebuilder:validation:MaxLength=256
	AppProtocol *string `json:"appProtocol,omitempty"`
}

// PublishedServiceSpec is what the importing clusters use of one exported Service.
type PublishedServiceSpec struct {
	// Namespace and Name of the exported Service (and of its ServiceExport).
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// ExportCreated is the ServiceExport's creation time: the oldest export of a name decides
	// its properties (the MCS API's conflict resolution).
	ExportCreated metav1.Time `json:"exportCreated"`
	// Type is the Service's type.
	// +optional
	Type corev1.ServiceType `json:"type,omitempty"`
	// Headless: the Service's clusterIP is None.
	// +optional
	Headless bool `json:"headless,omitempty"`
	// +optional
	SessionAffinity corev1.ServiceAffinity `json:"sessionAffinity,omitempty"`
	// +optional
	SessionAffinityConfig *corev1.SessionAffinityConfig `json:"sessionAffinityConfig,omitempty"`
	// InternalTrafficPolicy of the Service, carried to the ServiceImport.
	// +optional
	// +kubebuilder:validation:Enum=Cluster;Local
	InternalTrafficPolicy *corev1.ServiceInternalTrafficPolicy `json:"internalTrafficPolicy,omitempty"`
	// TrafficDistribution of the Service, carried to the ServiceImport.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	TrafficDistribution *string `json:"trafficDistribution,omitempty"`
	// ExportedLabels and ExportedAnnotations are the ServiceExport's: what the importing
	// clusters put on their ServiceImport.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	ExportedLabels map[string]string `json:"exportedLabels,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	ExportedAnnotations map[string]string `json:"exportedAnnotations,omitempty"`
	// Ports of the Service.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1000
	Ports []PublishedPort `json:"ports,omitempty"`
}

// PublishedService is what a cluster publishes of one of its exported Services for its peers:
// skein-controller keeps one, in its published namespace, for each ServiceExport whose Service
// exists, beside copies of the Service's EndpointSlices (labelled with SourceNamespaceLabel and
// SourceServiceLabel, never with kubernetes.io/service-name). A peer's services reader reads
// that namespace and nothing else.
//
// +kubebuilder:object:root=true
// +kubebuilder:metadata:labels="app.kubernetes.io/part-of=skein"
// +kubebuilder:resource:categories=skein
// +kubebuilder:printcolumn:name="Namespace",type=string,JSONPath=`.spec.namespace`
// +kubebuilder:printcolumn:name="Service",type=string,JSONPath=`.spec.name`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PublishedService struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec PublishedServiceSpec `json:"spec"`
}

// PublishedServiceList is a list of PublishedService.
//
// +kubebuilder:object:root=true
type PublishedServiceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PublishedService `json:"items"`
}
