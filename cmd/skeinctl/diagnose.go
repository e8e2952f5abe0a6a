package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/buildinfo"
	"github.com/skein-net/skein/control/identity"
)

// Levels of a finding.
const (
	levelOK      = "ok"
	levelWarning = "warning"
	levelProblem = "problem"
)

// finding is one check's outcome in plain words: what was checked (Check, Subject), how it
// went, and, when something is wrong, what to run or change (Hint).
type finding struct {
	Level   string `json:"level"`
	Check   string `json:"check"`
	Subject string `json:"subject,omitempty"`
	Detail  string `json:"detail"`
	Hint    string `json:"hint,omitempty"`
}

// report collects findings.
type report struct{ findings []finding }

func (r *report) add(level, check, subject, detail, hint string) {
	r.findings = append(r.findings, finding{Level: level, Check: check, Subject: printable(subject), Detail: printable(detail), Hint: printable(hint)})
}

// maxField bounds what diagnose prints of one field.
const maxField = 2000

// printable makes text that users, peers and node agents can write (names, condition
// messages) safe to print as one line of a report: control and format characters (newlines,
// terminal escapes, bidirectional overrides) are shown escaped, so no object can forge a line
// or hide one; long text is cut.
func printable(s string) string {
	if len(s) > maxField {
		s = s[:maxField] + "..."
	}
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsGraphic(r) }) < 0 {
		return s
	}
	q := strconv.QuoteToGraphic(s)
	return q[1 : len(q)-1]
}
func (r *report) ok(check, subject, detail string) { r.add(levelOK, check, subject, detail, "") }
func (r *report) warn(check, subject, detail, hint string) {
	r.add(levelWarning, check, subject, detail, hint)
}
func (r *report) problem(check, subject, detail, hint string) {
	r.add(levelProblem, check, subject, detail, hint)
}

func (r *report) count(level string) int {
	n := 0
	for _, f := range r.findings {
		if f.Level == level {
			n++
		}
	}
	return n
}

// print writes the findings as lines: level, check, subject, detail, and the hint indented
// below.
func (r *report) print(w io.Writer) {
	for _, f := range r.findings {
		subject := f.Check
		if f.Subject != "" {
			subject += " " + f.Subject
		}
		fmt.Fprintf(w, "%-8s %s: %s\n", strings.ToUpper(f.Level), subject, f.Detail)
		if f.Hint != "" {
			fmt.Fprintf(w, "         -> %s\n", f.Hint)
		}
	}
	fmt.Fprintf(w, "%d problem(s), %d warning(s), %d check(s) ok\n", r.count(levelProblem), r.count(levelWarning), r.count(levelOK))
}

// errProblems is diagnose's error when it found a problem (exit status 1, after the report).
var errProblems = errors.New("diagnose found problems (above)")

