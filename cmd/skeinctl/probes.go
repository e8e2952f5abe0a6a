package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/skein-net/skein/control/buildinfo"
)

// Labels and annotations of what skeinctl test network and skeinctl bench create.
const (
	probeRunLabel   = "skein.io/probe-run"     // the run's id, on the namespace and every pod
	probeKindLabel  = "skein.io/probe"         // server (pod network) or host (host network)
	probeExpiresKey = "skein.io/probe-expires" // RFC 3339: a later run removes the namespace after this
	probeNSPrefix   = "skein-probe-"           // namespaces are skein-probe-<run id>
	probeContainer  = "probe"                  // the container's name
	probeBinary     = "/usr/local/bin/skein-probe"
)

// probeRun is one run's probe pods in one cluster: a throw-away namespace with a DaemonSet of
// skein-probe servers on the pod network and, optionally, one on the host network.
type probeRun struct {
	label     string // local or remote
	c         client.Client
	cfg       *rest.Config
	cs        kubernetes.Interface
	csOnce    sync.Once
	csErr     error
	ns        string
	image     string
	host      bool // the host-network DaemonSet too
	keepUntil time.Duration
}

// newRunID is a run's random id: 8 hex digits.
func newRunID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// probeImage picks the probe image: the flag, else skein-probe beside the controller's image
// (same registry, same tag), else the public image of this skeinctl's version.
func probeImage(ctx context.Context, c client.Client, liqoNS, flag string) string {
	if flag != "" {
		return flag
	}
	var deps appsv1.DeploymentList
	if err := c.List(ctx, &deps, client.InNamespace(liqoNS), componentLabels("controller")); err == nil {
		for _, d := range deps.Items {
			for _, ct := range d.Spec.Template.Spec.Containers {
				if i := strings.LastIndex(ct.Image, "/skein-controller"); i >= 0 {
					return ct.Image[:i] + "/skein-probe" + ct.Image[i+len("/skein-controller"):]
				}
			}
		}
	}
	v := buildinfo.Get().Version
	if v == "" || v == "dev" {
		v = "latest"
	}
	return "ghcr.io/skein-net/skein-probe:" + v
}

// removeExpired deletes the namespaces of earlier runs that were never cleaned up (skeinctl
// killed) and whose expiry has passed.
func removeExpired(ctx context.Context, c client.Client) {
	var nss corev1.NamespaceList
	if err := c.List(ctx, &nss, client.HasLabels{probeRunLabel}); err != nil {
		return
	}
	for i := range nss.Items {
		ns := &nss.Items[i]
		t, err := time.Parse(time.RFC3339, ns.Annotations[probeExpiresKey])
		if err == nil && time.Now().After(t) && strings.HasPrefix(ns.Name, probeNSPrefix) && ns.DeletionTimestamp == nil {
			_ = c.Delete(ctx, ns)
		}
	}
}

// deploy creates the namespace and the DaemonSets.
func (p *probeRun) deploy(ctx context.Context, run string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.ns,
		Labels: map[string]string{probeRunLabel: run, "app.kubernetes.io/managed-by": "skeinctl"},
		Annotations: map[string]string{probeExpiresKey: time.Now().Add(p.keepUntil).UTC().Format(time.RFC3339),
			"skein.io/purpose": "skeinctl test network / bench: probe pods, removed when the command ends"}}}
	// The pod-network probes pass the restricted Pod Security level; the host-network ones
	// need privileged (host network, and NET_RAW for ICMP where the node's ping_group_range
	// does not allow unprivileged ICMP sockets).
	level := "restricted"
	if p.host {
		level = "privileged"
	}
	for _, k := range []string{"enforce", "warn", "audit"} {
		ns.Labels["pod-security.kubernetes.io/"+k] = level
	}
	if err := p.c.Create(ctx, ns); err != nil {
		return fmt.Errorf("(%s) create namespace %s: %w", p.label, p.ns, err)
	}
	kinds := []string{"server"}
	if p.host {
		kinds = append(kinds, "host")
	}
	for _, kind := range kinds {
		if err := p.c.Create(ctx, p.daemonSet(run, kind)); err != nil {
			return fmt.Errorf("(%s) create DaemonSet %s/probe-%s: %w", p.label, p.ns, kind, err)
		}
	}
	return nil
}

