// The gateway policy: what a gateway template may choose. Templates are written by whoever may
// write WgGatewayServerTemplates and WgGatewayClientTemplates (and GatewayServers and
// GatewayClients referring to them), and skein-controller applies what they render with its
// own authority: it creates Deployments, Services and RoleBindings in any namespace and binds
// cluster-wide roles. So the controller renders as a careful deputy: nothing a template says
// makes it create what the template's author could not create alone.
//
//   - the gateway runs skein-gateway: the container's image comes from the install's settings
//     (--gateway-image) or an allowed repository (--gateway-image-repositories), its command is
//     the image's own, and its arguments are gateway flags from an allow-list (gatewayFlags),
//     with its mode, name and namespace its own;
//   - the pod is one gateway container, with environment variables from an allow-list, no
//     runtime class, resources no larger than --gateway-max-cpu/--gateway-max-memory, a
//     priority class and tolerations only from the install's lists;
//   - the pod and its container set only fields from allow-lists (gatewayPodFields,
//     gatewayContainerFields): no exec hooks or probes, no probe or hook of another host, no
//     resolver of the template's (dnsConfig, hostAliases, dnsPolicy None), volumes mounted only
//     in scratch and skein directories (gatewayMountDirs), never over the gateway's program;
//   - the Deployment selects the gateway's own pods, with at most --gateway-max-replicas;
//   - a server's Service is built from the GatewayServer's spec (type, port, node port,
//     load-balancer IP) and selects the gateway's own pods: the template may tune only what
//     changes nothing outside the gateway (traffic policies, IP families, source ranges), and
//     its annotations only with keys the install allows (--gateway-service-annotations);
//   - --watch-pods, and the binding that lets a gateway read every Pod, follow the controller's
//     own setting (--gateway-watch-pods, podroutes.go), never the template.
//
// What a template asks beyond this is refused as a whole (Ready=False, ForbiddenTemplate,
// naming every field) and nothing of it is applied. podpolicy.go bounds the rest of the pod.

package controller

import (
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/controller/render"
)

// Defaults of the gateway policy (GatewayPolicy.withDefaults; skein-controller's flags and the
// chart's values leave them to it).
const (
	// DefaultGatewayImageRepository is where skein's gateway image is published: templates may
	// always take their image from it.
	DefaultGatewayImageRepository = "ghcr.io/skein-net/skein-gateway"
	// DefaultGatewayMaxReplicas bounds a gateway's replicas (one active, the rest standby).
	DefaultGatewayMaxReplicas = 3
	// DefaultGatewayMaxCPU and DefaultGatewayMaxMemory bound each request and limit of a
	// gateway pod (the chart asks 100m and 64Mi, limits 256Mi).
	DefaultGatewayMaxCPU    = "2"
	DefaultGatewayMaxMemory = "1Gi"
	// DefaultGatewayPodAnnotations are the pod annotations a template may set: Prometheus's
	// scrape settings.
	DefaultGatewayPodAnnotations = "prometheus.io/"
	// DefaultGatewayPodLabels are the pod label keys a template may set: Liqo's and skein's
	// own, and app.kubernetes.io/part-of and component (the labels no other workload's Service
	// selects on their own).
	DefaultGatewayPodLabels = "networking.liqo.io/,liqo.io/,app.kubernetes.io/part-of,app.kubernetes.io/component"
)

// GatewayPolicy is what the install lets gateway templates choose (skein-controller's
// --gateway-* flags, the chart's gateway values). The zero value is the default policy.
type GatewayPolicy struct {
	// Image is the gateway image a template without one gets (the chart's gateway.image); its
	// repository is allowed. Empty: a template must name an image of an allowed repository.
	Image string
	// ImageRepositories are further repositories a template may take the gateway image from,
	// compared as written (a registry host and a path, no tag). Nil: DefaultGatewayImageRepository.
	ImageRepositories []string
	// MaxReplicas bounds a gateway Deployment's replicas (0: DefaultGatewayMaxReplicas).
	MaxReplicas int32
	// PriorityClasses are the priority classes a gateway pod may ask for (besides none).
	PriorityClasses []string
	// Tolerations are the tolerations a gateway pod may carry, each exactly as listed.
	Tolerations []corev1.Toleration
	// MaxCPU and MaxMemory bound each CPU and memory request and limit of a gateway pod (zero:
	// DefaultGatewayMaxCPU, DefaultGatewayMaxMemory).
	MaxCPU, MaxMemory resource.Quantity
	// ServiceAnnotations are the annotation keys a server's Service may carry: a key, or a
	// prefix ending in "/" that allows every key under it (service.beta.kubernetes.io/).
	ServiceAnnotations []string
	// PodAnnotations are the annotation keys a gateway pod's template may carry, as
	// ServiceAnnotations (nil: DefaultGatewayPodAnnotations). Annotations steer what runs the
	// pod: a CNI's extra networks (k8s.v1.cni.cncf.io/networks), AppArmor's profile in its
	// annotation form, a service mesh's sidecar.
	PodAnnotations []string
	// PodLabels are the label keys a gateway pod's template may carry, as PodAnnotations (nil:
	// DefaultGatewayPodLabels). A pod label another Service of the namespace selects would make
	// the gateway's pods that Service's endpoints (taking a share of its traffic, unserved).
	PodLabels []string
}