func diagnoseCmd(g *globals) *cobra.Command {
	var output string
	var node nodeCheckFlags
	cmd := &cobra.Command{
		Use:   "diagnose",
		Short: "Check skein's installation, nodes and peerings and say in plain words what is wrong",
		Long: `Run the checks of docs/troubleshooting.md against the cluster and print each finding as OK,
WARNING or PROBLEM, with what to run or change for every one that is not OK.

From the API server: skein's CRDs are served; the cluster's identity and network parameters
are published; the controller's Deployment and the agents' DaemonSet are ready and run the
version of this skeinctl; every node has an InternalNode whose agent reports it programmed
(its Ready condition) and whose pod traffic to peers is not source-NATed by another rule
(PodTrafficMasqueraded); every peering's Configuration is mapped and Ready; every gateway is
deployed, has an active replica, has an address peers can reach (a server) and its
Connection is Connected. From each active gateway's metrics (read through the API server's
pod proxy, else a port-forward): whether the WAN's path MTU forced the tunnel MTU below the configured one, and
whether the WireGuard socket's send errors are counting up (read twice, 3 s apart).

With --node (on a node, as root: kubectl debug node/NAME, or ssh), it also reads this
machine's kernel: the overlay device, the rules and routes of table 18952 for every peer CIDR,
where a packet to each peer CIDR is really routed (another rule at a lower priority, often a
CNI's, can take the traffic first), the overlay's forwarding entries to each active gateway and
skein-agent's nftables table.

Exit status: 0 when nothing is a PROBLEM, 1 otherwise.`,
		Example: "  skeinctl diagnose\n  skeinctl diagnose -o json\n  skeinctl diagnose --node            # on a node, as root\n  skeinctl diagnose --node --node-name worker-1",
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(c.Context(), g.timeout)
			defer cancel()
			r := &report{}
			g.diagnose(ctx, r, node)
			if output != "" {
				if err := printObj(g.out, output, r.findings); err != nil {
					return err
				}
			} else {
				r.print(g.out)
			}
			if r.count(levelProblem) > 0 {
				return errProblems
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "json or yaml instead of lines")
	node.register(cmd)
	return cmd
}

// diagnose runs every check it can; one that cannot run says so and the others go on.
func (g *globals) diagnose(ctx context.Context, r *report, node nodeCheckFlags) {
	t := g.local()
	cfg, err := g.restConfig(t)
	if err != nil {
		r.problem("API server", "", err.Error(), "pass --kubeconfig and --context of the cluster to check")
		return
	}
	cl, err := g.client(ctx, t)
	if err != nil {
		r.problem("API server", cfg.Host, err.Error(), "check the address, the network path and your credentials: kubectl --kubeconfig ... get ns")
		return
	}
	version := "version unknown"
	if dc, err := discovery.NewDiscoveryClientForConfig(cfg); err == nil {
		if v, err := dc.ServerVersion(); err == nil {
			version = "Kubernetes " + v.GitVersion
		}
	}
	r.ok("API server", cfg.Host, "answers ("+version+")")
	if !checkCRDs(ctx, r, cl) {
		return
	}
	if id, err := identity.ReadClusterID(ctx, cl, g.liqoNamespace); err != nil {
		r.problem("cluster identity", "", err.Error(), fmt.Sprintf("is skein installed in namespace %q? (--liqo-namespace; helm install ... -n %s)", g.liqoNamespace, g.liqoNamespace))
	} else if n, err := identity.ReadNetwork(ctx, cl, g.liqoNamespace); err != nil {
		r.problem("cluster identity", id, err.Error(), "skein-controller publishes the network parameters when it starts: kubectl -n "+g.liqoNamespace+" logs deploy/skein-controller")
	} else {
		r.ok("cluster identity", id, fmt.Sprintf("pod CIDRs %v, external CIDRs %v, internal CIDR %v", n.PodCIDRs, n.ExternalCIDRs(), n.InternalCIDR))
	}
	checkComponents(ctx, r, cl, g.liqoNamespace)
	checkNodes(ctx, r, cl, g.liqoNamespace)
	s := readPeerings(ctx, r, cl)
	if s != nil {
		checkPeerings(r, s)
		if cs, err := kubernetes.NewForConfig(cfg); err != nil {
			r.warn("path MTU", "", "cannot read the gateways' metrics: "+err.Error(), "")
		} else {
			checkGatewayPaths(ctx, r, s, firstMetricsReader(proxyMetricsReader(cs), portForwardMetricsReader(cfg, cs)), pathSettle)
		}
	}
	if node.enabled {
		g.diagnoseNode(ctx, r, cl, s, node)
	}
}

// checkCRDs lists each of skein's kinds once; it reports false when the API does not serve
// them (nothing else can be checked then).
func checkCRDs(ctx context.Context, r *report, cl client.Client) bool {
	var missing []string
	kinds := []client.ObjectList{&netv1alpha1.ConfigurationList{}, &netv1alpha1.GatewayServerList{}, &netv1alpha1.GatewayClientList{},
		&netv1alpha1.ConnectionList{}, &netv1alpha1.InternalNodeList{}, &netv1alpha1.PublicKeyList{},
		&netv1alpha1.WgGatewayServerTemplateList{}, &netv1alpha1.WgGatewayClientTemplateList{}}
	for _, l := range kinds {
		err := cl.List(ctx, l, client.Limit(1))
		switch {
		case err == nil:
		case meta.IsNoMatchError(err) || apierrors.IsNotFound(err):
			missing = append(missing, strings.TrimSuffix(fmt.Sprintf("%T", l)[len("*v1alpha1."):], "List"))
		default:
			r.problem("CRDs", "", err.Error(), "")
			return false
		}
	}
	if len(missing) > 0 {
		r.problem("CRDs", netv1alpha1.SchemeGroupVersion.String(), "not served: "+strings.Join(missing, ", "),
			"install skein's chart (it carries the CRDs; docs/install.md) or kubectl apply -f deploy/crds/")
		return false
	}
	r.ok("CRDs", netv1alpha1.SchemeGroupVersion.String(), fmt.Sprintf("all %d kinds served", len(kinds)))
	return true
}

// checkComponents checks the controller's Deployment and the agents' DaemonSet and compares the
// images skein's pods run with this skeinctl's version.
func checkComponents(ctx context.Context, r *report, cl client.Client, ns string) {
	var deps appsv1.DeploymentList
	if err := cl.List(ctx, &deps, client.InNamespace(ns), componentLabels("controller")); err != nil {
		r.problem("skein-controller", "", err.Error(), "")
	} else if len(deps.Items) == 0 {
		r.problem("skein-controller", "", "no Deployment of skein's chart in namespace "+ns, "helm install skein ... -n "+ns+" (docs/install.md), or pass --liqo-namespace")
	}
	for _, d := range deps.Items {
		want := desiredReplicas(d)
		subject := d.Namespace + "/" + d.Name
		if want == 0 {
			r.problem("skein-controller", subject, "scaled to 0 replicas: nothing maps peers' CIDRs, deploys gateways or gives new nodes an overlay address",
				fmt.Sprintf("kubectl -n %s scale deploy/%s --replicas=1 (the chart's controller.replicas)", d.Namespace, d.Name))
			continue
		}
		if d.Status.ReadyReplicas < want {
			r.problem("skein-controller", subject, fmt.Sprintf("%d of %d replicas ready", d.Status.ReadyReplicas, want),
				fmt.Sprintf("kubectl -n %s describe deploy/%s; kubectl -n %s logs deploy/%s", d.Namespace, d.Name, d.Namespace, d.Name))
		} else {
			r.ok("skein-controller", subject, fmt.Sprintf("%d of %d replicas ready", d.Status.ReadyReplicas, want))
		}
	}
	var dss appsv1.DaemonSetList
	if err := cl.List(ctx, &dss, client.InNamespace(ns), componentLabels("agent")); err != nil {
		r.problem("skein-agent", "", err.Error(), "")
	} else if len(dss.Items) == 0 {
		r.problem("skein-agent", "", "no DaemonSet of skein's chart in namespace "+ns, "helm install skein ... -n "+ns+" (docs/install.md), or pass --liqo-namespace")
	}
	for _, d := range dss.Items {
		subject := d.Namespace + "/" + d.Name
		st := d.Status
		switch {
		case st.DesiredNumberScheduled == 0:
			r.problem("skein-agent", subject, "scheduled on no node", "the DaemonSet's nodeSelector and tolerations (chart values agent.nodeSelector, agent.tolerations) match no node")
		case st.NumberReady < st.DesiredNumberScheduled:
			r.problem("skein-agent", subject, fmt.Sprintf("ready on %d of %d nodes", st.NumberReady, st.DesiredNumberScheduled),
				fmt.Sprintf("kubectl -n %s get pods -l app.kubernetes.io/component=agent -o wide; kubectl -n %s logs POD", d.Namespace, d.Namespace))
		default:
			r.ok("skein-agent", subject, fmt.Sprintf("ready on %d of %d nodes", st.NumberReady, st.DesiredNumberScheduled))
		}
	}
	var pods corev1.PodList
	if err := cl.List(ctx, &pods, client.MatchingLabels{"app.kubernetes.io/part-of": "skein"}); err != nil {
		return
	}
	if skew := versionSkew(buildinfo.Get().Version, pods.Items); skew != "" {
		r.warn("versions", "", skew, "mixed versions work within a minor release; use the skeinctl of the chart's appVersion (skeinctl version)")
	}
}

// versionSkew lists the images of running pods whose tag is not mine ("" when all match, or
// when skeinctl is a development build without a version).
func versionSkew(mine string, pods []corev1.Pod) string {
	if mine == "" || mine == "dev" {
		return ""
	}
	other := map[string][]string{}
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, c := range p.Spec.Containers {
			if tag := imageTag(c.Image); tag != "" && tag != mine {
				other[c.Image] = append(other[c.Image], p.Namespace+"/"+p.Name)
			}
		}
	}
	if len(other) == 0 {
		return ""
	}
	var lines []string
	for im, ps := range other {
		lines = append(lines, fmt.Sprintf("%s (%d pods, such as %s)", im, len(ps), ps[0]))
	}
	sort.Strings(lines)
	return "skeinctl is " + mine + "; pods run " + strings.Join(lines, ", ")
}

