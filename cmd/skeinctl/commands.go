package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/buildinfo"
	"github.com/skein-net/skein/control/gateway"
	"github.com/skein-net/skein/control/identity"
	"github.com/skein-net/skein/control/kube"
)

type globals struct {
	kubeconfig, context string
	liqoNamespace       string // where skein is installed (liqoctl's --liqo-namespace)
	namespace           string // the namespace scope of a request (liqoctl's -n): create, generate publickey
	timeout             time.Duration
	out, err            io.Writer
}

// target is one cluster as the flags name it.
type target struct {
	kubeconfig, context, liqoNamespace string
}

func (g *globals) local() target { return target{g.kubeconfig, g.context, g.liqoNamespace} }

// requestNamespace is where create and generate publickey act: the command's own flag, else
// -n, else default.
func (g *globals) requestNamespace(flag string) string {
	switch {
	case flag != "":
		return flag
	case g.namespace != "":
		return g.namespace
	}
	return "default"
}

func newRoot(out, errw io.Writer) *cobra.Command {
	g := &globals{out: out, err: errw}
	root := &cobra.Command{
		Use:   "skeinctl",
		Short: "Peer Kubernetes clusters' networks with skein",
		Long: `skeinctl sets up and inspects skein's cross-cluster networking. Where the Liqo documentation
says liqoctl, type skeinctl: the network workflows, their flags and their output are the same.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(out)
	root.SetErr(errw)
	root.PersistentFlags().StringVar(&g.kubeconfig, "kubeconfig", "", "kubeconfig of the local cluster (default: $KUBECONFIG, then ~/.kube/config)")
	root.PersistentFlags().StringVar(&g.context, "context", "", "kubeconfig context of the local cluster (default: the current context)")
	root.PersistentFlags().StringVarP(&g.liqoNamespace, "liqo-namespace", "l", "liqo", "namespace skein is installed in, in the local cluster")
	root.PersistentFlags().StringVarP(&g.namespace, "namespace", "n", "", "namespace scope of the request, as liqoctl's -n: where create puts gateways, generate publickey finds them and export/unexport act (default: default)")
	root.PersistentFlags().DurationVar(&g.timeout, "timeout", 2*time.Minute, "how long to wait for the API and for objects to become ready")
	root.AddCommand(versionCmd(g), statusCmd(g), diagnoseCmd(g), generateCmd(g), createCmd(g), networkCmd(g), exportCmd(g), unexportCmd(g), testCmd(g), benchCmd(g))
	return root
}

func versionCmd(g *globals) *cobra.Command {
	var clientOnly bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print skeinctl's version and the images skein runs in the cluster",
		Long: `Print skeinctl's version and commit, then, when the cluster of --kubeconfig (or
--context) answers within 5 s, the images of skein's pods there (every pod labelled
app.kubernetes.io/part-of=skein: the controller, the agents, the gateways) with their counts.`,
		Example: "  skeinctl version\n  skeinctl version --client",
		Args:    cobra.NoArgs,
		Run: func(c *cobra.Command, _ []string) {
			fmt.Fprintf(g.out, "skeinctl %s\n", buildinfo.Get())
			if clientOnly {
				return
			}
			ctx, cancel := context.WithTimeout(c.Context(), min(g.timeout, 5*time.Second))
			defer cancel()
			images, err := g.runningImages(ctx)
			if err != nil {
				fmt.Fprintf(g.out, "cluster: not reachable (%v)\n", err)
				return
			}
			if len(images) == 0 {
				fmt.Fprintln(g.out, "cluster: no skein pod")
			}
			for _, im := range images {
				fmt.Fprintf(g.out, "cluster: %s\n", im)
			}
		},
	}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "print skeinctl's version only")
	return cmd
}

// runningImages lists, for each container of skein's pods in the cluster, its image and how
// many pods run it: "skein-agent ghcr.io/skein-net/skein-agent:v0.2.0 (3 pods)".
func (g *globals) runningImages(ctx context.Context) ([]string, error) {
	quick := *g
	quick.timeout = min(g.timeout, 5*time.Second)
	cl, err := quick.client(ctx, g.local())
	if err != nil {
		return nil, err
	}
	var pods corev1.PodList
	if err := cl.List(ctx, &pods, client.MatchingLabels{"app.kubernetes.io/part-of": "skein"}); err != nil {
		return nil, err
	}
	count := map[string]int{}
	for _, p := range pods.Items {
		for _, c := range p.Spec.Containers {
			count[c.Name+" "+c.Image]++
		}
	}
	out := make([]string, 0, len(count))
	for k, n := range count {
		out = append(out, fmt.Sprintf("%s (%d pods)", k, n))
	}
	sort.Strings(out)
	return out, nil
}

// client builds a client for the cluster t names and checks the API server answers.
func (g *globals) client(ctx context.Context, t target) (client.Client, error) {
	cfg, err := g.restConfig(t)
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: kube.Scheme()})
	if err != nil {
		return nil, fmt.Errorf("API server %s: %w", cfg.Host, err)
	}
	reach, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	if err := c.List(reach, &corev1.NamespaceList{}, client.Limit(1)); err != nil {
		return nil, fmt.Errorf("API server %s is not reachable: %w", cfg.Host, err)
	}
	return c, nil
}

// restConfig reads the client configuration of the cluster t names; every request made with it
// ends within --timeout.
func (g *globals) restConfig(t target) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if t.kubeconfig != "" {
		rules.ExplicitPath = t.kubeconfig
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: t.context}).ClientConfig()
	if err != nil {
		where := fmt.Sprintf("kubeconfig %q", t.kubeconfig)
		if t.context != "" {
			where += fmt.Sprintf(", context %q", t.context)
		}
		hint := "pass --kubeconfig, or set KUBECONFIG"
		if t != g.local() {
			hint = "check --remote-kubeconfig and --remote-context: the peer cluster's"
		}
		return nil, fmt.Errorf("reading %s: %w (%s)", where, err, hint)
	}
	cfg.Timeout = g.timeout
	return cfg, nil
}

// cluster connects to the cluster t names and reads its id.
func (g *globals) cluster(ctx context.Context, t target) (client.Client, string, error) {
	cl, err := g.client(ctx, t)
	if err != nil {
		return nil, "", err
	}
	id, err := identity.ReadClusterID(ctx, cl, t.liqoNamespace)
	return cl, id, err
}

// printObj writes obj as YAML (default) or JSON, without an empty status.
func printObj(w io.Writer, format string, obj any) error {
	raw, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	// Through JSON once, so that YAML uses the JSON field names; an object's empty status is
	// left out, as kubectl does. A list stays a list.
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return err
	}
	if m, ok := v.(map[string]any); ok {
		if st, ok := m["status"].(map[string]any); ok && len(st) == 0 {
			delete(m, "status")
		}
	}
	obj = v
	switch format {
	case "", "yaml":
		b, err := yaml.Marshal(obj)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	case "json":
		b, err := json.MarshalIndent(obj, "", "    ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(w, string(b))
		return err
	}
	return fmt.Errorf("output format %q: want yaml or json", format)
}

// checkOutput refuses an output format printObj does not know, before any API call.
func checkOutput(format string) error {
	switch format {
	case "", "yaml", "json":
		return nil
	}
	return fmt.Errorf("--output %q: want yaml or json (or nothing, for a table)", format)
}

var typeMeta = func(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: netv1alpha1.SchemeGroupVersion.String(), Kind: kind}
}

func generateCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "generate", Short: "Generate the resources a peer cluster applies"}
	var output string
	conf := &cobra.Command{
		Use:   "configuration",
		Short: "Generate this cluster's Configuration, to apply in the peer cluster",
		Long: `Print the Configuration describing this cluster's network (its pod and external CIDRs),
