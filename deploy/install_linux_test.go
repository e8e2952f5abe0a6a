package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/skein-net/skein/control/agent"
	"github.com/skein-net/skein/control/agent/plan"
	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/controller"
	"github.com/skein-net/skein/control/identity"
	"github.com/skein-net/skein/control/kube"
	"github.com/skein-net/skein/dataplane/kernel"
	"github.com/skein-net/skein/dataplane/overlay"
	"github.com/skein-net/skein/internal/apitest"
	"github.com/skein-net/skein/internal/metricsdoc"
	"github.com/skein-net/skein/internal/safebuffer"
)

func saUser(ns, sa string) string { return "system:serviceaccount:" + ns + ":" + sa }

func saGroups(ns string) []string {
	return []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
}

// saKubeconfig writes a kubeconfig that reaches the test API server as service account sa of
// ns, through impersonation: the process using it has exactly that account's permissions.
func saKubeconfig(t *testing.T, env *apitest.Env, ns, sa string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(env.KubeconfigFile(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range cfg.AuthInfos {
		ai.Impersonate, ai.ImpersonateGroups = saUser(ns, sa), saGroups(ns)
	}
	path := filepath.Join(t.TempDir(), sa+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// podEnv resolves a container's environment as the kubelet would for a pod named pod in ns.
func podEnv(t *testing.T, c corev1.Container, ns, pod string) []string {
	t.Helper()
	var env []string
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			env = append(env, e.Name+"="+ns)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env = append(env, e.Name+"="+pod)
		default:
			t.Fatalf("container %s: env %s: this test does not resolve %+v", c.Name, e.Name, e.ValueFrom)
		}
	}
	return env
}

// can asks the API server whether a user may do something.
func can(ctx context.Context, c client.Client, user string, groups []string, a authorizationv1.ResourceAttributes) (bool, error) {
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups, ResourceAttributes: &a}}
	if err := c.Create(ctx, sar); err != nil {
		return false, err
	}
	return sar.Status.Allowed, nil
}