// imageTag is an image reference's tag ("" for none or a digest only).
func imageTag(ref string) string {
	name, _, _ := strings.Cut(ref, "@")
	i := strings.LastIndex(name, ":")
	if i < 0 || strings.Contains(name[i:], "/") {
		return ""
	}
	return name[i+1:]
}

// checkNodes checks that every node has an InternalNode and reads the conditions its agent
// writes.
func checkNodes(ctx context.Context, r *report, cl client.Client, ns string) {
	var nodes corev1.NodeList
	var ins netv1alpha1.InternalNodeList
	if err := cl.List(ctx, &nodes); err != nil {
		r.warn("nodes", "", "cannot list nodes: "+err.Error(), "")
		return
	}
	if err := cl.List(ctx, &ins); err != nil {
		r.problem("nodes", "", "cannot list InternalNodes: "+err.Error(), "")
		return
	}
	byName := map[string]*netv1alpha1.InternalNode{}
	for i := range ins.Items {
		byName[ins.Items[i].Name] = &ins.Items[i]
	}
	for _, n := range nodes.Items {
		in := byName[n.Name]
		if in == nil {
			r.problem("node", n.Name, "no InternalNode: skein-controller gives every node one (its overlay address)",
				"kubectl -n "+ns+" logs deploy/skein-controller (an exhausted internal CIDR says so there)")
			continue
		}
		ready := meta.FindStatusCondition(in.Status.Conditions, netv1alpha1.ConditionReady)
		switch {
		case ready == nil:
			r.warn("node", n.Name, "its agent has not reported (no Ready condition in its InternalNode): no agent runs there, or an agent older than v0.2",
				fmt.Sprintf("kubectl -n %s get pods -l app.kubernetes.io/component=agent --field-selector spec.nodeName=%s", ns, n.Name))
		case ready.Status != metav1.ConditionTrue:
			r.problem("node", n.Name, fmt.Sprintf("not programmed (%s): %s", ready.Reason, ready.Message),
				fmt.Sprintf("kubectl -n %s logs POD (the agent on %s: kubectl -n %s get pods -l app.kubernetes.io/component=agent --field-selector spec.nodeName=%s)", ns, n.Name, ns, n.Name))
		case strings.Contains(ready.Message, "left unrouted"):
			r.warn("node", n.Name, ready.Message, "a peer's CIDR covers this node's own addresses: re-peer with a remapped CIDR (the Configuration's status) or change the peer's CIDRs")
		default:
			r.ok("node", n.Name, ready.Message)
		}
		if m := meta.FindStatusCondition(in.Status.Conditions, "PodTrafficMasqueraded"); m != nil && m.Status == metav1.ConditionTrue {
			r.problem("node", n.Name, "pod traffic to peers is source-NATed by another rule ("+m.Reason+")", m.Message)
		}
	}
}

