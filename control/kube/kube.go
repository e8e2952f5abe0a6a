// Package kube holds what skein's Kubernetes clients share: the scheme of the kinds they
// read and write.
package kube

import (
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
)

// Scheme returns a scheme with the core Kubernetes kinds and networking.liqo.io/v1alpha1.
func Scheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := netv1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}
