// Command skein-agent is skein's node component (Liqo-Route's role): it creates the overlay
// device liqo.vxlan, points FDB and neighbour entries at every peering's active gateway, routes
// the peers' CIDRs through table 18952 with policy rules, SNATs the node's own traffic to the
// peers, and publishes the node's VTEP. It runs on every node (host network, NET_ADMIN).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/skein-net/skein/control/agent"
	"github.com/skein-net/skein/control/agent/apiclient"
	"github.com/skein-net/skein/control/agent/plan"
	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/apiconn"
	"github.com/skein-net/skein/control/buildinfo"
	"github.com/skein-net/skein/control/buildinfo/buildmetric"
	"github.com/skein-net/skein/control/logging"
	"github.com/skein-net/skein/dataplane/kernel"
	"github.com/skein-net/skein/dataplane/overlay"
)

const usage = `skein-agent programs this node for skein's peerings.

Usage:
  skein-agent --node-name NAME --node-ip IP [flags]
  skein-agent --cleanup [--device liqo.vxlan]     remove everything the agent created

What it creates, and all it touches: the overlay device (liqo.vxlan), its FDB and permanent
neighbour entries, the routes of table 18952, the rules that look it up, and the nftables
table skein-agent.

Flags:
`

func main() {
	fs := flag.NewFlagSet("skein-agent", flag.ContinueOnError)
	apiconn.DeadConnectionsFaster()
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage); fs.PrintDefaults() }
	nodeName := fs.String("node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	nodeIP := fs.String("node-ip", os.Getenv("NODE_IP"), "this node's underlay address, its VTEP: IPv4, or IPv6 in an IPv6-only cluster, whose gateways then listen on IPv6 too (default $NODE_IP)")
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file (default: the pod's service account)")
	device := fs.String("device", netv1alpha1.DefaultOverlayDevice, "name of the overlay device")
	kindName := fs.String("overlay-kind", "vxlan", "vxlan, or geneve where the kernel has it")
	port := fs.Uint("overlay-port", 0, "overlay UDP port (default 4789 for vxlan, 6081 for geneve)")
	vni := fs.Uint("vni", netv1alpha1.DefaultVNI, "overlay VNI")
	mtu := fs.Int("mtu", 0, "MTU of the overlay device (default: the MTU of the interface holding --node-ip minus the encapsulation overhead)")
	internal := fs.String("internal-cidr", netv1alpha1.DefaultInternalCIDR, "the cluster's internal (overlay) CIDR")
	podCIDRs := fs.String("pod-cidrs", "10.244.0.0/16", "the cluster's pod CIDRs, comma-separated: never SNATed")
	masqBypass := fs.Bool("masquerade-bypass", true, "keep the source of pod traffic to peer clusters whatever the node's other NAT rules say: a NAT rule in skein-agent's own nftables table, before the usual source-NAT priority, binds such connections to their own address so that the CNI's masquerade skips them (CNIs that masquerade everything outside their pod CIDR, such as flannel, would give peers the node's address); with false, the InternalNode's PodTrafficMasqueraded condition says when the CNI masquerades peer traffic")
	guard := fs.Bool("overlay-guard", true, "take the overlay's frames (UDP to --overlay-port with --vni) only from the cluster's nodes (their InternalNodes' status.vtep) and active gateways, drop such frames sent by pods through this node, and drop IPv4 leaving the overlay device from a source not routed back through it (unless relayed to a gateway); nftables chains in skein-agent's own tables, drops counted in skein_agent_overlay_dropped_packets_total. false: the device takes frames from any sender")
	priority := fs.Int("rule-priority", kernel.DefaultRulePriority, "priority of the policy rules to table 18952 (lower for CNIs that need an early rule)")
	resync := fs.Duration("resync", 10*time.Second, "re-read everything and repair drift this often")
	cleanupOnUninstall := fs.Bool("cleanup-on-uninstall", true, "when stopping, remove what the agent programmed if its DaemonSet is gone or being deleted (helm uninstall); a restart leaves the node programmed")
	metricsAddr := fs.String("metrics-listen", ":9472", "address of /metrics and /healthz (\"off\" disables them)")
	netnsPath := fs.String("netns", "", "program the network namespace at this path (such as /var/run/netns/NAME) instead of the agent's own; for labs and tests")
	cleanup := fs.Bool("cleanup", false, "remove everything the agent created on this node and exit")
	logLevel := fs.String("log-level", "info", logging.LevelUsage)
	logFormat := fs.String("log-format", logging.FormatText, logging.FormatUsage)
	buildinfo.ParseFlags(fs, "skein-agent", os.Args[1:])
	fail := func(code int, format string, a ...any) {
		fmt.Fprintf(os.Stderr, "skein-agent: "+format+"\n", a...)
		os.Exit(code)
	}
	log, err := logging.New(os.Stderr, *logLevel, *logFormat)
	if err != nil {
		fail(2, "%v", err)
	}
	// client-go's reflectors log through klog (watch errors,
	// such as a missing RBAC rule, would otherwise go unseen).
	klog.SetSlogLogger(log)
	bi := buildinfo.Get()
	log.Info("starting", "version", bi.Version, "commit", bi.Commit, "go", bi.GoVersion)
	var inNS func(func() error) error
	nsFd := 0
	if *netnsPath != "" {
		inNS = kernel.InNamespace(*netnsPath)
		f, err := os.Open(*netnsPath)
		if err != nil {
			fail(1, "--netns: %v", err)
		}
		defer f.Close()
		nsFd = int(f.Fd())
	}
	k, err := kernel.NewNetlink(*netnsPath, inNS)
	if err != nil {
		fail(1, "%v", err)
	}
	defer k.Close()
	if *cleanup {
		if err := kernel.Cleanup(k, *device, uint32(*vni)); err != nil {
			fail(1, "cleanup: %v", err)
		}
		if err := kernel.DeleteHostSNAT(nsFd); err != nil {
			fail(1, "cleanup: %v", err)
		}
		fmt.Println("skein-agent: removed the overlay device, table 18952's routes and rules, and the nftables table")
		return
	}
	ip, err := netip.ParseAddr(*nodeIP)
	if err != nil || ip.Is4In6() || ip.Zone() != "" || ip.IsUnspecified() || *nodeName == "" {
		fail(2, "--node-name and --node-ip (an IPv4 or IPv6 address) are required (or $NODE_NAME and $NODE_IP)")
	}
	kind, err := overlay.ParseKind(*kindName)
	if err != nil {
		fail(2, "--overlay-kind: %v", err)
	}
	ic, err := netip.ParsePrefix(*internal)
	if err != nil {
		fail(2, "--internal-cidr %q: %v", *internal, err)
	}
	if ic != ic.Masked() {
		fail(2, "--internal-cidr %q has host bits set (did you mean %v?)", *internal, ic.Masked())
	}
	var pods []netip.Prefix
	for _, s := range strings.Split(*podCIDRs, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			fail(2, "--pod-cidrs: %q: %v", s, err)
		}
		if p != p.Masked() {
			fail(2, "--pod-cidrs: %q has host bits set (did you mean %v?)", s, p.Masked())
		}
		pods = append(pods, p)
	}
	if *port > 65535 || *vni == 0 || *vni >= 1<<24 {
		fail(2, "--overlay-port must be below 65536 and --vni within 1-16777215")
	}
	if *mtu == 0 {
		var under int
		find := func() (err error) { under, err = underlayMTU(ip); return err }
		if inNS != nil {
			err = inNS(find)
		} else {
			err = find()
		}
		if err != nil {
			fail(1, "%v (or set --mtu)", err)
		}
		*mtu = overlayMTU(under, ip)
		log.Info("overlay MTU from the underlay", "underlayMTU", under, "mtu", *mtu)
	}
	restCfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail(1, "reaching the API server: %v", err)
	}
	a, err := agent.New(restCfg, agent.Options{
		Node: plan.Node{Name: *nodeName, IP: ip, InternalCIDR: ic, PodCIDRs: pods, Device: *device, Kind: kind,
			VNI: uint32(*vni), Port: uint16(*port), MTU: *mtu, RulePriority: *priority, MasqueradeBypass: *masqBypass, UnguardedOverlay: !*guard},
		PodNamespace: os.Getenv("POD_NAMESPACE"), PodName: os.Getenv("POD_NAME"),
		Resync: *resync, Log: log,
		Monitor:       func(changed func(), done <-chan struct{}) error { return kernel.Monitor(*netnsPath, changed, done) },
		Masqueraded:   func() (uint64, bool, error) { return kernel.MasqueradedConnections(nsFd) },
		LocalNetworks: func() ([]netip.Prefix, error) { return k.LocalNetworks(*device) },
	}, k, func(s *kernel.HostSNAT) error {
		if s == nil {
			return kernel.DeleteHostSNAT(nsFd)
		}
		return kernel.EnsureHostSNAT(nsFd, *s)
	})
	if err != nil {
		fail(1, "%v", err)
	}
	if *metricsAddr != "off" {
		serveMetrics(*metricsAddr, a, func() (uint64, uint64, error) {
			sender, source, _, err := kernel.GuardDrops(nsFd)
			return sender, source, err
		}, log)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := a.Run(ctx); err != nil {
		fail(1, "%v", err)
	}
	// Stopping. A restart (a rolling update, a drain, a crash) leaves the node programmed, so
	// traffic flows on; an uninstall (the DaemonSet gone) takes skein's node state with it.
	if *cleanupOnUninstall {
		cleanupIfUninstalled(restCfg, k, nsFd, *device, uint32(*vni), log)
	}
}