// peerings are the peering objects of the cluster.
type peerings struct {
	confs   netv1alpha1.ConfigurationList
	servers netv1alpha1.GatewayServerList
	clients netv1alpha1.GatewayClientList
	conns   netv1alpha1.ConnectionList
	pods    corev1.PodList // gateway pods (networking.liqo.io/component=gateway)
}

func readPeerings(ctx context.Context, r *report, cl client.Client) *peerings {
	s := &peerings{}
	for _, l := range []client.ObjectList{&s.confs, &s.servers, &s.clients, &s.conns} {
		if err := cl.List(ctx, l); err != nil {
			r.problem("peerings", "", err.Error(), "")
			return nil
		}
	}
	if err := cl.List(ctx, &s.pods, client.MatchingLabels{"networking.liqo.io/component": "gateway"}); err != nil {
		r.warn("gateways", "", "cannot list gateway pods: "+err.Error(), "")
	}
	return s
}

// gatewayInfo is what checkPeerings needs of a GatewayServer or GatewayClient.
type gatewayInfo struct {
	kind, namespace, name, clusterID string
	conds                            []metav1.Condition
	internal                         *netv1alpha1.InternalEndpoint
	endpoint                         string // a server's address for peers, a client's for its server
}

func (s *peerings) gateways() []gatewayInfo {
	var out []gatewayInfo
	for _, g := range s.servers.Items {
		gi := gatewayInfo{kind: "GatewayServer", namespace: g.Namespace, name: g.Name, clusterID: g.Labels[netv1alpha1.RemoteClusterIDLabel],
			conds: g.Status.Conditions, internal: g.Status.InternalEndpoint}
		if e := g.Status.Endpoint; e != nil && len(e.Addresses) > 0 {
			gi.endpoint = hostPort(string(e.Addresses[0]), e.Port)
		}
		out = append(out, gi)
	}
	for _, g := range s.clients.Items {
		gi := gatewayInfo{kind: "GatewayClient", namespace: g.Namespace, name: g.Name, clusterID: g.Labels[netv1alpha1.RemoteClusterIDLabel],
			conds: g.Status.Conditions, internal: g.Status.InternalEndpoint}
		if len(g.Spec.Endpoint.Addresses) > 0 {
			gi.endpoint = hostPort(string(g.Spec.Endpoint.Addresses[0]), g.Spec.Endpoint.Port)
		}
		out = append(out, gi)
	}
	return out
}

