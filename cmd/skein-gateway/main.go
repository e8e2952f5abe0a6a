// Command skein-gateway is skein's gateway: wireguard-go, the userspace dataplane and a gVisor
// netstack in one unprivileged process. It runs from a config file (standalone) or from the
// API objects of its GatewayServer or GatewayClient (in-cluster).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/skein-net/skein/appliance"
	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/apiconn"
	"github.com/skein-net/skein/control/buildinfo"
	"github.com/skein-net/skein/control/gateway"
	"github.com/skein-net/skein/control/gateway/config"
	"github.com/skein-net/skein/control/logging"
	"github.com/skein-net/skein/dataplane"
	"github.com/skein-net/skein/dataplane/overlay"
)

const usage = `skein-gateway connects this cluster's pods to a peer cluster's through WireGuard,
without the kernel WireGuard module, a TUN device or any privilege.

Usage:
  skein-gateway --config FILE                        standalone, from a YAML file
  skein-gateway --check --config FILE                validate the file, print the public key
  skein-gateway --print-peer-config --config FILE    print the wg and ip commands a stock
                                                     WireGuard peer runs to join this gateway
  skein-gateway --mode server|client --gateway-name NAME [--gateway-namespace NS] [flags]
                                                     in-cluster, from the API

Standalone mode needs two UDP ports (WireGuard, and the overlay where the nodes' liqo.vxlan
devices send traffic for the peer cluster) and, unless httpListen is off, a TCP port for
/healthz, /readyz and /metrics. Inside the tunnel the server owns 169.254.100.1 and the client
169.254.100.2 (tunnelCIDR); each probes the other there, so a stock WireGuard peer must hold its
address and allow this gateway's (--print-peer-config prints how). docs/standalone.md has two
complete examples (two skein sites; a stock peer on the same subnet) and every config key, with
its default; docs/gateway-config.schema.json is the same as a JSON Schema for editors.

In-cluster mode reads its GatewayServer or GatewayClient, the Configuration and PublicKey
labelled with the remote cluster id, its key Secret and the InternalNodes, starts once they are
complete, applies changes live and keeps its Connection's status current. It is normally
started by the gateway Deployment that skein-controller renders from a template.

Flags:
`