// cleanupIfUninstalled removes the overlay device, table 18952's routes and rules and the
// nftables table when the agent's DaemonSet is gone or being deleted.
func cleanupIfUninstalled(cfg *rest.Config, k kernel.Kernel, nsFd int, device string, vni uint32, log *slog.Logger) {
	ns, pod := os.Getenv("POD_NAMESPACE"), os.Getenv("POD_NAME")
	if ns == "" || pod == "" {
		return
	}
	c, err := apiclient.New(cfg)
	if err != nil {
		log.Warn("uninstall check", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gone, why, err := c.OwnerGone(ctx, ns, pod)
	if err != nil {
		log.Warn("uninstall check: the node stays programmed", "err", err)
		return
	}
	if !gone {
		log.Info("stopping; the node stays programmed for the next agent")
		return
	}
	err = errors.Join(kernel.Cleanup(k, device, vni), kernel.DeleteHostSNAT(nsFd))
	if err != nil {
		log.Error("skein is being uninstalled: cleaning the node", "err", err)
		return
	}
	log.Info("skein is being uninstalled: removed the overlay device, table 18952's routes and rules, and the nftables table", "because", why)
}

// underlayMTU is the MTU of the interface that holds ip.
// overlayMTU is the overlay device's MTU on an underlay link of MTU under whose node address
// is nodeIP: the link's MTU less the encapsulation, whose outer header is of nodeIP's family
// (an IPv6 underlay costs 20 bytes more: 1430 on a 1500-byte link, as the gateways assume for
// an IPv6 underlay, where an IPv4 one gives 1450).
func overlayMTU(under int, nodeIP netip.Addr) int {
	if nodeIP.Is6() {
		return under - overlay.Overhead6
	}
	return under - overlay.Overhead
}

func underlayMTU(ip netip.Addr) (int, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return 0, err
	}
	for _, ifc := range ifs {
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if got, ok := netip.AddrFromSlice(n.IP); ok && got.Unmap() == ip {
					return ifc.MTU, nil
				}
			}
		}
	}
	return 0, fmt.Errorf("no interface holds the node IP %v", ip)
}

