package deploy

import (
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// checkScheduling: image pull secrets on the controller and the agent, the agent's priority
// class, a PodDisruptionBudget for more than one controller, and the gateway values (node
// selector, tolerations, priority class, pull secrets, annotations) in the gateways the
// controller renders from the chart's templates.
func checkScheduling(v chartValues, objs []*unstructured.Unstructured) []string {
	var problems []string
	bad := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	hasSecrets := func(what string, have, want []corev1.LocalObjectReference) {
		for _, w := range want {
			if !slices.Contains(have, w) {
				bad("%s: image pull secret %q missing from %v", what, w.Name, have)
			}
		}
	}
	for _, u := range objs {
		switch u.GetKind() {
		case "Deployment":
			d, err := as[appsv1.Deployment](u)
			if err != nil {
				bad("%v", err)
				continue
			}
			hasSecrets("Deployment "+d.Name, d.Spec.Template.Spec.ImagePullSecrets, v.ImagePullSecrets)
		case "DaemonSet":
			ds, err := as[appsv1.DaemonSet](u)
			if err != nil {
				bad("%v", err)
				continue
			}
			hasSecrets("DaemonSet "+ds.Name, ds.Spec.Template.Spec.ImagePullSecrets, v.ImagePullSecrets)
			if ds.Spec.Template.Spec.PriorityClassName != v.Agent.PriorityClassName {
				bad("agent priority class %q, want %q", ds.Spec.Template.Spec.PriorityClassName, v.Agent.PriorityClassName)
			}
		}
	}
	pdbs := 0
	for _, u := range objs {
		if u.GetKind() == "PodDisruptionBudget" {
			pdbs++
		}
	}
	if want := v.Controller.Replicas > 1; (pdbs == 1) != want {
		bad("%d PodDisruptionBudgets with %d controller replicas", pdbs, v.Controller.Replicas)
	}
	for _, t := range []struct {
		kind, name string
		server     bool
	}{{"WgGatewayServerTemplate", "wireguard-server", true}, {"WgGatewayClientTemplate", "wireguard-client", false}} {
		u := find(objs, t.kind, t.name)
		if u == nil {
			continue
		}
		rd, err := renderGateway(u, v, t.server)
		if err != nil {
			bad("%s: %v", t.name, err)
			continue
		}
		pod := rd.Deployment.Template.Spec
		for k, val := range v.Gateway.NodeSelector {
			if pod.NodeSelector[k] != val {
				bad("%s: node selector %v lacks %s=%s", t.name, pod.NodeSelector, k, val)
			}
		}
		for _, tol := range v.Gateway.Tolerations {
			if !slices.ContainsFunc(pod.Tolerations, func(x corev1.Toleration) bool { return x.MatchToleration(&tol) }) {
				bad("%s: tolerations %v lack %v", t.name, pod.Tolerations, tol)
			}
		}
		if pod.PriorityClassName != v.Gateway.PriorityClassName {
			bad("%s: priority class %q, want %q", t.name, pod.PriorityClassName, v.Gateway.PriorityClassName)
		}
		hasSecrets(t.name, pod.ImagePullSecrets, v.Gateway.ImagePullSecrets)
		for k, val := range v.Gateway.Annotations {
			if rd.Annotations[k] != val {
				bad("%s: rendered annotations %v lack %s=%s", t.name, rd.Annotations, k, val)
			}
		}
	}
	return problems
}
