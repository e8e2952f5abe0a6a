package controller

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/skein-net/skein/control/controller/mcs"
)

// ManagedByLabel, set to FieldOwner, marks every object skein-controller creates for a
// gateway: its key Secret, Deployment, Service, ServiceAccount, Role, RoleBindings,
// ClusterRoleBindings and PodDisruptionBudget. The controller's cache holds only objects so marked.
const ManagedByLabel = "app.kubernetes.io/managed-by"

// GatewayPodLabel names the gateway a pod belongs to; the templates put it on gateway pods
// (the Service selects them by it, and the controller finds the active one by it).
const GatewayPodLabel = "networking.liqo.io/gateway"

// CacheOptions scope the manager's cache to what skein-controller creates, plus the gateway
// pods: controller-runtime would otherwise list and watch every Secret, Pod, Deployment,
// Service, ServiceAccount and role binding of the cluster, and its memory would grow with the
// cluster instead of with skein. Nodes and skein's own kinds stay cluster-wide.
func CacheOptions() cache.Options {
	mine := cache.ByObject{Label: labels.SelectorFromSet(labels.Set{ManagedByLabel: FieldOwner})}
	req, err := labels.NewRequirement(GatewayPodLabel, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant label name
	}
	// Secrets: the gateways' keys, and the peers' credentials skeinctl writes.
	secrets, err := labels.NewRequirement(ManagedByLabel, selection.In, []string{FieldOwner, "skeinctl"})
	if err != nil {
		panic(err)
	}
	// EndpointSlices: the ones skein writes for imported services.
	slices := cache.ByObject{Label: labels.SelectorFromSet(labels.Set{discoveryv1.LabelManagedBy: mcs.ManagedBy})}
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Secret{}:                {Label: labels.NewSelector().Add(*secrets)},
		&discoveryv1.EndpointSlice{}:    slices,
		&appsv1.Deployment{}:            mine,
		&corev1.Service{}:               mine,
		&corev1.ServiceAccount{}:        mine,
		&rbacv1.RoleBinding{}:           mine,
		&rbacv1.Role{}:                  mine,
		&rbacv1.ClusterRoleBinding{}:    mine,
		&policyv1.PodDisruptionBudget{}: mine,
		&corev1.Pod{}:                   {Label: labels.NewSelector().Add(*req)},
	}}
}

// withManagedBy returns a copy of l with ManagedByLabel set.
func withManagedBy(l map[string]string) map[string]string {
	out := make(map[string]string, len(l)+1)
	for k, v := range l {
		out[k] = v
	}
	out[ManagedByLabel] = FieldOwner
	return out
}
