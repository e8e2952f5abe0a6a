package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/controller"
	"github.com/skein-net/skein/control/controller/render"
	"github.com/skein-net/skein/control/identity"
	"github.com/skein-net/skein/internal/apitest"
)

// imageValues are a component's image values.
type imageValues struct{ Registry, Repository, Tag, Digest, PullPolicy string }

// imageRef is the reference the chart renders for i: registry (or imageRegistry) / repository,
// then @digest, else :tag (or the appVersion).
func (v chartValues) imageRef(i imageValues) string {
	ref := i.Repository
	reg := i.Registry
	if reg == "" {
		reg = v.ImageRegistry
	}
	if reg = strings.TrimSuffix(reg, "/"); reg != "" {
		ref = reg + "/" + ref
	}
	if i.Digest != "" {
		return ref + "@" + i.Digest
	}
	tag := i.Tag
	if tag == "" {
		tag = chartAppVersion()
	}
	return ref + ":" + tag
}

// chartAppVersion is Chart.yaml's appVersion, the images' default tag.
func chartAppVersion() string {
	b, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		return ""
	}
	var c struct{ AppVersion string }
	if yaml.Unmarshal(b, &c) != nil {
		return ""
	}
	return c.AppVersion
}

// cidrList is a values field that takes one CIDR or a list of them.
type cidrList []string

func (c *cidrList) UnmarshalJSON(b []byte) error {
	var one string
	if json.Unmarshal(b, &one) == nil {
		*c = cidrList{one}
		return nil
	}
	return json.Unmarshal(b, (*[]string)(c))
}

func (c cidrList) String() string { return strings.Join(c, ",") }

// chartValues is what the checks read of the merged values (field names match the values'
// keys case-insensitively).
type chartValues struct {
	ClusterID        string
	ImageRegistry    string
	LogFormat        string
	ImagePullSecrets []corev1.LocalObjectReference
	IPAM             struct {
		PodCIDR, ServiceCIDR                      cidrList
		ExternalCIDR, ExternalCIDR6, InternalCIDR string
		Reserved, Pools                           []string
	}
	Overlay struct {
		Kind           string
		Port, VNI, MTU int
		Device         string
	}
	Peering struct {
		Networking struct {
			Gateway struct {
				MTU    int32
				Server struct {
					Service struct {
						Port int32
						Type string
					}
				}
			}
		}
	}
	Controller struct {
		Replicas       int32
		Image          imageValues
		LeaderElection bool
		MetricsPort    int32
		HealthPort     int32
		LogLevel       string
		KubeAPI        struct {
			QPS   float64
			Burst int
		}
	}
	Agent struct {
		PriorityClassName string
		Image             imageValues
		MetricsPort       int32
		RulePriority      int
		MasqueradeBypass  bool
		OverlayGuard      bool
		Resync            string
		LogLevel          string
	}
	Gateway struct {
		Replicas          int64
		Image             imageValues
		Resources         corev1.ResourceRequirements
		NodeSelector      map[string]string
		Tolerations       []corev1.Toleration
		PriorityClassName string
		Annotations       map[string]string
		ImagePullSecrets  []corev1.LocalObjectReference
		WatchPods         any // "auto", true or false
	}
}

func decodeValues(m map[string]any) (chartValues, error) {
	var v chartValues
	b, err := json.Marshal(m)
	if err != nil {
		return v, err
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return v, fmt.Errorf("decode the chart values: %w", err)
	}
	return v, nil
}

// overlayArgs are the overlay flags the chart passes to the agent and to the gateways, in the
// chart's order: the two must agree or the nodes and the gateways cannot talk.
func overlayArgs(v chartValues, mtuFlag string) []string {
	a := []string{"--overlay-kind=" + v.Overlay.Kind, fmt.Sprintf("--vni=%d", v.Overlay.VNI)}
	if v.Overlay.Port != 0 {
		a = append(a, fmt.Sprintf("--overlay-port=%d", v.Overlay.Port))
	}
	if v.Overlay.MTU != 0 {
		a = append(a, fmt.Sprintf("--%s=%d", mtuFlag, v.Overlay.MTU))
	}
	return a
}

func as[T any](u *unstructured.Unstructured) (*T, error) {
	var t T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &t); err != nil {
		return nil, fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
	}
	return &t, nil
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