// withDefaults fills what p leaves unset.
func (p GatewayPolicy) withDefaults() GatewayPolicy {
	if p.ImageRepositories == nil {
		p.ImageRepositories = []string{DefaultGatewayImageRepository}
	}
	if p.PodAnnotations == nil {
		p.PodAnnotations = []string{DefaultGatewayPodAnnotations}
	}
	if p.PodLabels == nil {
		p.PodLabels = commaList(DefaultGatewayPodLabels)
	}
	if p.MaxReplicas == 0 {
		p.MaxReplicas = DefaultGatewayMaxReplicas
	}
	if p.MaxCPU.IsZero() {
		p.MaxCPU = resource.MustParse(DefaultGatewayMaxCPU)
	}
	if p.MaxMemory.IsZero() {
		p.MaxMemory = resource.MustParse(DefaultGatewayMaxMemory)
	}
	return p
}

// ImageRepository is ref without its tag and digest.
func ImageRepository(ref string) string {
	if i := strings.IndexByte(ref, '@'); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndexByte(ref, ':'); i > strings.LastIndexByte(ref, '/') {
		ref = ref[:i]
	}
	return ref
}

// gatewayFlags are the skein-gateway flags a template may pass, by whether they are boolean
// (a boolean flag takes no separate value). Left out: --config, --check and
// --print-peer-config (standalone mode), --kubeconfig (its API server and credentials would be
// the template's, and the pod's token would go wherever it points), --version; --watch-pods is
// the controller's (podroutes.go), and --mode, --gateway-name and --gateway-namespace must be
// the gateway's own.
var gatewayFlags = map[string]bool{
	"mode": false, "gateway-name": false, "gateway-namespace": false,
	"log-level": false, "log-format": false,
	"pod-ip": false, "pod-name": false, "node-name": false,
	"overlay-kind": false, "overlay-port": false, "vni": false, "overlay-mtu": false, "complete-checksums": true,
	"listen-port": false, "http-listen": false,
	"probe-interval": false, "probe-fail-after": false, "endpoint-hold": false,
	"lease-duration": false, "lease-renew-deadline": false, "lease-retry-period": false,
	"gc-percent": false, "memory-limit-mib": false, "window": false,
	"watch-pods": true,
}

// gatewayEnv are the environment variables a gateway container may set: what the default
// templates pass from the downward API, and the Go runtime's memory and CPU knobs. Anything else
// may steer what the gateway's credentials reach (KUBECONFIG, KUBERNETES_SERVICE_HOST, proxies).
var gatewayEnv = []string{"POD_NAME", "POD_NAMESPACE", "POD_IP", "NODE_NAME", "GOMAXPROCS", "GOMEMLIMIT", "GOGC"}

