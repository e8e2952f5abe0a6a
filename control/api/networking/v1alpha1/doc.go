// Package v1alpha1 is the networking.liqo.io/v1alpha1 API that skein serves: the kinds, field
// names and status fields of the spec's manifests (Configuration, GatewayServer, GatewayClient,
// PublicKey, Connection, WgGatewayServerTemplate, WgGatewayClientTemplate), plus skein's own
// InternalNode.
//
// Compatibility rule: documented kinds and fields are never renamed or removed; skein only adds.
// Validation lives here as kubebuilder markers (OpenAPI and CEL) so that the API server rejects
// malformed objects at admission with a message that names the field; `make generate` turns the
// markers into the CRDs under deploy/crds and the deepcopy code beside these files.
//
// +kubebuilder:object:generate=true
// +groupName=networking.liqo.io
package v1alpha1