var clusterScoped = map[string]bool{"CustomResourceDefinition": true, "Namespace": true, "ClusterRole": true, "ClusterRoleBinding": true,
	"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true}

// checkRender checks a rendering of the chart against the values it was rendered with and
// against the chart's invariants, returning one line per problem.
func checkRender(v chartValues, ns string, objs []*unstructured.Unstructured) []string {
	var problems []string
	bad := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }

	seen := map[string]bool{}
	crds := 0
	for _, o := range objs {
		key := o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
		if seen[key] {
			bad("%s rendered twice", key)
		}
		seen[key] = true
		switch {
		case clusterScoped[o.GetKind()] && o.GetNamespace() != "":
			bad("%s %s is cluster-scoped but has namespace %q", o.GetKind(), o.GetName(), o.GetNamespace())
		case strings.HasSuffix(o.GetName(), "-apiserver-endpoints") && (o.GetKind() == "Role" || o.GetKind() == "RoleBinding"):
			// The one exception: get of the API server's EndpointSlice, which lives in default.
			if o.GetNamespace() != "default" {
				bad("%s %s is in namespace %q, want default (where the kubernetes EndpointSlice is)", o.GetKind(), o.GetName(), o.GetNamespace())
			}
		case !clusterScoped[o.GetKind()] && o.GetNamespace() != ns:
			bad("%s %s is in namespace %q, want the release namespace %q", o.GetKind(), o.GetName(), o.GetNamespace(), ns)
		}
		if o.GetKind() == "CustomResourceDefinition" {
			crds++
		}
	}
	if srcCRDs, _ := filepath.Glob("crds/*.yaml"); crds != len(srcCRDs) {
		bad("%d CRDs rendered, deploy/crds has %d", crds, len(srcCRDs))
	}

	problems = append(problems, checkController(v, objs)...)
	problems = append(problems, checkAgent(v, objs)...)
	problems = append(problems, checkGatewayTemplates(v, ns, objs)...)
	problems = append(problems, checkRBAC(objs)...)

	cm := find(objs, "ConfigMap", identity.ClusterIDConfigMap)
	switch {
	case v.ClusterID == "" && cm != nil:
		bad("ConfigMap %s rendered without a clusterID value: skein-controller generates the id", identity.ClusterIDConfigMap)
	case v.ClusterID != "" && cm == nil:
		bad("ConfigMap %s not rendered with clusterID %q", identity.ClusterIDConfigMap, v.ClusterID)
	case cm != nil:
		if got, _, _ := unstructured.NestedString(cm.Object, "data", identity.ClusterIDKey); got != v.ClusterID {
			bad("ConfigMap %s has %s %q, want %q", identity.ClusterIDConfigMap, identity.ClusterIDKey, got, v.ClusterID)
		}
		if cm.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
			bad("ConfigMap %s is not kept on uninstall (helm.sh/resource-policy: keep)", identity.ClusterIDConfigMap)
		}
	}

	// Only the agent may touch the host: no other pod on the host network, no privileged
	// container anywhere, no added capability but the agent's.
	for _, o := range objs {
		var spec *corev1.PodSpec
		switch o.GetKind() {
		case "Deployment":
			if d, err := as[appsv1.Deployment](o); err == nil {
				spec = &d.Spec.Template.Spec
			}
		case "DaemonSet":
			if d, err := as[appsv1.DaemonSet](o); err == nil {
				spec = &d.Spec.Template.Spec
			}
		}
		if spec == nil {
			continue
		}
		agent := o.GetKind() == "DaemonSet" && o.GetName() == fullname+"-agent"
		if spec.HostNetwork && !agent {
			bad("%s %s runs on the host network", o.GetKind(), o.GetName())
		}
		for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
			if sc := c.SecurityContext; sc != nil && !agent && sc.Capabilities != nil && len(sc.Capabilities.Add) > 0 {
				bad("%s %s container %s adds capabilities %v", o.GetKind(), o.GetName(), c.Name, sc.Capabilities.Add)
			}
			if sc := c.SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged {
				bad("%s %s container %s is privileged", o.GetKind(), o.GetName(), c.Name)
			}
			if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() || c.Resources.Requests.Cpu().IsZero() {
				bad("%s %s container %s lacks a cpu/memory request or a memory limit: %+v", o.GetKind(), o.GetName(), c.Name, c.Resources)
			}
		}
	}
	return problems
}

func envFrom(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			return e.ValueFrom.FieldRef.FieldPath
		}
	}
	return ""
}

func hasPort(c corev1.Container, port int32) bool {
	for _, p := range c.Ports {
		if p.ContainerPort == port && p.Protocol == corev1.ProtocolTCP {
			return true
		}
	}
	return false
}

func missingArgs(have, want []string) []string {
	var missing []string
	for _, w := range want {
		if !slices.Contains(have, w) {
			missing = append(missing, w)
		}
	}
	return missing
}

