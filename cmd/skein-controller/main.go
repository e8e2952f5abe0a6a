// Command skein-controller reconciles skein's API: this cluster's identity, for every
// Configuration of a peer how this cluster sees the peer's CIDRs (IPAM), and an InternalNode
// per Node with its overlay and external addresses, and GatewayServers/GatewayClients rendered
// from their templates with a key pair each.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	svcv1alpha1 "github.com/skein-net/skein/control/api/services/v1alpha1"
	"github.com/skein-net/skein/control/buildinfo"
	"github.com/skein-net/skein/control/buildinfo/buildmetric"
	"github.com/skein-net/skein/control/controller"
	"github.com/skein-net/skein/control/controller/ipam"
	"github.com/skein-net/skein/control/controller/mcs"
	skeindns "github.com/skein-net/skein/control/dns"
	"github.com/skein-net/skein/control/identity"
	"github.com/skein-net/skein/control/kube"
	"github.com/skein-net/skein/control/logging"
)

const usage = `skein-controller reconciles skein's networking.liqo.io API for this cluster.

Usage:
  skein-controller --namespace liqo --pod-cidrs 10.244.0.0/16 --service-cidr 10.96.0.0/12 [flags]

It keeps the cluster id in ConfigMap liqo-clusterid-configmap (key CLUSTER_ID) in --namespace,
creating it once, and writes every Configuration's status.remote: the peer's CIDRs as they
are when they clash with nothing used here, or remapped to a free prefix of the same length
from the pools, with a Ready condition that says which (or why not).

Flags:
`

func prefixes(flagName, s string) []netip.Prefix {
	out, err := parsePrefixes(flagName, s)
	if err != nil {
		fmt.Fprintf(os.Stderr, "skein-controller: %v\n", err)
		os.Exit(2)
	}
	return out
}

// externalCIDRs checks the two --external-cidr flags and returns those the cluster uses: the
// IPv4 one when the pod CIDRs have IPv4, the IPv6 one when they have IPv6; the other is
// unset (not reserved, not published, no node gets an address in it).
func externalCIDRs(pods []netip.Prefix, v4, v6 netip.Prefix) (netip.Prefix, netip.Prefix, error) {
	switch {
	case !v4.Addr().Is4():
		return v4, v6, fmt.Errorf("--external-cidr %v: want an IPv4 CIDR (the IPv6 one is --external-cidr6)", v4)
	case !v6.Addr().Is6():
		return v4, v6, fmt.Errorf("--external-cidr6 %v: want an IPv6 CIDR (the IPv4 one is --external-cidr)", v6)
	case v4.Bits() > 30:
		return v4, v6, fmt.Errorf("--external-cidr %v: want a /30 or larger (one address per node)", v4)
	case v6.Bits() > 126:
		return v4, v6, fmt.Errorf("--external-cidr6 %v: want a /126 or larger (one address per node)", v6)
	}
	if !slices.ContainsFunc(pods, func(p netip.Prefix) bool { return p.Addr().Is4() }) {
		v4 = netip.Prefix{}
	}
	if !slices.ContainsFunc(pods, func(p netip.Prefix) bool { return p.Addr().Is6() }) {
		v6 = netip.Prefix{}
	}
	return v4, v6, nil
}

// parsePrefixes reads a comma-separated list of IPv4 or IPv6 CIDRs without host bits (which
// family each flag takes is checked where it is used).
func parsePrefixes(flagName, s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil || p.Addr().Is4In6() {
			return nil, fmt.Errorf("--%s: %q is not an IPv4 or IPv6 CIDR", flagName, f)
		}
		if p != p.Masked() {
			return nil, fmt.Errorf("--%s: %q has host bits set (did you mean %v?)", flagName, f, p.Masked())
		}
		out = append(out, p)
	}
	return out, nil
}

