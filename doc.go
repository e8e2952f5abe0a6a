// Package skein is a multi-cluster network fabric for Kubernetes: it peers clusters so that pods
// reach pods in other clusters as if local, even when the clusters use the same pod CIDR. It
// serves the networking.liqo.io/v1alpha1 API with a userspace gateway (wireguard-go, a userspace
// dataplane and a gVisor netstack in one unprivileged process).
//
// The module root holds no code, only the tests of rules that span packages (layout_test.go).
// The layout and the dependency direction (enforced there):
//
//	cmd/        thin mains; nothing imports cmd
//	appliance/  assembles the gateway; only cmd imports it
//	dataplane/  the packet path and kernel programming; never imports k8s.io or gvisor.dev
//	netstack/   gVisor glue; the only importer of gvisor.dev
//	control/    by binary: api/ (the API), controller/, gateway/, agent/; shared kube/, identity/
//	internal/   test infrastructure; only tests and bench import it
//	bench/      the lab, end-to-end scenarios, benchmarks; product code never imports it
//	deploy/     CRDs and the Helm chart; its Go files are only the chart's tests
//
// See README.md and docs/ for more.
package skein