func checkController(v chartValues, objs []*unstructured.Unstructured) []string {
	name := fullname + "-controller"
	u := find(objs, "Deployment", name)
	if u == nil {
		return []string{"no Deployment " + name}
	}
	d, err := as[appsv1.Deployment](u)
	if err != nil {
		return []string{err.Error()}
	}
	var problems []string
	bad := func(format string, a ...any) { problems = append(problems, "controller: "+fmt.Sprintf(format, a...)) }
	pod := d.Spec.Template.Spec
	if d.Spec.Replicas == nil || *d.Spec.Replicas != v.Controller.Replicas {
		bad("replicas %v, want %d", d.Spec.Replicas, v.Controller.Replicas)
	}
	if len(pod.Containers) != 1 {
		return append(problems, fmt.Sprintf("controller: %d containers, want 1", len(pod.Containers)))
	}
	c := pod.Containers[0]
	if c.Image != v.imageRef(v.Controller.Image) || string(c.ImagePullPolicy) != v.Controller.Image.PullPolicy {
		bad("image %s (%s), want %s (%s)", c.Image, c.ImagePullPolicy, v.imageRef(v.Controller.Image), v.Controller.Image.PullPolicy)
	}
	want := []string{
		"--pod-cidrs=" + v.IPAM.PodCIDR.String(), "--service-cidr=" + v.IPAM.ServiceCIDR.String(),
		"--external-cidr=" + v.IPAM.ExternalCIDR, "--external-cidr6=" + v.IPAM.ExternalCIDR6, "--internal-cidr=" + v.IPAM.InternalCIDR,
		"--reserved=" + strings.Join(v.IPAM.Reserved, ","), "--pools=" + strings.Join(v.IPAM.Pools, ","),
		fmt.Sprintf("--metrics-listen=:%d", v.Controller.MetricsPort), fmt.Sprintf("--health-listen=:%d", v.Controller.HealthPort),
		fmt.Sprintf("--leader-elect=%t", v.Controller.LeaderElection), "--log-level=" + v.Controller.LogLevel, "--log-format=" + v.LogFormat,
		fmt.Sprintf("--kube-api-qps=%g", v.Controller.KubeAPI.QPS), fmt.Sprintf("--kube-api-burst=%d", v.Controller.KubeAPI.Burst),
		fmt.Sprintf("--gateway-watch-pods=%v", v.Gateway.WatchPods),
	}
	if m := missingArgs(c.Args, want); len(m) > 0 {
		bad("args %q lack %q", c.Args, m)
	}
	if got := envFrom(c, "POD_NAMESPACE"); got != "metadata.namespace" {
		bad("env POD_NAMESPACE from %q, want the pod's metadata.namespace", got)
	}
	if !hasPort(c, v.Controller.MetricsPort) {
		bad("no metrics port %d", v.Controller.MetricsPort)
	}
	if !hasPort(c, v.Controller.HealthPort) {
		bad("no health port %d", v.Controller.HealthPort)
	}
	for _, p := range []struct {
		probe *corev1.Probe
		path  string
	}{{c.ReadinessProbe, "/readyz"}, {c.LivenessProbe, "/healthz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != "health" {
			bad("probe %+v, want GET %s on port health", p.probe, p.path)
		}
	}
	if psc := pod.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		bad("does not run as non-root")
	}
	problems = append(problems, checkLockedDown("controller", c)...)
	if pod.ServiceAccountName != name {
		bad("service account %q, want %q", pod.ServiceAccountName, name)
	}
	return problems
}

// checkLockedDown: no capabilities, no privilege escalation, a read-only root filesystem.
func checkLockedDown(what string, c corev1.Container) []string {
	sc := c.SecurityContext
	switch {
	case sc == nil:
		return []string{what + ": container " + c.Name + " has no securityContext"}
	case sc.Capabilities == nil || len(sc.Capabilities.Add) > 0 || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}):
		return []string{fmt.Sprintf("%s: container %s capabilities %+v, want none added and ALL dropped", what, c.Name, sc.Capabilities)}
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		return []string{what + ": container " + c.Name + " root filesystem is writable"}
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		return []string{what + ": container " + c.Name + " allows privilege escalation"}
	}
	return nil
}

func checkAgent(v chartValues, objs []*unstructured.Unstructured) []string {
	name := fullname + "-agent"
	u := find(objs, "DaemonSet", name)
	if u == nil {
		return []string{"no DaemonSet " + name}
	}
	d, err := as[appsv1.DaemonSet](u)
	if err != nil {
		return []string{err.Error()}
	}
	var problems []string
	bad := func(format string, a ...any) { problems = append(problems, "agent: "+fmt.Sprintf(format, a...)) }
	pod := d.Spec.Template.Spec
	if !pod.HostNetwork {
		bad("not on the host network")
	}
	if len(pod.Containers) != 1 || len(pod.InitContainers) != 0 {
		return append(problems, fmt.Sprintf("agent: %d containers and %d init containers, want 1 and 0", len(pod.Containers), len(pod.InitContainers)))
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		return append(problems, "agent: no securityContext with capabilities")
	}
	add := slices.Clone(sc.Capabilities.Add)
	slices.Sort(add)
	if !slices.Equal(add, []corev1.Capability{"NET_ADMIN"}) {
		bad("adds capabilities %v, want exactly NET_ADMIN (no raw sockets: NET_RAW is not needed)", sc.Capabilities.Add)
	}
	if !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		bad("drops %v, want ALL", sc.Capabilities.Drop)
	}
	if sc.Privileged == nil || *sc.Privileged {
		bad("privileged is not an explicit false")
	}
	if sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		bad("does not run as root (runAsUser 0): the capabilities are root's")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		bad("allows privilege escalation")
	}
	if got := envFrom(c, "NODE_NAME"); got != "spec.nodeName" {
		bad("env NODE_NAME from %q, want spec.nodeName", got)
	}
	if got := envFrom(c, "NODE_IP"); got != "status.hostIP" {
		bad("env NODE_IP from %q, want status.hostIP", got)
	}
	if envFrom(c, "POD_NAME") != "metadata.name" || envFrom(c, "POD_NAMESPACE") != "metadata.namespace" {
		bad("env POD_NAME/POD_NAMESPACE are not the pod's name and namespace (the agent annotates its pod)")
	}
	if c.Image != v.imageRef(v.Agent.Image) {
		bad("image %s, want %s", c.Image, v.imageRef(v.Agent.Image))
	}
	if !hasPort(c, v.Agent.MetricsPort) {
		bad("no metrics port %d", v.Agent.MetricsPort)
	}
	want := append(overlayArgs(v, "mtu"), "--device="+v.Overlay.Device, "--internal-cidr="+v.IPAM.InternalCIDR,
		"--pod-cidrs="+v.IPAM.PodCIDR.String(), fmt.Sprintf("--metrics-listen=:%d", v.Agent.MetricsPort),
		fmt.Sprintf("--rule-priority=%d", v.Agent.RulePriority), fmt.Sprintf("--masquerade-bypass=%t", v.Agent.MasqueradeBypass), fmt.Sprintf("--overlay-guard=%t", v.Agent.OverlayGuard), "--resync="+v.Agent.Resync, "--log-level="+v.Agent.LogLevel, "--log-format="+v.LogFormat)
	if m := missingArgs(c.Args, want); len(m) > 0 {
		bad("args %q lack %q", c.Args, m)
	}
	for _, a := range c.Args {
		if (strings.HasPrefix(a, "--overlay-port=") || strings.HasPrefix(a, "--mtu=")) && !slices.Contains(want, a) {
			bad("passes %s, which the values do not ask for", a)
		}
	}
	if pod.ServiceAccountName != name {
		bad("service account %q, want %q", pod.ServiceAccountName, name)
	}
	return problems
}