func main() {
	fs := flag.NewFlagSet("skein-controller", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage); fs.PrintDefaults() }
	namespace := fs.String("namespace", envOr("POD_NAMESPACE", "liqo"), "install namespace (cluster id ConfigMap, Lease)")
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file (default: the pod's service account)")
	podCIDRs := fs.String("pod-cidrs", "10.244.0.0/16", "this cluster's pod CIDRs, comma-separated")
	serviceCIDR := fs.String("service-cidr", "10.96.0.0/12", "this cluster's service CIDR")
	externalCIDR := fs.String("external-cidr", "10.70.0.0/16", "this cluster's IPv4 external CIDR (how peers see its nodes' IPv4 host-network traffic: each node gets an address in it); used when --pod-cidrs has IPv4")
	externalCIDR6 := fs.String("external-cidr6", "fd00:70::/112", "this cluster's IPv6 external CIDR, the same for IPv6 host-network traffic; used when --pod-cidrs has IPv6 (dual-stack and IPv6-only clusters)")
	internalCIDR := fs.String("internal-cidr", netv1alpha1.DefaultInternalCIDR, "this cluster's internal CIDR (overlay addresses)")
	reserved := fs.String("reserved", "", "more CIDRs never given to peers, comma-separated")
	pools := fs.String("pools", joinPrefixes(slices.Concat(ipam.DefaultPools, ipam.DefaultPools6)), "remap pools, comma-separated: a peer's CIDR that clashes with one here is seen as a free prefix of the same length from the pools of its family (IPv4 or IPv6)")
	remapPublic := fs.Bool("remap-public-peer-cidrs", true, "remap a peer's pod or external CIDR outside the private ranges (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7) even when it clashes with nothing: else a peer publishing 8.8.8.0/24 has every node send this cluster's traffic to those addresses to its gateway")
	nodeCIDRs := fs.String("node-cidrs", "", "the networks of the nodes' addresses, comma-separated: never inside a peer's CIDR as seen here (the nodes' own addresses, from the Node objects, never are either)")
	allowPrivileged := fs.Bool("allow-privileged-gateways", false, "render gateway pods whose template asks for privileged containers, added capabilities, the host's network, PID or IPC namespace, or hostPath volumes (refused by default: the gateway runs unprivileged)")
	watchPods := fs.String("gateway-watch-pods", controller.PodRoutesAuto, "how gateways find a local pod's node: true (from the Pod objects: every gateway gets --watch-pods and may read every Pod), false (from Node.spec.podCIDRs; no gateway watches Pods, whatever its template says) or auto (false until a gateway pod is seen outside its node's pod CIDRs, then true; an event on that gateway says so)")
	gatewayPolicy := controller.GatewayPolicyFlags(fs)
	minPrefix := fs.Int("min-remote-prefix-length", netv1alpha1.DefaultMinRemotePrefixLength, "refuse peers' IPv4 CIDRs larger than this prefix length (a Configuration whose pod or external CIDR is, say, a /4 is not routed: Ready=False, ForbiddenCIDR)")
	minPrefix6 := fs.Int("min-remote-prefix-length6", netv1alpha1.DefaultMinRemotePrefixLength6, "the same for peers' IPv6 CIDRs")
	ipv6 := fs.Bool("ipv6", true, "map peers' IPv6 CIDRs (dual-stack and IPv6-only peers; a clashing one is remapped from the IPv6 --pools); false refuses a Configuration with an IPv6 CIDR (Ready=False, InvalidCIDR), for clusters whose nodes have no IPv6")
	gwMTU := fs.Int("gateway-mtu", netv1alpha1.DefaultMTU, "tunnel MTU skeinctl network connect uses when --mtu is not given (the chart's peering.networking.gateway.mtu; 576-9000)")
	gwServiceType := fs.String("gateway-server-service-type", string(netv1alpha1.ServiceTypeLoadBalancer), "type of a gateway server's Service in this cluster when skeinctl network connect is not told (peering.networking.gateway.server.service.type: NodePort, LoadBalancer or ClusterIP)")
	gwPort := fs.Int("gateway-server-port", netv1alpha1.DefaultPort, "port of a gateway server's Service in this cluster when skeinctl network connect is not told (peering.networking.gateway.server.service.port)")
	metrics := fs.String("metrics-listen", ":9473", "address of /metrics (\"off\" or \"0\" disables it)")
	health := fs.String("health-listen", ":9474", "address of /healthz (the process serves) and /readyz (its caches are synced) for the kubelet's probes (\"0\" disables them)")
	qps := fs.Float64("kube-api-qps", 50, "requests per second to the API server for each kind of object (the limit applies per kind: Deployments, Services, Configurations... each have their own; client-go's default of 5 makes 100 peerings take a minute)")
	burst := fs.Int("kube-api-burst", 100, "burst of requests to the API server, for each kind of object")
	leaderElect := fs.Bool("leader-elect", true, "elect one active replica through a Lease in --namespace")
	services := fs.Bool("multicluster-services", true, "import the services peers export with the Multi-Cluster Services API (ServiceExport/ServiceImport, multicluster.x-k8s.io), and export this cluster's; off when the MCS CRDs are not installed (the chart installs them)")
	importExcluded := fs.String("import-excluded-namespaces", strings.Join(controller.DefaultImportExcludedNamespaces, ","), "namespaces never imported into, comma-separated, besides --namespace (a peer's export of a name there is ignored here)")
	// What one peer may cost this cluster through multi-cluster services.
	importNamespaces := fs.String("import-namespace-selector", "", "import only into the namespaces this label selector selects, such as skein.io/import=true (empty: every namespace that exists and is not excluded)")
	maxImports := fs.Int("max-imports-per-peer", controller.DefaultMaxImportsPerPeer, "names one peer may have imported here (each a Service: a ClusterIP and a unit of its namespace's ResourceQuota); its newest exports beyond are not imported, and its Configuration says so (ServicesWithinBudget=False)")
	maxEndpoints := fs.Int("max-endpoints-per-peer", controller.DefaultMaxEndpointsPerPeer, "endpoints of one peer imported, across its imports, shared out oldest export first")
	maxObjects := fs.Int("max-objects-per-peer", controller.DefaultMaxObjectsPerPeer, "PublishedServices and EndpointSlice copies of one peer's published namespace the controller holds (trimmed): a peer with more is not read, and what was imported from it goes")
	published := fs.String("published-namespace", controller.DefaultPublishedNamespace, "namespace where this cluster publishes its exported services (a PublishedService and EndpointSlice copies for each) for its peers' services readers, which read that namespace and nothing else; it must exist (the chart makes it) and hold nothing else")
	maxPorts := fs.Int("max-ports-per-import", mcs.DefaultMaxPortsPerImport, "ports of one import (1-100: an EndpointSlice lists at most 100)")
	dnsListen := fs.String("dns-listen", "0", "address where the controller answers NAME.NAMESPACE.svc.clusterset.local over UDP and TCP from this cluster's ServiceImports, such as :5353 (\"0\": not served); every replica answers")
	dnsService := fs.String("dns-service", "", "the Service in --namespace in front of --dns-listen (the chart's skein-dns): --dns-configure-coredns forwards clusterset.local to its ClusterIPs")
	dnsCoreDNS := fs.String("dns-configure-coredns", "", "NAMESPACE/NAME of the cluster's CoreDNS ConfigMap, such as kube-system/coredns: the controller keeps a server block in its Corefile forwarding clusterset.local to --dns-service (empty: it never touches it)")
	uninstall := fs.Bool("uninstall", false, "remove what the controller wrote outside the chart's own objects, then exit (the chart's pre-delete hook runs it before helm uninstall deletes anything): its clusterset.local block in CoreDNS's Corefile (with --dns-configure-coredns), every import (ServiceImports, derived Services and EndpointSlices) and what it published in --published-namespace")
	uninstallStop := fs.String("uninstall-stop", "", "with --uninstall: the controller's Deployment in --namespace, scaled to zero (its pods gone) first, so that no running controller imports again what --uninstall removes")
	logLevel := fs.String("log-level", "info", logging.LevelUsage)
	logFormat := fs.String("log-format", logging.FormatText, logging.FormatUsage)
	buildinfo.ParseFlags(fs, "skein-controller", os.Args[1:])
	slogger, err := logging.New(os.Stderr, *logLevel, *logFormat)
	if err != nil {
		fmt.Fprintf(os.Stderr, "skein-controller: %v\n", err)
		os.Exit(2)
	}
	ctrl.SetLogger(logr.FromSlogHandler(slogger.Handler()))
	klog.SetSlogLogger(slogger)
	log := ctrl.Log.WithName("skein-controller")
	bi := buildinfo.Get()
	log.Info("starting", "version", bi.Version, "commit", bi.Commit, "go", bi.GoVersion)
	internal, external, external6 := prefixes("internal-cidr", *internalCIDR), prefixes("external-cidr", *externalCIDR), prefixes("external-cidr6", *externalCIDR6)
	if len(internal) != 1 || len(external) != 1 || len(external6) != 1 {
		fail(fmt.Errorf("--internal-cidr, --external-cidr and --external-cidr6 take one CIDR each"))
	}
	podList := prefixes("pod-cidrs", *podCIDRs)
	ext4, ext6, err := externalCIDRs(podList, external[0], external6[0])
	if err != nil {
		fail(err)
	}
	switch {
	case *minPrefix < 1 || *minPrefix > 32:
		fail(fmt.Errorf("--min-remote-prefix-length %d: want 1-32", *minPrefix))
	case *minPrefix6 < 1 || *minPrefix6 > 128:
		fail(fmt.Errorf("--min-remote-prefix-length6 %d: want 1-128", *minPrefix6))
	case *gwMTU < 576 || *gwMTU > 9000:
		fail(fmt.Errorf("--gateway-mtu %d: want 576-9000", *gwMTU))
	case *gwPort < 1 || *gwPort > 65535:
		fail(fmt.Errorf("--gateway-server-port %d: want 1-65535", *gwPort))
	case !slices.Contains([]string{controller.PodRoutesAuto, controller.PodRoutesAlways, controller.PodRoutesNever}, *watchPods):
		fail(fmt.Errorf("--gateway-watch-pods %q: want auto, true or false", *watchPods))
	case !slices.Contains([]string{"NodePort", "LoadBalancer", "ClusterIP"}, *gwServiceType):
		fail(fmt.Errorf("--gateway-server-service-type %q: want NodePort, LoadBalancer or ClusterIP", *gwServiceType))
	}
	policy, err := gatewayPolicy()
	if err != nil {
		fail(err)
	}
	switch {
	case *maxImports < 1 || *maxEndpoints < 1 || *maxObjects < 1:
		fail(fmt.Errorf("--max-imports-per-peer, --max-endpoints-per-peer and --max-objects-per-peer: want 1 or more"))
	case *maxPorts < 1 || *maxPorts > 100:
		fail(fmt.Errorf("--max-ports-per-import %d: want 1-100", *maxPorts))
	}
	importSelector, err := controller.ParseNamespaceSelector(*importNamespaces)
	if err != nil {
		fail(fmt.Errorf("--import-namespace-selector: %w", err))
	}
	poolList := prefixes("pools", *pools)
	if err := checkPools(poolList); err != nil {
		fail(err)
	}
	opts := controller.Options{
		PodCIDRs: podList, ServiceCIDRs: prefixes("service-cidr", *serviceCIDR),
		Reserved: prefixes("reserved", *reserved), Pools: poolList, NodeCIDRs: prefixes("node-cidrs", *nodeCIDRs),
		KeepPublicPeerCIDRs: !*remapPublic, MinRemotePrefixLength: *minPrefix, MinRemotePrefixLength6: *minPrefix6, IPv6: *ipv6, AllowPrivilegedGateways: *allowPrivileged, GatewayWatchPods: *watchPods, GatewayPolicy: policy,
		ExternalCIDR: ext4, ExternalCIDR6: ext6, InternalCIDR: internal[0], Metrics: ctrlmetrics.Registry,
	}
	opts.ImportBudget = controller.PeerBudget{MaxImports: *maxImports, MaxEndpoints: *maxEndpoints, MaxObjects: *maxObjects}
	opts.MaxPortsPerImport, opts.ImportNamespaces = *maxPorts, importSelector
	ctrlmetrics.Registry.MustRegister(buildmetric.Collector("controller"))
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail(fmt.Errorf("reaching the API server: %w", err))
	}
	cfg.QPS, cfg.Burst = float32(*qps), *burst
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  kube.Scheme(),
		Cache:                   controller.CacheOptions(),
		Metrics:                 metricsserver.Options{BindAddress: metricsBind(*metrics)},
		HealthProbeBindAddress:  *health,
		LeaderElection:          *leaderElect,
		LeaderElectionID:        "skein-controller",
		LeaderElectionNamespace: *namespace,
	})
	if err != nil {
		fail(err)
	}
	ctx := ctrl.SetupSignalHandler()
	direct, err := client.New(cfg, client.Options{Scheme: kube.Scheme()})
	if err != nil {
		fail(err)
	}
	if *uninstall {
		if *uninstallStop != "" {
			if err := stopDeployment(ctx, direct, *namespace, *uninstallStop, 90*time.Second); err != nil {
				fail(fmt.Errorf("uninstall: %w (helm uninstall --no-hooks skips this step)", err))
			}
		}
		if err := removeOnUninstall(ctx, direct, *dnsCoreDNS, *published); err != nil {
			fail(fmt.Errorf("uninstall: %w (helm uninstall --no-hooks skips this step; then remove the objects by hand, docs/install.md)", err))
		}
		os.Exit(0)
	}
	id, err := identity.EnsureClusterID(ctx, direct, *namespace)
	if err != nil {
		fail(err)
	}
	log.Info("cluster identity", "clusterID", id, "name", identity.ClusterName(id), "namespace", *namespace)
	if err := identity.PublishNetwork(ctx, direct, *namespace, identity.Network{PodCIDRs: opts.PodCIDRs, ServiceCIDRs: opts.ServiceCIDRs,
		Reserved: opts.Reserved, ExternalCIDR: opts.ExternalCIDR, ExternalCIDR6: opts.ExternalCIDR6, InternalCIDR: opts.InternalCIDR,
		Gateway: identity.GatewayDefaults{MTU: int32(*gwMTU), ServerServiceType: *gwServiceType, ServerPort: int32(*gwPort)}}); err != nil {
		fail(fmt.Errorf("publishing the network parameters: %w", err))
	}
	_, mcsErr := mgr.GetRESTMapper().RESTMapping(schema.GroupKind{Group: mcsv1a1.GroupName, Kind: mcsv1a1.ServiceImportKindName}, "v1alpha1")
	if !*services && mcsErr == nil {
		// Turned off: what was imported would keep pointing at endpoints nobody updates.
		n, err := controller.RemoveImports(ctx, direct)
		if err != nil {
			fail(fmt.Errorf("multi-cluster services off: removing the imports: %w", err))
		}
		p, err := controller.RemovePublished(ctx, direct, *published)
		if err != nil && !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err) {
			fail(fmt.Errorf("multi-cluster services off: removing what was published: %w", err))
		}
		log.Info("multi-cluster services off: imports and published exports removed (peers import nothing from this cluster)", "objects", n+p)
	}
	if *services {
		if err := mcsErr; err != nil {
			log.Info("multi-cluster services off: the MCS API (ServiceExport, ServiceImport of multicluster.x-k8s.io/v1alpha1) is not installed; install the CRDs from the chart's crds/ and restart", "error", err.Error())
		} else {
			opts.ClusterID, opts.ServicesFrom, opts.PublishedNamespace = id, cfg, *published
			if _, err := mgr.GetRESTMapper().RESTMapping(schema.GroupKind{Group: svcv1alpha1.GroupName, Kind: "PublishedService"}, "v1alpha1"); err != nil {
				opts.NoPublishing = true
				log.Info("this cluster's exports are not published for its peers: the PublishedService CRD (services.skein.io/v1alpha1) is not installed; apply the CRDs of this version (deploy/README.md, CRDs) and restart", "error", err.Error())
			}
			// Never into skein's own namespace: a peer's export there would put a Service
			// beside the controller and its Secrets.
			opts.ImportExcludedNamespaces = []string{*namespace}
			for _, n := range strings.Split(*importExcluded, ",") {
				if n = strings.TrimSpace(n); n != "" {
					opts.ImportExcludedNamespaces = append(opts.ImportExcludedNamespaces, n)
				}
			}
		}
	}
	if err := controller.Setup(mgr, opts); err != nil {
		fail(err)
	}
	if *dnsListen != "0" && *dnsListen != "" {
		if mcsErr != nil || !*services {
			log.Info("clusterset.local not served: multi-cluster services are off", "dnsListen", *dnsListen)
		} else if err := serveDNS(ctx, mgr, direct, *dnsListen, *namespace, *dnsService, *dnsCoreDNS); err != nil {
			fail(err)
		}
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		fail(err)
	}
	// Ready once the caches every reconciler reads are synced (a standby replica, waiting for
	// the Lease, is ready too: it serves nothing, but it is healthy and will take over).
	if err := mgr.AddReadyzCheck("caches", func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), time.Second)
		defer cancel()
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return errors.New("the caches are not synced yet")
		}
		return nil
	}); err != nil {
		fail(err)
	}
	if err := mgr.Start(ctx); err != nil {
		fail(err)
	}
}

