package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
)

// gatewayScrape is a gateway's /metrics as it writes the families diagnose reads.
func gatewayScrape(configured, effective int, sendErrs map[string]int) string {
	var b strings.Builder
	b.WriteString("# HELP skein_gateway_tunnel_mtu_bytes The tunnel MTU.\n# TYPE skein_gateway_tunnel_mtu_bytes gauge\n")
	fmt.Fprintf(&b, "skein_gateway_tunnel_mtu_bytes{kind=\"configured\"} %d\nskein_gateway_tunnel_mtu_bytes{kind=\"effective\"} %d\n", configured, effective)
	b.WriteString("# HELP skein_gateway_wireguard_send_errors_total Errors.\n# TYPE skein_gateway_wireguard_send_errors_total counter\n")
	for _, k := range []string{"message_too_long", "no_buffer_space", "not_permitted", "other"} {
		fmt.Fprintf(&b, "skein_gateway_wireguard_send_errors_total{kind=%q} %d\n", k, sendErrs[k])
	}
	b.WriteString("# HELP process_cpu_seconds_total CPU.\n# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 12.5\n")
	return b.String()
}

// onePeering is a cluster with one GatewayServer whose active replica runs.
func onePeering() *peerings {
	s := &peerings{}
	s.servers.Items = []netv1alpha1.GatewayServer{{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: "tenant"}}}
	s.pods.Items = []corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Name: "gw-standby", Namespace: "tenant", Labels: map[string]string{"networking.liqo.io/gateway": "gw", "networking.liqo.io/active": "false"}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.1.8"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "gw-active", Namespace: "tenant", Labels: map[string]string{"networking.liqo.io/gateway": "gw", "networking.liqo.io/active": "true"}},
			Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "gateway", Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 19471}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.1.9"}},
	}
	return s
}