// renderGateway renders a chart-rendered gateway template the way skein-controller does, for a
// gateway named gw created with the peering values (what skeinctl creates with the same flags).
func renderGateway(u *unstructured.Unstructured, v chartValues, server bool) (*render.Rendered, error) {
	raw, ok, _ := unstructured.NestedMap(u.Object, "spec", "template")
	if !ok {
		return nil, fmt.Errorf("%s %s has no spec.template", u.GetKind(), u.GetName())
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	g := v.Peering.Networking.Gateway
	var spec any = netv1alpha1.GatewayClientSpec{MTU: g.MTU, Endpoint: netv1alpha1.Endpoint{Addresses: []netv1alpha1.Address{"192.0.2.1"}, Port: g.Server.Service.Port, Protocol: "UDP"}}
	if server {
		spec = netv1alpha1.GatewayServerSpec{MTU: g.MTU, Endpoint: netv1alpha1.ServerEndpoint{Port: g.Server.Service.Port, ServiceType: netv1alpha1.ServiceType(g.Server.Service.Type)}}
	}
	d, err := render.NewData("gw", "tenant", "remote-cluster", "gw-wg-key", "0000", spec)
	if err != nil {
		return nil, err
	}
	return render.Render(runtime.RawExtension{Raw: b}, d)
}

func checkGatewayTemplates(v chartValues, ns string, objs []*unstructured.Unstructured) []string {
	var problems []string
	for _, t := range []struct{ kind, name, file string }{
		{"WgGatewayServerTemplate", "wireguard-server", "templates/wireguard-server.yaml"},
		{"WgGatewayClientTemplate", "wireguard-client", "templates/wireguard-client.yaml"},
	} {
		bad := func(format string, a ...any) { problems = append(problems, t.name+": "+fmt.Sprintf(format, a...)) }
		u := find(objs, t.kind, t.name)
		if u == nil {
			bad("no %s %s", t.kind, t.name)
			continue
		}
		// The chart changes only what it manages; everything else is deploy/templates verbatim
		// (its '{{ ... }}' strings included).
		src, err := readValues(t.file)
		if err != nil {
			bad("%v", err)
			continue
		}
		want := &unstructured.Unstructured{Object: src}
		want.SetNamespace(ns)
		labels := u.GetLabels()
		for k, val := range want.GetLabels() {
			if labels[k] != val {
				bad("label %s=%q of deploy/%s lost", k, val, t.file)
			}
		}
		if labels["app.kubernetes.io/managed-by"] != "Helm" {
			bad("no chart labels: %v", labels)
		}
		want.SetLabels(labels)
		containers, _, _ := unstructured.NestedSlice(want.Object, "spec", "template", "spec", "deployment", "template", "spec", "containers")
		for _, c := range containers {
			c := c.(map[string]any)
			if c["name"] != "gateway" {
				continue
			}
			c["image"], c["imagePullPolicy"] = v.imageRef(v.Gateway.Image), v.Gateway.Image.PullPolicy
			res, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&v.Gateway.Resources)
			if err != nil {
				bad("%v", err)
			}
			c["resources"] = res
			for _, a := range overlayArgs(v, "overlay-mtu") {
				c["args"] = append(c["args"].([]any), a)
			}
			if fmt.Sprint(v.Gateway.WatchPods) == "true" {
				c["args"] = append(c["args"].([]any), "--watch-pods")
			}
		}
		if err := unstructured.SetNestedSlice(want.Object, containers, "spec", "template", "spec", "deployment", "template", "spec", "containers"); err != nil {
			bad("%v", err)
		}
		// The scheduling values (checked on the rendered gateways by checkScheduling).
		podPath := []string{"spec", "template", "spec", "deployment", "template", "spec"}
		set := func(value any, path ...string) {
			if err := unstructured.SetNestedField(want.Object, value, path...); err != nil {
				bad("%v", err)
			}
		}
		asJSON := func(x any) any {
			b, _ := json.Marshal(x)
			var out any
			_ = json.Unmarshal(b, &out)
			return out
		}
		if len(v.Gateway.NodeSelector) > 0 {
			set(asJSON(v.Gateway.NodeSelector), append(podPath, "nodeSelector")...)
		}
		if len(v.Gateway.Tolerations) > 0 {
			set(asJSON(v.Gateway.Tolerations), append(podPath, "tolerations")...)
		}
		if v.Gateway.PriorityClassName != "" {
			set(v.Gateway.PriorityClassName, append(podPath, "priorityClassName")...)
		}
		if len(v.Gateway.ImagePullSecrets) > 0 {
			set(asJSON(v.Gateway.ImagePullSecrets), append(podPath, "imagePullSecrets")...)
		}
		if len(v.Gateway.Annotations) > 0 {
			set(asJSON(v.Gateway.Annotations), "spec", "template", "metadata", "annotations")
		}
		// replicas comes from gateway.replicas (compared as a number: YAML and JSON decoders
		// differ in the Go type they give it).
		replicasPath := []string{"spec", "template", "spec", "deployment", "replicas"}
		var wantReplicas any = v.Gateway.Replicas
		if got, ok, _ := unstructured.NestedFieldNoCopy(u.Object, replicasPath...); ok && fmt.Sprint(got) == fmt.Sprint(v.Gateway.Replicas) {
			wantReplicas = got
		}
		if err := unstructured.SetNestedField(want.Object, wantReplicas, replicasPath...); err != nil {
			bad("%v", err)
		}
		if !equality.Semantic.DeepEqual(want.Object, u.Object) {
			w, _ := yaml.Marshal(want.Object)
			g, _ := yaml.Marshal(u.Object)
			bad("rendered template differs from deploy/%s plus the chart's settings:\n--- want\n%s\n--- got\n%s", t.file, w, g)
		}

		// Rendered by the controller for a gateway: non-root, no capabilities, read-only root.
		r, err := renderGateway(u, v, t.kind == "WgGatewayServerTemplate")
		if err != nil {
			bad("skein-controller cannot render it: %v", err)
			continue
		}
		pod := r.Deployment.Template.Spec
		if r.Deployment.Replicas == nil || int64(*r.Deployment.Replicas) != v.Gateway.Replicas {
			bad("gateway replicas %v, want gateway.replicas %d", r.Deployment.Replicas, v.Gateway.Replicas)
		}
		if psc := pod.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
			bad("gateway pods do not run as a non-root user: %+v", pod.SecurityContext)
		}
		if pod.HostNetwork {
			bad("gateway pods run on the host network")
		}
		if r.Deployment.Template.Labels["networking.liqo.io/gateway"] != "gw" || pod.ServiceAccountName != "gw" {
			bad("the gateway's name did not reach its pods (labels %v, service account %q)", r.Deployment.Template.Labels, pod.ServiceAccountName)
		}
		for _, c := range slices.Concat(pod.InitContainers, pod.Containers) {
			problems = append(problems, checkLockedDown(t.name, c)...)
			if c.Name != "gateway" {
				continue
			}
			if c.Image != v.imageRef(v.Gateway.Image) {
				bad("gateway image %s, want %s", c.Image, v.imageRef(v.Gateway.Image))
			}
			if m := missingArgs(c.Args, append(overlayArgs(v, "overlay-mtu"), "--gateway-name=gw")); len(m) > 0 {
				bad("gateway args %q lack %q", c.Args, m)
			}
			if watches := slices.Contains(c.Args, "--watch-pods"); watches != (fmt.Sprint(v.Gateway.WatchPods) == "true") {
				bad("gateway.watchPods %v, but the rendered gateway's args are %q", v.Gateway.WatchPods, c.Args)
			}
		}
		if t.kind == "WgGatewayServerTemplate" {
			svc := r.Service
			g := v.Peering.Networking.Gateway.Server.Service
			if svc == nil || string(svc.Type) != g.Type || len(svc.Ports) == 0 || svc.Ports[0].Port != g.Port || svc.Ports[0].Protocol != corev1.ProtocolUDP {
				bad("a server with service type %s and port %d gets the Service %+v", g.Type, g.Port, svc)
			}
		}
		// skein-controller, run with the flags the chart gives it, renders the default templates
		// the chart wrote: its gateway policy allows every setting of .Values.gateway.
		policy, err := controllerGatewayPolicy(objs)
		if err != nil {
			bad("%v", err)
			continue
		}
		var gs *netv1alpha1.GatewayServer
		if t.kind == "WgGatewayServerTemplate" {
			g := v.Peering.Networking.Gateway
			gs = &netv1alpha1.GatewayServer{Spec: netv1alpha1.GatewayServerSpec{MTU: g.MTU,
				Endpoint: netv1alpha1.ServerEndpoint{Port: g.Server.Service.Port, ServiceType: netv1alpha1.ServiceType(g.Server.Service.Type)}}}
		}
		if refused := policy.Constrain(r, "gw", "tenant", gs); len(refused) > 0 {
			bad("skein-controller, with the chart's --gateway-* flags, refuses the template: %q", refused)
		}
	}
	return problems
}