// anyReplica is a runnable every replica runs, leader or not (manager.RunnableFunc runs on
// the leader only).
type anyReplica func(context.Context) error

func (f anyReplica) Start(ctx context.Context) error { return f(ctx) }
func (anyReplica) NeedLeaderElection() bool          { return false }

// stopDeployment scales the Deployment namespace/name to zero replicas and waits, up to
// timeout, until none of its pods is left. A Deployment already gone is stopped.
func stopDeployment(ctx context.Context, c client.Client, namespace, name string, timeout time.Duration) error {
	var d appsv1.Deployment
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &d); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("deployment %s/%s: %w", namespace, name, err)
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil || sel.Empty() {
		return fmt.Errorf("deployment %s/%s: its selector %v selects no pods of its own", namespace, name, d.Spec.Selector)
	}
	if err := c.Patch(ctx, &d, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":0}}`))); err != nil {
		return fmt.Errorf("scaling deployment %s/%s to zero: %w", namespace, name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
			return fmt.Errorf("pods of deployment %s/%s: %w", namespace, name, err)
		}
		if len(pods.Items) == 0 {
			ctrl.Log.WithName("uninstall").Info("controller stopped", "deployment", namespace+"/"+name)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("deployment %s/%s: %d pods still there after %s", namespace, name, len(pods.Items), timeout)
		case <-time.After(time.Second):
		}
	}
}

