// Package e2e proves skein's workflows end to end in the lab (bench/lab): two real Kubernetes
// clusters that both use 10.244.0.0/16, skein installed with its Helm chart, peered with
// skeinctl, traffic between pods checked in both directions. `make e2e` runs it and prints the
// report; `go test ./...` runs it too (as root, with the Kubernetes binaries and helm built).
package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	"github.com/skein-net/skein/bench/lab"
	"github.com/skein-net/skein/bench/lab/labtest"
	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/controller/mcs"
	"github.com/skein-net/skein/control/kube"
	"github.com/skein-net/skein/deploy/images"
	"github.com/skein-net/skein/internal/k8sbin"
	"github.com/skein-net/skein/internal/metricsdoc"
)

// env is the running lab with skein installed.
type env struct {
	t      *testing.T
	l      *lab.Lab
	bin    string
	helm   string
	prefix string
	c      []client.Client // one per cluster
	ids    []string        // each cluster's id (cluster ids are read once, after install)
	report strings.Builder
	// installSets are helm --set values install adds.
	installSets []string
}

func (e *env) reportf(format string, a ...any) {
	fmt.Fprintf(&e.report, format+"\n", a...)
	if os.Getenv("SKEIN_DEMO") == "" {
		// The demo prints its report once, at its end (TestDemo); the suites log each line.
		e.t.Logf(format, a...)
	}
}