// controllerGatewayPolicy is the gateway policy of skein-controller as the chart runs it: its
// --gateway-* flags of the policy, parsed as the controller parses them.
func controllerGatewayPolicy(objs []*unstructured.Unstructured) (controller.GatewayPolicy, error) {
	u := find(objs, "Deployment", fullname+"-controller")
	if u == nil {
		return controller.GatewayPolicy{}, fmt.Errorf("no controller Deployment")
	}
	d, err := as[appsv1.Deployment](u)
	if err != nil {
		return controller.GatewayPolicy{}, err
	}
	fs := flag.NewFlagSet("skein-controller", flag.ContinueOnError)
	policy := controller.GatewayPolicyFlags(fs)
	var args []string
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if fs.Lookup(name) != nil {
			args = append(args, a)
		}
	}
	if err := fs.Parse(args); err != nil {
		return controller.GatewayPolicy{}, fmt.Errorf("the controller's args %q: %w", args, err)
	}
	return policy()
}

// checkRBAC: the gateway roles are deploy/rbac's, under the names skein-controller binds; the
// controller may bind exactly those; no role has a wildcard or escalating verbs.
func checkRBAC(objs []*unstructured.Unstructured) []string {
	var problems []string
	bad := func(format string, a ...any) { problems = append(problems, "rbac: "+fmt.Sprintf(format, a...)) }
	b, err := os.ReadFile("rbac/skein-gateway-clusterrole.yaml")
	if err != nil {
		return []string{err.Error()}
	}
	src, err := parseManifests(string(b))
	if err != nil {
		return []string{err.Error()}
	}
	names := []string{}
	for _, s := range src {
		names = append(names, s.GetName())
		want, err := as[rbacv1.ClusterRole](s)
		if err != nil {
			bad("%v", err)
			continue
		}
		u := find(objs, "ClusterRole", s.GetName())
		if u == nil {
			bad("no ClusterRole %s (deploy/rbac)", s.GetName())
			continue
		}
		got, err := as[rbacv1.ClusterRole](u)
		if err != nil {
			bad("%v", err)
		} else if !reflect.DeepEqual(got.Rules, want.Rules) {
			bad("ClusterRole %s rules %+v, want deploy/rbac's %+v", s.GetName(), got.Rules, want.Rules)
		}
	}
	sort.Strings(names)
	if want := []string{controller.GatewayClusterRole, controller.GatewayNodesClusterRole, controller.GatewayPodsClusterRole}; !slices.Equal(names, want) {
		bad("deploy/rbac defines %v, skein-controller binds %v", names, want)
	}
	bindable := []string{}
	for _, o := range objs {
		if o.GetKind() != "ClusterRole" && o.GetKind() != "Role" {
			continue
		}
		r, err := as[rbacv1.ClusterRole](o) // a Role has the same rules field
		if err != nil {
			bad("%v", err)
			continue
		}
		for _, rule := range r.Rules {
			for _, f := range [][]string{rule.Verbs, rule.Resources, rule.APIGroups, rule.ResourceNames} {
				if slices.Contains(f, "*") {
					bad("%s %s has a wildcard rule %+v", o.GetKind(), o.GetName(), rule)
				}
			}
			for _, verb := range []string{"escalate", "impersonate"} {
				if slices.Contains(rule.Verbs, verb) {
					bad("%s %s may %s", o.GetKind(), o.GetName(), verb)
				}
			}
			if slices.Contains(rule.Verbs, "bind") {
				if o.GetName() != fullname+"-controller" || !slices.Equal(rule.Resources, []string{"clusterroles"}) {
					bad("%s %s may bind %v", o.GetKind(), o.GetName(), rule.Resources)
				}
				bindable = append(bindable, rule.ResourceNames...)
			}
		}
	}
	sort.Strings(bindable)
	if !slices.Equal(bindable, names) {
		bad("skein-controller may bind %v, want exactly the gateway roles %v", bindable, names)
	}
	return problems
}