func serveMetrics(addr string, a *agent.Agent, guardDrops func() (sender, source uint64, err error), log *slog.Logger) {
	reg := prometheus.NewRegistry()
	// The agent's memory is part of what it promises: its Go runtime and process are measured.
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildmetric.Collector("agent"))
	gauge := func(name, help string, f func(agent.Stats) float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(a.Stats()) }))
	}
	counter := func(name, help string, f func(agent.Stats) float64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return f(a.Stats()) }))
	}
	gauge("skein_agent_peerings_programmed", "Peerings whose gateway is programmed on this node.", func(s agent.Stats) float64 { return float64(s.Programmed) })
	gauge("skein_agent_refused_cidrs", "Remote CIDRs this node does not route because they would take its own traffic (they cover its address, a gateway VTEP, the internal or pod CIDR, or a special range); each is logged.", func(s agent.Stats) float64 { return float64(s.Refused) })
	counter("skein_agent_reconciles_total", "Reconciles run.", func(s agent.Stats) float64 { return float64(s.Reconciles) })
	counter("skein_agent_kernel_changes_total", "Kernel objects added, changed or removed.", func(s agent.Stats) float64 { return float64(s.Changes) })
	counter("skein_agent_drift_repairs_total", "Resyncs that found and repaired drift.", func(s agent.Stats) float64 { return float64(s.DriftRepairs) })
	counter("skein_agent_reconcile_errors_total", "Reconciles that failed.", func(s agent.Stats) float64 { return float64(s.Errors) })
	counter("skein_agent_masqueraded_connections_total", "Pod connections to peer clusters that left this node source-NATed by a rule that is not skein's (a CNI's masquerade); peers drop them. See --masquerade-bypass.", func(s agent.Stats) float64 { return float64(s.Masqueraded) })
	if guardDrops != nil {
		reg.MustRegister(&dropsCollector{read: guardDrops})
	}
	started := time.Now()
	gauge("skein_agent_last_success_timestamp_seconds", "Unix time the last reconcile ended without an error (before the first, the agent's start); /healthz fails once it is older than 2.5 resyncs.", func(s agent.Stats) float64 {
		if s.LastSuccess.IsZero() {
			return float64(started.UnixNano()) / 1e9
		}
		return float64(s.LastSuccess.UnixNano()) / 1e9
	})
	gauge("skein_agent_reconcile_latency_seconds", "Time from the last API event to the kernel being reconciled.", func(s agent.Stats) float64 { return s.LastLatency.Seconds() })
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := a.Health(time.Now()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
			log.Error("metrics server", "err", err)
		}
	}()
}