labelled with this cluster's id. Apply it in the peer cluster; the peer's skein-controller then
decides how it sees these CIDRs (remapping them if they clash with its own).`,
		Example: `  skeinctl --kubeconfig $KUBE_SERVER generate configuration > conf-server.yaml
  kubectl --kubeconfig $KUBE_CLIENT apply -f conf-server.yaml`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(c.Context(), g.timeout)
			defer cancel()
			cl, id, err := g.cluster(ctx, g.local())
			if err != nil {
				return err
			}
			n, err := identity.ReadNetwork(ctx, cl, g.liqoNamespace)
			if err != nil {
				return err
			}
			return printObj(g.out, output, &netv1alpha1.Configuration{
				TypeMeta:   typeMeta("Configuration"),
				ObjectMeta: metav1.ObjectMeta{Name: identity.PeerName(id), Labels: map[string]string{netv1alpha1.RemoteClusterIDLabel: id}},
				Spec:       netv1alpha1.ConfigurationSpec{Remote: netv1alpha1.ClusterConfig{CIDR: n.Published()}},
			})
		},
	}
	conf.Flags().StringVarP(&output, "output", "o", "yaml", "output format: yaml or json")

	var gwType, gwName, gwNamespace string
	pub := &cobra.Command{
		Use:   "publickey",
		Short: "Generate the PublicKey of one of this cluster's gateways, to apply in the peer cluster",
		Long: `Print the PublicKey holding the WireGuard public key of this cluster's GatewayServer or