func (p *probeRun) daemonSet(run, kind string) *appsv1.DaemonSet {
	labels := map[string]string{probeRunLabel: run, probeKindLabel: kind, "app.kubernetes.io/name": "skein-probe", "app.kubernetes.io/managed-by": "skeinctl"}
	ct := corev1.Container{Name: probeContainer, Image: p.image, Args: []string{"serve"},
		// Bounded (issue 40): the server and the measurements skeinctl execs in the same
		// container peak at about 36 MB resident (a 128-stream throughput measurement; the
		// server's connection caps bound what callers add), so 256Mi leaves room; the Go
		// runtime collects harder from GOMEMLIMIT on instead of being killed. No CPU limit:
		// CFS throttling would cap what skeinctl bench measures (a measurement tool must not
		// be the bottleneck), and the pods live only for the run.
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
		},
		Env: []corev1.EnvVar{{Name: "GOMEMLIMIT", Value: "200MiB"}},
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
		ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
			HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(7072)}}},
	}
	spec := corev1.PodSpec{
		Containers:  []corev1.Container{ct},
		Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}, // every node, as skein-agent
		SecurityContext: &corev1.PodSecurityContext{
			RunAsUser: ptr.To[int64](65534), RunAsGroup: ptr.To[int64](65534),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			// ICMP echo without privilege: an unprivileged ICMP socket, which this (safe,
			// per-pod) sysctl allows for every group.
			Sysctls: []corev1.Sysctl{{Name: "net.ipv4.ping_group_range", Value: "0 2147483647"}},
		},
		TerminationGracePeriodSeconds: ptr.To[int64](1),
		AutomountServiceAccountToken:  ptr.To(false),
		EnableServiceLinks:            ptr.To(false),
	}
	if kind == "host" {
		// Only runs checks through exec; it serves nothing, so it takes no host port.
		spec.HostNetwork = true
		spec.DNSPolicy = corev1.DNSClusterFirstWithHostNet
		spec.Containers[0].Args = []string{"idle"}
		spec.Containers[0].ReadinessProbe = nil
		// The node's ping_group_range is the node's: ICMP needs a raw socket (root, NET_RAW),
		// and a pod sysctl cannot be set in the host's namespace.
		spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
		spec.Containers[0].SecurityContext = &corev1.SecurityContext{
			RunAsUser: ptr.To[int64](0), RunAsNonRoot: ptr.To(false), AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_RAW"}},
		}
	}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "probe-" + kind, Namespace: p.ns, Labels: labels},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec}},
	}
}

// probePod is one ready probe pod.
type probePod struct {
	Name, Node string
	// IP and IP6 are its IPv4 and IPv6 addresses ("" when it has none of that family: an
	// IPv6-only cluster's pods have IP6 alone).
	IP, IP6 string
	Host    bool
}

// addr is the pod's address of a family ("" when it has none).
func (p probePod) addr(ipv6 bool) string {
	if ipv6 {
		return p.IP6
	}
	return p.IP
}

// ready lists the ready probe pods, sorted by node, and how many the DaemonSets want.
func (p *probeRun) ready(ctx context.Context) (pods []probePod, want int, err error) {
	var dss appsv1.DaemonSetList
	if err := p.c.List(ctx, &dss, client.InNamespace(p.ns)); err != nil {
		return nil, 0, err
	}
	// Only the DaemonSets this run made, and only their pods: anyone else who can create
	// pods in the namespace (it admits privileged pods for the host probes) is not trusted.
	ours := map[types.UID]bool{}
	for _, d := range dss.Items {
		if !strings.HasPrefix(d.Name, "probe-") || d.Labels[probeRunLabel] == "" {
			continue
		}
		ours[d.UID] = true
		want += int(d.Status.DesiredNumberScheduled)
	}
	var list corev1.PodList
	if err := p.c.List(ctx, &list, client.InNamespace(p.ns)); err != nil {
		return nil, want, err
	}
	for _, pod := range list.Items {
		if pod.DeletionTimestamp != nil || !podReady(&pod) {
			continue
		}
		if owner := metav1.GetControllerOf(&pod); owner == nil || !ours[owner.UID] {
			continue
		}
		// Its first IPv4 and IPv6 addresses; a pod with neither (addresses that do not parse:
		// an API server that does not validate them) is no probe to check against.
		pp := probePod{Name: pod.Name, Node: pod.Spec.NodeName, Host: pod.Spec.HostNetwork}
		ips := pod.Status.PodIPs
		if len(ips) == 0 && pod.Status.PodIP != "" {
			ips = []corev1.PodIP{{IP: pod.Status.PodIP}}
		}
		for _, ip := range ips {
			a, err := netip.ParseAddr(ip.IP)
			switch {
			case err != nil || a.Zone() != "" || a.Is4In6():
			case a.Is4() && pp.IP == "":
				pp.IP = a.String()
			case a.Is6() && pp.IP6 == "":
				pp.IP6 = a.String()
			}
		}
		if pp.IP == "" && pp.IP6 == "" {
			continue
		}
		pods = append(pods, pp)
	}
	sort.Slice(pods, func(i, j int) bool {
		if pods[i].Host != pods[j].Host {
			return !pods[i].Host
		}
		return pods[i].Node < pods[j].Node
	})
	return pods, want, nil
}

