package gateway

import (
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// realisticPod is a pod as a Deployment's ReplicaSet makes it and the kubelet reports it:
// labels, an annotation, an owner, managed fields, one container with resources, probes and
// a mounted token, status conditions.
func realisticPod(i int) *corev1.Pod {
	now := metav1.NewTime(time.Unix(1_700_000_000, 0))
	name := fmt.Sprintf("web-7d9f8b6c5d-%05d", i)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "shop", UID: types.UID(fmt.Sprintf("0d6c9a2e-1b3f-4c5d-8e7f-%012d", i)), ResourceVersion: fmt.Sprint(100000 + i),
			Labels:      map[string]string{"app.kubernetes.io/name": "web", "app.kubernetes.io/instance": "shop", "pod-template-hash": "7d9f8b6c5d"},
			Annotations: map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-11-20T10:00:00Z"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7d9f8b6c5d",
				UID: "9a8b7c6d-5e4f-4a3b-2c1d-0e9f8a7b6c5d"}},
			ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &now,
					FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(strings.Repeat("x", 1400))},
				{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &now,
					FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(strings.Repeat("x", 1100)), Subresource: "status"},
			},
		},
		Spec: corev1.PodSpec{
			NodeName: fmt.Sprintf("node-%03d", i%500),
			Containers: []corev1.Container{{Name: "web", Image: "registry.example/shop/web:1.42.0",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"),
					corev1.ResourceMemory: resource.MustParse("128Mi")}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready"}}},
				VolumeMounts:   []corev1.VolumeMount{{Name: "kube-api-access-abcde", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}},
			}},
			Volumes:            []corev1.Volume{{Name: "kube-api-access-abcde"}},
			ServiceAccountName: "default",
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: fmt.Sprintf("10.%d.%d.%d", 100+i>>16, i>>8&255, i&255),
			HostIP: "192.168.1.10", StartTime: &now,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "web", Ready: true, Image: "registry.example/shop/web:1.42.0",
				ImageID:     "registry.example/shop/web@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
				ContainerID: "containerd://0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}},
		},
	}
}

// TestPodAddrOf: a pod's routes are its node and first IPv4 and IPv6 addresses, and there are
// none for a pod
// that owns no address of its own or no longer owns it.
func TestPodAddrOf(t *testing.T) {
	base := realisticPod(7)
	want := PodAddr{Node: base.Spec.NodeName, IP: netip.MustParseAddr(base.Status.PodIP)}
	for _, tc := range []struct {
		name string
		edit func(*corev1.Pod)
		want PodAddr
		ok   bool
	}{
		{"running", func(*corev1.Pod) {}, want, true},
		{"pending with an address", func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }, want, true},
		{"unknown phase", func(p *corev1.Pod) { p.Status.Phase = "" }, want, true},
		{"podIPs first", func(p *corev1.Pod) {
			p.Status.PodIPs = []corev1.PodIP{{IP: "10.9.9.9"}, {IP: "fd00::9"}}
		}, PodAddr{Node: base.Spec.NodeName, IP: netip.MustParseAddr("10.9.9.9"), IP6: netip.MustParseAddr("fd00::9")}, true},
		{"dual-stack, IPv6 first", func(p *corev1.Pod) {
			p.Status.PodIP, p.Status.PodIPs = "fd00::9", []corev1.PodIP{{IP: "fd00::9"}, {IP: "10.9.9.8"}, {IP: "fd00::8"}, {IP: "10.9.9.7"}}
		}, PodAddr{Node: base.Spec.NodeName, IP: netip.MustParseAddr("10.9.9.8"), IP6: netip.MustParseAddr("fd00::9")}, true},
		{"IPv6 only", func(p *corev1.Pod) { p.Status.PodIP, p.Status.PodIPs = "fd00::9", []corev1.PodIP{{IP: "fd00::9"}} },
			PodAddr{Node: base.Spec.NodeName, IP6: netip.MustParseAddr("fd00::9")}, true},
		{"IPv4-mapped and zoned addresses are neither", func(p *corev1.Pod) {
			p.Status.PodIP, p.Status.PodIPs = "", []corev1.PodIP{{IP: "::ffff:10.9.9.9"}, {IP: "fe80::1%eth0"}}
		}, PodAddr{}, false},
		{"host network", func(p *corev1.Pod) { p.Spec.HostNetwork = true }, PodAddr{}, false},
		{"not scheduled", func(p *corev1.Pod) { p.Spec.NodeName = "" }, PodAddr{}, false},
		{"no address yet", func(p *corev1.Pod) { p.Status.PodIP = "" }, PodAddr{}, false},
		{"address does not parse", func(p *corev1.Pod) { p.Status.PodIP = "10.1.2.300" }, PodAddr{}, false},
		{"succeeded", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }, PodAddr{}, false},
		{"failed", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }, PodAddr{}, false},
	} {
		p := realisticPod(7)
		tc.edit(p)
		got, ok := PodAddrOf(p)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: PodAddrOf = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// BenchmarkPodWatchMemory reports the heap N pods hold: whole (as an informer without a
// transform keeps them), slimmed to the fields the gateway reads (as its informer kept them
// before pods.go) and in the pod watch (PodAddrs): bytes per pod, and MiB for N.
func BenchmarkPodWatchMemory(b *testing.B) {
	for _, n := range []int{10_000, 150_000} {
		for _, kept := range []string{"whole", "slim", "podwatch"} {
			b.Run(fmt.Sprintf("pods=%d/kept=%s", n, kept), func(b *testing.B) {
				var perPod float64
				for range b.N {
					held := make([]any, 0, n)
					pw := newPodWatch(nil, func() {}, nil)
					before := heapInUse()
					for i := range n {
						p := realisticPod(i)
						switch kept {
						case "whole":
							held = append(held, p)
						case "slim":
							held = append(held, slim(p))
						default:
							pw.update(p, false)
						}
					}
					after := heapInUse()
					perPod = float64(after-before) / float64(n)
					runtime.KeepAlive(held)
					runtime.KeepAlive(pw)
				}
				b.ReportMetric(perPod, "bytes/pod")
				b.ReportMetric(perPod*float64(n)/(1<<20), "MiB")
			})
		}
	}
}

// slim is the transform the gateway's informer applied to Pods before pods.go: the fields
// FromObjects read, and what the cache itself needs.
func slim(p *corev1.Pod) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion},
		Spec:       corev1.PodSpec{NodeName: p.Spec.NodeName, HostNetwork: p.Spec.HostNetwork},
		Status:     corev1.PodStatus{Phase: p.Status.Phase, PodIP: p.Status.PodIP, PodIPs: p.Status.PodIPs},
	}
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}
