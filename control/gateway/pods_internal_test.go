package gateway

import (
	"fmt"
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

// TestSlimPodKeepsWhatFromObjectsReads: the transform keeps every field nodes() reads.
func TestSlimPodKeepsWhatFromObjectsReads(t *testing.T) {
	p := realisticPod(7)
	p.Spec.HostNetwork = true
	s, err := slimPod(p)
	if err != nil {
		t.Fatal(err)
	}
	q := s.(*corev1.Pod)
	if q.Name != p.Name || q.Namespace != p.Namespace || q.UID != p.UID || q.ResourceVersion != p.ResourceVersion ||
		q.Spec.NodeName != p.Spec.NodeName || !q.Spec.HostNetwork || q.Status.PodIP != p.Status.PodIP || q.Status.Phase != p.Status.Phase {
		t.Errorf("slim pod %+v lost a field of %+v", q, p)
	}
	if len(q.ManagedFields) != 0 || len(q.Spec.Containers) != 0 || len(q.Labels) != 0 {
		t.Errorf("slim pod keeps what nothing reads: %+v", q)
	}
	if o, _ := slimPod("tombstone"); o != "tombstone" {
		t.Errorf("a non-Pod is changed: %v", o)
	}
}

// BenchmarkPodCacheMemory reports the heap a cache of N pods holds, whole (what the informer
// kept before) and slimmed (what it keeps): bytes per pod, and MiB for N.
func BenchmarkPodCacheMemory(b *testing.B) {
	for _, n := range []int{10_000, 150_000} {
		for _, slim := range []bool{false, true} {
			b.Run(fmt.Sprintf("pods=%d/slim=%v", n, slim), func(b *testing.B) {
				var perPod float64
				for range b.N {
					held := make([]any, 0, n)
					before := heapInUse()
					for i := range n {
						var o any = realisticPod(i)
						if slim {
							o, _ = slimPod(o)
						}
						held = append(held, o)
					}
					after := heapInUse()
					perPod = float64(after-before) / float64(n)
					runtime.KeepAlive(held)
				}
				b.ReportMetric(perPod, "bytes/pod")
				b.ReportMetric(perPod*float64(n)/(1<<20), "MiB")
			})
		}
	}
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}