// TestCheckGatewayPaths: diagnose names a tunnel MTU lowered by the path with the --mtu that
// avoids it, says nothing of send errors that stopped counting, and names those that count up
// between its two reads (too big for the path: a warning; lost to a firewall: a problem).
func TestCheckGatewayPaths(t *testing.T) {
	for _, tc := range []struct {
		name   string
		scrape []string // successive reads
		err    error
		want   []string // "LEVEL detail" lines, in order
		reads  int
	}{
		{name: "fits", scrape: []string{gatewayScrape(1340, 1340, nil)}, reads: 1,
			want: []string{"OK path MTU gatewayserver tenant/gw: the tunnel MTU 1340 fits the path to the peer"}},
		{name: "narrowed", scrape: []string{gatewayScrape(1340, 1312, nil)}, reads: 1,
			want: []string{"WARNING path MTU gatewayserver tenant/gw: the WAN's path MTU forces the tunnel down from 1340 to 1312: traffic flows" +
				" -> to avoid the search after every reconnect set --mtu 1312 on connect (skeinctl network connect ... --mtu 1312, or spec.mtu of both gateways)"}},
		{name: "old errors, not counting", reads: 2,
			scrape: []string{gatewayScrape(1340, 1312, map[string]int{"message_too_long": 40}), gatewayScrape(1340, 1312, map[string]int{"message_too_long": 40})},
			want:   []string{"WARNING path MTU gatewayserver tenant/gw: the WAN's path MTU forces the tunnel down from 1340 to 1312"}},
		{name: "too long, counting up", reads: 2,
			scrape: []string{gatewayScrape(1340, 1340, map[string]int{"message_too_long": 40}), gatewayScrape(1340, 1340, map[string]int{"message_too_long": 64})},
			want: []string{"OK path MTU gatewayserver tenant/gw: the tunnel MTU 1340 fits",
				"WARNING path MTU gatewayserver tenant/gw: the WireGuard socket's sends to the peer fail and keep failing (message_too_long +24 in 0s): datagrams too big for the path (resent one at a time, slower, not lost)" +
					" -> the path between the clusters is narrower than the tunnel's packets"}},
		{name: "too long, counting up, lowered", reads: 2,
			scrape: []string{gatewayScrape(1340, 1312, map[string]int{"message_too_long": 1}), gatewayScrape(1340, 1312, map[string]int{"message_too_long": 9})},
			want: []string{"WARNING path MTU gatewayserver tenant/gw: the WAN's path MTU forces the tunnel down from 1340 to 1312",
				"WARNING path MTU gatewayserver tenant/gw: the WireGuard socket's sends to the peer fail and keep failing (message_too_long +8 in 0s)" +
					": datagrams too big for the path (resent one at a time, slower, not lost) -> the path between the clusters is narrower than the tunnel's packets and the gateways already lowered the tunnel MTU to 1312: set --mtu 1312 on connect"}},
		{name: "firewall", reads: 2,
			scrape: []string{gatewayScrape(1340, 1340, map[string]int{"not_permitted": 3}), gatewayScrape(1340, 1340, map[string]int{"not_permitted": 5, "message_too_long": 1})},
			want: []string{"OK path MTU",
				"PROBLEM WireGuard sends gatewayserver tenant/gw: the WireGuard socket's sends to the peer fail and keep failing (message_too_long +1, not_permitted +2 in 0s): datagrams to the peer are lost -> not_permitted: a firewall"}},
		{name: "older gateway", scrape: []string{"# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1\n"}, reads: 1},
		{name: "not metrics", scrape: []string{"<html>404</html>\n"}, reads: 1,
			want: []string{"WARNING path MTU gatewayserver tenant/gw: the gateway's /metrics is not Prometheus text"}},
		{name: "unreadable", err: errors.New(`pods "gw-active" is forbidden`), reads: 1,
			want: []string{"WARNING path MTU gatewayserver tenant/gw: cannot read the active gateway's metrics: pods \"gw-active\" is forbidden" +
				" -> diagnose reads them through the API server's pod proxy, else a port-forward, and needs the pods/proxy or pods/portforward permission in tenant; or from inside the cluster: curl http://10.244.1.9:19471/metrics"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reads := 0
			read := func(_ context.Context, p *corev1.Pod) (string, error) {
				if p.Name != "gw-active" {
					t.Errorf("read the metrics of %s, not of the active replica", p.Name)
				}
				reads++
				if tc.err != nil {
					return "", tc.err
				}
				return tc.scrape[min(reads, len(tc.scrape))-1], nil
			}
			r := &report{}
			checkGatewayPaths(context.Background(), r, onePeering(), read, 0)
			var got []string
			for _, f := range r.findings {
				l := fmt.Sprintf("%s %s %s: %s", strings.ToUpper(f.Level), f.Check, f.Subject, f.Detail)
				if f.Hint != "" {
					l += " -> " + f.Hint
				}
				got = append(got, l)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("findings:\n%s\nwant %d", strings.Join(got, "\n"), len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("finding %d:\n%s\nwant it to start with\n%s", i, got[i], w)
				}
			}
			if reads != tc.reads {
				t.Errorf("%d reads of the metrics, want %d", reads, tc.reads)
			}
		})
	}
}

// TestCheckGatewayPathsSkips: no active running replica with an address, no read.
func TestCheckGatewayPathsSkips(t *testing.T) {
	s := onePeering()
	s.pods.Items[1].Status.PodIP = ""
	r := &report{}
	checkGatewayPaths(context.Background(), r, s, func(context.Context, *corev1.Pod) (string, error) {
		t.Error("read the metrics of a pod without an address")
		return "", nil
	}, 0)
	if len(r.findings) != 0 {
		t.Errorf("findings %+v", r.findings)
	}
}

// TestFirstMetricsReader: the port-forward is tried when the pod proxy fails (an API server
// that cannot reach pod addresses), not when it works; both failing name both.
func TestFirstMetricsReader(t *testing.T) {
	calls := map[string]int{}
	reader := func(name, text string, err error) metricsReader {
		return func(context.Context, *corev1.Pod) (string, error) { calls[name]++; return text, err }
	}
	p := &corev1.Pod{}
	text, err := firstMetricsReader(reader("proxy", "a", nil), reader("forward", "b", nil))(context.Background(), p)
	if text != "a" || err != nil || calls["forward"] != 0 {
		t.Errorf("proxy working: %q, %v, calls %v", text, err, calls)
	}
	text, err = firstMetricsReader(reader("proxy", "", errors.New("proxy: no route to pod")), reader("forward", "b", nil))(context.Background(), p)
	if text != "b" || err != nil {
		t.Errorf("proxy failing: %q, %v", text, err)
	}
	_, err = firstMetricsReader(reader("proxy", "", errors.New("proxy: no route to pod")), reader("forward", "", errors.New("forward: forbidden")))(context.Background(), p)
	if err == nil || !strings.Contains(err.Error(), "no route") || !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("both failing: %v", err)
	}
}