// checkFlags checks that every flag the rendered objects pass is one their command defines.
func checkFlags(t testing.TB, objs []*unstructured.Unstructured, v chartValues) []string {
	t.Helper()
	dir, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	var problems []string
	check := func(cmd string, args []string) {
		unknown, err := unknownFlags(filepath.Join(dir, cmd), args)
		if err != nil {
			problems = append(problems, err.Error())
		} else if len(unknown) > 0 {
			problems = append(problems, fmt.Sprintf("%s does not define the flags %q", cmd, unknown))
		}
	}
	for _, w := range []struct{ kind, name, cmd string }{
		{"Deployment", fullname + "-controller", "skein-controller"},
		{"DaemonSet", fullname + "-agent", "skein-agent"},
	} {
		u := find(objs, w.kind, w.name)
		if u == nil {
			problems = append(problems, "no "+w.kind+" "+w.name)
			continue
		}
		containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			args, _, _ := unstructured.NestedStringSlice(c.(map[string]any), "args")
			check(w.cmd, args)
		}
	}
	for _, kind := range []string{"WgGatewayServerTemplate", "WgGatewayClientTemplate"} {
		for _, u := range objs {
			if u.GetKind() != kind {
				continue
			}
			r, err := renderGateway(u, v, kind == "WgGatewayServerTemplate")
			if err != nil {
				problems = append(problems, err.Error())
				continue
			}
			for _, c := range r.Deployment.Template.Spec.Containers {
				check("skein-gateway", c.Args)
			}
		}
	}
	return problems
}

