package gateway

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The gateway's cache holds every Node and, with WatchPods, every Pod of the cluster: it keeps
// only what FromObjects reads, so its memory grows with the number of pods by a few hundred
// bytes each instead of the several kilobytes of a whole Pod (labels, annotations, managed
// fields, containers, conditions). BenchmarkPodCacheMemory measures both.

// slimPod is the cache's transform for Pods: name, node, host network, addresses, phase.
func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a tombstone on delete: passed on as it is
	}
	return &corev1.Pod{
		ObjectMeta: slimMeta(p.ObjectMeta),
		Spec:       corev1.PodSpec{NodeName: p.Spec.NodeName, HostNetwork: p.Spec.HostNetwork},
		Status:     corev1.PodStatus{Phase: p.Status.Phase, PodIP: p.Status.PodIP, PodIPs: p.Status.PodIPs},
	}, nil
}

// slimNode is the cache's transform for Nodes: name, pod CIDRs, addresses.
func slimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	return &corev1.Node{
		ObjectMeta: slimMeta(n.ObjectMeta),
		Spec:       corev1.NodeSpec{PodCIDR: n.Spec.PodCIDR, PodCIDRs: n.Spec.PodCIDRs},
		Status:     corev1.NodeStatus{Addresses: n.Status.Addresses},
	}, nil
}

// slimMeta keeps what the cache itself needs (name, namespace, uid, resource version).
func slimMeta(m metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion}
}
