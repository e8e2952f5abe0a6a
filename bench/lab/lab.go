package lab

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/skein-net/skein/dataplane/kernel"
	"github.com/skein-net/skein/internal/k8sbin"
)

// The clusters' networks. Both clusters use the same pod CIDR on purpose.
var (
	PodCIDR = netip.MustParsePrefix("10.244.0.0/16")
	// BlockPools are the pod CIDRs of a lab with PodBlocks; kube-controller-manager still
	// allocates the Nodes' spec.podCIDRs from PodCIDR, which no pod then uses.
	BlockPools  = []netip.Prefix{netip.MustParsePrefix("10.245.0.0/16"), netip.MustParsePrefix("10.246.0.0/16")}
	ServiceCIDR = netip.MustParsePrefix("10.96.0.0/12")
	// PodCIDR6 and ServiceCIDR6 are the IPv6 pod and service CIDRs of a lab with DualStack; the
	// pod CIDR is the same in every cluster on purpose, as PodCIDR is. Each node gets a /64 of it.
	PodCIDR6     = netip.MustParsePrefix("fd00:244::/56")
	ServiceCIDR6 = netip.MustParsePrefix("fd00:96::/112")
	// APIServerService is the kubernetes Service's ClusterIP and port, where pods reach the
	// API server (APIServerService6 in a lab with IPv6Only: the first address of ServiceCIDR6).
	APIServerService  = netip.MustParseAddrPort("10.96.0.1:443")
	APIServerService6 = netip.MustParseAddrPort("[fd00:96::1]:443")
)

