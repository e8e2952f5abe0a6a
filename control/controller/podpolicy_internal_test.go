package controller

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// TestConstrainPod: each way a template could make a gateway pod reach beyond the gateway's
// own key and network namespace is named; the default templates' pod passes.
func TestConstrainPod(t *testing.T) {
	ok := func() *corev1.PodSpec {
		return &corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65534),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{Name: "gateway", Image: "skein-gateway",
				Env: []corev1.EnvVar{{Name: "KEY", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "gw-wg-key"}, Key: "privateKey"}}}},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
			Volumes: []corev1.Volume{{Name: "key", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "gw-wg-key"}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		}
	}
	if bad := constrainPod(ok(), "gw", "gw-wg-key", false); bad != "" {
		t.Fatalf("a gateway pod as the default templates render it: %s", bad)
	}
	for _, tc := range []struct {
		edit func(*corev1.PodSpec)
		want string
	}{
		{func(p *corev1.PodSpec) { p.NodeName = "control-plane-1" }, "nodeName"},
		{func(p *corev1.PodSpec) {
			p.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 80}}
		}, "containers[0].ports[0].hostPort"},
		{func(p *corev1.PodSpec) {
			p.Volumes = append(p.Volumes, corev1.Volume{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "other-gw-wg-key"}}})
		}, "volumes[2].secret (not the gateway's key gw-wg-key)"},
		{func(p *corev1.PodSpec) {
			p.Volumes = append(p.Volumes, corev1.Volume{Name: "s", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "tenant-db"}}}}}}})
		}, "volumes[2].projected.sources[0].secret"},
		{func(p *corev1.PodSpec) {
			p.Volumes = append(p.Volumes, corev1.Volume{Name: "n", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "10.0.0.5", Path: "/"}}})
		}, "volumes[2] (a volume type other than"},
		{func(p *corev1.PodSpec) {
			p.Containers[0].Env[0].ValueFrom.SecretKeyRef.Name = "tenant-db"
		}, "containers[0].env[0].valueFrom.secretKeyRef"},
		{func(p *corev1.PodSpec) {
			p.InitContainers = []corev1.Container{{Name: "i", EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "tenant-db"}}}}}}
		}, "initContainers[0].envFrom[0].secretRef"},
		{func(p *corev1.PodSpec) { p.SecurityContext.RunAsUser = ptr.To[int64](0) }, "securityContext.runAsUser 0"},
		{func(p *corev1.PodSpec) { p.Containers[0].SecurityContext.RunAsUser = ptr.To[int64](0) }, "containers[0].securityContext.runAsUser 0"},
		{func(p *corev1.PodSpec) { p.Containers[0].SecurityContext.AllowPrivilegeEscalation = ptr.To(true) }, "allowPrivilegeEscalation"},
		{func(p *corev1.PodSpec) { p.SecurityContext.SeccompProfile.Type = corev1.SeccompProfileTypeUnconfined }, "securityContext.seccompProfile Unconfined"},
		{func(p *corev1.PodSpec) {
			p.Containers[0].SecurityContext.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
		}, "appArmorProfile Unconfined"},
		{func(p *corev1.PodSpec) { p.SecurityContext.SELinuxOptions = &corev1.SELinuxOptions{Type: "spc_t"} }, "seLinuxOptions.type spc_t"},
		{func(p *corev1.PodSpec) {
			p.SecurityContext.Sysctls = []corev1.Sysctl{{Name: "net.ipv4.ip_forward", Value: "1"}}
		}, "securityContext.sysctls"},
		{func(p *corev1.PodSpec) { p.Containers[0].SecurityContext.ProcMount = ptr.To(corev1.UnmaskedProcMount) }, "procMount"},
		{func(p *corev1.PodSpec) {
			p.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "e",
				SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}}
		}, "ephemeralContainers[0].securityContext.privileged"},
		{func(p *corev1.PodSpec) {
			p.Containers[0].SecurityContext.WindowsOptions = &corev1.WindowsSecurityContextOptions{HostProcess: ptr.To(true)}
		}, "windowsOptions.hostProcess"},
	} {
		p := ok()
		tc.edit(p)
		if bad := constrainPod(p, "gw", "gw-wg-key", false); !strings.Contains(bad, tc.want) {
			t.Errorf("constrainPod = %q, want it to name %q", bad, tc.want)
		}
		if bad := constrainPod(p, "gw", "gw-wg-key", true); bad != "" {
			t.Errorf("with --allow-privileged-gateways: %q", bad)
		}
	}
}
