package mcs

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// BenchmarkBuildPorts: two clusters export a Service of 20,000 ports each (the attack of the
// review: the port merge was quadratic, 2.9 s a build, with one reconcile at a time), with the
// port limit lifted so that all of them are merged.
func BenchmarkBuildPorts(b *testing.B) { benchmarkBuildPorts(b, Limits{MaxPortsPerImport: 20000}) }

// BenchmarkBuildPortsDefaultLimit: the same exports with the default limit (100 ports).
func BenchmarkBuildPortsDefaultLimit(b *testing.B) { benchmarkBuildPorts(b, Limits{}) }

func benchmarkBuildPorts(b *testing.B, lim Limits) {
	const n = 20000
	var ports []corev1.ServicePort
	for i := range n {
		ports = append(ports, corev1.ServicePort{Name: fmt.Sprintf("p%d", i), Protocol: corev1.ProtocolTCP, Port: int32(1 + i)})
	}
	sources := []Source{
		{ClusterID: "b", Export: export(time.Hour), Service: service(ports...), Slices: []discoveryv1.EndpointSlice{slice("10.244.1.5")}, Map: mapping("10.244.0.0/16", "10.71.0.0/16")},
		{ClusterID: "c", Export: export(time.Minute), Service: service(ports...), Slices: []discoveryv1.EndpointSlice{slice("10.244.1.6")}, Map: mapping("10.244.0.0/16", "10.72.0.0/16")},
	}
	b.ReportAllocs()
	for b.Loop() {
		Build("shop", "orders", sources, lim)
	}
}