func main() {
	fs := flag.NewFlagSet("skein-gateway", flag.ContinueOnError)
	apiconn.DeadConnectionsFaster()
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	configPath := fs.String("config", "", "standalone: path of the gateway's YAML config file")
	check := fs.Bool("check", false, "standalone: validate the config file, print the public key, and exit")
	printPeer := fs.Bool("print-peer-config", false, "standalone: validate the config file, print the commands (wg, ip) a Linux host with stock WireGuard runs to be this gateway's peer, and exit")
	logLevel := fs.String("log-level", "info", logging.LevelUsage)
	logFormat := fs.String("log-format", logging.FormatText, logging.FormatUsage)

	mode := fs.String("mode", "", "in-cluster: server (a GatewayServer) or client (a GatewayClient)")
	name := fs.String("gateway-name", "", "in-cluster: name of the GatewayServer or GatewayClient")
	namespace := fs.String("gateway-namespace", os.Getenv("POD_NAMESPACE"), "in-cluster: its namespace (default $POD_NAMESPACE)")
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "in-cluster: kubeconfig file (default: the pod's service account)")
	podIP := fs.String("pod-ip", os.Getenv("POD_IP"), "in-cluster: the pod's IP, where the overlay socket binds (default $POD_IP)")
	overlayKind := fs.String("overlay-kind", "vxlan", "in-cluster: vxlan or geneve, as the nodes' overlay devices")
	overlayPort := fs.Uint("overlay-port", 0, "in-cluster: UDP port of the overlay (default 4789 for vxlan, 6081 for geneve)")
	vni := fs.Uint("vni", netv1alpha1.DefaultVNI, "in-cluster: VNI of the overlay")
	completeSums := fs.Bool("complete-checksums", true, "in-cluster: recompute inner TCP/UDP checksums from the nodes, so their overlay devices may keep TX offload (TSO) on")
	overlayMTU := fs.Int("overlay-mtu", 0, "in-cluster: MTU of the nodes' overlay devices (default 1450)")
	listenPort := fs.Uint("listen-port", 0, "in-cluster server: WireGuard UDP port (default: the GatewayServer's endpoint port)")
	httpListen := fs.String("http-listen", ":9471", "in-cluster: address of /healthz, /readyz and /metrics (\"off\" disables them)")
	probeInterval := fs.Duration("probe-interval", config.DefaultProbeInterval, "in-cluster: interval of the probes to the peer gateway")
	probeFail := fs.Int("probe-fail-after", config.DefaultProbeFail, "in-cluster: consecutive lost probes that make the Connection Error")
	endpointHold := fs.Duration("endpoint-hold", 30*time.Second, "in-cluster client: how long the server may stay silent before the client dials the GatewayClient's next address (or resolves its name again); at least 1s")
	watchPods := fs.Bool("watch-pods", false, "in-cluster: route local pods by /32 from Pod objects (for CNIs without per-node pod CIDRs)")
	podName := fs.String("pod-name", os.Getenv("POD_NAME"), "in-cluster: this replica's pod; with it, replicas elect an active one through a Lease (default $POD_NAME; empty: no election)")
	nodeName := fs.String("node-name", os.Getenv("NODE_NAME"), "in-cluster: the node this replica runs on, published when active (default $NODE_NAME)")
	leaseDuration := fs.Duration("lease-duration", 6*time.Second, "in-cluster: how long a dead active replica holds the Lease before a standby takes over")
	renewDeadline := fs.Duration("lease-renew-deadline", 4*time.Second, "in-cluster: how long one renewal of the Lease may take (an active replica that cannot reach the API server stays active until it sees another replica hold the Lease)")
	retryPeriod := fs.Duration("lease-retry-period", 500*time.Millisecond, "in-cluster: how often replicas try to acquire or renew the Lease")
	gcPercent := fs.Int("gc-percent", config.DefaultGCPercent, "in-cluster: the Go garbage collector's GOGC (-1: off, leaving GC to the memory limit)")
	memLimit := fs.Int("memory-limit-mib", config.DefaultMemoryLimitMiB, "in-cluster: soft limit of the Go heap in MiB (0: none; the file's memoryLimitMiB in standalone mode)")
	window := fs.Int("window", dataplane.DefaultWindow, "in-cluster: most packets wireguard-go may hold per direction (each holds a 64 KiB buffer; the file's window in standalone mode)")
	buildinfo.ParseFlags(fs, "skein-gateway", os.Args[1:])
	fail := func(code int, format string, a ...any) {
		fmt.Fprintf(os.Stderr, "skein-gateway: "+format+"\n", a...)
		os.Exit(code)
	}
	if fs.NArg() > 0 {
		fail(2, "unexpected arguments %q (see --help)", fs.Args())
	}
	if *window < 1 || *window > config.MaxWindow {
		fail(2, "--window %d: want 1-%d packets", *window, config.MaxWindow)
	}
	log, err := logging.New(os.Stderr, *logLevel, *logFormat)
	if err != nil {
		fail(2, "%v", err)
	}
	// client-go's reflectors log through klog (watch errors, such as a missing RBAC rule,
	// would otherwise go unseen).
	klog.SetSlogLogger(log)
	bi := buildinfo.Get()
	if !*check && !*printPeer {
		log.Info("starting", "version", bi.Version, "commit", bi.Commit, "go", bi.GoVersion)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	switch {
	case (*check || *printPeer) && *configPath == "":
		fail(2, "--check and --print-peer-config need --config FILE")
	case *configPath != "" && *mode != "":
		fail(2, "--config (standalone) and --mode (in-cluster) exclude each other")
	case *configPath != "":
		cfg, err := gateway.LoadFile(*configPath)
		if err != nil {
			fail(1, "%v", err)
		}
		plan, err := cfg.Resolve()
		if err != nil {
			fail(1, "%s: %v", *configPath, err)
		}
		if *check {
			fmt.Printf("config ok; public key %s\n", plan.PrivateKey.Public())
			return
		}
		if *printPeer {
			script, err := cfg.StockPeerScript(plan)
			if err != nil {
				fail(1, "%s: %v", *configPath, err)
			}
			fmt.Print(script)
			return
		}
		gw, err := appliance.Start(plan, log)
		if err != nil {
			fail(1, "%v", err)
		}
		// SIGHUP reloads the file and applies what changed live (refused, with the running
		// configuration kept, when the file is wrong or changes the gateway's own addresses).
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		for ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-hup:
				reload(gw, *configPath, log)
			}
		}
		log.Info("stopping")
		gw.Close()
	case *mode != "":
		if *mode != "server" && *mode != "client" {
			fail(2, "--mode %q: want server or client", *mode)
		}
		if *name == "" || *namespace == "" {
			fail(2, "--gateway-name and --gateway-namespace (or $POD_NAMESPACE) are required in-cluster")
		}
		ip, err := netip.ParseAddr(*podIP)
		if err != nil {
			fail(2, "--pod-ip %q (or $POD_IP): want the pod's IP address", *podIP)
		}
		kind, err := overlay.ParseKind(*overlayKind)
		if err != nil {
			fail(2, "--overlay-kind: %v", err)
		}
		if *overlayPort > 65535 || *listenPort > 65535 || *vni > 1<<24-1 {
			fail(2, "--overlay-port and --listen-port must be below 65536, --vni below 2^24")
		}
		if *endpointHold < time.Second {
			fail(2, "--endpoint-hold %v: want at least 1s (the server needs time to answer a handshake)", *endpointHold)
		}
		restCfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
		if err != nil {
			fail(1, "reaching the API server: %v", err)
		}
		var election *gateway.Election
		if *podName != "" {
			if !(*leaseDuration > *renewDeadline && *renewDeadline > *retryPeriod && *retryPeriod > 0) {
				fail(2, "lease timings: want --lease-duration > --lease-renew-deadline > --lease-retry-period > 0")
			}
			election = &gateway.Election{PodName: *podName, NodeName: *nodeName, LeaseDuration: *leaseDuration, RenewDeadline: *renewDeadline, RetryPeriod: *retryPeriod, Log: log}
		}
		memLimitMiB := *memLimit
		if memLimitMiB == 0 {
			memLimitMiB = -1 // the flag's 0 is "none"
		}
		ic, err := appliance.StartInCluster(restCfg, gateway.Options{
			Namespace: *namespace, Name: *name, Server: *mode == "server", WatchPods: *watchPods, EndpointHold: *endpointHold,
			Local: gateway.Local{
				PodIP: ip, OverlayKind: kind, OverlayPort: uint16(*overlayPort), VNI: uint32(*vni), OverlayMTU: *overlayMTU, CompleteChecksums: *completeSums,
				ListenPort: uint16(*listenPort), ProbeInterval: *probeInterval, ProbeFail: *probeFail,
				HTTPListen: *httpListen, MemoryLimitMiB: memLimitMiB, GCPercent: *gcPercent,
				Window: *window,
			},
		}, election, log)
		if err != nil {
			fail(1, "%v", err)
		}
		// In-cluster the configuration comes from the API and is applied as it changes: SIGHUP
		// has nothing to reload (and must not stop the gateway, as its default action would).
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
	wait:
		for {
			select {
			case <-ctx.Done():
				log.Info("stopping")
				break wait
			case <-ic.Done():
				break wait
			case <-hup:
				log.Info("SIGHUP ignored: in-cluster, the configuration follows the API objects")
			}
		}
		ic.Close()
		if err := ic.Err(); err != nil {
			fail(1, "%v", err)
		}
	default:
		fail(2, "either --config FILE (standalone) or --mode server|client (in-cluster) is required (see --help)")
	}
}

// reload re-reads the standalone config file and applies it to the running gateway.
func reload(gw *appliance.Gateway, path string, log *slog.Logger) {
	cfg, err := gateway.LoadFile(path)
	if err == nil {
		var plan *config.Gateway
		if plan, err = cfg.Resolve(); err == nil {
			err = gw.Apply(plan)
		}
	}
	if err != nil {
		log.Error("SIGHUP: the configuration was not reloaded; the running one stays", "config", path, "err", err)
		return
	}
	log.Info("SIGHUP: configuration reloaded", "config", path)
}