// notReady says why the probe pods that are not ready are not: "node-b: ImagePullBackOff".
func (p *probeRun) notReady(ctx context.Context) []string {
	var list corev1.PodList
	if err := p.c.List(ctx, &list, client.InNamespace(p.ns)); err != nil {
		return []string{err.Error()}
	}
	var out []string
	// A DaemonSet that could not create its pods (admission refused them) has no pod to
	// look at: its events say why.
	var events corev1.EventList
	if err := p.c.List(ctx, &events, client.InNamespace(p.ns)); err == nil {
		seen := map[string]bool{}
		for _, e := range events.Items {
			if e.InvolvedObject.Kind == "DaemonSet" && e.Reason == "FailedCreate" && !seen[e.InvolvedObject.Name] {
				seen[e.InvolvedObject.Name] = true
				out = append(out, printable(fmt.Sprintf("DaemonSet %s cannot create its pods: %s", e.InvolvedObject.Name, e.Message)))
			}
		}
	}
	for _, pod := range list.Items {
		if podReady(&pod) {
			continue
		}
		why := string(pod.Status.Phase)
		for _, cs := range pod.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil {
				why = w.Reason
				if w.Message != "" {
					why += ": " + w.Message
				}
			}
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
				why = "not scheduled: " + c.Message
			}
		}
		node := pod.Spec.NodeName
		if node == "" {
			node = pod.Name
		}
		out = append(out, printable(fmt.Sprintf("%s (%s): %s", node, pod.Labels[probeKindLabel], why)))
	}
	sort.Strings(out)
	return out
}

// remove deletes the namespace and waits until it is gone (at most wait; 0: do not wait).
func (p *probeRun) remove(ctx context.Context, wait time.Duration) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.ns}}
	if err := p.c.Delete(ctx, ns); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("(%s) delete namespace %s: %w", p.label, p.ns, err)
	}
	if wait <= 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		err := p.c.Get(ctx, client.ObjectKey{Name: p.ns}, &corev1.Namespace{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("(%s) namespace %s is still terminating after %s; it goes on its own", p.label, p.ns, wait)
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// exec runs skein-probe with args in pod and returns its standard output; a failure carries
// its standard error.
func (p *probeRun) exec(ctx context.Context, pod string, args ...string) ([]byte, error) {
	p.csOnce.Do(func() { p.cs, p.csErr = kubernetes.NewForConfig(p.cfg) })
	if p.csErr != nil {
		return nil, p.csErr
	}
	req := p.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(p.ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: probeContainer, Command: append([]string{probeBinary}, args...), Stdout: true, Stderr: true}, scheme.ParameterCodec)
	// No overall client timeout on a stream: ctx bounds it.
	cfg := rest.CopyConfig(p.cfg)
	cfg.Timeout = 0
	ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
	if err != nil {
		return nil, err
	}
	spdy, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		return nil, err
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return nil, err
	}
	var out, errb bytes.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &limited{w: &out, n: 16 << 20}, Stderr: &limited{w: &errb, n: 64 << 10}})
	if err != nil {
		return out.Bytes(), fmt.Errorf("(%s) exec in %s/%s: %w: %s", p.label, p.ns, pod, err, printable(strings.TrimSpace(errb.String())))
	}
	return out.Bytes(), nil
}

// limited writes at most n bytes to w and drops the rest: a pod's output is not trusted to
// be small.
type limited struct {
	w io.Writer
	n int
}

func (l *limited) Write(b []byte) (int, error) {
	k := min(len(b), l.n)
	if k > 0 {
		_, _ = l.w.Write(b[:k])
		l.n -= k
	}
	return len(b), nil
}
