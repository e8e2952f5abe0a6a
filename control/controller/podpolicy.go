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
// needs none of it: it runs unprivileged. Beyond Pod Security's baseline the policy also
// refuses what would let a template read or reach what the gateway must not: Secrets other
// than the gateway's own key (as volumes or environment), volumes other than ConfigMaps,
// emptyDirs, the downward API and projected tokens, host ports, a fixed nodeName, running as
// root, privilege escalation, unconfined seccomp or AppArmor, SELinux types other than the
// container ones, sysctls, unmasked /proc and Windows host processes.

// constrainPod applies the policy to a rendered gateway pod, whose ServiceAccount becomes sa.
// It returns what a template asked for that is not allowed, as field paths within the pod
// spec ("" when nothing).
func constrainPod(spec *corev1.PodSpec, sa, keySecret string, allowPrivileged bool) string {
	spec.ServiceAccountName = sa
	spec.DeprecatedServiceAccount = ""
	if allowPrivileged {
		return ""
	}
	var bad []string
	for field, on := range map[string]bool{"hostNetwork": spec.HostNetwork, "hostPID": spec.HostPID, "hostIPC": spec.HostIPC, "nodeName": spec.NodeName != ""} {
		if on {
			bad = append(bad, field)
		}
	}
	for i, v := range spec.Volumes {
		at := fmt.Sprintf("volumes[%d]", i)
		switch {
		case v.HostPath != nil:
			bad = append(bad, at+".hostPath")
		case v.Secret != nil:
			if v.Secret.SecretName != keySecret {
				bad = append(bad, at+".secret (not the gateway's key "+keySecret+")")
			}
		case v.Projected != nil:
			for j, src := range v.Projected.Sources {
				if src.Secret != nil && src.Secret.Name != keySecret {
					bad = append(bad, fmt.Sprintf("%s.projected.sources[%d].secret (not the gateway's key %s)", at, j, keySecret))
				}
			}
		case v.ConfigMap != nil, v.EmptyDir != nil, v.DownwardAPI != nil:
		default:
			bad = append(bad, at+" (a volume type other than configMap, emptyDir, downwardAPI, projected or the key secret)")
		}
	}
	if sc := spec.SecurityContext; sc != nil {
		if sc.RunAsUser != nil && *sc.RunAsUser == 0 {
			bad = append(bad, "securityContext.runAsUser 0")
		}
		if len(sc.Sysctls) > 0 {
			bad = append(bad, "securityContext.sysctls")
		}
		bad = append(bad, confinement("securityContext", sc.SeccompProfile, sc.AppArmorProfile, sc.SELinuxOptions, sc.WindowsOptions)...)
	}
	check := func(kind string, i int, c corev1.Container) {
		at := fmt.Sprintf("%s[%d]", kind, i)
		for j, p := range c.Ports {
			if p.HostPort != 0 {
				bad = append(bad, fmt.Sprintf("%s.ports[%d].hostPort", at, j))
			}
		}
		for j, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name != keySecret {
				bad = append(bad, fmt.Sprintf("%s.env[%d].valueFrom.secretKeyRef (not the gateway's key %s)", at, j, keySecret))
			}
		}
		for j, e := range c.EnvFrom {
			if e.SecretRef != nil && e.SecretRef.Name != keySecret {
				bad = append(bad, fmt.Sprintf("%s.envFrom[%d].secretRef (not the gateway's key %s)", at, j, keySecret))
			}
		}
		sc := c.SecurityContext
		if sc == nil {
			return
		}
		at += ".securityContext"
		if sc.Privileged != nil && *sc.Privileged {
			bad = append(bad, at+".privileged")
		}
		if sc.Capabilities != nil && len(sc.Capabilities.Add) > 0 {
			bad = append(bad, at+".capabilities.add")
		}
		if sc.AllowPrivilegeEscalation != nil && *sc.AllowPrivilegeEscalation {
			bad = append(bad, at+".allowPrivilegeEscalation")
		}
		if sc.RunAsUser != nil && *sc.RunAsUser == 0 {
			bad = append(bad, at+".runAsUser 0")
		}
		if sc.ProcMount != nil && *sc.ProcMount == corev1.UnmaskedProcMount {
			bad = append(bad, at+".procMount")
		}
		bad = append(bad, confinement(at, sc.SeccompProfile, sc.AppArmorProfile, sc.SELinuxOptions, sc.WindowsOptions)...)
	}
	for i, c := range spec.InitContainers {
		check("initContainers", i, c)
	}
	for i, c := range spec.Containers {
		check("containers", i, c)
	}
	for i, c := range spec.EphemeralContainers {
		check("ephemeralContainers", i, corev1.Container(c.EphemeralContainerCommon))
	}
	if len(bad) == 0 {
		return ""
	}
	slices.Sort(bad)
	return strings.Join(bad, ", ")
}

// confinement lists the confinements a security context at at turns off.
func confinement(at string, seccomp *corev1.SeccompProfile, apparmor *corev1.AppArmorProfile, selinux *corev1.SELinuxOptions, windows *corev1.WindowsSecurityContextOptions) []string {
	var bad []string
	if seccomp != nil && seccomp.Type == corev1.SeccompProfileTypeUnconfined {
		bad = append(bad, at+".seccompProfile Unconfined")
	}
	if apparmor != nil && apparmor.Type == corev1.AppArmorProfileTypeUnconfined {
		bad = append(bad, at+".appArmorProfile Unconfined")
	}
	if selinux != nil {
		switch selinux.Type {
		case "", "container_t", "container_init_t", "container_kvm_t", "container_engine_t":
		default:
			bad = append(bad, at+".seLinuxOptions.type "+selinux.Type)
		}
		if selinux.User != "" || selinux.Role != "" {
			bad = append(bad, at+".seLinuxOptions user or role")
		}
	}
	if windows != nil && windows.HostProcess != nil && *windows.HostProcess {
		bad = append(bad, at+".windowsOptions.hostProcess")
	}
	return bad
}