GatewayClient, labelled with this cluster's id. Apply it in the peer cluster.`,
		Example: `  skeinctl generate publickey --gateway-type client --gateway-name client
  skeinctl generate publickey --gateway-type server --gateway-name server -o json`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if gwType != "server" && gwType != "client" {
				return fmt.Errorf("--gateway-type %q: want server or client", gwType)
			}
			if gwName == "" {
				return fmt.Errorf("--gateway-name is required")
			}
			ctx, cancel := context.WithTimeout(c.Context(), g.timeout)
			defer cancel()
			cl, id, err := g.cluster(ctx, g.local())
			if err != nil {
				return err
			}
			ns := g.requestNamespace(gwNamespace)
			var ref *netv1alpha1.ObjectRef
			if gwType == "server" {
				gs := &netv1alpha1.GatewayServer{}
				if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: gwName}, gs); err != nil {
					return fmt.Errorf("gatewayserver %s/%s: %w", ns, gwName, err)
				}
				ref = gs.Status.SecretRef
			} else {
				gc := &netv1alpha1.GatewayClient{}
				if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: gwName}, gc); err != nil {
					return fmt.Errorf("gatewayclient %s/%s: %w", ns, gwName, err)
				}
				ref = gc.Status.SecretRef
			}
			if ref == nil {
				return fmt.Errorf("gateway %s/%s has no key Secret yet (status.secretRef); is skein-controller running?", ns, gwName)
			}
			s := &corev1.Secret{}
			sns := ref.Namespace
			if sns == "" {
				sns = ns
			}
			if err := cl.Get(ctx, client.ObjectKey{Namespace: sns, Name: ref.Name}, s); err != nil {
				return fmt.Errorf("secret %s/%s: %w", sns, ref.Name, err)
			}
			pk, err := gateway.PeerPublicKey(s, id, "")
			if err != nil {
				return err
			}
			pk.Name = identity.PeerName(id)
			return printObj(g.out, output, pk)
		},
	}
	pub.Flags().StringVar(&gwType, "gateway-type", "", "the gateway's role: server or client")
	pub.Flags().StringVar(&gwName, "gateway-name", "", "name of the GatewayServer or GatewayClient")
	pub.Flags().StringVar(&gwNamespace, "gateway-namespace", "", "namespace of the gateway (default: -n, else default)")
	pub.Flags().StringVarP(&output, "output", "o", "yaml", "output format: yaml or json")
	cmd.AddCommand(conf, pub)
	return cmd
}

func createCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "create", Short: "Create gateway resources (or print them with -o)"}
	var (
		remoteID, serviceType, lbIP, output, serverTemplate, clientTemplate, templateNS, gwNamespace string
		port, nodePort, mtu                                                                          int32
		addresses                                                                                    []string
	)
	apply := func(c *cobra.Command, obj client.Object) error {
		if output != "" {
			return printObj(g.out, output, obj)
		}
		ctx, cancel := context.WithTimeout(c.Context(), g.timeout)
		defer cancel()
		cl, err := g.client(ctx, g.local())
		if err != nil {
			return err
		}
		if err := cl.Create(ctx, obj); err != nil {
			return fmt.Errorf("create %s %s/%s: %w", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetNamespace(), obj.GetName(), err)
		}
		fmt.Fprintf(g.out, "INFO   %s %s/%s created\n", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetNamespace(), obj.GetName())
		return nil
	}
	server := &cobra.Command{
		Use:   "gatewayserver NAME",
		Short: "Create a GatewayServer: the side of a peering that listens",
		Example: `  skeinctl create gatewayserver server --remote-cluster-id 35d83766-f466-46ef-b5b3-d253b6d465f1 --service-type NodePort -o yaml
  skeinctl create gatewayserver server --remote-cluster-id ID --service-type LoadBalancer --load-balancer-ip 203.0.113.7`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if remoteID == "" {
				return fmt.Errorf("--remote-cluster-id is required")
			}
			if err := checkMTU(mtu); err != nil {
				return err
			}
			if err := checkServiceType("--service-type", serviceType); err != nil {
				return err
			}
			if err := checkEndpoint(args[0], remoteID, port, serviceType, nodePort, lbIP, nil); err != nil {
				return err
			}
			st := netv1alpha1.ServiceType(serviceType)
			gs := &netv1alpha1.GatewayServer{
				TypeMeta:   typeMeta("GatewayServer"),
				ObjectMeta: metav1.ObjectMeta{Name: args[0], Namespace: g.requestNamespace(gwNamespace), Labels: map[string]string{netv1alpha1.RemoteClusterIDLabel: remoteID}},
				Spec: netv1alpha1.GatewayServerSpec{
					Endpoint: netv1alpha1.ServerEndpoint{Port: port, ServiceType: st},
					MTU:      mtu,
					ServerTemplateRef: netv1alpha1.TemplateRef{APIVersion: netv1alpha1.SchemeGroupVersion.String(), Kind: "WgGatewayServerTemplate",
						Name: serverTemplate, Namespace: cmp.Or(templateNS, g.liqoNamespace)},
				},
			}
			if nodePort != 0 {
				gs.Spec.Endpoint.NodePort = &nodePort
			}
			if lbIP != "" {
				gs.Spec.Endpoint.LoadBalancerIP = &lbIP
			}
			return apply(c, gs)
		},
	}
	clientCmd := &cobra.Command{
		Use:     "gatewayclient NAME",
		Short:   "Create a GatewayClient: the side of a peering that connects to the peer's server",
		Example: `  skeinctl create gatewayclient client --remote-cluster-id ef7a1f41-c753-4a0e-83e5-bed013e7fe4f --addresses 10.42.3.54 --port 32133 -o yaml`,
		Args:    cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if remoteID == "" {
				return fmt.Errorf("--remote-cluster-id is required")
			}
			if len(addresses) == 0 {
				return fmt.Errorf("--addresses is required: the peer's GatewayServer status.endpoint.addresses")
			}
			if err := checkMTU(mtu); err != nil {
				return err
			}
			if err := checkEndpoint(args[0], remoteID, port, "", 0, "", addresses); err != nil {
				return err
			}
			var addrs []netv1alpha1.Address
			for _, a := range addresses {
				addrs = append(addrs, netv1alpha1.Address(strings.TrimSpace(a)))
			}
			gc := &netv1alpha1.GatewayClient{
				TypeMeta:   typeMeta("GatewayClient"),
				ObjectMeta: metav1.ObjectMeta{Name: args[0], Namespace: g.requestNamespace(gwNamespace), Labels: map[string]string{netv1alpha1.RemoteClusterIDLabel: remoteID}},
				Spec: netv1alpha1.GatewayClientSpec{
					Endpoint: netv1alpha1.Endpoint{Addresses: addrs, Port: port, Protocol: "UDP"},
					MTU:      mtu,
					ClientTemplateRef: netv1alpha1.TemplateRef{APIVersion: netv1alpha1.SchemeGroupVersion.String(), Kind: "WgGatewayClientTemplate",
						Name: clientTemplate, Namespace: cmp.Or(templateNS, g.liqoNamespace)},
				},
			}
			return apply(c, gc)
		},
	}
	for _, c := range []*cobra.Command{server, clientCmd} {
		c.Flags().StringVar(&remoteID, "remote-cluster-id", "", "the peer cluster's id (required)")
		c.Flags().Int32Var(&port, "port", netv1alpha1.DefaultPort, "the gateway's UDP port (server: the Service port; client: the server's port)")
		c.Flags().Int32Var(&mtu, "mtu", netv1alpha1.DefaultMTU, "the tunnel MTU; the same on both sides")
		c.Flags().StringVar(&templateNS, "template-namespace", "", "namespace of the gateway template (default: --liqo-namespace)")
		c.Flags().StringVar(&gwNamespace, "gateway-namespace", "", "namespace of the gateway (default: -n, else default)")
		c.Flags().StringVarP(&output, "output", "o", "", "print the resource (yaml or json) instead of creating it")
	}
	server.Flags().StringVar(&serviceType, "service-type", "LoadBalancer", "type of the gateway Service: NodePort, LoadBalancer or ClusterIP")
	server.Flags().Int32Var(&nodePort, "node-port", 0, "force this node port (30000-32767); 0 lets Kubernetes choose")
	server.Flags().StringVar(&lbIP, "load-balancer-ip", "", "ask the load balancer for this IP; empty lets it choose")
	server.Flags().StringVar(&serverTemplate, "template-name", "wireguard-server", "name of the WgGatewayServerTemplate")
	clientCmd.Flags().StringSliceVar(&addresses, "addresses", nil, "the server's addresses (IPs or names), comma-separated")
	clientCmd.Flags().StringVar(&clientTemplate, "template-name", "wireguard-client", "name of the WgGatewayClientTemplate")
	cmd.AddCommand(server, clientCmd)
	return cmd
}