// checkPeerings checks every Configuration and every gateway.
func checkPeerings(r *report, s *peerings) {
	if len(s.confs.Items) == 0 && len(s.servers.Items) == 0 && len(s.clients.Items) == 0 {
		r.ok("peerings", "", "none yet (skeinctl network connect peers two clusters)")
		return
	}
	gws := s.gateways()
	for _, c := range s.confs.Items {
		subject := c.Namespace + "/" + c.Name
		id := c.Labels[netv1alpha1.RemoteClusterIDLabel]
		ready := meta.FindStatusCondition(c.Status.Conditions, netv1alpha1.ConditionReady)
		switch {
		case ready != nil && ready.Status != metav1.ConditionTrue:
			r.problem("configuration", subject, fmt.Sprintf("not ready (%s): %s", ready.Reason, ready.Message),
				"docs/troubleshooting.md, \"Connected, but pods do not reach the peer\"")
		case c.Status.Remote == nil:
			r.problem("configuration", subject, "not mapped yet: skein-controller has not written how this cluster sees the peer's CIDRs",
				"kubectl logs -n NAMESPACE deploy/skein-controller")
		default:
			seen := c.Status.Remote.CIDR
			r.ok("configuration", subject, fmt.Sprintf("peer %s: pods %s seen as %s, external %s seen as %s", id,
				joinCIDRs(c.Spec.Remote.CIDR.Pods()), joinCIDRs(seen.Pods()), c.Spec.Remote.CIDR.External, seen.External))
		}
		found := false
		for _, g := range gws {
			found = found || (g.clusterID == id && g.namespace == c.Namespace)
		}
		if !found && id != "" {
			r.warn("configuration", subject, "no gateway in its namespace for cluster "+id+": the tunnel is not set up",
				"skeinctl network connect (or skeinctl create gatewayserver/gatewayclient)")
		}
	}
	for _, g := range gws {
		checkGateway(r, s, g)
	}
}

