package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// defaultGatewayMetricsPort is where a gateway serves /metrics when its pod names no port
// "metrics".
const defaultGatewayMetricsPort = 9471

// gatewayMetricsPort is the port of a gateway pod's container port named metrics, else the
// default.
func gatewayMetricsPort(p *corev1.Pod) int32 {
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == "metrics" {
				return cp.ContainerPort
			}
		}
	}
	return defaultGatewayMetricsPort
}

// metricsReadTimeout bounds one read of a gateway's /metrics.
const metricsReadTimeout = 5 * time.Second

// metricsReader reads a pod's /metrics text.
type metricsReader func(ctx context.Context, pod *corev1.Pod) (string, error)

// proxyMetricsReader reads a pod's /metrics through the API server's pod proxy
// (kubectl get --raw /api/v1/namespaces/NS/pods/NAME:PORT/proxy/metrics): it works wherever
// skeinctl reaches the API server, with the pods/proxy permission.
func proxyMetricsReader(cs kubernetes.Interface) metricsReader {
	return func(ctx context.Context, p *corev1.Pod) (string, error) {
		// An API server that cannot reach pod addresses must not hold diagnose.
		ctx, cancel := context.WithTimeout(ctx, metricsReadTimeout)
		defer cancel()
		port := strconv.Itoa(int(gatewayMetricsPort(p)))
		b, err := cs.CoreV1().Pods(p.Namespace).ProxyGet("http", p.Name, port, "/metrics", nil).DoRaw(ctx)
		if err != nil {
			return "", fmt.Errorf("read /metrics of %s/%s through the API server (pods/%s:%s/proxy/metrics): %w", p.Namespace, p.Name, p.Name, port, err)
		}
		return string(b), nil
	}
}

// portForwardMetricsReader reads a pod's /metrics through a port-forward (kubectl
// port-forward: the API server asks the pod's kubelet, which connects inside the pod's network
// namespace): for API servers that cannot reach pod addresses themselves, as on clusters whose
// control plane is not on the pod network. It needs the pods/portforward permission; the
// forward listens on 127.0.0.1 only, on a port the kernel picks, for one read.
func portForwardMetricsReader(cfg *rest.Config, cs kubernetes.Interface) metricsReader {
	return func(ctx context.Context, p *corev1.Pod) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, metricsReadTimeout)
		defer cancel()
		port := strconv.Itoa(int(gatewayMetricsPort(p)))
		fail := func(err error) (string, error) {
			return "", fmt.Errorf("read /metrics of %s/%s through a port-forward to port %s: %w", p.Namespace, p.Name, port, err)
		}
		rt, upgrader, err := spdy.RoundTripperFor(cfg)
		if err != nil {
			return fail(err)
		}
		u := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(p.Namespace).Name(p.Name).SubResource("portforward").URL()
		dialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
		stop, ready := make(chan struct{}), make(chan struct{})
		defer close(stop)
		fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:" + port}, stop, ready, io.Discard, io.Discard)
		if err != nil {
			return fail(err)
		}
		done := make(chan error, 1)
		go func() { done <- fw.ForwardPorts() }()
		select {
		case <-ready:
		case err := <-done:
			if err == nil {
				err = errors.New("the forward ended before it was ready")
			}
			return fail(err)
		case <-ctx.Done():
			return fail(ctx.Err())
		}
		ports, err := fw.GetPorts()
		if err != nil || len(ports) != 1 {
			return fail(fmt.Errorf("no local port: %v", err))
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[0].Local), nil)
		if err != nil {
			return fail(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fail(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fail(fmt.Errorf("the gateway answered %s", resp.Status))
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxMetricsBytes+1))
		if err != nil {
			return fail(err)
		}
		if len(b) > maxMetricsBytes {
			return fail(fmt.Errorf("more than %d bytes of metrics", maxMetricsBytes))
		}
		return string(b), nil
	}
}

// maxMetricsBytes bounds one gateway's /metrics as diagnose reads it (a few kB in practice).
const maxMetricsBytes = 4 << 20

// firstMetricsReader tries each reader in turn; when every one fails, the error names each
// way tried.
func firstMetricsReader(readers ...metricsReader) metricsReader {
	return func(ctx context.Context, p *corev1.Pod) (string, error) {
		var errs []error
		for _, read := range readers {
			text, err := read(ctx, p)
			if err == nil {
				return text, nil
			}
			errs = append(errs, err)
		}
		return "", errors.Join(errs...)
	}
}

// gatewayPathState is what a gateway's metrics say about the path to its peer.
type gatewayPathState struct {
	configured, effective float64            // skein_gateway_tunnel_mtu_bytes (0: absent, an older gateway)
	sendErrors            map[string]float64 // skein_gateway_wireguard_send_errors_total by kind
}

// parseGatewayPathState reads the tunnel MTU and the send errors from a gateway's /metrics.
func parseGatewayPathState(text string) (gatewayPathState, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return gatewayPathState{}, fmt.Errorf("the gateway's /metrics is not Prometheus text: %w", err)
	}
	st := gatewayPathState{sendErrors: map[string]float64{}}
	if f := fams["skein_gateway_tunnel_mtu_bytes"]; f != nil {
		for _, m := range f.GetMetric() {
			v := m.GetGauge().GetValue()
			for _, l := range m.GetLabel() {
				if l.GetName() != "kind" {
					continue
				}
				switch l.GetValue() {
				case "configured":
					st.configured = v
				case "effective":
					st.effective = v
				}
			}
		}
	}
	if f := fams["skein_gateway_wireguard_send_errors_total"]; f != nil {
		for _, m := range f.GetMetric() {
			kind := "other"
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" {
					kind = l.GetValue()
				}
			}
			st.sendErrors[kind] += m.GetCounter().GetValue()
		}
	}
	return st, nil
}