func checkServiceType(flag, v string) error {
	switch corev1.ServiceType(v) {
	case corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeClusterIP:
		return nil
	}
	return fmt.Errorf("%s %q: want NodePort, LoadBalancer or ClusterIP", flag, v)
}

// checkEndpoint checks, as admission would, what the create commands take from flags, so
// that `-o yaml` never prints an object the API server would refuse.
func checkEndpoint(name, remoteID string, port int32, serviceType string, nodePort int32, lbIP string, addresses []string) error {
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Errorf("name %q: %s", name, strings.Join(errs, "; "))
	}
	if errs := validation.IsValidLabelValue(remoteID); len(errs) > 0 {
		return fmt.Errorf("--remote-cluster-id %q: %s", remoteID, strings.Join(errs, "; "))
	}
	if port < 1 || port > 65535 {
		return fmt.Errorf("--port %d: want 1-65535", port)
	}
	if nodePort != 0 && (nodePort < 30000 || nodePort > 32767) {
		return fmt.Errorf("--node-port %d: want 0 (let Kubernetes choose) or a port in 30000-32767", nodePort)
	}
	if nodePort != 0 && serviceType == string(netv1alpha1.ServiceTypeClusterIP) {
		return fmt.Errorf("--node-port needs --service-type NodePort or LoadBalancer")
	}
	if lbIP != "" {
		if _, err := netip.ParseAddr(lbIP); err != nil {
			return fmt.Errorf("--load-balancer-ip %q: %w", lbIP, err)
		}
		if serviceType != string(netv1alpha1.ServiceTypeLoadBalancer) {
			return fmt.Errorf("--load-balancer-ip needs --service-type LoadBalancer")
		}
	}
	for _, a := range addresses {
		if _, err := netip.ParseAddr(strings.TrimSpace(a)); err != nil {
			return fmt.Errorf("--addresses %q: want IP addresses, such as the peer's GatewayServer status.endpoint.addresses", a)
		}
	}
	return nil
}

func checkMTU(mtu int32) error {
	if mtu < 576 || mtu > 9000 {
		return fmt.Errorf("--mtu %d: want 576-9000 (and the same on both sides)", mtu)
	}
	return nil
}
