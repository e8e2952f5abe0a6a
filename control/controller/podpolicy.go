package controller

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Gateway pods are rendered from templates that users (and skeinctl) may write, and run with
// skein-controller's authority to create Deployments. So what a template can ask for is
// bounded: the pod always runs as the gateway's own ServiceAccount (the one the controller
// binds to the gateway role), and nothing that reaches into the node (privileged containers,
// added capabilities, the host's network, PID or IPC namespace, hostPath volumes) is rendered
// unless the install allows it (skein-controller --allow-privileged-gateways). The gateway
// needs none of it: it runs unprivileged.

// constrainPod applies the policy to a rendered gateway pod, whose ServiceAccount becomes sa.
// It returns what a template asked for that is not allowed, as field paths within the pod
// spec ("" when nothing).
func constrainPod(spec *corev1.PodSpec, sa string, allowPrivileged bool) string {
	spec.ServiceAccountName = sa
	spec.DeprecatedServiceAccount = ""
	if allowPrivileged {
		return ""
	}
	var bad []string
	for field, on := range map[string]bool{"hostNetwork": spec.HostNetwork, "hostPID": spec.HostPID, "hostIPC": spec.HostIPC} {
		if on {
			bad = append(bad, field)
		}
	}
	for i, v := range spec.Volumes {
		if v.HostPath != nil {
			bad = append(bad, fmt.Sprintf("volumes[%d].hostPath", i))
		}
	}
	check := func(kind string, i int, sc *corev1.SecurityContext) {
		if sc == nil {
			return
		}
		if sc.Privileged != nil && *sc.Privileged {
			bad = append(bad, fmt.Sprintf("%s[%d].securityContext.privileged", kind, i))
		}
		if sc.Capabilities != nil && len(sc.Capabilities.Add) > 0 {
			bad = append(bad, fmt.Sprintf("%s[%d].securityContext.capabilities.add", kind, i))
		}
	}
	for i, c := range spec.InitContainers {
		check("initContainers", i, c.SecurityContext)
	}
	for i, c := range spec.Containers {
		check("containers", i, c.SecurityContext)
	}
	for i, c := range spec.EphemeralContainers {
		check("ephemeralContainers", i, c.SecurityContext)
	}
	if len(bad) == 0 {
		return ""
	}
	slices.Sort(bad)
	return strings.Join(bad, ", ")
}