// TestChartInstall installs the chart with `helm install` into a real API server and runs the
// components with the permissions it grants, nothing more: the real skein-controller binary
// with the Deployment's arguments and environment as its ServiceAccount, through the whole
// spec/003 flow (it renders gateways from the chart's templates, binds them the chart's gateway
// roles); the agent's API side as its ServiceAccount. Then the cluster id across upgrade and
// uninstall: never changed, kept on uninstall, a different clusterID refused.
func TestChartInstall(t *testing.T) {
	helmBinary(t)
	env := apiServer(t)
	c := env.Client
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const ns = "liqo"
	kubeconfig := env.KubeconfigFile(t)
	chart, err := filepath.Abs(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	install := func(extra ...string) (string, error) {
		return helm(t, kubeconfig, append([]string{"upgrade", "--install", releaseName, chart, "--namespace", ns, "--create-namespace"}, extra...)...)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	idA := "6f1c2b0e-8f7a-4c55-9d0e-2a4b6c8d0e1f"
	out, err := install("--set-string", "clusterID="+idA, "--set", "peering.networking.gateway.mtu=1400")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// The notes say which peering values network connect will use; the controller gets them.
	if want := "a LoadBalancer Service on port 51820, MTU 1400"; !strings.Contains(out, want) {
		t.Errorf("helm install's notes lack %q:\n%s", want, out)
	}
	ctrlDep := &appsv1.Deployment{}
	must(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: fullname + "-controller"}, ctrlDep))
	if args := strings.Join(ctrlDep.Spec.Template.Spec.Containers[0].Args, " "); !strings.Contains(args, "--gateway-mtu=1400 --gateway-server-service-type=LoadBalancer --gateway-server-port=51820") {
		t.Errorf("the controller does not get the peering values: %s", args)
	}
	getID := func() string {
		t.Helper()
		id, err := identity.ReadClusterID(ctx, c, ns)
		must(err)
		return id
	}
	if got := getID(); got != idA {
		t.Fatalf("cluster id %q after install with clusterID %q", got, idA)
	}

	dep := &appsv1.Deployment{}
	must(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: fullname + "-controller"}, dep))
	ds := &appsv1.DaemonSet{}
	must(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: fullname + "-agent"}, ds))
	for _, tmpl := range []client.Object{&netv1alpha1.WgGatewayServerTemplate{}, &netv1alpha1.WgGatewayClientTemplate{}} {
		name := "wireguard-server"
		if _, ok := tmpl.(*netv1alpha1.WgGatewayClientTemplate); ok {
			name = "wireguard-client"
		}
		must(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, tmpl))
	}

	// skein-controller, as the Deployment runs it (on loopback ports: the chart's may be taken here).
	bins, err := binaries()
	must(err)
	ctrPod := dep.Spec.Template.Spec
	ctr := ctrPod.Containers[0]
	ctrUser := saUser(ns, ctrPod.ServiceAccountName)
	healthAddr, metricsAddr := freeLoopbackPort(t), freeLoopbackPort(t)
	args := append(slices.Clone(ctr.Args), "--metrics-listen="+metricsAddr, "--health-listen="+healthAddr, "--kubeconfig="+saKubeconfig(t, env, ns, ctrPod.ServiceAccountName))
	cmd := exec.Command(filepath.Join(bins, "skein-controller"), args...)
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(e string) bool {
		return strings.HasPrefix(e, "KUBECONFIG=") || strings.HasPrefix(e, "POD_")
	}), podEnv(t, ctr, ns, "skein-controller-0")...)
	var ctrLog safebuffer.Buffer
	cmd.Stdout, cmd.Stderr = &ctrLog, &ctrLog
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	must(cmd.Start())
	var stopOnce sync.Once
	stopController := func() {
		stopOnce.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		})
	}
	t.Cleanup(stopController)
	ctrLogs := func() string { return "skein-controller log:\n" + ctrLog.String() }

	// It read the id the chart created, published the chart's networks, and leads.
	var network *identity.Network
	apitest.Eventually(t, "skein-network ConfigMap", 60*time.Second, func() bool {
		network, err = identity.ReadNetwork(ctx, c, ns)
		return err == nil
	}, ctrLogs)
	if got := fmt.Sprint(network.PodCIDRs); got != "[10.244.0.0/16]" || network.InternalCIDR.String() != "10.80.0.0/16" {
		t.Errorf("skein-controller publishes pod CIDRs %s and internal CIDR %s, not the chart's defaults", got, network.InternalCIDR)
	}
	apitest.Eventually(t, "leader election Lease", 60*time.Second, func() bool {
		l := &coordinationv1.Lease{}
		return c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "skein-controller"}, l) == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != ""
	}, ctrLogs)

	// The kubelet's probes: alive, and ready once its caches are synced.
	for _, path := range []string{"/healthz", "/readyz"} {
		apitest.Eventually(t, "skein-controller answers "+path, 30*time.Second, func() bool {
			resp, err := http.Get("http://" + healthAddr + path)
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}, ctrLogs)
	}

	// spec/003's manual flow, as in control/controller's TestSpec003, in a namespace of its own.
	gwNS := env.Namespace(t, "chart-spec003")
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: gwNS + "-node"}}
	must(c.Create(ctx, node))
	t.Cleanup(func() { _ = c.Delete(context.Background(), node) })
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.42.3.54"}}
	must(c.Status().Update(ctx, node))
	must(c.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "server-0", Namespace: gwNS,
		Labels: map[string]string{"networking.liqo.io/gateway": "server", "networking.liqo.io/active": "true"}},
		Spec: corev1.PodSpec{NodeName: node.Name, Containers: []corev1.Container{{Name: "gateway", Image: "skein-gateway"}}}}))
	dir := filepath.Join("..", "control", "api", "networking", "v1alpha1", "testdata", "spec003")
	where := map[string]string{}
	for _, f := range []string{"configuration.yaml", "gatewayserver.yaml", "gatewayclient.yaml", "publickey-server.yaml", "publickey-client.yaml"} {
		u := apitest.CreateFromFile(t, c, filepath.Join(dir, f), gwNS)
		where[f] = u.GetNamespace()
		t.Cleanup(func() { _ = c.Delete(context.Background(), u) })
	}
	conf := &netv1alpha1.Configuration{}
	apitest.Eventually(t, "Configuration status.remote", 60*time.Second, func() bool {
		return c.Get(ctx, client.ObjectKey{Namespace: gwNS, Name: "dry-paper"}, conf) == nil && conf.Status.Remote != nil && conf.Status.Remote.CIDR.Pod != ""
	}, ctrLogs)
	gs := &netv1alpha1.GatewayServer{}
	apitest.Eventually(t, "GatewayServer status.endpoint and internalEndpoint", 60*time.Second, func() bool {
		return c.Get(ctx, client.ObjectKey{Namespace: gwNS, Name: "server"}, gs) == nil && gs.Status.Endpoint != nil &&
			len(gs.Status.Endpoint.Addresses) > 0 && gs.Status.InternalEndpoint != nil && gs.Status.InternalEndpoint.IP != nil
	}, ctrLogs)
	gc := &netv1alpha1.GatewayClient{}
	apitest.Eventually(t, "GatewayClient status.internalEndpoint", 60*time.Second, func() bool {
		return c.Get(ctx, client.ObjectKey{Namespace: where["gatewayclient.yaml"], Name: "client"}, gc) == nil &&
			gc.Status.InternalEndpoint != nil && gc.Status.InternalEndpoint.IP != nil
	}, ctrLogs)
	pk := &netv1alpha1.PublicKey{}
	apitest.Eventually(t, "PublicKey checked", 60*time.Second, func() bool {
		return c.Get(ctx, client.ObjectKey{Namespace: where["publickey-server.yaml"], Name: "crimson-field"}, pk) == nil && len(pk.Status.Conditions) > 0
	}, ctrLogs)

	// Its metrics: as docs/metrics.md lists them, lint-clean, the IPAM gauges counting the peer.
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	must(err)
	scrape, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	must(err)
	metricsdoc.Check(t, "controller", string(scrape))
	if v, _ := metricsdoc.Sample(string(scrape), `skein_controller_ipam_range_assigned_addresses{range="internal"}`); v < 2 {
		t.Errorf("%v internal addresses assigned, want the node's and the gateways'", v)
	}
	if v, ok := metricsdoc.Sample(string(scrape), "skein_controller_build_info{"); !ok || v != 1 {
		t.Errorf("no skein_controller_build_info")
	}

	// What it rendered from the chart's template and the bindings it made.
	gwDep := &appsv1.Deployment{}
	must(c.Get(ctx, client.ObjectKey{Namespace: gwNS, Name: "server"}, gwDep))
	if img := gwDep.Spec.Template.Spec.Containers[0].Image; img != "ghcr.io/skein-net/skein-gateway:"+chartAppVersion() {
		t.Errorf("the gateway Deployment runs %s, not the chart's gateway image", img)
	}
	rb := &rbacv1.RoleBinding{}
	must(c.Get(ctx, client.ObjectKey{Namespace: gwNS, Name: "server"}, rb))
	crb := &rbacv1.ClusterRoleBinding{}
	must(c.Get(ctx, client.ObjectKey{Name: controller.GatewayClusterBindingName(gwNS, "server")}, crb))
	if rb.RoleRef.Name != controller.GatewayClusterRole || crb.RoleRef.Name != controller.GatewayNodesClusterRole {
		t.Errorf("gateway bindings to %s and %s", rb.RoleRef.Name, crb.RoleRef.Name)
	}

	// A failure is an Event (events.k8s.io): a second Configuration for the same cluster.
	dup := &netv1alpha1.Configuration{ObjectMeta: metav1.ObjectMeta{Name: "dup", Namespace: gwNS, Labels: conf.Labels}, Spec: conf.Spec}
	must(c.Create(ctx, dup))
	apitest.Eventually(t, "DuplicateClusterID event", 60*time.Second, func() bool {
		var evs eventsv1.EventList
		if c.List(ctx, &evs, client.InNamespace(gwNS)) != nil {
			return false
		}
		return slices.ContainsFunc(evs.Items, func(e eventsv1.Event) bool { return e.Reason == "DuplicateClusterID" && e.Regarding.Name == "dup" })
	}, ctrLogs)
	must(c.Delete(ctx, dup))

	// The agent's API side, as the DaemonSet's ServiceAccount, on the node above.
	agentSA := ds.Spec.Template.Spec.ServiceAccountName
	// As the agent's pod-bound token says who it is: its node and its pod (the chart's policy
	// holds it to them).
	agentCfg := rest.CopyConfig(env.Config)
	agentCfg.Impersonate = rest.ImpersonationConfig{UserName: saUser(ns, agentSA), Groups: saGroups(ns),
		Extra: map[string][]string{"authentication.kubernetes.io/node-name": {node.Name}, "authentication.kubernetes.io/pod-name": {"skein-agent-test"}}}
	in := &netv1alpha1.InternalNode{}
	apitest.Eventually(t, "InternalNode of the node", 60*time.Second, func() bool {
		return c.Get(ctx, client.ObjectKey{Name: node.Name}, in) == nil && in.Spec.OverlayIP != nil
	}, ctrLogs)
	agentPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "skein-agent-test", Namespace: ns},
		Spec: corev1.PodSpec{NodeName: node.Name, Containers: []corev1.Container{{Name: "agent", Image: "skein-agent"}}}}
	must(c.Create(ctx, agentPod))
	var agentLog safebuffer.Buffer
	a, err := agent.New(agentCfg, agent.Options{
		Node:         plan.Node{Name: node.Name, IP: netip.MustParseAddr("192.168.77.1"), PodCIDRs: network.PodCIDRs, InternalCIDR: network.InternalCIDR},
		PodNamespace: ns, PodName: agentPod.Name, Resync: time.Second,
		Log: slog.New(slog.NewTextHandler(&agentLog, nil)),
	}, kernel.NewFake(), nil)
	must(err)
	agentCtx, cancelAgent := context.WithCancel(ctx)
	agentDone := make(chan error, 1)
	go func() { agentDone <- a.Run(agentCtx) }()
	var agentOnce sync.Once
	stopAgent := func() {
		agentOnce.Do(func() {
			cancelAgent()
			if err := <-agentDone; err != nil {
				t.Errorf("agent: %v", err)
			}
		})
	}
	defer stopAgent()
	// The server's active replica publishes its VTEP (what skein-gateway does): its pod's IP,
	// and the MAC of the overlay IP the controller gave it.
	apitest.Eventually(t, "the GatewayServer's overlay IP", 60*time.Second, func() bool {
		return c.Get(ctx, client.ObjectKeyFromObject(gs), gs) == nil && gs.Status.InternalEndpoint != nil && gs.Status.InternalEndpoint.IP != nil
	}, ctrLogs)
	gwMAC := overlay.MACString(overlay.GatewayMAC(netip.MustParseAddr(string(*gs.Status.InternalEndpoint.IP))))
	vtep, _ := json.Marshal(map[string]any{"status": map[string]any{"internalEndpoint": map[string]any{"vtep": map[string]string{"ip": "10.244.1.20", "mac": gwMAC}}}})
	must(c.Status().Patch(ctx, gs, client.RawPatch(types.MergePatchType, vtep)))
	agentLogs := func() string { return "agent log:\n" + agentLog.String() }
	apitest.Eventually(t, "the agent publishes its VTEP", 60*time.Second, func() bool {
		return c.Get(ctx, client.ObjectKey{Name: node.Name}, in) == nil && in.Status.VTEP != nil && in.Status.VTEP.IP == "192.168.77.1"
	}, agentLogs)
	apitest.Eventually(t, "the agent annotates its pod", 60*time.Second, func() bool {
		return c.Get(ctx, client.ObjectKeyFromObject(agentPod), agentPod) == nil && agentPod.Annotations[agent.MACAnnotation] == string(in.Status.VTEP.MAC)
	}, agentLogs)

	// The policy: an agent on another node may not write this node's InternalNode, nor
	// annotate a pod that is not its own.
	otherCfg := rest.CopyConfig(env.Config)
	otherCfg.Impersonate = rest.ImpersonationConfig{UserName: saUser(ns, agentSA), Groups: saGroups(ns),
		Extra: map[string][]string{"authentication.kubernetes.io/node-name": {"another-node"}, "authentication.kubernetes.io/pod-name": {"skein-agent-other"}}}
	other, err := client.New(otherCfg, client.Options{Scheme: kube.Scheme()})
	must(err)
	hijack, _ := json.Marshal(map[string]any{"status": map[string]any{"vtep": map[string]string{"ip": "192.168.77.66", "mac": "02:00:00:00:00:66"}}})
	if err := other.Status().Patch(ctx, in.DeepCopy(), client.RawPatch(types.MergePatchType, hijack)); err == nil || !strings.Contains(err.Error(), "only the InternalNode of the node its pod runs on") {
		t.Errorf("an agent of another node wrote this node's InternalNode: %v", err)
	}
	annotate, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{agent.MACAnnotation: "02:00:00:00:00:66"}}})
	if err := other.Patch(ctx, agentPod.DeepCopy(), client.RawPatch(types.MergePatchType, annotate)); err == nil || !strings.Contains(err.Error(), "only its own pod") {
		t.Errorf("an agent annotated another agent's pod: %v", err)
	}

	// Least privilege: what each account may not do (and what a gateway may).
	gwUser, gwGroups := saUser(gwNS, "server"), saGroups(gwNS)
	for _, q := range []struct {
		who    string
		groups []string
		attrs  authorizationv1.ResourceAttributes
		want   bool
	}{
		{ctrUser, saGroups(ns), authorizationv1.ResourceAttributes{Verb: "delete", Resource: "nodes"}, false},
		{ctrUser, saGroups(ns), authorizationv1.ResourceAttributes{Verb: "create", Group: "rbac.authorization.k8s.io", Resource: "clusterroles"}, false},
		{ctrUser, saGroups(ns), authorizationv1.ResourceAttributes{Verb: "bind", Group: "rbac.authorization.k8s.io", Resource: "clusterroles", Name: "cluster-admin"}, false},
		{ctrUser, saGroups(ns), authorizationv1.ResourceAttributes{Verb: "update", Resource: "configmaps", Namespace: ns, Name: "kube-root-ca.crt"}, false},
		{ctrUser, saGroups(ns), authorizationv1.ResourceAttributes{Verb: "get", Resource: "configmaps", Namespace: "kube-system", Name: "extension-apiserver-authentication"}, false},
		{ctrUser, saGroups(ns), authorizationv1.ResourceAttributes{Verb: "create", Resource: "pods", Namespace: ns}, false},
		{ctrUser, saGroups(ns), authorizationv1.ResourceAttributes{Verb: "update", Group: "networking.liqo.io", Resource: "publickeys", Namespace: gwNS}, false},
		{saUser(ns, agentSA), saGroups(ns), authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: ns}, false},
		{saUser(ns, agentSA), saGroups(ns), authorizationv1.ResourceAttributes{Verb: "patch", Resource: "pods", Namespace: gwNS}, false},
		{saUser(ns, agentSA), saGroups(ns), authorizationv1.ResourceAttributes{Verb: "update", Group: "networking.liqo.io", Resource: "internalnodes"}, false},
		{saUser(ns, agentSA), saGroups(ns), authorizationv1.ResourceAttributes{Verb: "create", Group: "networking.liqo.io", Resource: "configurations", Namespace: gwNS}, false},
		{saUser(ns, agentSA), saGroups(ns), authorizationv1.ResourceAttributes{Verb: "list", Resource: "nodes"}, false},
		// The gateway, through the bindings the controller made with the chart's roles.
		{gwUser, gwGroups, authorizationv1.ResourceAttributes{Verb: "watch", Group: "networking.liqo.io", Resource: "gatewayservers", Namespace: gwNS}, true},
		{gwUser, gwGroups, authorizationv1.ResourceAttributes{Verb: "list", Resource: "nodes"}, true},
		// Not every Pod of the cluster: the default templates do not --watch-pods.
		{gwUser, gwGroups, authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods"}, false},
		{gwUser, gwGroups, authorizationv1.ResourceAttributes{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: gwNS, Name: "server"}, true},
		// Its own Lease and key Secret by name, no other (issue 40).
		{gwUser, gwGroups, authorizationv1.ResourceAttributes{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: gwNS, Name: "client"}, false},
		{gwUser, gwGroups, authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: gwNS, Name: "server-wg-key"}, true},
		{gwUser, gwGroups, authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: gwNS, Name: "client-wg-key"}, false},
		{gwUser, gwGroups, authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets", Namespace: gwNS}, false},
		{gwUser, gwGroups, authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: ns}, false},
		{gwUser, gwGroups, authorizationv1.ResourceAttributes{Verb: "delete", Group: "networking.liqo.io", Resource: "gatewayservers", Namespace: gwNS}, false},
	} {
		got, err := can(ctx, c, q.who, q.groups, q.attrs)
		must(err)
		if got != q.want {
			t.Errorf("%s may %s %s/%s %s in %q: %t, want %t", q.who, q.attrs.Verb, q.attrs.Group, q.attrs.Resource, q.attrs.Name, q.attrs.Namespace, got, q.want)
		}
	}

	// Deleting the gateway removes what the controller made for it.
	must(c.Delete(ctx, gs))
	apitest.Eventually(t, "GatewayServer removed with its ClusterRoleBinding", 60*time.Second, func() bool {
		return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(gs), gs)) && apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(crb), crb))
	}, ctrLogs)

	stopAgent()
	stopController()
	for what, log := range map[string]string{"skein-controller": ctrLog.String(), "agent": agentLog.String()} {
		for _, line := range strings.Split(log, "\n") {
			if strings.Contains(strings.ToLower(line), "forbidden") {
				t.Errorf("%s was refused something: %s", what, line)
			}
		}
	}

	// The cluster id is never changed by the chart.
	manifestHasID := func() bool {
		out, err := helm(t, kubeconfig, "get", "manifest", releaseName, "--namespace", ns)
		must(err)
		objs, err := parseManifests(out)
		must(err)
		return find(objs, "ConfigMap", identity.ClusterIDConfigMap) != nil
	}
	if out, err := install("--set-string", "clusterID=11111111-2222-3333-4444-555555555555"); err == nil || !strings.Contains(err.Error(), "never changes") {
		t.Errorf("an upgrade with another clusterID: err = %v, want a refusal\n%s", err, out)
	}
	if out, err := install(); err != nil {
		t.Fatalf("an upgrade without clusterID: %v\n%s", err, out)
	}
	if got := getID(); got != idA || !manifestHasID() {
		t.Errorf("after an upgrade without clusterID: id %q (want %q), still in the release: %t", got, idA, manifestHasID())
	}
	// --no-hooks: this API server has no kubelet to run the pre-delete Job (the lab's
	// TestE2E/uninstall runs it).
	if out, err := helm(t, kubeconfig, "uninstall", releaseName, "--namespace", ns, "--no-hooks"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got := getID(); got != idA {
		t.Errorf("after uninstall: id %q, want %q kept", got, idA)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: controller.GatewayClusterRole}, &rbacv1.ClusterRole{}); !apierrors.IsNotFound(err) {
		t.Errorf("ClusterRole %s after uninstall: %v", controller.GatewayClusterRole, err)
	}
	if out, err := install(); err != nil {
		t.Fatalf("reinstall: %v\n%s", err, out)
	}
	if got := getID(); got != idA || !manifestHasID() {
		t.Errorf("after a reinstall: id %q (want %q), adopted by the release: %t", got, idA, manifestHasID())
	}
	if out, err := helm(t, kubeconfig, "uninstall", releaseName, "--namespace", ns, "--no-hooks"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}

	// An id skein-controller created (no Helm ownership) is left alone.
	must(c.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: identity.ClusterIDConfigMap}}))
	idB := "7a2d3c4b-5e6f-4a1b-8c9d-0e1f2a3b4c5d"
	must(c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: identity.ClusterIDConfigMap},
		Data: map[string]string{identity.ClusterIDKey: idB}}))
	if out, err := install(); err != nil {
		t.Fatalf("install over the controller's id: %v\n%s", err, out)
	}
	if got := getID(); got != idB || manifestHasID() {
		t.Errorf("install over the controller's id: id %q (want %q), taken into the release: %t", got, idB, manifestHasID())
	}
	if out, err := install("--set-string", "clusterID="+idB); err != nil {
		t.Errorf("upgrade with the id the cluster has: %v\n%s", err, out)
	}
	if _, err := install("--set-string", "clusterID="+idA); err == nil || !strings.Contains(err.Error(), "never changes") {
		t.Errorf("upgrade with another id over the controller's: err = %v, want a refusal", err)
	}
	if out, err := helm(t, kubeconfig, "uninstall", releaseName, "--namespace", ns, "--no-hooks"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got := getID(); got != idB {
		t.Errorf("after uninstall: id %q, want the controller's %q", got, idB)
	}
}

// freeLoopbackPort returns an address on 127.0.0.1 with a port free a moment ago, for a
// process that takes its listen address as a flag.
func freeLoopbackPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