// run runs a command in the workstation against cluster i.
func (e *env) run(ctx context.Context, i int, args ...string) string {
	e.t.Helper()
	out, err := e.l.Exec(ctx, i, args...)
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// setup builds the binaries and starts the lab. With KEEP set, the lab stays up after a
// failure (after any run when keepAlways). The nodes run the real node stack (kubelet,
// containerd, runc, flannel), which pulls skein's images from the lab's registry (built from
// the lab's binaries as make images builds them).
func setup(t *testing.T, keepAlways bool) *env {
	return setupLab(t, keepAlways, lab.Options{})
}

// setupLab is setup with a lab of the given pod network; its prefix is opts.Prefix, or one
// of this process's when that is empty.
func setupLab(t *testing.T, keepAlways bool, opts lab.Options) *env {
	k8s, nodeStack := labtest.NeedNodeStack(t)
	helm, ok := k8sbin.HelmReady()
	if !ok {
		t.Fatal("helm is not in the cache: run make k8s-binaries")
	}
	e := &env{t: t, helm: helm, prefix: cmp.Or(opts.Prefix, fmt.Sprintf("se%d", os.Getpid()))}
	e.bin = labtest.Build(t, "skein-e2e-bin")
	keep := func() bool { return os.Getenv("KEEP") != "" && (keepAlways || t.Failed()) }
	t.Cleanup(func() {
		if !keep() {
			os.RemoveAll(e.bin)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var progress strings.Builder
	opts.Prefix = e.prefix
	layoutDir, digests := labtest.ImageLayout(t, e.bin, version(t))
	for _, c := range images.Components {
		e.reportf("images: %s:%s %s", c.Name, version(t), digests[c.Name])
	}
	l, err := lab.Start(ctx, lab.Config{Options: opts, K8sBin: k8s, NodeStack: nodeStack,
		LabBinary: filepath.Join(e.bin, "lab"), BinDir: e.bin, Log: &progress, ImageLayout: layoutDir})
	t.Cleanup(func() {
		if errors.Is(err, lab.ErrAlreadyUp) {
			return // somebody else's lab
		}
		if keep() {
			fmt.Printf("\nKEEP set: the lab stays up.\n  %[1]s/lab status --prefix %[2]s\n  %[1]s/lab exec --prefix %[2]s -c 0 -- kubectl get pods -A\n"+
				"  %[1]s/lab shell --prefix %[2]s -c 1      (a shell with kubectl, skeinctl and helm for cluster 1)\n"+
				"  %[1]s/lab down --prefix %[2]s            (removes it all, binaries excepted: rm -rf %[1]s)\n", e.bin, e.prefix)
			return
		}
		lab.Down(e.prefix)
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	e.l = l
	// With SKEIN_FAILED_LOGS=DIR (make soak sets it), a failed run leaves its logs there
	// (runs before the teardown above).
	if dir := os.Getenv("SKEIN_FAILED_LOGS"); dir != "" {
		t.Cleanup(func() {
			if t.Failed() && !keep() {
				saveLogs(t, l.StateDir, filepath.Join(dir, fmt.Sprintf("%s-%s", e.prefix, time.Now().UTC().Format("20060102T150405"))))
			}
		})
	}
	e.reportf("lab: %d clusters x 2 nodes up in %.1fs", len(l.Clusters), l.Ready.Sub(l.Started).Seconds())
	e.c = make([]client.Client, len(l.Clusters))
	for i := range l.Clusters {
		cfg, err := l.RESTConfig(i)
		if err != nil {
			t.Fatal(err)
		}
		if e.c[i], err = client.New(cfg, client.Options{Scheme: kube.Scheme()}); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// TestE2E runs the scenarios in order on one lab.
func TestE2E(t *testing.T) {
	e := setup(t, false)
	// skein keeps CoreDNS forwarding clusterset.local to it (step clusterset-dns).
	e.installSets = append(e.installSets, "multiclusterServices.dns.configureCoreDNS=kube-system/coredns")
	defer func() { fmt.Printf("\n=== skein end-to-end report\n%s\n", e.report.String()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 16*time.Minute)
	defer cancel()
	if !t.Run("install", func(t *testing.T) { e.t = t; e.install(ctx, 2) }) {
		return
	}
	e.probes(ctx)
	t.Run("cluster-dns", func(t *testing.T) { e.t = t; e.clusterDNS(ctx) })
	if !t.Run("connect", func(t *testing.T) { e.t = t; e.connect(ctx) }) {
		return
	}
	gens, since := e.gatewayGenerations(ctx), time.Now()
	t.Run("clusterset-dns", func(t *testing.T) { e.t = t; e.clustersetDNS(ctx) })
	t.Run("matrix", func(t *testing.T) { e.t = t; e.matrix(ctx) })
	t.Run("diagnose", func(t *testing.T) { e.t = t; e.diagnose(ctx) })
	t.Run("test-network", func(t *testing.T) { e.t = t; e.testNetworkHealthy(ctx) })
	t.Run("throughput", func(t *testing.T) { e.t = t; e.throughput(ctx, 3*time.Second) })
	t.Run("skeinctl-bench", func(t *testing.T) { e.t = t; e.skeinctlBench(ctx); e.skeinctlBenchInterrupted(ctx) })
	t.Run("metrics", func(t *testing.T) { e.t = t; e.metrics(ctx) })
	t.Run("container-security", func(t *testing.T) { e.t = t; e.containerSecurity(ctx) })
	t.Run("logs-exec", func(t *testing.T) { e.t = t; e.logsExec(ctx) })
	t.Run("parallel-streams", func(t *testing.T) { e.t = t; e.parallelStreams(ctx) })
	t.Run("node-stack-restart", func(t *testing.T) { e.t = t; e.nodeStackRestart(ctx) })
	t.Run("agent-restart", func(t *testing.T) { e.t = t; e.agentRestart(ctx) })
	t.Run("failover", func(t *testing.T) { e.t = t; e.failover(ctx) })
	// Late: the gateways keep the lowered tunnel MTU for up to 10 minutes after the WAN is
	// restored, which would change the figures and checks of the scenarios before it.
	t.Run("narrow-wan", func(t *testing.T) { e.t = t; e.narrowWAN(ctx) })
	t.Run("flat-generations", func(t *testing.T) { e.t = t; e.flatGenerations(ctx, gens, since) })
	// After flat-generations: it scales a gateway and changes the agents' DaemonSet.
	t.Run("test-network-fails", func(t *testing.T) { e.t = t; e.testNetworkFails(ctx) })
	if t.Run("disconnect-reset", func(t *testing.T) { e.t = t; e.disconnectReset(ctx) }) {
		t.Run("manual", func(t *testing.T) { e.t = t; e.manual(ctx) })
	}
	t.Run("uninstall", func(t *testing.T) { e.t = t; e.uninstall(ctx) })
}

// uninstall: helm uninstall in cluster 0 leaves nothing of skein's on its nodes (each agent,
// stopping, sees its DaemonSet gone and removes its device, table 18952's routes and rules,
// and its nftables table).
func (e *env) uninstall(ctx context.Context) {
	nodes := e.l.Clusters[0].Nodes
	leftover := func(ns string) []string {
		var left []string
		if out, _ := exec.Command("ip", "-n", ns, "-o", "link", "show", "liqo.vxlan").Output(); len(out) > 0 {
			left = append(left, "device liqo.vxlan")
		}
		if out, _ := exec.Command("ip", "-n", ns, "rule", "show", "lookup", "18952").Output(); strings.TrimSpace(string(out)) != "" {
			left = append(left, "rules to table 18952")
		}
		if out, _ := exec.Command("ip", "-n", ns, "route", "show", "table", "18952").Output(); strings.TrimSpace(string(out)) != "" {
			left = append(left, "routes in table 18952")
		}
		if err := exec.Command("ip", "netns", "exec", ns, "nft", "list", "table", "ip", "skein-agent").Run(); err == nil {
			left = append(left, "nftables table skein-agent")
		}
		return left
	}
	programmed := 0
	for _, n := range nodes {
		if len(leftover(n.Name)) > 0 {
			programmed++
		}
	}
	if programmed == 0 {
		e.t.Fatal("no node of cluster 0 is programmed before the uninstall: nothing to check")
	}
	// What the controller wrote outside the chart's objects, which the chart's pre-delete hook
	// removes: the clusterset.local block in CoreDNS's Corefile, and an import (a service
	// exported in cluster 0 is imported by cluster 0 too: a ServiceImport, a derived Service
	// and EndpointSlices).
	const name = "uninstall-probe"
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "none"}, Ports: []corev1.ServicePort{{Name: "call", Port: 7070, Protocol: corev1.ProtocolTCP}}}}
	if err := e.c[0].Create(ctx, svc); err != nil {
		e.t.Fatal(err)
	}
	defer func() { _ = e.c[0].Delete(context.Background(), svc) }()
	e.run(ctx, 0, "skeinctl", "export", name, "-n", "default", "--wait")
	imported := func() (n int) {
		var sis mcsv1a1.ServiceImportList
		if err := e.c[0].List(ctx, &sis); err == nil {
			n += len(sis.Items)
		}
		var svcs corev1.ServiceList
		if err := e.c[0].List(ctx, &svcs, client.HasLabels{mcs.ImportLabel}); err == nil {
			n += len(svcs.Items)
		}
		return n
	}
	e.waitFor(ctx, time.Minute, "cluster 0 imports its own export default/"+name, func() bool { return imported() >= 2 })
	corefile := func() string {
		var cm corev1.ConfigMap
		if err := e.c[0].Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "coredns"}, &cm); err != nil {
			e.t.Fatal(err)
		}
		return cm.Data["Corefile"]
	}
	if !strings.Contains(corefile(), "clusterset.local") {
		e.t.Fatal("CoreDNS's Corefile has no clusterset.local block before the uninstall: nothing to check")
	}
	start := time.Now()
	e.run(ctx, 0, e.helm, "uninstall", "skein", "--namespace", "liqo", "--wait", "--timeout", "2m")
	if n := imported(); n != 0 {
		e.t.Errorf("after helm uninstall, %d ServiceImports and derived Services are left in cluster 0", n)
	}
	if cf := corefile(); strings.Contains(cf, "clusterset.local") {
		e.t.Errorf("after helm uninstall, CoreDNS's Corefile still forwards clusterset.local:\n%s", cf)
	}
	e.waitFor(ctx, time.Minute, "cluster 0's nodes clean after helm uninstall", func() bool {
		for _, n := range nodes {
			if len(leftover(n.Name)) > 0 {
				return false
			}
		}
		return true
	})
	for _, n := range nodes {
		if left := leftover(n.Name); len(left) > 0 {
			e.t.Errorf("after helm uninstall, node %s keeps %v", n.Name, left)
		}
	}
	e.reportf("uninstall: helm uninstall in cluster 0 (%d of %d nodes programmed, an import, CoreDNS's clusterset.local block): every node clean %.1fs after it began, the import and the block gone",
		programmed, len(nodes), time.Since(start).Seconds())
}

// gatewayGenerations returns the generation of every Deployment skein-controller made in both
// clusters, by cluster, namespace and name.
func (e *env) gatewayGenerations(ctx context.Context) map[string]int64 {
	e.t.Helper()
	gens := map[string]int64{}
	for i, c := range e.c {
		var deps appsv1.DeploymentList
		if err := c.List(ctx, &deps, client.MatchingLabels{"app.kubernetes.io/managed-by": "skein-controller"}); err != nil {
			e.t.Fatal(err)
		}
		for _, d := range deps.Items {
			gens[fmt.Sprintf("cluster %d: %s/%s", i+1, d.Namespace, d.Name)] = d.Generation
		}
	}
	return gens
}

// flatGenerations: at least a minute after gens were taken (matrix, throughput, an agent
// restart and a gateway failover in between, with the real Deployment controller running),
// no gateway Deployment's generation moved: skein-controller does not fight
// kube-controller-manager.
func (e *env) flatGenerations(ctx context.Context, gens map[string]int64, since time.Time) {
	if len(gens) == 0 {
		e.t.Fatal("no Deployment of skein-controller's found in the lab")
	}
	if wait := time.Minute - time.Since(since); wait > 0 {
		time.Sleep(wait)
	}
	now := e.gatewayGenerations(ctx)
	for k, g := range gens {
		if now[k] != g {
			e.t.Errorf("%s: generation %d -> %d in %s", k, g, now[k], time.Since(since).Round(time.Second))
		}
	}
	e.reportf("generations: %d gateway Deployments, generation unchanged over %s", len(gens), time.Since(since).Round(time.Second))
}

// manualScript is spec/003's "manual on single cluster" script with skeinctl for liqoctl and
// kubectl's jsonpath for jq: the YAML resources applied with kubectl, in the spec's order.
const manualScript = `set -o nounset -o errexit -o pipefail
cd "$WORKDIR"
skeinctl --kubeconfig $KUBE_SERVER generate configuration > conf-server.yaml
skeinctl --kubeconfig $KUBE_CLIENT generate configuration > conf-client.yaml
kubectl --kubeconfig $KUBE_SERVER apply -f conf-client.yaml
kubectl --kubeconfig $KUBE_CLIENT apply -f conf-server.yaml
SERVER_CONFIGURATION_NAME=$(kubectl --kubeconfig $KUBE_SERVER get configuration -o jsonpath='{.items[0].metadata.name}')
CLIENT_CONFIGURATION_NAME=$(kubectl --kubeconfig $KUBE_CLIENT get configuration -o jsonpath='{.items[0].metadata.name}')
kubectl wait --for jsonpath='{.status.remote.cidr.pod}' configuration $SERVER_CONFIGURATION_NAME --timeout=300s --kubeconfig $KUBE_SERVER
kubectl wait --for jsonpath='{.status.remote.cidr.pod}' configuration $CLIENT_CONFIGURATION_NAME --timeout=300s --kubeconfig $KUBE_CLIENT
CLUSTER_ID_SERVER=$(kubectl get --kubeconfig $KUBE_SERVER -n liqo configmaps liqo-clusterid-configmap -o jsonpath='{.data.CLUSTER_ID}')
CLUSTER_ID_CLIENT=$(kubectl get --kubeconfig $KUBE_CLIENT -n liqo configmaps liqo-clusterid-configmap -o jsonpath='{.data.CLUSTER_ID}')
skeinctl --kubeconfig $KUBE_SERVER create gatewayserver server --remote-cluster-id $CLUSTER_ID_CLIENT --service-type NodePort
kubectl wait --for jsonpath='{.status.endpoint.addresses[0]}' gatewayserver server --timeout=300s --kubeconfig $KUBE_SERVER
kubectl wait --for jsonpath='{.status.endpoint.port}' gatewayserver server --timeout=300s --kubeconfig $KUBE_SERVER
kubectl wait --for jsonpath='{.status.internalEndpoint.ip}' gatewayserver server --timeout=300s --kubeconfig $KUBE_SERVER
ADDRESS_SERVER=$(kubectl --kubeconfig $KUBE_SERVER get gatewayserver server -o jsonpath='{.status.endpoint.addresses[0]}')
PORT_SERVER=$(kubectl --kubeconfig $KUBE_SERVER get gatewayserver server -o jsonpath='{.status.endpoint.port}')
skeinctl --kubeconfig $KUBE_CLIENT create gatewayclient client --remote-cluster-id $CLUSTER_ID_SERVER --addresses $ADDRESS_SERVER --port $PORT_SERVER
kubectl wait --for jsonpath='{.status.internalEndpoint.ip}' gatewayclient client --timeout=300s --kubeconfig $KUBE_CLIENT
skeinctl --kubeconfig $KUBE_SERVER generate publickey --gateway-type server --gateway-name server > publickey-server.yaml
skeinctl --kubeconfig $KUBE_CLIENT generate publickey --gateway-type client --gateway-name client > publickey-client.yaml
kubectl --kubeconfig $KUBE_SERVER apply -f publickey-client.yaml
kubectl --kubeconfig $KUBE_CLIENT apply -f publickey-server.yaml
`

// manual: spec/003's manual-on-single-cluster flow (cluster 1 server, cluster 0 client) reaches
// Connected on both sides, then the connectivity matrix passes again.
func (e *env) manual(ctx context.Context) {
	dir, err := os.MkdirTemp("/var/tmp", "skein-e2e-manual-")
	if err != nil {
		e.t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	start := time.Now()
	cmd := e.l.Command(ctx, 0, "bash", "-c", manualScript)
	cmd.Env = append(cmd.Env, "WORKDIR="+dir, "KUBE_SERVER="+e.l.Clusters[1].Kubeconfig, "KUBE_CLIENT="+e.l.Clusters[0].Kubeconfig)
	if out, err := cmd.CombinedOutput(); err != nil {
		e.t.Fatalf("the spec's manual script: %v\n%s", err, out)
	}
	took := e.waitFor(ctx, 2*time.Minute, "both Connections Connected", func() bool {
		for i := range 2 {
			var conns netv1alpha1.ConnectionList
			if err := e.c[i].List(ctx, &conns); err != nil || len(conns.Items) != 1 || conns.Items[0].Status.Value != netv1alpha1.Connected {
				return false
			}
		}
		return true
	})
	e.reportf("manual: spec/003's single-cluster script (kubectl apply of Configuration, GatewayServer, GatewayClient, PublicKey) ran in %.1fs; both Connections Connected %.1fs later",
		time.Since(start).Seconds()-took.Seconds(), took.Seconds())
	e.matrix(ctx)
}

// install: helm install into both clusters, every skein pod Ready.
func (e *env) install(ctx context.Context, gatewayReplicas int) {
	chart, err := filepath.Abs("../../deploy/chart")
	if err != nil {
		e.t.Fatal(err)
	}
	// lab exec's PATH has kubectl, skeinctl and helm, as its usage says.
	for _, tool := range [][]string{{"helm", "version", "--short"}, {"kubectl", "version", "--client"}, {"skeinctl", "version", "--client"}} {
		if out, err := e.l.Exec(ctx, 0, tool...); err != nil {
			e.t.Errorf("lab exec %v: %v\n%s", tool, err, out)
		}
	}
	var cidrs []string
	for _, c := range e.l.PodCIDRs {
		cidrs = append(cidrs, `"`+c.String()+`"`)
	}
	var imageArgs []string
	if e.l.Registry != "" {
		imageArgs = []string{"--set", "imageRegistry=" + e.l.Registry + "/skein-net"}
	}
	for _, s := range e.installSets {
		imageArgs = append(imageArgs, "--set", s)
	}
	for i := range e.c {
		start := time.Now()
		e.run(ctx, i, slices.Concat([]string{e.helm, "install", "skein", chart, "--namespace", "liqo", "--create-namespace",
			"--set", fmt.Sprintf("gateway.replicas=%d", gatewayReplicas), "--set-json", "ipam.podCIDR=[" + strings.Join(cidrs, ",") + "]",
			"--wait", "--timeout", "3m"}, imageArgs)...)
		helmTook := time.Since(start)
		// helm's --wait holds a DaemonSet ready with maxUnavailable (1) of its pods not ready yet.
		var pods corev1.PodList
		e.waitFor(ctx, time.Minute, fmt.Sprintf("cluster %d: 3 skein pods (controller, agent on each of 2 nodes) Ready", i), func() bool {
			if err := e.c[i].List(ctx, &pods, client.InNamespace("liqo")); err != nil || len(pods.Items) != 3 {
				return false
			}
			for _, p := range pods.Items {
				if !podReady(&p) {
					return false
				}
			}
			return true
		})
		e.reportf("install: cluster %d, helm install --wait took %.1fs, %d pods Ready after %.1fs", i, helmTook.Seconds(), len(pods.Items), time.Since(start).Seconds())
		if e.l.Registry != "" {
			seen := map[string]bool{}
			for _, p := range pods.Items {
				for _, st := range p.Status.ContainerStatuses {
					if !strings.HasPrefix(st.ImageID, e.l.Registry+"/") {
						e.t.Errorf("cluster %d: pod %s container %s runs %q, not an image pulled from the lab's registry", i, p.Name, st.Name, st.ImageID)
					}
					if !seen[st.ImageID] {
						seen[st.ImageID] = true
						e.reportf("install: cluster %d runs %s", i, st.ImageID)
					}
				}
			}
		}
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// probes runs a skein-probe server on every node of both clusters (a DaemonSet).
func (e *env) probes(ctx context.Context) {
	labels := map[string]string{"app": "probe"}
	for i := range e.c {
		ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "default"},
			Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "probe", Image: e.probeImage(), Args: []string{"serve"},
						ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
							HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(7072)}}}}},
				}}}}
		if err := e.c[i].Create(ctx, ds); err != nil {
			e.t.Fatal(err)
		}
	}
	for i := range e.c {
		e.waitFor(ctx, time.Minute, fmt.Sprintf("probe pods of cluster %d Ready", i), func() bool {
			return len(e.probePods(ctx, i)) == 2
		})
	}
}