// constrainGateway applies the policy to what a template rendered for gateway owner (gs is
// the GatewayServer when it is one): it fixes the Deployment's selector, the gateway
// container's image and arguments and, for a server, builds the Service from gs's spec. It
// returns what the template asked for that the policy refuses, as field paths within the
// template's spec.template (nil when nothing).
func (p GatewayPolicy) constrainGateway(rd *render.Rendered, name, namespace string, server bool, gs *netv1alpha1.GatewayServer) []string {
	p = p.withDefaults()
	var bad []string
	refuse := func(format string, a ...any) { bad = append(bad, fmt.Sprintf(format, a...)) }
	const dep = "spec.deployment"
	own := map[string]string{GatewayPodLabel: name}
	d := rd.Deployment
	if d.Selector == nil {
		d.Selector = &metav1.LabelSelector{MatchLabels: own}
	} else if len(d.Selector.MatchExpressions) > 0 || d.Selector.MatchLabels[GatewayPodLabel] != name {
		// Labels beside the gateway's own only narrow what it selects.
		refuse("%s.selector (must select the gateway's own pods by matchLabels %s: %s)", dep, GatewayPodLabel, name)
	}
	if d.Replicas != nil && *d.Replicas > p.MaxReplicas {
		refuse("%s.replicas %d (at most %d: --gateway-max-replicas)", dep, *d.Replicas, p.MaxReplicas)
	}
	for k := range d.Template.Annotations {
		if !annotationAllowed(p.PodAnnotations, k) {
			refuse("%s.template.metadata.annotations %s (allowed: %s; --gateway-pod-annotations)", dep, k, listOrNone(p.PodAnnotations))
		}
	}
	for k := range d.Template.Labels {
		if !annotationAllowed(p.PodLabels, k) {
			refuse("%s.template.metadata.labels %s (a Service of the namespace selecting it would send its traffic to the gateway; allowed: %s; --gateway-pod-labels)", dep, k, listOrNone(p.PodLabels))
		}
	}
	pod := &d.Template.Spec
	const at = dep + ".template.spec"
	if len(pod.InitContainers) > 0 {
		refuse("%s.initContainers (the gateway pod runs the gateway container alone)", at)
	}
	if len(pod.EphemeralContainers) > 0 {
		refuse("%s.ephemeralContainers", at)
	}
	if pod.PriorityClassName != "" && !slices.Contains(p.PriorityClasses, pod.PriorityClassName) {
		refuse("%s.priorityClassName %s (allowed: %s; --gateway-priority-classes)", at, pod.PriorityClassName, listOrNone(p.PriorityClasses))
	}
	if pod.Priority != nil {
		refuse("%s.priority (comes from the priority class)", at)
	}
	if pod.RuntimeClassName != nil {
		refuse("%s.runtimeClassName", at)
	}
	if len(pod.ResourceClaims) > 0 {
		refuse("%s.resourceClaims", at)
	}
	if len(pod.Overhead) > 0 {
		refuse("%s.overhead", at)
	}
	for _, f := range unlisted(pod, gatewayPodFields) {
		refuse("%s.%s (not a field a gateway template may set)", at, f)
	}
	switch pod.DNSPolicy {
	case "", corev1.DNSClusterFirst, corev1.DNSClusterFirstWithHostNet, corev1.DNSDefault:
	default:
		refuse("%s.dnsPolicy %s (the cluster's or the node's resolver only)", at, pod.DNSPolicy)
	}
	if pod.RestartPolicy != "" && pod.RestartPolicy != corev1.RestartPolicyAlways {
		refuse("%s.restartPolicy %s", at, pod.RestartPolicy)
	}
	// A pod being deleted keeps running (and holding its requests) through its preStop hook
	// and grace period, and the ReplicaSet does not count it: unbounded, each rollout or
	// scale-down would add pods beyond --gateway-max-replicas for as long as the template says.
	if g := pod.TerminationGracePeriodSeconds; g != nil && *g > MaxGatewayGracePeriodSeconds {
		refuse("%s.terminationGracePeriodSeconds %d (at most %d)", at, *g, MaxGatewayGracePeriodSeconds)
	}
	for i, t := range pod.Tolerations {
		if !slices.ContainsFunc(p.Tolerations, func(a corev1.Toleration) bool { return equality.Semantic.DeepEqual(a, t) }) {
			refuse("%s.tolerations[%d] (not one of --gateway-tolerations)", at, i)
		}
	}
	if pod.Resources != nil {
		bad = append(bad, p.resources(at+".resources", *pod.Resources)...)
	}
	gateways := 0
	for i := range pod.Containers {
		c := &pod.Containers[i]
		cat := fmt.Sprintf("%s.containers[%d]", at, i)
		if c.Name != "gateway" {
			refuse("%s (a container other than gateway)", cat)
			continue
		}
		gateways++
		bad = append(bad, p.gatewayContainer(c, cat, name, namespace, server)...)
	}
	if gateways != 1 {
		refuse("%s.containers (want one container named gateway)", at)
	}
	if !server && rd.Service != nil {
		refuse("spec.service (a GatewayClient has no Service)")
	}
	if server {
		svc, why := p.service(rd.Service, rd.Annotations, name, gs)
		rd.Service = svc
		bad = append(bad, why...)
	}
	slices.Sort(bad)
	return slices.Compact(bad)
}

