package lab

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/skein-net/skein/deploy/images"
	"github.com/skein-net/skein/internal/k8sbin"
)

// The lab's cluster DNS is CoreDNS as kubeadm installs it: the Deployment coredns in
// kube-system (k8s-app=kube-dns), its ConfigMap with the Corefile, the ServiceAccount and the
// system:coredns ClusterRole, and the Service kube-dns at the tenth address of each service
// CIDR (10.96.0.10, fd00:96::a), which every kubelet's clusterDNS names.

// CoreDNSRef is the CoreDNS image's repository and tag in the lab's registry (of either family).
var CoreDNSRef = "skein-net/coredns:" + k8sbin.CoreDNSVersion

// ClusterDomain is the clusters' DNS domain (the kubelets' clusterDomain).
const ClusterDomain = "cluster.local"

// DNSNamespace and DNSService are where the cluster DNS Service lives, as in every kubeadm
// or kind cluster: kube-system/kube-dns.
const (
	DNSNamespace = "kube-system"
	DNSService   = "kube-dns"
	dnsApp       = "coredns"
)

// clusterDNS is the kube-dns Service's ClusterIP in each service CIDR: its tenth address, as
// kubeadm takes it (10.96.0.10 of 10.96.0.0/12, fd00:96::a of fd00:96::/112).
func clusterDNS(serviceCIDRs []netip.Prefix) []netip.Addr {
	var out []netip.Addr
	for _, p := range serviceCIDRs {
		a := p.Masked().Addr()
		for range 10 {
			a = a.Next()
		}
		out = append(out, a)
	}
	return out
}

// ClusterDNS is the kube-dns Service's ClusterIP of each family the clusters have (the first
// is the one the kubelets give pods).
func (l *Lab) ClusterDNS() []netip.Addr { return clusterDNS(l.ServiceCIDRs) }

// corednsLayout adds the CoreDNS image (CoreDNSRef), built from the cached CoreDNS binary as
// skein's own images are built (one static binary, running as nobody), to the OCI layout at dir.
func corednsLayout(binary, dir string) error {
	b, err := os.ReadFile(binary)
	if err != nil {
		return fmt.Errorf("lab: the CoreDNS binary (make k8s-binaries builds it): %w", err)
	}
	c := images.Component{Name: "coredns", Package: "github.com/coredns/coredns", Description: "CoreDNS " + k8sbin.CoreDNSVersion + ", the lab's cluster DNS"}
	p := images.Platform{OS: "linux", Arch: runtime.GOARCH}
	idx, err := images.Index(c, []images.Platform{p}, map[images.Platform][]byte{p: b},
		images.Meta{Version: k8sbin.CoreDNSVersion, Revision: k8sbin.CoreDNSVersion, Created: time.Unix(0, 0)}, nil)
	if err != nil {
		return fmt.Errorf("lab: CoreDNS image: %w", err)
	}
	return images.WriteLayout(dir, strings.TrimPrefix(CoreDNSRef, "skein-net/"), idx)
}

// Corefile is the lab's CoreDNS configuration: kubeadm's, but without its forward of other
// names to the node's resolver. Nothing in the lab may send a query outside it, so a name
// outside cluster.local (and a reverse lookup of an address outside the clusters) finds no
// plugin to answer it, and CoreDNS answers SERVFAIL at once; the errors plugin reports those
// once a minute. extra is added as server blocks of their own (such as a zone forwarded to
// another server in the cluster).
func Corefile(extra string) string {
	return `.:53 {
    errors {
        consolidate 1m "no next plugin found$" warning
    }
    health {
        lameduck 5s
    }
    ready
    kubernetes ` + ClusterDomain + ` in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    prometheus :9153
    cache 30
    loop
    reload
    loadbalance
}
` + extra
}