// probePods lists cluster i's ready probe pods, by node name.
func (e *env) probePods(ctx context.Context, i int) []corev1.Pod {
	var pods corev1.PodList
	if err := e.c[i].List(ctx, &pods, client.InNamespace("default"), client.MatchingLabels{"app": "probe"}); err != nil {
		return nil
	}
	var ready []corev1.Pod
	for _, p := range pods.Items {
		if podReady(&p) && p.DeletionTimestamp == nil {
			ready = append(ready, p)
		}
	}
	if len(ready) == 2 && ready[0].Spec.NodeName > ready[1].Spec.NodeName {
		ready[0], ready[1] = ready[1], ready[0]
	}
	return ready
}

func (e *env) waitFor(ctx context.Context, d time.Duration, what string, cond func() bool) time.Duration {
	e.t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d || ctx.Err() != nil {
			e.t.Fatalf("%s: not after %s (lab logs in %s)", what, d, filepath.Join(e.l.StateDir, "logs"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	return time.Since(start)
}

// connect: skeinctl network connect --server-service-type NodePort --wait. make bench's
// connect section (bench/harness, connect.go) reads its report line: keep the two in step.
func (e *env) connect(ctx context.Context) {
	start := time.Now()
	out := e.run(ctx, 0, "skeinctl", "network", "connect", "--remote-kubeconfig", e.l.Clusters[1].Kubeconfig,
		"--server-service-type", "NodePort", "--wait", "--timeout", "3m")
	for _, side := range []string{"(local)", "(remote)"} {
		if !strings.Contains(out, side+" Connection is established") {
			e.t.Errorf("skeinctl network connect: no %q line in:\n%s", side+" Connection is established", out)
		}
	}
	// skeinctl's own breakdown: "INFO   Connected in 5.4s (network init 0.3s, ...)".
	breakdown := ""
	for _, l := range strings.Split(out, "\n") {
		if b, ok := strings.CutPrefix(l, "INFO   Connected in "); ok {
			breakdown = b
		}
	}
	if breakdown == "" {
		e.t.Errorf("skeinctl network connect --wait: no \"Connected in\" line with the time each step took:\n%s", out)
	}
	e.reportf("connect: skeinctl network connect --server-service-type NodePort --wait: %.1fs to \"Connection is established\" on both sides; skeinctl: %s", time.Since(start).Seconds(), breakdown)
}

// diagnose: skeinctl diagnose finds no problem in either cluster of a working peering, with
// the node checks of every node's kernel (--node on its network namespace).
func (e *env) diagnose(ctx context.Context) {
	for i, c := range e.l.Clusters {
		for j, n := range c.Nodes {
			args := []string{"skeinctl", "diagnose", "--node", "--node-name", c.NodeName(j), "--netns", "/var/run/netns/" + n.Name}
			out, err := e.l.Exec(ctx, i, args...)
			if err != nil {
				e.t.Errorf("cluster %d node %s: %v\n%s", i, c.NodeName(j), err, out)
				continue
			}
			// "path MTU": the active gateways' metrics were read (the lab's API servers cannot
			// reach pod addresses: through the port-forward).
			for _, want := range []string{"0 problem(s)", "OK       connection", "OK       kernel " + c.NodeName(j) + " gateway", "OK       path MTU"} {
				if !strings.Contains(out, want) {
					e.t.Errorf("cluster %d node %s: skeinctl diagnose --node:\n%s\nwant %q", i, c.NodeName(j), out, want)
				}
			}
			if i == 0 && j == 0 {
				e.reportf("diagnose: cluster 0, node %s:\n%s", c.NodeName(j), out)
			}
		}
	}
}

// view is how one cluster sees its peer's pods: each of the peer's pod CIDRs (spec) and the
// prefix it is seen as here (status).
type view []struct{ real, seen netip.Prefix }

// of is the address a peer pod at a is reached at from here.
func (v view) of(a netip.Addr) netip.Addr {
	for _, m := range v {
		if m.real.Contains(a) {
			return remap(a, m.seen)
		}
	}
	return netip.Addr{} // not in any published CIDR: unreachable, and the test says so
}

// peerView is how cluster i sees its only peer: its pods (every pod CIDR) and its external
// CIDR as remapped here.
func (e *env) peerView(ctx context.Context, i int) (pods view, external netip.Prefix) {
	e.t.Helper()
	var confs netv1alpha1.ConfigurationList
	if err := e.c[i].List(ctx, &confs); err != nil || len(confs.Items) != 1 {
		e.t.Fatalf("cluster %d: want one Configuration, got %d (%v)", i, len(confs.Items), err)
	}
	return e.configurationView(i, &confs.Items[0])
}

// viewOf is how cluster at sees cluster of (one of its peers), found by the peer's cluster id.
func (e *env) viewOf(ctx context.Context, at, of int) (pods view, external netip.Prefix) {
	e.t.Helper()
	var confs netv1alpha1.ConfigurationList
	if err := e.c[at].List(ctx, &confs, client.MatchingLabels{"liqo.io/remote-cluster-id": e.clusterID(ctx, of)}); err != nil || len(confs.Items) != 1 {
		e.t.Fatalf("cluster %d: want one Configuration for cluster %d, got %d (%v)", at, of, len(confs.Items), err)
	}
	return e.configurationView(at, &confs.Items[0])
}

// clusterID is cluster i's id (skein-controller writes it when the chart is installed).
func (e *env) clusterID(ctx context.Context, i int) string {
	e.t.Helper()
	if e.ids == nil {
		e.ids = make([]string, len(e.c))
	}
	if e.ids[i] == "" {
		var cm corev1.ConfigMap
		if err := e.c[i].Get(ctx, client.ObjectKey{Namespace: "liqo", Name: "liqo-clusterid-configmap"}, &cm); err != nil || cm.Data["CLUSTER_ID"] == "" {
			e.t.Fatalf("cluster %d: no cluster id: %v", i, err)
		}
		e.ids[i] = cm.Data["CLUSTER_ID"]
	}
	return e.ids[i]
}

// configurationView reads a Configuration of cluster i: the peer's pod CIDRs and how they
// and its external CIDR are seen here.
func (e *env) configurationView(i int, cf *netv1alpha1.Configuration) (pods view, external netip.Prefix) {
	e.t.Helper()
	if cf.Status.Remote == nil {
		e.t.Fatalf("cluster %d: Configuration %s has no status.remote", i, cf.Name)
	}
	specPods, seenPods := cf.Spec.Remote.CIDR.Pods(), cf.Status.Remote.CIDR.Pods()
	if len(specPods) != len(seenPods) {
		e.t.Fatalf("cluster %d: Configuration %s maps %d of %d pod CIDRs", i, cf.Name, len(seenPods), len(specPods))
	}
	for j := range specPods {
		real, err1 := netip.ParsePrefix(string(specPods[j]))
		seen, err2 := netip.ParsePrefix(string(seenPods[j]))
		if err1 != nil || err2 != nil {
			e.t.Fatalf("cluster %d: pod CIDR %s seen as %s does not parse", i, specPods[j], seenPods[j])
		}
		pods = append(pods, struct{ real, seen netip.Prefix }{real, seen})
	}
	external, err := netip.ParsePrefix(string(cf.Status.Remote.CIDR.External))
	if err != nil {
		e.t.Fatalf("cluster %d: status.remote %+v does not parse", i, cf.Status.Remote.CIDR)
	}
	return pods, external
}

// remap moves a into prefix to, keeping its host bits (the NAT of the spec); either family,
// the invalid address when a and to differ in family.
func remap(a netip.Addr, to netip.Prefix) netip.Addr {
	if a.Is4() != to.Addr().Is4() {
		return netip.Addr{}
	}
	x, p := a.AsSlice(), to.Masked().Addr().AsSlice()
	bits := to.Bits()
	for i := range x {
		keep := byte(0)
		if n := bits - 8*i; n >= 8 {
			keep = 0xff
		} else if n > 0 {
			keep = ^byte(0xff >> n)
		}
		x[i] = p[i]&keep | x[i]&^keep
	}
	out, _ := netip.AddrFromSlice(x)
	return out
}

// nodeNS is the network namespace of cluster i's node.
func (e *env) nodeNS(i int, node string) string {
	for j := range e.l.Clusters[i].Nodes {
		if e.l.Clusters[i].NodeName(j) == node {
			return e.l.Clusters[i].Nodes[j].Name
		}
	}
	e.t.Fatalf("cluster %d has no node %s", i, node)
	return ""
}

// podNS is a pod's network namespace, as a /proc/PID/ns/net path of one of its processes.
func (e *env) podNS(i int, p corev1.Pod) string {
	ns, _, err := lab.PodProcesses(e.nodeNS(i, p.Spec.NodeName), p.Name, netip.MustParseAddr(p.Status.PodIP))
	if err != nil {
		e.t.Fatalf("cluster %d: %v", i, err)
	}
	return ns
}

// containerPIDs are the processes of a pod's containers (those of its network namespace but
// the sandbox's pause), to kill as a crash would.
func (e *env) containerPIDs(i int, p corev1.Pod) []string {
	_, pids, err := lab.PodProcesses(e.nodeNS(i, p.Spec.NodeName), p.Name, netip.MustParseAddr(p.Status.PodIP))
	if err != nil {
		e.t.Fatalf("cluster %d: %v", i, err)
	}
	var out []string
	for _, pid := range pids {
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); filepath.Base(exe) != "pause" {
			out = append(out, strconv.Itoa(pid))
		}
	}
	return out
}

// inNS prepares a command run in network namespace ns: a lab namespace's name or a path (podNS).
func inNS(ctx context.Context, ns string, args ...string) *exec.Cmd {
	path := ns
	if !strings.HasPrefix(ns, "/") {
		path = "/run/netns/" + ns
	}
	return exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + path, "--"}, args...)...)
}