// dropsCollector is skein_agent_overlay_dropped_packets_total, read from the overlay guard's
// nftables counters at each scrape (kernel.GuardDrops). Those restart from zero when the agent
// replaces its table: a reading below the last one is a restart, and the count goes on from
// there, so the metric never goes down.
type dropsCollector struct {
	read func() (sender, source uint64, err error)

	mu          sync.Mutex
	last, total [2]uint64 // sender, source
}

var dropsDesc = prometheus.NewDesc("skein_agent_overlay_dropped_packets_total",
	"Packets the overlay guard dropped (--overlay-guard): reason sender, the overlay's frames from what is no node and no gateway of the cluster, or sent by a pod; reason source, packets leaving the overlay device whose source is not routed back through it.",
	[]string{"reason"}, nil)

func (c *dropsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- dropsDesc }

func (c *dropsCollector) Collect(ch chan<- prometheus.Metric) {
	sender, source, err := c.read()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		for i, now := range [2]uint64{sender, source} {
			if now < c.last[i] {
				c.total[i] += now
			} else {
				c.total[i] += now - c.last[i]
			}
			c.last[i] = now
		}
	}
	ch <- prometheus.MustNewConstMetric(dropsDesc, prometheus.CounterValue, float64(c.total[0]), "sender")
	ch <- prometheus.MustNewConstMetric(dropsDesc, prometheus.CounterValue, float64(c.total[1]), "source")
}