// gatewayContainer checks the gateway container (at cat) and rebuilds its arguments.
func (p GatewayPolicy) gatewayContainer(c *corev1.Container, cat, name, namespace string, server bool) []string {
	var bad []string
	refuse := func(format string, a ...any) { bad = append(bad, fmt.Sprintf(format, a...)) }
	switch repo := ImageRepository(c.Image); {
	case c.Image == "" && p.Image != "":
		c.Image = p.Image
	case c.Image == "":
		refuse("%s.image (none given, and skein-controller has no --gateway-image)", cat)
	case repo != ImageRepository(p.Image) && !slices.Contains(p.ImageRepositories, repo):
		refuse("%s.image %s (allowed repositories: %s; --gateway-image, --gateway-image-repositories)", cat, c.Image, strings.Join(p.allowedRepositories(), ", "))
	}
	if len(c.Command) > 0 {
		refuse("%s.command (the gateway runs the image's own entrypoint)", cat)
	}
	mode := "client"
	if server {
		mode = "server"
	}
	args, why := gatewayArgs(c.Args, cat+".args", map[string]string{"mode": mode, "gateway-name": name, "gateway-namespace": namespace})
	c.Args = args
	bad = append(bad, why...)
	for j, e := range c.Env {
		if !slices.Contains(gatewayEnv, e.Name) {
			refuse("%s.env[%d] %s (allowed: %s)", cat, j, e.Name, strings.Join(gatewayEnv, ", "))
		}
	}
	if len(c.EnvFrom) > 0 {
		refuse("%s.envFrom", cat)
	}
	bad = append(bad, p.resources(cat+".resources", c.Resources)...)
	for _, f := range unlisted(c, gatewayContainerFields) {
		refuse("%s.%s (not a field a gateway container may set)", cat, f)
	}
	for j, m := range c.VolumeMounts {
		if !mountAllowed(m.MountPath) {
			refuse("%s.volumeMounts[%d].mountPath %s (only under %s: a mount elsewhere could replace the gateway's program or what it trusts)", cat, j, m.MountPath, strings.Join(gatewayMountDirs, ", "))
		}
	}
	for what, pr := range map[string]*corev1.Probe{"livenessProbe": c.LivenessProbe, "readinessProbe": c.ReadinessProbe, "startupProbe": c.StartupProbe} {
		if pr != nil {
			bad = append(bad, handlerRefusals(cat+"."+what, pr.Exec != nil, pr.HTTPGet, pr.TCPSocket)...)
		}
	}
	if l := c.Lifecycle; l != nil {
		for what, h := range map[string]*corev1.LifecycleHandler{"postStart": l.PostStart, "preStop": l.PreStop} {
			if h != nil {
				bad = append(bad, handlerRefusals(cat+".lifecycle."+what, h.Exec != nil, h.HTTPGet, h.TCPSocket)...)
				if h.Sleep != nil && h.Sleep.Seconds > MaxGatewayGracePeriodSeconds {
					refuse("%s.lifecycle.%s.sleep.seconds %d (at most %d)", cat, what, h.Sleep.Seconds, MaxGatewayGracePeriodSeconds)
				}
			}
		}
	}
	return bad
}

// MaxGatewayGracePeriodSeconds bounds a gateway pod's termination grace period and its
// hooks' sleeps: a gateway hands over to a standby in seconds.
const MaxGatewayGracePeriodSeconds = 300

// gatewayPodFields are the pod fields (by their JSON names) a gateway template may set; the
// fields other checks bound are listed too (they are refused there with their reason: the
// node-escape fields by podpolicy.go, priority, tolerations, resources and runtime class
// above). Left out, and so refused: what a gateway never needs and what decides what it runs,
// resolves or reaches: dnsConfig and hostAliases (every name the gateway resolves, a
// GatewayClient's endpoint among them), schedulerName, shareProcessNamespace, hostname and
// subdomain, activeDeadlineSeconds, readiness and scheduling gates, and fields newer than
// this list (an allow-list: a field the API gains is refused until it is judged).
var gatewayPodFields = []string{
	"containers", "initContainers", "ephemeralContainers", "volumes",
	"serviceAccountName", "serviceAccount", "automountServiceAccountToken",
	"securityContext", "hostNetwork", "hostPID", "hostIPC", "hostUsers", "nodeName",
	"restartPolicy", "terminationGracePeriodSeconds", "dnsPolicy", "enableServiceLinks",
	"nodeSelector", "affinity", "tolerations", "topologySpreadConstraints", "os",
	"priorityClassName", "priority", "preemptionPolicy", "runtimeClassName", "overhead",
	"resources", "resourceClaims", "imagePullSecrets",
}

