// How gateways find the node of a local pod. A gateway routes a pod's return traffic to the
// node whose Node.spec.podCIDRs hold the pod's address; CNIs with their own IPAM (Calico's
// blocks, Cilium's cluster pool, the clouds' VPC CNIs) give pods addresses outside those CIDRs,
// and the gateway must then learn each pod's node from the Pod objects (--watch-pods), which
// needs read access to every Pod. PodRoutes decides, cluster-wide, whether gateways do so: the
// controller's setting alone, never a template (GatewayPolicy strips a template's --watch-pods).

package controller

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
)

// Pod route modes (skein-controller --gateway-watch-pods, the chart's gateway.watchPods).
const (
	// PodRoutesAuto turns --watch-pods on for every gateway once a gateway pod is seen with an
	// address outside its node's pod CIDRs (or on a node without any).
	PodRoutesAuto = "auto"
	// PodRoutesAlways gives every gateway --watch-pods.
	PodRoutesAlways = "true"
	// PodRoutesNever routes by the nodes' pod CIDRs only: no gateway watches Pods, whatever
	// its template says.
	PodRoutesNever = "false"
)

// PodRoutes holds the mode and, in auto mode, the first evidence that pods live outside their
// nodes' pod CIDRs. Once seen it stays on for the controller's life (a restart finds it again
// from the gateway pods themselves).
type PodRoutes struct {
	Mode string

	mu       sync.Mutex
	evidence string
	subs     []subscriber
}

// subscriber is a gateway reconciler's queue of gateways to render again.
type subscriber struct {
	server bool
	ch     chan event.GenericEvent
}

// Subscribe returns the events by which the gateway reconciler of one kind renders every
// gateway again when pod routes turn on.
func (p *PodRoutes) Subscribe(server bool) <-chan event.GenericEvent {
	ch := make(chan event.GenericEvent, 1024)
	p.mu.Lock()
	p.subs = append(p.subs, subscriber{server: server, ch: ch})
	p.mu.Unlock()
	return ch
}

// Broadcast queues every gateway of the cluster for rendering again (after pod routes turned on).
func (p *PodRoutes) Broadcast(ctx context.Context, c client.Reader) error {
	var servers netv1alpha1.GatewayServerList
	var clients netv1alpha1.GatewayClientList
	if err := c.List(ctx, &servers); err != nil {
		return err
	}
	if err := c.List(ctx, &clients); err != nil {
		return err
	}
	p.mu.Lock()
	subs := slices.Clone(p.subs)
	p.mu.Unlock()
	for _, s := range subs {
		var objs []client.Object
		if s.server {
			for i := range servers.Items {
				objs = append(objs, &servers.Items[i])
			}
		} else {
			for i := range clients.Items {
				objs = append(objs, &clients.Items[i])
			}
		}
		for _, o := range objs {
			select {
			case s.ch <- event.GenericEvent{Object: o}:
			default: // full: the gateways queued already are enough to drain it
			}
		}
	}
	return nil
}

// gatewayPod reports whether pod is a running replica of the gateway Deployment named gw: a
// pod of one of its ReplicaSets (gw-<pod-template-hash>), not any pod that carries the
// gateway's label.
func gatewayPod(pod *corev1.Pod, gw string) bool {
	if pod.Status.Phase != corev1.PodRunning || pod.DeletionTimestamp != nil {
		return false
	}
	owner := metav1.GetControllerOf(pod)
	hash := pod.Labels[appsv1.DefaultDeploymentUniqueLabelKey]
	return owner != nil && owner.Kind == "ReplicaSet" && hash != "" && owner.Name == gw+"-"+hash
}

// ParsePodRoutes checks a mode.
func ParsePodRoutes(mode string) (*PodRoutes, error) {
	switch mode {
	case PodRoutesAuto, PodRoutesAlways, PodRoutesNever:
		return &PodRoutes{Mode: mode}, nil
	}
	return nil, fmt.Errorf("%q: want auto, true or false", mode)
}

// Observe looks at one running gateway pod and its node. It returns the evidence when this
// observation is the one that turned pod routes on ("" otherwise).
func (p *PodRoutes) Observe(pod *corev1.Pod, node *corev1.Node) string {
	if p == nil || p.Mode != PodRoutesAuto || pod.Spec.HostNetwork || pod.Status.PodIP == "" || node == nil {
		return ""
	}
	ip, err := netip.ParseAddr(pod.Status.PodIP)
	if err != nil || !ip.Is4() {
		return ""
	}
	cidrs := node.Spec.PodCIDRs
	if len(cidrs) == 0 && node.Spec.PodCIDR != "" {
		cidrs = []string{node.Spec.PodCIDR}
	}
	if slices.ContainsFunc(cidrs, func(s string) bool {
		c, err := netip.ParsePrefix(s)
		return err == nil && c.Contains(ip)
	}) {
		return ""
	}
	why := fmt.Sprintf("gateway pod %s/%s has address %s, outside the pod CIDRs of its node %s (%v)", pod.Namespace, pod.Name, ip, node.Name, cidrs)
	if len(cidrs) == 0 {
		why = fmt.Sprintf("gateway pod %s/%s runs on node %s, which has no pod CIDRs", pod.Namespace, pod.Name, node.Name)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.evidence != "" {
		return ""
	}
	p.evidence = why
	return why
}

// Evidence is why pod routes are on in auto mode ("" while they are not).
func (p *PodRoutes) Evidence() string {
	if p == nil {
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.evidence
}

// Apply adds --watch-pods to the gateway container when the mode or the evidence asks for it
// (nil p: never). The template's own --watch-pods is gone by then (GatewayPolicy).
func (p *PodRoutes) Apply(spec *corev1.PodSpec) {
	if p == nil || watchesPods(spec) {
		return
	}
	if p.Mode != PodRoutesAlways && (p.Mode != PodRoutesAuto || p.Evidence() == "") {
		return
	}
	for i := range spec.Containers {
		if spec.Containers[i].Name == "gateway" {
			spec.Containers[i].Args = append(spec.Containers[i].Args, "--watch-pods")
		}
	}
}