// removeOnUninstall removes what the controller wrote outside the chart's own objects: the
// clusterset.local block in the Corefile of coredns (NAMESPACE/NAME; "": none was kept), every
// import, and what it published in the published namespace. A kind whose CRD is not installed
// has nothing to remove.
func removeOnUninstall(ctx context.Context, c client.Client, coredns, published string) error {
	log := ctrl.Log.WithName("uninstall")
	if coredns != "" {
		ns, name, ok := strings.Cut(coredns, "/")
		if !ok || ns == "" || name == "" {
			return fmt.Errorf("--dns-configure-coredns %q: want NAMESPACE/NAME", coredns)
		}
		changed, err := skeindns.ConfigureCoreDNS(ctx, c, ns, name, nil)
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("removing the clusterset.local block from CoreDNS's Corefile: %w", err)
		}
		log.Info("CoreDNS's Corefile without skein's clusterset.local block", "configMap", coredns, "changed", changed)
	}
	n, err := controller.RemoveImports(ctx, c)
	if err != nil && !meta.IsNoMatchError(err) {
		return fmt.Errorf("removing the imports: %w", err)
	}
	p, err := controller.RemovePublished(ctx, c, published)
	if err != nil && !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err) {
		return fmt.Errorf("removing what was published in %s: %w", published, err)
	}
	log.Info("imports and published exports removed", "objects", n+p)
	return nil
}

