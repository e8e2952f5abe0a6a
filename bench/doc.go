// Package bench is skein's proving ground: the lab that runs real Kubernetes clusters in network
// namespaces, the end-to-end scenarios that run in it, and the throughput and latency harness.
// Its k8sbin package builds the Kubernetes binaries the lab and the API tests use.
//
// Product code never imports bench; bench drives the product through its binaries, the API and
// the CLI, as users do.
package bench