// gatewayContainerFields are the gateway container's fields a template may set, as
// gatewayPodFields. Left out: workingDir, volumeDevices, terminationMessagePath (a file the
// kubelet reads), stdin and tty, a container restart policy (init containers' only).
var gatewayContainerFields = []string{
	"name", "image", "imagePullPolicy", "command", "args", "env", "envFrom", "ports",
	"resources", "resizePolicy", "volumeMounts", "livenessProbe", "readinessProbe", "startupProbe",
	"lifecycle", "securityContext", "terminationMessagePolicy",
}

// gatewayMountDirs are where a gateway container may mount volumes: scratch space for a
// read-only root filesystem and skein's own directories. Anywhere else a ConfigMap the
// template's author wrote could take the place of the image's entrypoint (a subPath mount
// over /usr/local/bin/skein-gateway) or of what the gateway trusts (the ServiceAccount's CA
// and token, /etc/hosts, CA bundles).
var gatewayMountDirs = []string{"/tmp", "/var/tmp", "/run/skein", "/var/run/skein", "/etc/skein"}

// mountAllowed reports whether a volume may be mounted at mountPath: a clean absolute path
// within one of gatewayMountDirs.
func mountAllowed(mountPath string) bool {
	if mountPath != path.Clean(mountPath) || !path.IsAbs(mountPath) {
		return false
	}
	return slices.ContainsFunc(gatewayMountDirs, func(d string) bool {
		return mountPath == d || strings.HasPrefix(mountPath, d+"/")
	})
}

// handlerRefusals judges a probe's or lifecycle hook's action (at at): the kubelet runs it
// with its own reach, so no command (exec runs anything in the gateway's container, with its
// token) and no host (the kubelet would call any address from the node's network: a cloud
// metadata server, a node-local service; Pod Security's baseline forbids it too). HTTP, TCP
// and gRPC checks of the pod's own address, and sleep, remain.
func handlerRefusals(at string, exec bool, get *corev1.HTTPGetAction, tcp *corev1.TCPSocketAction) []string {
	var bad []string
	if exec {
		bad = append(bad, at+".exec (the kubelet would run a command of the template's in the gateway's container)")
	}
	if get != nil && get.Host != "" {
		bad = append(bad, fmt.Sprintf("%s.httpGet.host %s (the kubelet would call it from the node: the pod's own address only)", at, get.Host))
	}
	if tcp != nil && tcp.Host != "" {
		bad = append(bad, fmt.Sprintf("%s.tcpSocket.host %s (the kubelet would connect from the node: the pod's own address only)", at, tcp.Host))
	}
	return bad
}