// serveDNS answers clusterset.local on addr from the manager's cache (every replica: the
// Service in front balances over them), and, with coredns set, keeps CoreDNS's Corefile
// forwarding the zone to the Service (the leader, once a minute, so that an edit that dropped
// the block is repaired).
func serveDNS(ctx context.Context, mgr ctrl.Manager, direct client.Client, addr, namespace, service, coredns string) error {
	if err := skeindns.IndexSlices(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	srv := skeindns.New(mgr.GetCache(), skeindns.DefaultLimits)
	ctrlmetrics.Registry.MustRegister(srv.Collectors()...)
	if err := mgr.Add(anyReplica(func(ctx context.Context) error {
		// A standby replica runs no controller that would start these informers: start them
		// here, so that no query waits for a first sync.
		for _, o := range []client.Object{&mcsv1a1.ServiceImport{}, &discoveryv1.EndpointSlice{}} {
			if _, err := mgr.GetCache().GetInformer(ctx, o); err != nil {
				return fmt.Errorf("dns: %w", err)
			}
		}
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return ctx.Err()
		}
		ctrl.Log.Info("answering clusterset.local", "listen", addr)
		return srv.Serve(ctx, addr)
	})); err != nil {
		return err
	}
	if coredns == "" {
		return nil
	}
	cmNS, cmName, ok := strings.Cut(coredns, "/")
	if !ok || cmNS == "" || cmName == "" || service == "" {
		return fmt.Errorf("--dns-configure-coredns %q: want NAMESPACE/NAME, and --dns-service", coredns)
	}
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		skeindns.KeepCoreDNS(ctx, direct, client.ObjectKey{Namespace: namespace, Name: service}, client.ObjectKey{Namespace: cmNS, Name: cmName},
			time.Minute, ctrl.Log.WithName("coredns"))
		return nil
	}))
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "skein-controller: %v\n", err)
	os.Exit(1)
}

// metricsBind maps --metrics-listen to controller-runtime's bind address: "off" (as the agent
// and the gateway spell it) and "0" disable the endpoint.
func metricsBind(addr string) string {
	if addr == "off" {
		return "0"
	}
	return addr
}

// joinPrefixes is the comma-separated form of ps (a flag's default).
func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

// checkPools refuses remap pools a peer's CIDR could never be remapped into (overlapping the
// ranges admission refuses: loopback, multicast, link-local, ...) and pools listed twice or
// overlapping, before anything connects.
func checkPools(pools []netip.Prefix) error {
	for i, p := range pools {
		if f, bad := netv1alpha1.ForbiddenRange(p); bad {
			return fmt.Errorf("--pools: %v overlaps %s (%s): remaps there would never be routed", p, f.Prefix, f.Why)
		}
		for _, q := range pools[:i] {
			if q.Overlaps(p) {
				return fmt.Errorf("--pools: %v and %v overlap: list each range once", q, p)
			}
		}
	}
	return nil
}