// probeIn runs skein-probe in pod p of cluster i with kubectl exec (from the workstation, through
// the API server, the pod's kubelet and containerd) and returns its output: the call leaves from
// the container, as the pod's own processes would send it.
func (e *env) probeIn(ctx context.Context, i int, p corev1.Pod, args ...string) (string, error) {
	out, err := e.l.Command(ctx, i, append([]string{"kubectl", "exec", "-n", p.Namespace, p.Name, "-c", p.Spec.Containers[0].Name,
		"--", "/usr/local/bin/skein-probe"}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// probe runs skein-probe in namespace ns and returns its output: for the host network (a node's
// namespace), and for streams that must outlive what they disturb (a containerd restart ends
// kubectl exec sessions).
func (e *env) probe(ctx context.Context, ns string, args ...string) (string, error) {
	out, err := inNS(ctx, ns, append([]string{filepath.Join(e.bin, "skein-probe")}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// gatewayNodeFor is the node of cluster at's active gateway towards cluster of.
func (e *env) gatewayNodeFor(ctx context.Context, at, of int) string {
	gw := e.activeGatewayFor(ctx, at, of)
	return gw.Spec.NodeName
}

// matrix: pod to pod across the clusters, both ways, from the gateway's node and the other, TCP,
// UDP and ICMP; the far side sees the remapped source. Then host network to a remote pod.
func (e *env) matrix(ctx context.Context) { e.matrixPairs(ctx, [][2]int{{0, 1}, {1, 0}}) }

// matrixPairs runs the matrix from cluster s to cluster d for each ordered pair {s, d}.
func (e *env) matrixPairs(ctx context.Context, pairs [][2]int) {
	var failed, passed int
	// record counts and reports one cell of the matrix.
	record := func(line string, err error, out, seen string) {
		if err != nil {
			failed++
			e.t.Errorf("%s: %v: %s", line, err, out)
			e.reportf("%s FAIL", line)
			return
		}
		passed++
		e.reportf("%s ok (seen as %s)", line, seen)
	}
	for _, dir := range pairs {
		s, d := dir[0], dir[1]
		seenAs, srcExternalAtD := e.viewOf(ctx, d, s) // how d sees s's pods and nodes
		dstAs, _ := e.viewOf(ctx, s, d)               // how s sees d's pods
		gw := e.gatewayNodeFor(ctx, s, d)
		for _, src := range e.probePods(ctx, s) {
			where := "other node"
			if src.Spec.NodeName == gw {
				where = "gateway node"
			}
			for _, dst := range e.probePods(ctx, d) {
				target := dstAs.of(netip.MustParseAddr(dst.Status.PodIP))
				wantSrc := seenAs.of(netip.MustParseAddr(src.Status.PodIP)).String()
				for _, proto := range []string{"tcp", "udp", "icmp"} {
					var out string
					var err error
					if proto == "icmp" {
						out, err = e.ping(ctx, e.podNS(s, src), target.String())
					} else {
						port := map[string]string{"tcp": "7070", "udp": "7071"}[proto]
						out, err = e.probeIn(ctx, s, src, "call", "--timeout", "3s", proto, target.String()+":"+port)
						if err == nil && !strings.HasPrefix(out, dst.Name+" saw "+wantSrc+":") {
							err = fmt.Errorf("far side saw %q, want %s from %s", out, dst.Name, wantSrc)
						}
					}
					line := fmt.Sprintf("matrix: c%d %s (%s, %s) -> c%d %s as %s: %s", s, src.Name, src.Status.PodIP, where, d, dst.Name, target, proto)
					record(line, err, out, wantSrc)
				}
			}
		}
		// Host network (a hostNetwork pod is a process in the node's namespace) to a remote pod.
		dst := e.probePods(ctx, d)[0]
		target := dstAs.of(netip.MustParseAddr(dst.Status.PodIP))
		for j := range e.l.Clusters[s].Nodes {
			node := e.l.Clusters[s].NodeName(j)
			out, err := e.probe(ctx, e.l.Clusters[s].Nodes[j].Name, "call", "--timeout", "3s", "tcp", target.String()+":7070")
			line := fmt.Sprintf("matrix: c%d host network on %s -> c%d %s as %s: tcp", s, node, d, dst.Name, target)
			seen := ""
			if f := strings.Fields(out); len(f) >= 3 {
				if ap, perr := netip.ParseAddrPort(f[2]); perr == nil {
					seen = ap.Addr().String()
					if err == nil && !srcExternalAtD.Contains(ap.Addr()) {
						err = fmt.Errorf("seen as %s, outside %s (how c%d sees c%d's external CIDR)", ap.Addr(), srcExternalAtD, d, s)
					}
				}
			}
			if err == nil && seen == "" {
				err = fmt.Errorf("no source address in the answer")
			}
			record(line, err, out, seen)
		}
	}
	e.reportf("matrix: %d passed, %d failed", passed, failed)
}

// ping sends ICMP echo from namespace ns with the machine's ping (skein-probe speaks TCP and
// UDP only, and no image of the lab carries ping).
func (e *env) ping(ctx context.Context, ns, target string) (string, error) {
	out, err := inNS(ctx, ns, "ping", "-c", "3", "-i", "0.2", "-W", "2", "-q", target).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// stream runs skein-probe stream from namespace ns for d and returns the longest gap.
func (e *env) stream(ctx context.Context, ns, target string, d time.Duration) (<-chan time.Duration, <-chan string) {
	gap, text := make(chan time.Duration, 1), make(chan string, 1)
	go func() {
		out, err := e.probe(ctx, ns, "stream", "--interval", "20ms", "--duration", d.String(), target)
		text <- out
		lines := strings.Split(out, "\n")
		f := strings.Fields(lines[len(lines)-1])
		if err != nil || len(f) != 6 {
			gap <- -1
			return
		}
		ms, _ := strconv.Atoi(f[5])
		gap <- time.Duration(ms) * time.Millisecond
	}()
	return gap, text
}

// agentRestart: deleting an agent pod costs no more than one probe interval (2 s) of traffic
// through its node; a table-18952 route deleted by hand comes back within the 10 s resync.
func (e *env) agentRestart(ctx context.Context) {
	src := e.probePods(ctx, 0)[0]
	dstAs, _ := e.peerView(ctx, 0)
	dst := e.probePods(ctx, 1)[0]
	target := dstAs.of(netip.MustParseAddr(dst.Status.PodIP)).String() + ":7071"
	gapc, textc := e.stream(ctx, e.podNS(0, src), target, 12*time.Second)
	time.Sleep(2 * time.Second)
	var agents corev1.PodList
	if err := e.c[0].List(ctx, &agents, client.InNamespace("liqo"), client.MatchingLabels{"app.kubernetes.io/component": "agent"}); err != nil {
		e.t.Fatal(err)
	}
	for _, a := range agents.Items {
		if a.Spec.NodeName == src.Spec.NodeName {
			if err := e.c[0].Delete(ctx, &a); err != nil {
				e.t.Fatal(err)
			}
		}
	}
	gap, text := <-gapc, <-textc
	e.reportf("agent restart: agent pod on %s deleted while %s streamed UDP to c1: longest gap %s (%s)", src.Spec.NodeName, src.Name, gap, text)
	if gap < 0 || gap > 2*time.Second {
		e.t.Errorf("agent restart: longest gap %s, want at most one probe interval (2s): %s", gap, text)
	}
	e.waitFor(ctx, time.Minute, "agents Ready again", func() bool {
		var pods corev1.PodList
		_ = e.c[0].List(ctx, &pods, client.InNamespace("liqo"), client.MatchingLabels{"app.kubernetes.io/component": "agent"})
		ready := 0
		for _, p := range pods.Items {
			if podReady(&p) && p.DeletionTimestamp == nil {
				ready++
			}
		}
		return ready == 2
	})

	ns := e.nodeNS(0, src.Spec.NodeName)
	route := dstAs[0].seen.String()
	if out, err := exec.Command("ip", "-n", ns, "route", "del", route, "table", "18952").CombinedOutput(); err != nil {
		e.t.Fatalf("delete the route to %s in table 18952 on %s: %v: %s", route, src.Spec.NodeName, err, out)
	}
	took := e.waitFor(ctx, 10*time.Second, "route to "+route+" in table 18952 repaired", func() bool {
		out, _ := exec.Command("ip", "-n", ns, "route", "show", route, "table", "18952").Output()
		return strings.TrimSpace(string(out)) != ""
	})
	e.reportf("agent drift: route %s of table 18952 deleted by hand on %s, repaired in %s", route, src.Spec.NodeName, took.Round(time.Millisecond))

	// The rule too: repaired on the kernel's notice, not at the next resync (10 s).
	if out, err := exec.Command("ip", "-n", ns, "rule", "del", "to", route, "lookup", "18952").CombinedOutput(); err != nil {
		e.t.Fatalf("delete the rule to %s on %s: %v: %s", route, src.Spec.NodeName, err, out)
	}
	took = e.waitFor(ctx, 15*time.Second, "rule to "+route+" repaired", func() bool {
		out, _ := exec.Command("ip", "-n", ns, "rule", "show", "to", route).Output()
		return strings.Contains(string(out), "lookup 18952")
	})
	e.reportf("agent drift: rule to %s deleted by hand on %s, repaired in %s", route, src.Spec.NodeName, took.Round(time.Millisecond))
	if took > 2*time.Second {
		e.t.Errorf("the rule was repaired after %v: the agent did not hear the kernel's notice (resync is 10 s)", took)
	}

	// And the host-network SNAT's nftables table.
	if out, err := exec.Command("ip", "netns", "exec", ns, "nft", "delete", "table", "ip", "skein-agent").CombinedOutput(); err != nil {
		e.t.Fatalf("delete nftables table skein-agent on %s: %v: %s", src.Spec.NodeName, err, out)
	}
	took = e.waitFor(ctx, 15*time.Second, "nftables table skein-agent repaired", func() bool {
		return exec.Command("ip", "netns", "exec", ns, "nft", "list", "table", "ip", "skein-agent").Run() == nil
	})
	e.reportf("agent drift: nftables table skein-agent deleted by hand on %s, repaired in %s", src.Spec.NodeName, took.Round(time.Millisecond))
	if took > 2*time.Second {
		e.t.Errorf("the nftables table was repaired after %v: the agent did not hear the kernel's notice (resync is 10 s)", took)
	}
}

// failover: two gateway replicas per side; SIGKILL the active server replica while a stream
// runs, then delete the active pod gracefully; report both gaps.
func (e *env) failover(ctx context.Context) {
	src := e.probePods(ctx, 0)[0]
	dstAs, _ := e.peerView(ctx, 0)
	dst := e.probePods(ctx, 1)[0]
	target := dstAs.of(netip.MustParseAddr(dst.Status.PodIP)).String() + ":7071"
	active := func() corev1.Pod { return e.activeGateway(ctx, 1) }
	var gws corev1.PodList
	if err := e.c[1].List(ctx, &gws, client.MatchingLabels{"networking.liqo.io/component": "gateway"}); err != nil {
		e.t.Fatal(err)
	}
	if len(gws.Items) != 2 {
		e.t.Fatalf("cluster 1: %d gateway pods, want 2 (gateway.replicas=2)", len(gws.Items))
	}

	a := active()
	gapc, textc := e.stream(ctx, e.podNS(0, src), target, 20*time.Second)
	time.Sleep(2 * time.Second)
	pids := e.containerPIDs(1, a)
	if len(pids) == 0 {
		e.t.Fatalf("no process in the active gateway pod %s", a.Name)
	}
	for _, p := range pids {
		_ = exec.Command("kill", "-9", p).Run()
	}
	gap, text := <-gapc, <-textc
	e.reportf("failover: SIGKILL of the active gateway %s: longest gap %s (%s)", a.Name, gap, text)
	if gap < 0 {
		e.t.Errorf("failover after SIGKILL: traffic did not resume: %s", text)
	}

	e.waitFor(ctx, time.Minute, "both gateway replicas Ready again", func() bool {
		var pods corev1.PodList
		_ = e.c[1].List(ctx, &pods, client.MatchingLabels{"networking.liqo.io/component": "gateway"})
		ready := 0
		for _, p := range pods.Items {
			if podReady(&p) && p.DeletionTimestamp == nil {
				ready++
			}
		}
		return ready == 2
	})
	a = active()
	gapc, textc = e.stream(ctx, e.podNS(0, src), target, 15*time.Second)
	time.Sleep(2 * time.Second)
	if err := e.c[1].Delete(ctx, &a); err != nil {
		e.t.Fatal(err)
	}
	gap, text = <-gapc, <-textc
	e.reportf("failover: graceful delete of the active gateway %s: longest gap %s (%s)", a.Name, gap, text)
	if gap < 0 {
		e.t.Errorf("failover after a graceful delete: traffic did not resume: %s", text)
	}
}

// disconnectReset: skeinctl network disconnect, then reset: no skein route, rule, FDB entry,
// link or nftables table on any node; the API objects gone.
func (e *env) disconnectReset(ctx context.Context) {
	start := time.Now()
	e.run(ctx, 0, "skeinctl", "network", "disconnect", "--remote-kubeconfig", e.l.Clusters[1].Kubeconfig, "--wait", "--yes")
	e.run(ctx, 0, "skeinctl", "network", "reset", "--remote-kubeconfig", e.l.Clusters[1].Kubeconfig, "--wait", "--yes")
	took := time.Since(start)
	clean := func(i int, ns string) []string {
		var left []string
		for _, c := range [][]string{
			{"ip", "-n", ns, "link", "show", "liqo.vxlan"},
			{"ip", "-n", ns, "route", "show", "table", "18952"},
			{"ip", "-n", ns, "rule", "show", "table", "18952"},
			{"ip", "netns", "exec", ns, "nft", "list", "table", "ip", "skein-agent"},
		} {
			out, _ := exec.Command(c[0], c[1:]...).CombinedOutput()
			if s := strings.TrimSpace(string(out)); s != "" && !strings.Contains(s, "does not exist") && !strings.Contains(s, "No such file") {
				left = append(left, strings.Join(c[3:], " ")+": "+s)
			}
		}
		return left
	}
	var left []string
	e.waitFor(ctx, 30*time.Second, "nodes clean after disconnect and reset", func() bool {
		left = nil
		for i := range 2 {
			for _, n := range e.l.Clusters[i].Nodes {
				left = append(left, clean(i, n.Name)...)
			}
		}
		return len(left) == 0
	})
	for i := range 2 {
		for _, l := range []client.ObjectList{&netv1alpha1.ConfigurationList{}, &netv1alpha1.GatewayServerList{},
			&netv1alpha1.GatewayClientList{}, &netv1alpha1.PublicKeyList{}, &netv1alpha1.ConnectionList{}} {
			e.waitFor(ctx, 30*time.Second, fmt.Sprintf("cluster %d: no %T left", i, l), func() bool {
				return e.c[i].List(ctx, l) == nil && listLen(l) == 0
			})
		}
	}
	e.reportf("disconnect+reset: %.1fs; no liqo.vxlan, table 18952 route or rule, or skein nftables table on any node; no networking.liqo.io peering object left", took.Seconds())
}

func listLen(l client.ObjectList) int {
	switch l := l.(type) {
	case *netv1alpha1.ConfigurationList:
		return len(l.Items)
	case *netv1alpha1.GatewayServerList:
		return len(l.Items)
	case *netv1alpha1.GatewayClientList:
		return len(l.Items)
	case *netv1alpha1.PublicKeyList:
		return len(l.Items)
	case *netv1alpha1.ConnectionList:
		return len(l.Items)
	}
	return -1
}

// throughput runs iperf3 (Debian's) for d from a pod of cluster 0 to a server pod of cluster 1,
// through both gateways, and reports the rate.
// metrics scrapes every skein pod of both clusters (the PodMonitor's selector,
// app.kubernetes.io/part-of=skein, and the port named metrics) from inside the lab and holds
// each scrape to docs/metrics.md. Standby gateways are skipped: the last handshake is absent
// on a replica that never had one.
func (e *env) metrics(ctx context.Context) {
	for i := range 2 {
		seen := map[string]int{}
		for _, tg := range e.scrapeTargets(ctx, i) {
			if tg.component == "gateway" && tg.pod.Labels["networking.liqo.io/active"] != "true" {
				continue
			}
			scrape, err := e.scrape(ctx, tg)
			if err != nil {
				e.t.Errorf("cluster %d: %s: %v", i, tg.component, err)
				continue
			}
			e.t.Run(fmt.Sprintf("c%d-%s-%s", i, tg.component, tg.pod.Name), func(t *testing.T) { metricsdoc.Check(t, tg.component, scrape) })
			seen[tg.component]++
		}
		if seen["controller"] != 1 || seen["agent"] != len(e.l.Clusters[i].Nodes) || seen["gateway"] < 1 {
			e.t.Errorf("cluster %d: scraped %v; want the controller, an agent per node and the active gateways", i, seen)
		}
		e.reportf("metrics: cluster %d, scraped and checked against docs/metrics.md: %v", i, seen)
	}
}

// scrapeTarget is a skein process's metrics endpoint in the lab.
type scrapeTarget struct {
	cluster   int
	component string // controller, agent or gateway
	pod       corev1.Pod
	ns        string // the network namespace to scrape from
	url       string
}

// scrapeTargets lists the metrics endpoints of cluster i's running skein pods: the PodMonitor's
// selector (app.kubernetes.io/part-of=skein) and the port named metrics.
func (e *env) scrapeTargets(ctx context.Context, i int) []scrapeTarget {
	e.t.Helper()
	var pods corev1.PodList
	if err := e.c[i].List(ctx, &pods, client.MatchingLabels{"app.kubernetes.io/part-of": "skein"}); err != nil {
		e.t.Fatal(err)
	}
	var out []scrapeTarget
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		component := p.Labels["app.kubernetes.io/component"]
		if p.Labels["networking.liqo.io/component"] == "gateway" {
			component = "gateway"
		}
		port := int32(0)
		for _, c := range p.Spec.Containers {
			for _, cp := range c.Ports {
				if cp.Name == "metrics" {
					port = cp.ContainerPort
				}
			}
		}
		if component == "" || port == 0 || p.Status.PodIP == "" {
			e.t.Errorf("cluster %d: pod %s/%s: component %q, metrics port %d, IP %q", i, p.Namespace, p.Name, component, port, p.Status.PodIP)
			continue
		}
		ns := e.nodeNS(i, p.Spec.NodeName)
		if !p.Spec.HostNetwork {
			ns = e.podNS(i, p)
		}
		out = append(out, scrapeTarget{cluster: i, component: component, pod: p, ns: ns,
			url: fmt.Sprintf("http://%s/metrics", net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port))))})
	}
	return out
}

// scrape fetches a target's metrics in the text format.
func (e *env) scrape(ctx context.Context, tg scrapeTarget) (string, error) {
	out, err := e.probe(ctx, tg.ns, "get", tg.url)
	if err != nil {
		return "", fmt.Errorf("%s: %w: %s", tg.url, err, out)
	}
	return out + "\n", nil // probe trims the output; the text format ends in a newline
}

func (e *env) throughput(ctx context.Context, d time.Duration) {
	dep, srv := e.iperfServer(ctx, "iperf3", nil)
	dstAs, _ := e.peerView(ctx, 0)
	target := dstAs.of(netip.MustParseAddr(srv.Status.PodIP)).String()
	src := e.probePods(ctx, 0)[0]
	secs := strconv.Itoa(int(d.Seconds()))
	out, err := inNS(ctx, e.podNS(0, src), "iperf3", "-c", target, "-t", secs, "-J").Output()
	if err != nil {
		e.t.Fatalf("iperf3 -c %s: %v: %s", target, err, out)
	}
	var res struct {
		End struct {
			SumSent struct {
				BitsPerSecond float64 `json:"bits_per_second"`
				Retransmits   int     `json:"retransmits"`
			} `json:"sum_sent"`
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal(out, &res); err != nil || res.End.SumReceived.BitsPerSecond == 0 {
		e.t.Fatalf("iperf3 result: %v: %s", err, out)
	}
	e.reportf("throughput: iperf3 TCP, 1 stream, %ss, c0 %s -> c1 %s as %s: %.0f Mbit/s received, %d retransmits",
		secs, src.Name, srv.Name, target, res.End.SumReceived.BitsPerSecond/1e6, res.End.SumSent.Retransmits)
	_ = e.c[1].Delete(ctx, dep)
}

// TestDemo is make demo: the lab, skein installed with Helm in both clusters, peered with
// skeinctl, then skeinctl test network (the connectivity matrix) and skeinctl bench (the
// throughput, packet rate and latency figures beside the same inside one cluster). It runs
// only when SKEIN_DEMO is set (make demo sets it); KEEP=1 keeps the lab up afterwards.
func TestDemo(t *testing.T) {
	if os.Getenv("SKEIN_DEMO") == "" {
		t.Skip("the demo runs with make demo (SKEIN_DEMO=1); the end-to-end suite covers the same steps")
	}
	start := time.Now()
	// Its own lab prefix (dm and the process id): a kept demo lab is not taken for a suite's.
	e := setupLab(t, true, lab.Options{Prefix: fmt.Sprintf("dm%d", os.Getpid())})
	defer func() {
		fmt.Printf("\n=== skein demo: two clusters, both on pod CIDR 10.244.0.0/16, peered through userspace gateways\n%s", e.report.String())
		fmt.Printf("=== total %.0fs\n", time.Since(start).Seconds())
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	e.install(ctx, 1)
	e.connect(ctx)
	// The user's own tools: the connectivity matrix and the throughput ladder.
	remote := e.l.Clusters[1].Kubeconfig
	e.reportf("skeinctl test network --remote-kubeconfig %s\n%s", remote, e.run(ctx, 0, "skeinctl", "test", "network", "--remote-kubeconfig", remote))
	// The chart outlives the lab (its state directory goes with it): bin/, beside the binaries.
	svg, err := filepath.Abs(filepath.Join("..", "..", "bin", "demo-skeinctl-bench.svg"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(svg), 0o755); err != nil {
		t.Fatal(err)
	}
	e.reportf("skeinctl bench --remote-kubeconfig %s --duration 5s --svg %s\n%s\nchart: %s", remote, svg,
		e.run(ctx, 0, "skeinctl", "bench", "--remote-kubeconfig", remote, "--duration", "5s", "--svg", svg), svg)
}

// saveLogs copies the lab's logs (the control planes' and every pod's) from stateDir to dir.
func saveLogs(t *testing.T, stateDir, dir string) {
	logs, _ := filepath.Glob(filepath.Join(stateDir, "logs"))
	nodeLogs, _ := filepath.Glob(filepath.Join(stateDir, "*", "logs"))
	for _, src := range append(logs, nodeLogs...) {
		rel, err := filepath.Rel(stateDir, src)
		if err != nil {
			continue
		}
		dst := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Logf("saving logs: %v", err)
			return
		}
		if out, err := exec.Command("cp", "-r", src, dst).CombinedOutput(); err != nil {
			t.Logf("saving logs %s: %v: %s", src, err, out)
		}
	}
	t.Logf("the failed run's logs are in %s", dir)
}

// version is the VERSION file's: the tag of the images and the chart's appVersion.
func version(t *testing.T) string {
	b, err := os.ReadFile("../../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// iperfServer runs an iperf3 server (a Deployment named name, its container limited to limits)
// in cluster 1 and returns it and its pod once Ready; the caller deletes it.
func (e *env) iperfServer(ctx context.Context, name string, limits corev1.ResourceList) (*appsv1.Deployment, corev1.Pod) {
	labels := map[string]string{"app": name}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "iperf3", Image: e.iperfImage(), Args: []string{"-s"},
					Resources: corev1.ResourceRequirements{Limits: limits},
					ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
						TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(5201)}}}}}}}}}
	if err := e.c[1].Create(ctx, dep); err != nil {
		e.t.Fatal(err)
	}
	var srv corev1.Pod
	e.waitFor(ctx, time.Minute, name+" server pod Ready", func() bool {
		var pods corev1.PodList
		_ = e.c[1].List(ctx, &pods, client.InNamespace("default"), client.MatchingLabels(labels))
		if len(pods.Items) == 1 && podReady(&pods.Items[0]) {
			srv = pods.Items[0]
			return true
		}
		return false
	})
	return dep, srv
}

// iperfImage is the iperf3 server's image: the lab's (Debian's iperf3 and its libraries).
func (e *env) iperfImage() string { return lab.IperfImage }

// probeImage is the probe pods' image: skein-probe from the lab's registry.
func (e *env) probeImage() string {
	return e.l.Registry + "/skein-net/skein-probe:" + version(e.t)
}
