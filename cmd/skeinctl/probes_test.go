package main

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TestProbePodsBounded: the probe pods skeinctl test network and skeinctl bench create carry
// resource requests and limits (issue 40: an unauthenticated server without a memory limit
// grew from 8 to 214 MB under idle connections), the memory limit well above the real peak
// of a 128-stream skeinctl bench measurement (server and client in one container: about
// 36 MB resident), and a Go memory limit below the container's.
func TestProbePodsBounded(t *testing.T) {
	p := &probeRun{ns: "skein-probe-x", image: "example.org/skein-probe:dev"}
	for _, kind := range []string{"server", "host"} {
		ds := p.daemonSet("x", kind)
		cs := ds.Spec.Template.Spec.Containers
		if len(cs) != 1 {
			t.Fatalf("%s: %d containers", kind, len(cs))
		}
		if a := ds.Spec.Template.Spec.AutomountServiceAccountToken; a == nil || *a {
			t.Errorf("%s: the probe pods mount a ServiceAccount token (they read nothing from the API)", kind)
		}
		r := cs[0].Resources
		if req := r.Requests[corev1.ResourceCPU]; req.IsZero() {
			t.Errorf("%s: no CPU request", kind)
		}
		for _, name := range []corev1.ResourceName{corev1.ResourceMemory} {
			req, lim := r.Requests[name], r.Limits[name]
			if req.IsZero() || lim.IsZero() {
				t.Errorf("%s: %s request %v limit %v, want both", kind, name, req.String(), lim.String())
				continue
			}
			if req.Cmp(lim) > 0 {
				t.Errorf("%s: %s request %v above its limit %v", kind, name, req.String(), lim.String())
			}
		}
		mem := r.Limits[corev1.ResourceMemory]
		if mem.Cmp(resource.MustParse("128Mi")) < 0 || mem.Cmp(resource.MustParse("1Gi")) > 0 {
			t.Errorf("%s: memory limit %v, want 128Mi-1Gi (the bench's peak is about 36 MB)", kind, mem.String())
		}
		if cpu, ok := r.Limits[corev1.ResourceCPU]; ok {
			t.Errorf("%s: CPU limit %v: throttling would cap what skeinctl bench measures", kind, cpu.String())
		}
		gomem := ""
		for _, e := range cs[0].Env {
			if e.Name == "GOMEMLIMIT" {
				gomem = e.Value
			}
		}
		// Go's 200MiB is Kubernetes' 200Mi.
		if q, err := resource.ParseQuantity(strings.TrimSuffix(gomem, "B")); err != nil || q.Cmp(mem) >= 0 {
			t.Errorf("%s: GOMEMLIMIT %q, want one below the memory limit %v", kind, gomem, mem.String())
		}
	}
}