// unlisted returns the fields v (a struct of the Kubernetes API) sets, by their JSON names,
// that allowed does not list, sorted. Empty fields are omitted from the API's JSON, so what
// remains is what the template set.
func unlisted(v any, allowed []string) []string {
	b, err := json.Marshal(v)
	if err != nil {
		return []string{fmt.Sprintf("(cannot encode: %v)", err)}
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return []string{fmt.Sprintf("(cannot decode: %v)", err)}
	}
	var out []string
	for k := range m {
		if !slices.Contains(allowed, k) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// allowedRepositories lists the repositories a gateway image may come from.
func (p GatewayPolicy) allowedRepositories() []string {
	repos := slices.Clone(p.ImageRepositories)
	if p.Image != "" {
		repos = append(repos, ImageRepository(p.Image))
	}
	slices.Sort(repos)
	return slices.Compact(repos)
}

// resources checks requests and limits against the maxima: CPU and memory only.
func (p GatewayPolicy) resources(at string, r corev1.ResourceRequirements) []string {
	var bad []string
	for what, list := range map[string]corev1.ResourceList{"requests": r.Requests, "limits": r.Limits} {
		for n, q := range list {
			switch n {
			case corev1.ResourceCPU:
				if q.Cmp(p.MaxCPU) > 0 {
					bad = append(bad, fmt.Sprintf("%s.%s.cpu %s (at most %s: --gateway-max-cpu)", at, what, q.String(), p.MaxCPU.String()))
				}
			case corev1.ResourceMemory:
				if q.Cmp(p.MaxMemory) > 0 {
					bad = append(bad, fmt.Sprintf("%s.%s.memory %s (at most %s: --gateway-max-memory)", at, what, q.String(), p.MaxMemory.String()))
				}
			default:
				bad = append(bad, fmt.Sprintf("%s.%s.%s (cpu and memory only)", at, what, n))
			}
		}
	}
	if len(r.Claims) > 0 {
		bad = append(bad, at+".claims")
	}
	return bad
}

// gatewayArgs checks a gateway's arguments (at at) against gatewayFlags and returns them
// rebuilt as --flag=value, without --watch-pods (the controller's: PodRoutes.Apply) and with
// each of own's flags set to its value (a template that gives one another value is refused).
func gatewayArgs(args []string, at string, own map[string]string) ([]string, []string) {
	var out, bad []string
	seen := map[string]bool{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		flagName, value, hasValue := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		isBool, known := gatewayFlags[flagName]
		switch {
		case !strings.HasPrefix(a, "-") || flagName == "" || strings.HasPrefix(flagName, "-"):
			bad = append(bad, fmt.Sprintf("%s[%d] %q (not a flag)", at, i, a))
			continue
		case !known:
			bad = append(bad, fmt.Sprintf("%s[%d] %q (not a gateway flag a template may pass)", at, i, a))
			continue
		}
		if !hasValue && !isBool {
			if i+1 == len(args) {
				bad = append(bad, fmt.Sprintf("%s[%d] %q (no value)", at, i, a))
				continue
			}
			i++
			value, hasValue = args[i], true
		}
		if flagName == "watch-pods" {
			continue
		}
		if want, ok := own[flagName]; ok {
			if value != want {
				bad = append(bad, fmt.Sprintf("%s[%d] %q (must be --%s=%s, the gateway's own)", at, i, a, flagName, want))
			}
			seen[flagName] = true
		}
		if hasValue {
			out = append(out, "--"+flagName+"="+value)
		} else {
			out = append(out, "--"+flagName)
		}
	}
	for _, f := range []string{"mode", "gateway-name", "gateway-namespace"} {
		if !seen[f] {
			out = append(out, "--"+f+"="+own[f])
		}
	}
	return out, bad
}

// service builds a GatewayServer's Service from its spec, taking from the template's Service
// (tmpl, at spec.service) only what changes nothing beyond the gateway, and the annotations the
// policy allows. It returns what the template asked for that the policy refuses.
func (p GatewayPolicy) service(tmpl *corev1.ServiceSpec, annotations map[string]string, name string, gs *netv1alpha1.GatewayServer) (*corev1.ServiceSpec, []string) {
	var bad []string
	refuse := func(format string, a ...any) { bad = append(bad, fmt.Sprintf(format, a...)) }
	const at = "spec.service"
	if tmpl == nil {
		tmpl = &corev1.ServiceSpec{}
	}
	ep := gs.Spec.Endpoint
	typ := corev1.ServiceType(ep.ServiceType)
	if typ == "" {
		typ = corev1.ServiceTypeLoadBalancer
	}
	port := ep.Port
	if port == 0 {
		port = netv1alpha1.DefaultPort
	}
	svc := &corev1.ServiceSpec{
		Type:     typ,
		Selector: map[string]string{GatewayPodLabel: name, activePodLabel: "true"},
		// The active label alone decides which replica gets the traffic. Readiness would only
		// add an outage: after an API server outage longer than the nodes' grace period
		// kube-controller-manager marks every pod of the cluster NotReady until its kubelet
		// reports again, and the Service would then send the peer nowhere.
		PublishNotReadyAddresses: true,
		// What only shapes the traffic to the gateway's own pods.
		ExternalTrafficPolicy: tmpl.ExternalTrafficPolicy, InternalTrafficPolicy: tmpl.InternalTrafficPolicy,
		IPFamilies: tmpl.IPFamilies, IPFamilyPolicy: tmpl.IPFamilyPolicy, LoadBalancerSourceRanges: tmpl.LoadBalancerSourceRanges,
		SessionAffinity: tmpl.SessionAffinity, SessionAffinityConfig: tmpl.SessionAffinityConfig,
		AllocateLoadBalancerNodePorts: tmpl.AllocateLoadBalancerNodePorts, TrafficDistribution: tmpl.TrafficDistribution,
	}
	if tmpl.Type != "" && tmpl.Type != typ {
		refuse("%s.type %s (the GatewayServer's spec.endpoint.serviceType is %s)", at, tmpl.Type, typ)
	}
	if tmpl.Selector != nil && !maps.Equal(tmpl.Selector, map[string]string{GatewayPodLabel: name}) && !maps.Equal(tmpl.Selector, svc.Selector) {
		refuse("%s.selector (must select the gateway's own pods, %s: %s)", at, GatewayPodLabel, name)
	} else if tmpl.Selector != nil {
		svc.Selector = tmpl.Selector
		svc.PublishNotReadyAddresses = tmpl.Selector[activePodLabel] == "true"
	}
	sp := corev1.ServicePort{Name: "wireguard", Protocol: corev1.ProtocolUDP, Port: port, TargetPort: intstr.FromInt32(port)}
	if len(tmpl.Ports) > 1 {
		refuse("%s.ports[1:] (the Service has the GatewayServer's port alone)", at)
	}
	if len(tmpl.Ports) > 0 {
		tp := tmpl.Ports[0]
		if tp.Name != "" {
			sp.Name = tp.Name
		}
		if tp.TargetPort != (intstr.IntOrString{}) {
			sp.TargetPort = tp.TargetPort
		}
		if tp.Port != 0 && tp.Port != port {
			refuse("%s.ports[0].port %d (the GatewayServer's spec.endpoint.port is %d)", at, tp.Port, port)
		}
		if tp.Protocol != "" && tp.Protocol != corev1.ProtocolUDP {
			refuse("%s.ports[0].protocol %s (UDP)", at, tp.Protocol)
		}
		if tp.NodePort != 0 && (ep.NodePort == nil || *ep.NodePort != tp.NodePort) {
			refuse("%s.ports[0].nodePort %d (from the GatewayServer's spec.endpoint.nodePort)", at, tp.NodePort)
		}
		if tp.AppProtocol != nil {
			sp.AppProtocol = tp.AppProtocol
		}
	}
	if np := ep.NodePort; np != nil && *np != 0 && typ != corev1.ServiceTypeClusterIP {
		sp.NodePort = *np
	}
	svc.Ports = []corev1.ServicePort{sp}
	if lb := ep.LoadBalancerIP; lb != nil && *lb != "" && typ == corev1.ServiceTypeLoadBalancer {
		svc.LoadBalancerIP = *lb
	}
	for field, set := range map[string]bool{
		"externalIPs": len(tmpl.ExternalIPs) > 0, "clusterIP": tmpl.ClusterIP != "", "clusterIPs": len(tmpl.ClusterIPs) > 0,
		"externalName": tmpl.ExternalName != "", "healthCheckNodePort": tmpl.HealthCheckNodePort != 0,
		"loadBalancerClass": tmpl.LoadBalancerClass != nil, "loadBalancerIP": tmpl.LoadBalancerIP != "",
	} {
		if set {
			refuse("%s.%s", at, field)
		}
	}
	for k := range annotations {
		if !annotationAllowed(p.ServiceAnnotations, k) {
			refuse("metadata.annotations %s (on the Service; allowed: %s; --gateway-service-annotations)", k, listOrNone(p.ServiceAnnotations))
		}
	}
	return svc, bad
}

// annotationAllowed reports whether allowed (keys, and prefixes ending in "/") allows key.
func annotationAllowed(allowed []string, key string) bool {
	return slices.ContainsFunc(allowed, func(a string) bool {
		return a == key || (strings.HasSuffix(a, "/") && strings.HasPrefix(key, a))
	})
}

// gatewaySelector is the selector of a gateway's pods (its Deployment's, its
// PodDisruptionBudget's).
func gatewaySelector(name string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{GatewayPodLabel: name}}
}

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}