// pathSettle is how long diagnose waits to see whether a gateway's send errors are counting up.
const pathSettle = 3 * time.Second

// gatewayPathTarget is an active gateway whose metrics diagnose reads.
type gatewayPathTarget struct {
	subject string
	pod     *corev1.Pod
	first   gatewayPathState
}

// checkGatewayPaths reads the metrics of every gateway's active replica and names a path MTU
// problem: the tunnel MTU lowered by the gateways' path MTU discovery (traffic flows; the fix
// saves the search after every reconnect), and the WireGuard socket's send errors when they
// count up (read twice, settle apart; an old total alone says nothing about now).
func checkGatewayPaths(ctx context.Context, r *report, s *peerings, read metricsReader, settle time.Duration) {
	var targets []*gatewayPathTarget
	for _, g := range s.gateways() {
		p := activeGatewayPod(s, g)
		if p == nil {
			continue // checkGateway has named it
		}
		subject := strings.ToLower(g.kind) + " " + g.namespace + "/" + g.name
		text, err := read(ctx, p)
		if err != nil {
			r.warn("path MTU", subject, "cannot read the active gateway's metrics: "+err.Error(),
				fmt.Sprintf("diagnose reads them through the API server's pod proxy, else a port-forward, and needs the pods/proxy or pods/portforward permission in %s; or from inside the cluster: curl http://%s/metrics",
					p.Namespace, hostPort(p.Status.PodIP, gatewayMetricsPort(p))))
			continue
		}
		st, err := parseGatewayPathState(text)
		if err != nil {
			r.warn("path MTU", subject, err.Error(), "")
			continue
		}
		switch {
		case st.configured == 0:
			// A gateway older than path MTU discovery: nothing to read.
		case st.effective > 0 && st.effective < st.configured:
			r.warn("path MTU", subject, fmt.Sprintf("the WAN's path MTU forces the tunnel down from %.0f to %.0f: traffic flows", st.configured, st.effective),
				fmt.Sprintf("to avoid the search after every reconnect set --mtu %.0f on connect (skeinctl network connect ... --mtu %.0f, or spec.mtu of both gateways)", st.effective, st.effective))
		default:
			r.ok("path MTU", subject, fmt.Sprintf("the tunnel MTU %.0f fits the path to the peer", st.configured))
		}
		if total(st.sendErrors) > 0 {
			targets = append(targets, &gatewayPathTarget{subject: subject, pod: p, first: st})
		}
	}
	if len(targets) == 0 {
		return
	}
	select {
	case <-ctx.Done():
		return
	case <-time.After(settle):
	}
	for _, t := range targets {
		text, err := read(ctx, t.pod)
		if err != nil {
			continue // said once above if it keeps failing; a single failure is no finding
		}
		st, err := parseGatewayPathState(text)
		if err != nil {
			continue
		}
		reportSendErrors(r, t.subject, t.first, st, settle)
	}
}

// reportSendErrors names the send errors that counted up between two reads.
func reportSendErrors(r *report, subject string, before, after gatewayPathState, settle time.Duration) {
	var kinds []string
	serious := false
	for k, v := range after.sendErrors {
		if d := v - before.sendErrors[k]; d > 0 {
			kinds = append(kinds, fmt.Sprintf("%s +%.0f", k, d))
			serious = serious || (k != "message_too_long" && k != "gso_unsupported")
		}
	}
	if len(kinds) == 0 {
		return
	}
	sort.Strings(kinds)
	detail := fmt.Sprintf("the WireGuard socket's sends to the peer fail and keep failing (%s in %s)", strings.Join(kinds, ", "), settle)
	if !serious {
		hint := "the path between the clusters is narrower than the tunnel's packets: refused batches are sent again one datagram at a time until the gateways' path MTU discovery lowers the tunnel MTU; if it goes on, connect with --mtu set to the path MTU minus 60 (80 over IPv6): docs/troubleshooting.md, \"A WAN narrower than the tunnel's packets\""
		if after.effective > 0 && after.effective < after.configured {
			hint = fmt.Sprintf("the path between the clusters is narrower than the tunnel's packets and the gateways already lowered the tunnel MTU to %.0f: set --mtu %.0f on connect", after.effective, after.effective)
		}
		r.warn("path MTU", subject, detail+": datagrams too big for the path (resent one at a time, slower, not lost)", hint)
		return
	}
	r.problem("WireGuard sends", subject, detail+": datagrams to the peer are lost",
		"not_permitted: a firewall on the gateway's node; unreachable or connection_refused: the route to the peer or its port (docs/metrics.md, skein_gateway_wireguard_send_errors_total)")
}

func total(m map[string]float64) float64 {
	var t float64
	for _, v := range m {
		t += v
	}
	return t
}

// activeGatewayPod is g's running active replica with an address, or nil.
func activeGatewayPod(s *peerings, g gatewayInfo) *corev1.Pod {
	for i := range s.pods.Items {
		p := &s.pods.Items[i]
		if p.Namespace == g.namespace && p.Labels["networking.liqo.io/gateway"] == g.name && p.Labels["networking.liqo.io/active"] == "true" &&
			p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && p.DeletionTimestamp == nil {
			return p
		}
	}
	return nil
}
