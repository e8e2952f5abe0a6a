// Package control is skein's control plane: the networking.liqo.io/v1alpha1 API types (in
// api/networking/v1alpha1), the reconcilers of the controller, IPAM, the pure translation from
// API objects to dataplane configuration, and the watchers the gateway and the node agent use.
//
// It talks to Kubernetes with client-go and controller-runtime. It never imports appliance,
// netstack or gvisor.dev; tests that need an API server use control/apitest.
package control