// GatewayPolicyFlags registers the policy's flags (skein-controller's --gateway-image,
// --gateway-image-repositories, --gateway-max-replicas, --gateway-priority-classes,
// --gateway-tolerations, --gateway-max-cpu, --gateway-max-memory, --gateway-pod-annotations,
// --gateway-pod-labels, --gateway-service-annotations) on fs. The function it returns checks them once fs is parsed.
func GatewayPolicyFlags(fs *flag.FlagSet) func() (GatewayPolicy, error) {
	image := fs.String("gateway-image", "", "the gateway image (the chart's gateway.image): what a template whose gateway container names no image gets; its repository is allowed")
	repositories := fs.String("gateway-image-repositories", DefaultGatewayImageRepository, "more repositories a gateway template may take the gateway image from, comma-separated (a registry host and path, no tag: compared as written); empty: "+DefaultGatewayImageRepository)
	maxReplicas := fs.Int("gateway-max-replicas", DefaultGatewayMaxReplicas, "most replicas a gateway template may ask for (one active, the rest standby)")
	priorityClasses := fs.String("gateway-priority-classes", "", "priority classes a gateway template may give its pods, comma-separated (none by default)")
	tolerations := fs.String("gateway-tolerations", "", "tolerations a gateway template may give its pods, a JSON list of core/v1 tolerations; each toleration of a template must equal one of them (none by default)")
	maxCPU := fs.String("gateway-max-cpu", DefaultGatewayMaxCPU, "largest CPU request or limit of a gateway pod's template")
	maxMemory := fs.String("gateway-max-memory", DefaultGatewayMaxMemory, "largest memory request or limit of a gateway pod's template")
	podAnnotations := fs.String("gateway-pod-annotations", DefaultGatewayPodAnnotations, "annotations a gateway template may give its pods, comma-separated: a key, or a prefix ending in / for every key under it; empty: "+DefaultGatewayPodAnnotations)
	podLabels := fs.String("gateway-pod-labels", DefaultGatewayPodLabels, "label keys a gateway template may give its pods, comma-separated: a key, or a prefix ending in / for every key under it; empty: "+DefaultGatewayPodLabels)
	serviceAnnotations := fs.String("gateway-service-annotations", "", "annotations a gateway server's Service may carry (from its template's metadata), comma-separated: a key, or a prefix ending in / for every key under it (service.beta.kubernetes.io/); none by default")
	return func() (GatewayPolicy, error) {
		p := GatewayPolicy{Image: strings.TrimSpace(*image), ImageRepositories: commaList(*repositories),
			PriorityClasses: commaList(*priorityClasses), ServiceAnnotations: commaList(*serviceAnnotations), PodAnnotations: commaList(*podAnnotations), PodLabels: commaList(*podLabels)}
		if p.Image != "" && (strings.ContainsAny(p.Image, " \t") || ImageRepository(p.Image) == "") {
			return p, fmt.Errorf("--gateway-image %q: want an image reference such as ghcr.io/skein-net/skein-gateway:v1.2.3", *image)
		}
		if *maxReplicas < 1 || *maxReplicas > 100 {
			return p, fmt.Errorf("--gateway-max-replicas %d: want 1-100", *maxReplicas)
		}
		p.MaxReplicas = int32(*maxReplicas)
		if t := strings.TrimSpace(*tolerations); t != "" {
			dec := json.NewDecoder(strings.NewReader(t))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&p.Tolerations); err != nil {
				return p, fmt.Errorf(`--gateway-tolerations: want a JSON list of tolerations ([{"key":"edge","operator":"Exists","effect":"NoSchedule"}]): %w`, err)
			}
		}
		for _, q := range []struct {
			flag, value string
			to          *resource.Quantity
		}{{"gateway-max-cpu", *maxCPU, &p.MaxCPU}, {"gateway-max-memory", *maxMemory, &p.MaxMemory}} {
			v, err := resource.ParseQuantity(q.value)
			if err != nil || v.Sign() <= 0 {
				return p, fmt.Errorf("--%s %q: want a positive quantity such as 2 or 1Gi", q.flag, q.value)
			}
			*q.to = v
		}
		return p, nil
	}
}

// Constrain applies the policy to what a template rendered for gateway namespace/name (gs is
// the GatewayServer when it is one, nil for a GatewayClient), as the gateway reconciler does
// before applying it, and returns what the policy refuses (nil when nothing).
func (p GatewayPolicy) Constrain(rd *render.Rendered, name, namespace string, gs *netv1alpha1.GatewayServer) []string {
	return p.constrainGateway(rd, name, namespace, gs != nil, gs)
}

// commaList splits a comma-separated flag, dropping empty entries (nil when none).
func commaList(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}