// dryRunApply has the API server validate every object: a server-side apply with dryRun=All
// and strict field validation, CRDs first so the custom resources after them are known.
func dryRunApply(ctx context.Context, env *apitest.Env, objs []*unstructured.Unstructured) error {
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		return err
	}
	sorted := slices.Clone(objs)
	slices.SortStableFunc(sorted, func(a, b *unstructured.Unstructured) int {
		ca, cb := a.GetKind() == "CustomResourceDefinition", b.GetKind() == "CustomResourceDefinition"
		switch {
		case ca && !cb:
			return -1
		case cb && !ca:
			return 1
		}
		return 0
	})
	force := true
	var errs []error
	for _, o := range sorted {
		gvk := o.GroupVersionKind()
		m, err := env.Client.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", gvk.Kind, o.GetName(), err))
			continue
		}
		b, err := o.MarshalJSON()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var r dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			r = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		_, err = r.Patch(ctx, o.GetName(), types.ApplyPatchType, b, metav1.PatchOptions{
			DryRun: []string{metav1.DryRunAll}, FieldManager: "skein-chart-test", Force: &force, FieldValidation: "Strict"})
		if err != nil {
			errs = append(errs, fmt.Errorf("the API server refuses %s %s/%s: %w", gvk.Kind, o.GetNamespace(), o.GetName(), err))
		}
	}
	return errors.Join(errs...)
}