func checkGateway(r *report, s *peerings, g gatewayInfo) {
	subject := strings.ToLower(g.kind) + " " + g.namespace + "/" + g.name
	ready := meta.FindStatusCondition(g.conds, netv1alpha1.ConditionReady)
	if ready != nil && ready.Status != metav1.ConditionTrue {
		r.problem("gateway", subject, fmt.Sprintf("not deployed (%s): %s", ready.Reason, ready.Message), "")
		return
	}
	var active, running int
	for _, p := range s.pods.Items {
		if p.Namespace != g.namespace || p.Labels["networking.liqo.io/gateway"] != g.name {
			continue
		}
		if p.Status.Phase == corev1.PodRunning {
			running++
		}
		if p.Labels["networking.liqo.io/active"] == "true" {
			active++
		}
	}
	switch {
	case running == 0:
		r.problem("gateway", subject, "no gateway pod runs", fmt.Sprintf("kubectl -n %s get pods -l networking.liqo.io/gateway=%s; kubectl -n %s describe deploy/%s", g.namespace, g.name, g.namespace, g.name))
	case active == 0 || g.internal == nil:
		r.problem("gateway", subject, fmt.Sprintf("%d pod(s) run but none is the active replica: the replicas elect one through a Lease and need the API server for it", running),
			fmt.Sprintf("kubectl -n %s logs -l networking.liqo.io/gateway=%s", g.namespace, g.name))
	case active > 1:
		r.warn("gateway", subject, fmt.Sprintf("%d pods carry the active label (one should)", active), "it settles within a Lease period; if it stays, the gateway logs say why")
	}
	if g.kind == "GatewayServer" && g.endpoint == "" {
		r.problem("gateway", subject, "no address for peers yet: its Service has no node port address or load balancer address",
			fmt.Sprintf("kubectl -n %s describe svc %s (a LoadBalancer may be pending: use --server-service-type NodePort)", g.namespace, g.name))
	}
	var conn *netv1alpha1.Connection
	for i := range s.conns.Items {
		c := &s.conns.Items[i]
		role := netv1alpha1.ConnectionTypeServer
		if g.kind == "GatewayClient" {
			role = netv1alpha1.ConnectionTypeClient
		}
		if c.Namespace == g.namespace && c.Spec.GatewayRef.Name == g.name && c.Spec.Type == role {
			conn = c
		}
	}
	switch {
	case conn == nil:
		r.problem("connection", subject, "no Connection: the active gateway writes it once it runs", "")
	case running == 0:
		r.problem("connection", subject, fmt.Sprintf("says %s, but no gateway pod runs to keep it up to date: the tunnel is down", dash(string(conn.Status.Value))), "")
	case conn.Status.Value == netv1alpha1.Connected:
		lat := ""
		if conn.Status.Latency != nil {
			lat = ", latency " + conn.Status.Latency.Value.Duration.String()
		}
		r.ok("connection", subject, "Connected to "+g.clusterID+lat+" (endpoint "+g.endpoint+")")
	default:
		hint := "the peer's gateway never answered: UDP between the clusters (docs/install.md, section 1); the gateway's log and skein_gateway_last_handshake_timestamp_seconds; behind a NAT: skeinctl network connect --client-address"
		r.problem("connection", subject, fmt.Sprintf("%s (endpoint %s)", dash(string(conn.Status.Value)), dash(g.endpoint)), hint)
	}
}

// nodeCheckFlags select the node checks of diagnose.
type nodeCheckFlags struct {
	enabled       bool
	name          string
	device, netns string
}

func (f *nodeCheckFlags) register(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&f.enabled, "node", false, "also check this machine's kernel as the node --node-name (on a node, as root)")
	cmd.Flags().StringVar(&f.name, "node-name", "", "the Kubernetes node this machine is (default: its hostname)")
	cmd.Flags().StringVar(&f.device, "overlay-device", netv1alpha1.DefaultOverlayDevice, "name of the overlay device (the agent's --device)")
	cmd.Flags().StringVar(&f.netns, "netns", "", "check the network namespace at this path (such as /var/run/netns/NAME) instead of skeinctl's own; for labs")
}
