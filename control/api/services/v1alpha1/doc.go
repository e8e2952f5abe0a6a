// Package v1alpha1 is skein's own services.skein.io/v1alpha1 API: PublishedService, what a
// cluster publishes of one of its exported Services (MCS API) for its peers to read. It is no
// part of the networking.liqo.io API of the spec.
//
// +kubebuilder:object:generate=true
// +groupName=services.skein.io
package v1alpha1