// startRegistry runs the lab's registry in the router namespace, loaded with the OCI layouts,
// and waits until it serves the images.
func startRegistry(ctx context.Context, cfg Config, stateDir, routerNS string, layouts []string) error {
	ready := filepath.Join(stateDir, "registry.ready")
	if err := os.MkdirAll(filepath.Join(stateDir, "logs"), 0o755); err != nil {
		return err
	}
	args := []string{cfg.LabBinary, "registry", "--listen", cfg.registryAddr(), "--ready", ready}
	for _, l := range layouts {
		abs, err := filepath.Abs(l)
		if err != nil {
			return err
		}
		args = append(args, "--layout", abs)
	}
	layoutDir := strings.Join(layouts, " and ")
	if err := spawn(cfg.LabBinary, stateDir, routerNS, filepath.Join(stateDir, "logs", "registry.log"), args...); err != nil {
		return fmt.Errorf("lab: registry: %w", err)
	}
	for deadline := time.Now().Add(time.Minute); ; {
		if _, err := os.Stat(ready); err == nil {
			fmt.Fprintf(cfg.Log, "lab: registry at %s serves the images of %s\n", cfg.registryAddr(), layoutDir)
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("lab: the registry did not load %s within a minute (see %s)", layoutDir, filepath.Join(stateDir, "logs", "registry.log"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// podCIDRs are where pods get addresses.
func (o Options) podCIDRs() []netip.Prefix {
	if o.PodBlocks {
		return BlockPools
	}
	if o.DualStack {
		return []netip.Prefix{PodCIDR, PodCIDR6}
	}
	if o.IPv6Only {
		return []netip.Prefix{PodCIDR6}
	}
	return []netip.Prefix{PodCIDR}
}

// serviceCIDRs are the clusters' Service ClusterIP ranges.
func (o Options) serviceCIDRs() []netip.Prefix {
	if o.DualStack {
		return []netip.Prefix{ServiceCIDR, ServiceCIDR6}
	}
	if o.IPv6Only {
		return []netip.Prefix{ServiceCIDR6}
	}
	return []netip.Prefix{ServiceCIDR}
}

// registryAddr is where the lab's registry listens: RegistryAddr, or RegistryAddr6 in a lab
// with IPv6Only.
func (o Options) registryAddr() string {
	if o.IPv6Only {
		return RegistryAddr6
	}
	return RegistryAddr
}

// loopback is the control plane's and nodes' loopback address for their local endpoints (etcd,
// the controllers' and kube-proxy's health and metrics): ::1 in a lab with IPv6Only, which has
// no IPv4 anywhere it could avoid it.
func (o Options) loopback() netip.Addr {
	if o.IPv6Only {
		return netip.IPv6Loopback()
	}
	return netip.MustParseAddr("127.0.0.1")
}

// joinCIDRs is prefixes as a flag value: comma-separated.
func joinCIDRs(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

// podBlock is node j's block in a lab with PodBlocks: a /24 of the pools in turn.
func podBlock(j int) netip.Prefix {
	a := BlockPools[j%len(BlockPools)].Addr().As4()
	a[2] = byte(j)
	return netip.PrefixFrom(netip.AddrFrom4(a), 24)
}

// Config says what to start.
type Config struct {
	Options
	// K8sBin holds etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy
	// and kubectl (internal/k8sbin).
	K8sBin string
	// LabBinary is the lab command (bench/cmd/lab): it supervises the lab's processes and sets
	// up each node (lab node, lab node-init).
	LabBinary string
	// BinDir holds the binaries pod images map to (skein-controller, skein-agent, ...).
	BinDir string
	// Log receives progress lines (nil: discarded).
	Log io.Writer
	// KeepOnFailure leaves a lab that failed to start in place, for its logs.
	KeepOnFailure bool
	// ImageLayout, when set, is an OCI image layout the lab's registry (RegistryAddr, in the
	// router namespace) serves too, as RegistryAddr/skein-net/NAME:TAG.
	ImageLayout string
	// NodeStack is the bin directory of the node stack (internal/k8sbin.EnsureNodeStack): each
	// node runs containerd, runc, the kubelet and flanneld in mount and PID namespaces of its
	// own (see node.go), pulling every image from the lab's registry, which serves the pod
	// sandbox image (from BinDir's pause) and an iperf3 image besides ImageLayout.
	NodeStack string
	// CoreDNS is the CoreDNS binary (internal/k8sbin.EnsureCoreDNS) the clusters' DNS runs,
	// packed into an image in the lab's registry; empty: the cached one (CoreDNSReady).
	CoreDNS string
}

// PauseImage is the pod sandbox image of the real node stack, in the lab's registry
// (RegistryAddr6 + "/" + PauseRef in a lab with IPv6Only).
const PauseImage = RegistryAddr + "/" + PauseRef

// PauseRef is PauseImage's repository and tag in the lab's registry.
const PauseRef = "skein-net/pause:lab"

// RegistryAddr is where the lab's registry listens: the router's address on the workstation's
// link, which every node and the workstation reach.
const RegistryAddr = "10.255.0.1:5000"

// RegistryAddr6 is where the registry of a lab with IPv6Only listens: the router's address on
// WorkstationNet6, in brackets (an image reference's host, and containerd's certs.d directory,
// name it so).
const RegistryAddr6 = "[2001:db8:0:ff::1]:5000"

// ClusterState is one running cluster.
type ClusterState struct {
	Cluster
	// Kubeconfig is the admin kubeconfig; its server is reachable from the workstation
	// namespace (and from Go through RESTConfig).
	Kubeconfig string
	APIServer  string
}

// Lab is a running lab. It is saved as lab.json in the state dir, so that another process
// (lab exec, lab down) finds it.
type Lab struct {
	Topology *Topology
	StateDir string
	K8sBin   string
	BinDir   string
	Clusters []ClusterState
	// PodCIDRs are where the clusters' pods get addresses (the same in every cluster).
	PodCIDRs []netip.Prefix
	// ServiceCIDRs are the clusters' Service ClusterIP ranges (the same in every cluster).
	ServiceCIDRs []netip.Prefix
	// Registry is the lab's registry (RegistryAddr) when it serves images, else empty.
	Registry string
	// NodeStack is the real node stack's bin directory when the nodes run it (Config.NodeStack).
	NodeStack string
	// Started and Ready are when Start began and when every node was Ready.
	Started, Ready time.Time
}

// DefaultStateDir is where a lab with this prefix keeps its certificates, etcd data, logs and
// pod files. Down removes it.
func DefaultStateDir(prefix string) string { return filepath.Join("/var/tmp", "skein-lab-"+prefix) }

// Start builds the network and starts every cluster: etcd, kube-apiserver,
// kube-controller-manager and kube-scheduler in the control-plane namespace, the node stack
// (lab node) and kube-proxy (nftables mode) in each node namespace, the registry in the router
// namespace. It returns when every node is Ready.
// On error everything it made is removed.
func Start(ctx context.Context, cfg Config) (_ *Lab, err error) {
	started := time.Now()
	if cfg.Prefix == "" {
		cfg.Prefix = "skl"
	}
	if err := CheckPrefix(cfg.Prefix); err != nil {
		return nil, err
	}
	stateDir := DefaultStateDir(cfg.Prefix)
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	for _, d := range []string{"/run", "/tmp"} {
		if strings.HasPrefix(stateDir, d+"/") {
			return nil, fmt.Errorf("lab: state dir %s must not lie under %s (pods see their own %s)", stateDir, d, d)
		}
	}
	for _, tool := range []string{"nsenter", "setpriv", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("lab: %s is needed (Debian packages util-linux and nftables): %w", tool, err)
		}
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "kubectl"} {
		if _, err := os.Stat(filepath.Join(cfg.K8sBin, b)); err != nil {
			return nil, fmt.Errorf("lab: %s not found in %s (run make k8s-binaries)", b, cfg.K8sBin)
		}
	}
	if cfg.NodeStack == "" {
		return nil, errors.New("lab: no node stack (kubelet, containerd, runc, CNI plugins, flannel): run make k8s-binaries")
	}
	{
		for _, b := range []string{"kubelet", "containerd", "containerd-shim-runc-v2", "runc", "flanneld", "cni/bridge", "cni/host-local", "cni/portmap"} {
			if _, err := os.Stat(filepath.Join(cfg.NodeStack, b)); err != nil {
				return nil, fmt.Errorf("lab: %s not found in %s (run go run ./bench/cmd/k8s-binaries -node-stack)", b, cfg.NodeStack)
			}
		}
	}
	if cfg.CoreDNS == "" {
		var ok bool
		if cfg.CoreDNS, ok = k8sbin.CoreDNSReady(); !ok {
			return nil, errors.New("lab: CoreDNS (the clusters' DNS) is not built: run make k8s-binaries")
		}
	}
	if err := checkInotify(cfg.Options); err != nil {
		return nil, err
	}
	// Claim the prefix (its state dir) under the labs' lock: a lab that is up or starting with
	// it is somebody else's, and nothing here may take it down.
	if err := claim(cfg.Prefix, stateDir); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil && !cfg.KeepOnFailure {
			_ = Down(cfg.Prefix)
		}
	}()
	fmt.Fprintf(cfg.Log, "lab: network (%d clusters x %d nodes)\n", cmp.Or(cfg.Clusters, 2), cmp.Or(cfg.Nodes, 2))
	topo, err := Up(cfg.Options)
	if err != nil {
		return nil, err
	}
	l := &Lab{Topology: topo, StateDir: stateDir, K8sBin: cfg.K8sBin, BinDir: cfg.BinDir, Started: started, PodCIDRs: cfg.podCIDRs(), ServiceCIDRs: cfg.serviceCIDRs(), NodeStack: cfg.NodeStack}
	var layouts []string
	if cfg.ImageLayout != "" {
		layouts = append(layouts, cfg.ImageLayout)
	}
	{
		dir := filepath.Join(stateDir, "lab-images")
		if err := pauseLayout(cfg.BinDir, dir); err != nil {
			return nil, err
		}
		if err := iperfLayout(dir); err != nil {
			return nil, err
		}
		if err := corednsLayout(cfg.CoreDNS, dir); err != nil {
			return nil, err
		}
		layouts = append(layouts, dir)
	}
	if len(layouts) > 0 {
		if err := startRegistry(ctx, cfg, stateDir, topo.Router.Name, layouts); err != nil {
			return nil, err
		}
		l.Registry = cfg.registryAddr()
	}
	for _, cl := range topo.Clusters {
		cs, err := startCluster(cfg, stateDir, cl)
		if err != nil {
			return nil, fmt.Errorf("lab: cluster %s: %w", cl.Name, err)
		}
		l.Clusters = append(l.Clusters, cs)
	}
	if err := l.save(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(l.Clusters))
	for i := range l.Clusters {
		wg.Go(func() { errs[i] = l.waitNodes(ctx, i, cfg.Log) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	l.Ready = time.Now()
	return l, l.save()
}

func (l *Lab) save() error {
	data, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(l.StateDir, "lab.json"), data, 0o644)
}

// Load reads the description of a running lab from its state dir.
func Load(stateDir string) (*Lab, error) {
	data, err := os.ReadFile(filepath.Join(stateDir, "lab.json"))
	if err != nil {
		return nil, fmt.Errorf("lab: no lab in %s (is it up?): %w", stateDir, err)
	}
	var l Lab
	return &l, json.Unmarshal(data, &l)
}

// stateEnv names, in the environment of every process the lab spawns, the lab's state dir:
// Down finds by it what a namespace scan misses (a process between nsenter's start and its
// entry into the namespace).
const stateEnv = "SKEIN_LAB_STATE"

// spawn starts a long-running process in network namespace ns, detached from the caller (own
// session), under the lab's supervisor (lab supervise) which restarts it when it exits, its
// output appended to logPath, tagged with the lab's state dir (stateEnv). nsenter changes
// only the network namespace.
func spawn(labBinary, stateDir, ns, logPath string, args ...string) error {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.Command("nsenter", append([]string{"--net=/run/netns/" + ns, "--", labBinary, "supervise", "--"}, args...)...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), stateEnv+"="+stateDir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s in %s: %w", args[0], ns, err)
	}
	return cmd.Process.Release()
}

func startCluster(cfg Config, stateDir string, cl Cluster) (ClusterState, error) {
	dir := filepath.Join(stateDir, cl.Name)
	logs := filepath.Join(stateDir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return ClusterState{}, err
	}
	p, err := newPKI(filepath.Join(dir, "pki"), cl.Name)
	if err != nil {
		return ClusterState{}, err
	}
	cp := cl.ControlPlane.Addr.String()
	// The kubeconfigs' server: brackets around an IPv6 address.
	server := "https://" + net.JoinHostPort(cp, "6443")
	apiService, bindAll := APIServerService.Addr(), "0.0.0.0"
	if cfg.IPv6Only {
		apiService, bindAll = APIServerService6.Addr(), "::"
	}
	lo := cfg.loopback()
	etcdURL := func(port string) string { return "http://" + net.JoinHostPort(lo.String(), port) }
	certs := []struct {
		name, cn string
		groups   []string
		hosts    []string
	}{
		{"apiserver", "kube-apiserver", nil, []string{cp, apiService.String(), "127.0.0.1", "::1", "localhost",
			"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}},
		{"admin", "skein-lab-admin", []string{"system:masters"}, nil},
		{"controller-manager", "system:kube-controller-manager", nil, nil},
		{"scheduler", "system:kube-scheduler", nil, nil},
		{"kube-proxy", "system:kube-proxy", nil, nil},
		// flanneld reads every Node and patches its own (annotations, status).
		{"flannel", "skein-lab:flannel", []string{cniGroup}, nil},
		// The API server's identity towards the kubelets (logs, exec, port-forward).
		{"apiserver-kubelet-client", kubeletClientUser, nil, nil},
	}
	for _, n := range cl.Nodes {
		certs = append(certs, struct {
			name, cn string
			groups   []string
			hosts    []string
		}{"kubelet-" + nodeName(n), "system:node:" + nodeName(n), []string{"system:nodes"}, nil})
	}
	kcfg := map[string]string{}
	for _, c := range certs {
		if err := p.issue(c.name, c.cn, c.groups, c.hosts); err != nil {
			return ClusterState{}, err
		}
		if c.name == "apiserver" {
			continue
		}
		path, err := p.kubeconfig(c.name, cl.Name, server)
		if err != nil {
			return ClusterState{}, err
		}
		kcfg[c.name] = path
	}
	bin := func(b string) string { return filepath.Join(cfg.K8sBin, b) }
	log := func(b string) string { return filepath.Join(logs, cl.Name+"-"+b+".log") }
	ns := cl.ControlPlane.Name
	if err := spawn(cfg.LabBinary, stateDir, ns, log("etcd"), bin("etcd"), "--name", cl.Name, "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL("2379"), "--advertise-client-urls", etcdURL("2379"),
		"--listen-peer-urls", etcdURL("2380"), "--initial-advertise-peer-urls", etcdURL("2380"),
		"--initial-cluster", cl.Name+"="+etcdURL("2380"), "--unsafe-no-fsync", "--log-level", "warn"); err != nil {
		return ClusterState{}, err
	}
	if err := spawn(cfg.LabBinary, stateDir, ns, log("kube-apiserver"), bin("kube-apiserver"),
		"--etcd-servers", etcdURL("2379"), "--bind-address", bindAll, "--secure-port", "6443",
		"--advertise-address", cp, "--service-cluster-ip-range", joinCIDRs(cfg.serviceCIDRs()),
		"--client-ca-file", p.path("ca.crt"), "--tls-cert-file", p.path("apiserver.crt"), "--tls-private-key-file", p.path("apiserver.key"),
		"--service-account-key-file", p.path("sa.pub"), "--service-account-signing-key-file", p.path("sa.key"),
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--authorization-mode", "Node,RBAC", "--enable-admission-plugins", "NodeRestriction",
		"--kubelet-client-certificate", p.path("apiserver-kubelet-client.crt"), "--kubelet-client-key", p.path("apiserver-kubelet-client.key"),
		"--kubelet-preferred-address-types", "InternalIP",
		"--allow-privileged", "--profiling=false", "--v", "1"); err != nil {
		return ClusterState{}, err
	}
	// Nodes get a /24 of PodCIDR (and a /64 of PodCIDR6 in a dual-stack lab).
	nodeCIDRs := []string{"--cluster-cidr", PodCIDR.String(), "--node-cidr-mask-size", "24"}
	if cfg.DualStack {
		nodeCIDRs = []string{"--cluster-cidr", joinCIDRs([]netip.Prefix{PodCIDR, PodCIDR6}),
			"--node-cidr-mask-size-ipv4", "24", "--node-cidr-mask-size-ipv6", "64"}
	}
	if cfg.IPv6Only {
		nodeCIDRs = []string{"--cluster-cidr", PodCIDR6.String(), "--node-cidr-mask-size", "64"}
	}
	if err := spawn(cfg.LabBinary, stateDir, ns, log("kube-controller-manager"), slices.Concat([]string{bin("kube-controller-manager"),
		"--kubeconfig", kcfg["controller-manager"], "--authentication-kubeconfig", kcfg["controller-manager"],
		"--authorization-kubeconfig", kcfg["controller-manager"], "--bind-address", lo.String(),
		"--use-service-account-credentials", "--service-account-private-key-file", p.path("sa.key"),
		"--root-ca-file", p.path("ca.crt"), "--allocate-node-cidrs"}, nodeCIDRs, []string{
		"--service-cluster-ip-range", joinCIDRs(cfg.serviceCIDRs()),
		"--flex-volume-plugin-dir", filepath.Join(dir, "volume-plugins"), // not the machine's /usr/libexec/kubernetes
		"--leader-elect=false", "--profiling=false", "--v", "1"})...); err != nil {
		return ClusterState{}, err
	}
	if err := spawn(cfg.LabBinary, stateDir, ns, log("kube-scheduler"), bin("kube-scheduler"),
		"--kubeconfig", kcfg["scheduler"], "--authentication-kubeconfig", kcfg["scheduler"],
		"--authorization-kubeconfig", kcfg["scheduler"], "--bind-address", lo.String(),
		"--leader-elect=false", "--profiling=false", "--v", "1"); err != nil {
		return ClusterState{}, err
	}
	// kube-proxy takes one CIDR per family: one that holds every pod CIDR.
	proxyCIDR := PodCIDR.String()
	if cfg.PodBlocks {
		proxyCIDR = "10.244.0.0/14"
	}
	if cfg.DualStack {
		proxyCIDR = joinCIDRs([]netip.Prefix{PodCIDR, PodCIDR6})
	}
	if cfg.IPv6Only {
		proxyCIDR = PodCIDR6.String()
	}
	for j, n := range cl.Nodes {
		name := nodeName(n)
		{
			nc := NodeConfig{Name: name, Addr: n.Addr, Dir: filepath.Join(stateDir, name), LogDir: logs, Cluster: cl.Name,
				StackBin: cfg.NodeStack, Kubeconfig: kcfg["kubelet-"+name], FlannelKubeconfig: kcfg["flannel"], CACert: p.path("ca.crt"),
				CgroupRoot: cgroupParent + "/" + n.Name, ClusterCIDR: PodCIDR, Registry: cfg.registryAddr(), PauseImage: cfg.registryAddr() + "/" + PauseRef,
				ClusterDNS: clusterDNS(cfg.serviceCIDRs())[0]}
			if cfg.IPv6Only {
				// The IPv6 family of the dual-stack pod network, alone.
				nc.ClusterCIDR = netip.Prefix{}
			}
			if cfg.DualStack || cfg.IPv6Only {
				nc.DualStack, nc.IPv6Only, nc.Addr6, nc.ClusterCIDR6 = cfg.DualStack, cfg.IPv6Only, n.Addr6, PodCIDR6
				for k, other := range cl.Nodes {
					if k != j {
						nc.Neighbours = append(nc.Neighbours, Neighbour{Name: nodeName(other), Addr: other.Addr, Addr6: other.Addr6})
					}
				}
			}
			if cfg.PodBlocks {
				nc.PodBlock, nc.PodPools = podBlock(j), BlockPools
				for k, other := range cl.Nodes {
					if k != j {
						nc.BlockRoutes = append(nc.BlockRoutes, BlockRoute{Block: podBlock(k), Via: other.Addr})
					}
				}
			}
			path := filepath.Join(nc.Dir, "node.json")
			if err := os.MkdirAll(nc.Dir, 0o755); err != nil {
				return ClusterState{}, err
			}
			data, err := json.MarshalIndent(nc, "", "  ")
			if err != nil {
				return ClusterState{}, err
			}
			if err := os.WriteFile(path, data, 0o644); err != nil {
				return ClusterState{}, err
			}
			if err := spawn(cfg.LabBinary, stateDir, n.Name, log(name+"-node"), cfg.LabBinary, "node", "--config", path); err != nil {
				return ClusterState{}, err
			}
		}
		if err := spawn(cfg.LabBinary, stateDir, n.Name, log(name+"-kube-proxy"), bin("kube-proxy"),
			"--kubeconfig", kcfg["kube-proxy"], "--hostname-override", name, "--proxy-mode", "nftables",
			"--cluster-cidr", proxyCIDR, "--conntrack-max-per-core", "0",
			"--metrics-bind-address", net.JoinHostPort(lo.String(), "10249"), "--healthz-bind-address", net.JoinHostPort(lo.String(), "10256"), "--v", "1"); err != nil {
			return ClusterState{}, err
		}
	}
	return ClusterState{Cluster: cl, Kubeconfig: kcfg["admin"], APIServer: server}, nil
}

// nodeName is a node's Kubernetes name: its namespace name without the lab prefix.
func nodeName(n NS) string {
	parts := strings.Split(n.Name, "-")
	return strings.Join(parts[len(parts)-2:], "-")
}

// NodeName is the Kubernetes name of node i of the cluster.
func (c ClusterState) NodeName(i int) string { return nodeName(c.Nodes[i]) }

// cniGroup is the group of flanneld's certificate: it reads every Node and patches its own (as
// kube-flannel's ClusterRole allows).
const cniGroup = "skein-lab:cni"

// kubeletClientUser is the API server's user name towards the kubelets; it is bound to
// system:kubelet-api-admin, as kubeadm binds it.
const kubeletClientUser = "kube-apiserver-kubelet-client"

// cgroupParent holds the real kubelets' cgroup roots (cgroupParent/<node namespace>) in every
// cgroup v1 hierarchy; Down removes them.
const cgroupParent = "/skein-lab"

func grantCNI(ctx context.Context, cs kubernetes.Interface) error {
	// As kube-flannel's ClusterRole: read every Node, patch them and their status.
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "skein-lab-cni"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "patch"}},
			{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "skein-lab-cni"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: cniGroup}}}
	kubeletAPI := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "skein-lab-apiserver-kubelet-client"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:kubelet-api-admin"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: kubeletClientUser}}}
	for {
		_, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
		if err == nil || apierrors.IsAlreadyExists(err) {
			_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})
		}
		if err == nil || apierrors.IsAlreadyExists(err) {
			_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, kubeletAPI, metav1.CreateOptions{})
			if err == nil || apierrors.IsAlreadyExists(err) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("grant the kubelets read access to nodes: %w", err)
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// Dialer dials from inside network namespace ns, so a process in the machine's namespace
// reaches lab addresses without any route of its own: the socket is made in ns and keeps it.
func Dialer(ns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	enter := kernel.InNamespace("/run/netns/" + ns)
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := enter(func() (err error) {
			c, err = (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}

// RESTConfig is the admin client config of cluster i, dialing from the workstation.
func (l *Lab) RESTConfig(i int) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", l.Clusters[i].Kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.Dial = Dialer(l.Topology.Workstation.Name)
	cfg.QPS, cfg.Burst = 50, 100
	return cfg, nil
}

// waitNodes waits for the API server, then for every node of cluster i to be Ready.
func (l *Lab) waitNodes(ctx context.Context, i int, log io.Writer) error {
	cl := l.Clusters[i]
	if err := l.waitAPIServer(ctx, i); err != nil {
		return err
	}
	fmt.Fprintf(log, "lab: %s: API server ready after %.1fs\n", cl.Name, time.Since(l.Started).Seconds())
	cfg, err := l.RESTConfig(i)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if err := grantCNI(ctx, cs); err != nil {
		return fmt.Errorf("lab: %s: %w", cl.Name, err)
	}
	if l.Registry != "" {
		if err := deployCoreDNS(ctx, cs, l.Registry+"/"+CoreDNSRef, l.ClusterDNS()); err != nil {
			return fmt.Errorf("lab: %s: %w", cl.Name, err)
		}
	}
	for {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		ready := 0
		if err == nil {
			for _, n := range nodes.Items {
				for _, c := range n.Status.Conditions {
					if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue && n.Spec.PodCIDR != "" {
						ready++
					}
				}
			}
		}
		if ready == len(cl.Nodes) {
			fmt.Fprintf(log, "lab: %s: %d nodes ready after %.1fs\n", cl.Name, ready, time.Since(l.Started).Seconds())
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("lab: %s: %d of %d nodes ready when time ran out (logs in %s): %w", cl.Name, ready, len(cl.Nodes),
				filepath.Join(l.StateDir, "logs"), ctx.Err())
		case <-time.After(300 * time.Millisecond):
		}
	}
}

func (l *Lab) waitAPIServer(ctx context.Context, i int) error {
	cl := l.Clusters[i]
	ca, err := os.ReadFile(filepath.Join(filepath.Dir(cl.Kubeconfig), "ca.crt"))
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	dial := Dialer(l.Topology.Workstation.Name)
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: dial, TLSClientConfig: &tls.Config{RootCAs: pool}}}
	var last error
	for {
		resp, err := hc.Get(cl.APIServer + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
				return nil
			}
			err = fmt.Errorf("readyz: %s", resp.Status)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("lab: %s: API server not ready (last: %v; logs in %s): %w", cl.Name, last, filepath.Join(l.StateDir, "logs"), ctx.Err())
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// Exec runs a command in the workstation namespace against cluster i (KUBECONFIG set, the
// lab's tools on PATH) and returns its combined output.
func (l *Lab) Exec(ctx context.Context, i int, args ...string) (string, error) {
	cmd := l.Command(ctx, i, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// Command prepares a command like Exec without running it.
func (l *Lab) Command(ctx context.Context, i int, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", l.Topology.Workstation.Name}, args...)...)
	// kubectl's discovery cache is keyed by the API server's address, which every lab shares:
	// it lives in the lab's state dir, not in ~/.kube, and goes with the lab.
	cmd.Env = append(os.Environ(), "KUBECONFIG="+l.Clusters[i].Kubeconfig, "KUBECACHEDIR="+filepath.Join(l.StateDir, "kubecache"),
		"PATH="+l.BinDir+":"+l.K8sBin+helmDir()+":"+os.Getenv("PATH"))
	return cmd
}

// helmDir is ":" and the directory of the cached helm, or "" when helm is not built (make
// k8s-binaries builds it).
func helmDir() string {
	if h, ok := k8sbin.HelmReady(); ok {
		return ":" + filepath.Dir(h)
	}
	return ""
}

// Build compiles the binaries a lab runs (skein's commands, the lab command and skein-probe)
// into dir, which must not lie under /tmp (containers see a private /tmp).
func Build(ctx context.Context, dir string) error {
	if strings.HasPrefix(dir, "/tmp/") {
		return fmt.Errorf("lab: binaries in %s would be hidden from containers (they see a private /tmp)", dir)
	}
	root, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return fmt.Errorf("lab: find the module root: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+"/", "./cmd/...", "./bench/cmd/lab", "./bench/cmd/pause")
	cmd.Dir = strings.TrimSpace(string(root))
	// Static binaries: the images made of them carry no C library.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("lab: build: %w: %s", err, out)
	}
	return nil
}