// deployCoreDNS creates cluster DNS in a cluster, as kubeadm does; it does not wait for it (see
// WaitDNS).
func deployCoreDNS(ctx context.Context, cs kubernetes.Interface, image string, ips []netip.Addr) error {
	labels := map[string]string{"k8s-app": DNSService}
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: DNSNamespace, Labels: map[string]string{"k8s-app": DNSService}}
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
	}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: dnsApp, Namespace: DNSNamespace}}}
	sa := &corev1.ServiceAccount{ObjectMeta: meta(dnsApp)}
	cm := &corev1.ConfigMap{ObjectMeta: meta(dnsApp), Data: map[string]string{"Corefile": Corefile("")}}
	probe := func(path string, port int32) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(port), Scheme: corev1.URISchemeHTTP}}}
	}
	liveness := probe("/health", 8080)
	liveness.InitialDelaySeconds, liveness.TimeoutSeconds, liveness.SuccessThreshold, liveness.FailureThreshold = 60, 5, 1, 5
	readiness := probe("/ready", 8181)
	dep := &appsv1.Deployment{ObjectMeta: meta(dnsApp), Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To[int32](2),
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
			RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: ptr.To(intstr.FromInt32(1))}},
		Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{
				PriorityClassName:  "system-cluster-critical",
				ServiceAccountName: dnsApp,
				// CoreDNS resolves nothing through cluster DNS itself.
				DNSPolicy:    corev1.DNSDefault,
				NodeSelector: map[string]string{"kubernetes.io/os": "linux"},
				Tolerations: []corev1.Toleration{{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists},
					{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}},
				Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
					PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 100, PodAffinityTerm: corev1.PodAffinityTerm{
						LabelSelector: &metav1.LabelSelector{MatchLabels: labels}, TopologyKey: "kubernetes.io/hostname"}}}}},
				Containers: []corev1.Container{{
					Name: dnsApp, Image: image, Args: []string{"-conf", "/etc/coredns/Corefile"},
					Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("70Mi")},
						Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("170Mi")}},
					Ports: []corev1.ContainerPort{{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
						{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP},
						{Name: "metrics", ContainerPort: 9153, Protocol: corev1.ProtocolTCP}},
					VolumeMounts:   []corev1.VolumeMount{{Name: "config-volume", MountPath: "/etc/coredns", ReadOnly: true}},
					LivenessProbe:  liveness,
					ReadinessProbe: readiness,
					// Port 53 without root: containerd opens the unprivileged ports to every
					// container (enable_unprivileged_ports, its default), as the image's own
					// file capability would.
					SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
						Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}, Drop: []corev1.Capability{"ALL"}}},
				}},
				Volumes: []corev1.Volume{{Name: "config-volume", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: dnsApp},
					Items:                []corev1.KeyToPath{{Key: "Corefile", Path: "Corefile"}}}}}},
			},
		},
	}}
	svc := &corev1.Service{ObjectMeta: meta(DNSService), Spec: corev1.ServiceSpec{
		Selector: labels,
		Ports: []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
			{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
			{Name: "metrics", Port: 9153, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(9153)}},
	}}
	svc.ObjectMeta.Labels["kubernetes.io/name"] = "CoreDNS"
	svc.ObjectMeta.Annotations = map[string]string{"prometheus.io/port": "9153", "prometheus.io/scrape": "true"}
	for _, ip := range ips {
		svc.Spec.ClusterIPs = append(svc.Spec.ClusterIPs, ip.String())
		fam := corev1.IPv4Protocol
		if ip.Is6() {
			fam = corev1.IPv6Protocol
		}
		svc.Spec.IPFamilies = append(svc.Spec.IPFamilies, fam)
	}
	if len(ips) > 0 {
		svc.Spec.ClusterIP = ips[0].String()
	}
	if len(ips) > 1 {
		svc.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicyRequireDualStack)
	}
	create := []func() error{
		func() error {
			_, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.CoreV1().ServiceAccounts(DNSNamespace).Create(ctx, sa, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.CoreV1().ConfigMaps(DNSNamespace).Create(ctx, cm, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.CoreV1().Services(DNSNamespace).Create(ctx, svc, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.AppsV1().Deployments(DNSNamespace).Create(ctx, dep, metav1.CreateOptions{})
			return err
		},
	}
	for _, f := range create {
		// kube-system and the service CIDR's allocator appear shortly after the API server is
		// ready: retry until the context ends.
		for {
			err := f()
			if err == nil || apierrors.IsAlreadyExists(err) {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("cluster DNS: %w", err)
			case <-time.After(300 * time.Millisecond):
			}
		}
	}
	return nil
}

// WaitDNS waits until cluster i's CoreDNS Deployment has every replica available.
func (l *Lab) WaitDNS(ctx context.Context, i int) error {
	cfg, err := l.RESTConfig(i)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var last string
	for {
		d, err := cs.AppsV1().Deployments(DNSNamespace).Get(ctx, dnsApp, metav1.GetOptions{})
		if err == nil {
			want := ptr.Deref(d.Spec.Replicas, 1)
			if d.Status.ObservedGeneration >= d.Generation && d.Status.AvailableReplicas >= want && d.Status.UpdatedReplicas >= want {
				return nil
			}
			last = fmt.Sprintf("%d of %d replicas available", d.Status.AvailableReplicas, want)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("lab: %s: cluster DNS not available (%s): %w", l.Clusters[i].Name, last, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}