// TestChecksCatch proves the checks bite: each mutation of a correct rendering must be reported.
func TestChecksCatch(t *testing.T) {
	helmBinary(t)
	defaults, err := readValues(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := decodeValues(defaults)
	if err != nil {
		t.Fatal(err)
	}
	objs := renderChart(t, "liqo", map[string]any{})
	if p := checkRender(v, "liqo", objs); len(p) != 0 {
		t.Fatalf("the default rendering has problems: %q", p)
	}
	podPath := []string{"spec", "template", "spec", "containers"}
	gwPath := []string{"spec", "template", "spec", "deployment", "template", "spec", "containers"}
	// mutate edits the named object's first container (or the object itself when path is nil).
	cases := []struct {
		name, kind, obj string
		path            []string
		mutate          func(o, c map[string]any)
		values          func(v *chartValues)
		want            string
	}{
		{"agent gets SYS_ADMIN", "DaemonSet", "skein-agent", podPath, func(_, c map[string]any) {
			c["securityContext"].(map[string]any)["capabilities"].(map[string]any)["add"] = []any{"NET_ADMIN", "SYS_ADMIN"}
		}, nil, "want exactly NET_ADMIN"},
		{"agent gets NET_RAW back", "DaemonSet", "skein-agent", podPath, func(_, c map[string]any) {
			c["securityContext"].(map[string]any)["capabilities"].(map[string]any)["add"] = []any{"NET_ADMIN", "NET_RAW"}
		}, nil, "want exactly NET_ADMIN"},
		{"agent privileged", "DaemonSet", "skein-agent", podPath, func(_, c map[string]any) {
			c["securityContext"].(map[string]any)["privileged"] = true
		}, nil, "is privileged"},
		{"agent off the host network", "DaemonSet", "skein-agent", podPath, func(o, _ map[string]any) {
			_ = unstructured.SetNestedField(o, false, "spec", "template", "spec", "hostNetwork")
		}, nil, "not on the host network"},
		{"agent without NODE_IP", "DaemonSet", "skein-agent", podPath, func(_, c map[string]any) {
			c["env"] = slices.DeleteFunc(c["env"].([]any), func(e any) bool { return e.(map[string]any)["name"] == "NODE_IP" })
		}, nil, "NODE_IP"},
		{"agent overlay differs from the gateways'", "DaemonSet", "skein-agent", podPath, func(_, c map[string]any) {
			c["args"] = slices.DeleteFunc(c["args"].([]any), func(a any) bool { return strings.HasPrefix(a.(string), "--vni=") })
		}, nil, "--vni="},
		{"gateway with NET_ADMIN", "WgGatewayServerTemplate", "wireguard-server", gwPath, func(_, c map[string]any) {
			c["securityContext"].(map[string]any)["capabilities"].(map[string]any)["add"] = []any{"NET_ADMIN"}
		}, nil, "want none added"},
		{"gateway with a writable root", "WgGatewayClientTemplate", "wireguard-client", gwPath, func(_, c map[string]any) {
			c["securityContext"].(map[string]any)["readOnlyRootFilesystem"] = false
		}, nil, "root filesystem is writable"},
		{"gateway template evaluated by helm", "WgGatewayServerTemplate", "wireguard-server", gwPath, func(_, c map[string]any) {
			c["args"].([]any)[1] = "--gateway-name="
		}, nil, "differs from deploy/templates"},
		{"controller ignores podCIDR", "Deployment", "skein-controller", podPath, nil, func(v *chartValues) {
			v.IPAM.PodCIDR = cidrList{"10.99.0.0/16"}
		}, "--pod-cidrs=10.99.0.0/16"},
		{"gateway ignores the image value", "WgGatewayServerTemplate", "wireguard-server", gwPath, nil, func(v *chartValues) {
			v.Gateway.Image.Tag = "v9"
		}, "skein-gateway:v9"},
		{"controller refuses the chart's gateway template", "WgGatewayServerTemplate", "wireguard-server", gwPath, func(_, c map[string]any) {
			c["image"] = "registry.example/other/skein-gateway:v1"
		}, nil, "refuses the template"},
		{"server ignores the service type", "WgGatewayServerTemplate", "wireguard-server", gwPath, func(o, _ map[string]any) {
			_ = unstructured.SetNestedField(o, "LoadBalancer", "spec", "template", "spec", "service", "type")
		}, func(v *chartValues) { v.Peering.Networking.Gateway.Server.Service.Type = "NodePort" }, "service type NodePort"},
		{"controller role with a wildcard", "ClusterRole", "skein-controller", nil, func(o, _ map[string]any) {
			rules := o["rules"].([]any)
			o["rules"] = append(rules, map[string]any{"apiGroups": []any{""}, "resources": []any{"secrets"}, "verbs": []any{"*"}})
		}, nil, "wildcard"},
		{"controller may bind cluster-admin", "ClusterRole", "skein-controller", nil, func(o, _ map[string]any) {
			rules := o["rules"].([]any)
			o["rules"] = append(rules, map[string]any{"apiGroups": []any{"rbac.authorization.k8s.io"}, "resources": []any{"clusterroles"}, "resourceNames": []any{"cluster-admin"}, "verbs": []any{"bind"}})
		}, nil, "want exactly the gateway roles"},
		{"gateway role drifted from deploy/rbac", "ClusterRole", "skein-gateway-nodes", nil, func(o, _ map[string]any) {
			o["rules"] = o["rules"].([]any)[:1]
		}, nil, "want deploy/rbac's"},
		{"cluster id ConfigMap rendered without clusterID", "", "", nil, nil, func(v *chartValues) { v.ClusterID = "other" }, "not rendered with clusterID"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mutated := make([]*unstructured.Unstructured, len(objs))
			found := c.kind == ""
			for i, o := range objs {
				mutated[i] = o.DeepCopy()
				if o.GetKind() != c.kind || o.GetName() != c.obj {
					continue
				}
				found = true
				switch {
				case c.mutate == nil:
				case c.path == nil:
					c.mutate(mutated[i].Object, nil)
				default:
					cs, _, _ := unstructured.NestedSlice(mutated[i].Object, c.path...)
					c.mutate(mutated[i].Object, cs[0].(map[string]any))
					if err := unstructured.SetNestedSlice(mutated[i].Object, cs, c.path...); err != nil {
						t.Fatal(err)
					}
				}
			}
			if !found {
				t.Fatalf("no %s %s in the rendering", c.kind, c.obj)
			}
			mv := v
			if c.values != nil {
				c.values(&mv)
			}
			p := checkRender(mv, "liqo", mutated)
			if !strings.Contains(strings.Join(p, "\n"), c.want) {
				t.Errorf("not reported (want a problem mentioning %q); problems: %q", c.want, p)
			}
		})
	}
}

// TestDryRunApplyCatches proves the server-side check bites: the API server refuses a field
// that does not exist and a value the CRD's validation forbids.
func TestDryRunApplyCatches(t *testing.T) {
	env := apiServer(t)
	ctx := context.Background()
	ns := env.Namespace(t, "dryrun")
	parse := func(s string) []*unstructured.Unstructured {
		objs, err := parseManifests(strings.ReplaceAll(s, "NS", ns))
		if err != nil {
			t.Fatal(err)
		}
		return objs
	}
	ok := parse("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: fine, namespace: NS}\ndata: {a: b}\n")
	if err := dryRunApply(ctx, env, ok); err != nil {
		t.Fatalf("a valid ConfigMap: %v", err)
	}
	for name, s := range map[string]string{
		"unknown field": "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: a, namespace: NS}\nspec:\n  selector: {matchLabels: {a: b}}\n" +
			"  template:\n    metadata: {labels: {a: b}}\n    spec:\n      hostNetwrk: true\n      containers: [{name: a, image: a}]\n",
		"CRD validation": "apiVersion: networking.liqo.io/v1alpha1\nkind: GatewayServer\nmetadata: {name: a, namespace: NS}\n" +
			"spec:\n  mtu: 100\n  serverTemplateRef: {kind: WgGatewayServerTemplate, name: wireguard-server}\n",
	} {
		if err := dryRunApply(ctx, env, parse(s)); err == nil {
			t.Errorf("%s: the API server accepted it", name)
		}
	}
}
