// Command lab runs real Kubernetes clusters in network namespaces on this machine (see
// bench/lab): lab up, lab down, lab exec, lab shell, lab status. Its nodes run the real node
// stack (kubelet, containerd, runc, CNI plugins, flannel; lab node and lab node-init set each
// node up). Run it as root.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/skein-net/skein/bench/lab"
	"github.com/skein-net/skein/internal/k8sbin"
)

const usage = `lab: real Kubernetes clusters in network namespaces (run as root).

Usage:
  lab up [--prefix P] [--clusters N] [--nodes N] [--bin-dir DIR] [--images LAYOUT]
        [--pod-blocks | --dual-stack | --ipv6-only] [--wan-mtu N [--wan-drop-icmp]]
        [--keep-on-failure]
        start the lab: a router, a workstation, N clusters (pod CIDR 10.244.0.0/16 each) of
        N nodes, each node running kubelet, containerd, runc and flannel (make k8s-binaries
        builds them); returns when every node is Ready and leaves it running. The router
        serves a registry at 10.255.0.1:5000 with the lab's pause and iperf3 images and, with
        --images (an OCI layout, such as make images writes in bin/images), those images, as
        10.255.0.1:5000/skein-net/NAME:TAG; containerd pulls every image from there
        ([2001:db8:0:ff::1]:5000 with --ipv6-only, where no lab link carries IPv4)
        --wan-mtu narrows the path between the clusters (the router's routing between their
        underlays; each cluster's own traffic and the workstation's keep 1500) to N bytes,
        1280-1500, and --wan-drop-icmp drops the router's fragmentation needed (Packet Too
        Big) there: a path MTU black hole
  lab wan [--prefix P] --mtu N [--drop-icmp]
        narrow the running lab's WAN the same way (--mtu 0 without --drop-icmp: restore it)
  lab down [--prefix P]        stop everything and remove every namespace, link and file
  lab status [--prefix P]      show the clusters, their namespaces, kubeconfigs and logs
        (/var/tmp/skein-lab-P/logs: one file per component, such as c0-c0-n1-kubelet.log;
        docs/lab.md says how to enter a node and use ctr there)
  lab exec [--prefix P] [-c I] -- CMD [ARGS]
        run CMD in the workstation namespace against cluster I (default 0; KUBECONFIG
        set; kubectl, skeinctl and helm on PATH), e.g. lab exec -c 1 -- kubectl get nodes
  lab shell [--prefix P] [-c I]   a shell in the workstation namespace, set up like exec
  lab push [--prefix P] --layout DIR
        push the named indexes of an OCI layout (make images writes bin/images) into the
        lab's registry, as 10.255.0.1:5000/skein-net/NAME:TAG (or the IPv6 registry's)

Internal (started by lab up): lab supervise -- CMD, lab node --config FILE,
lab node-init --config FILE, lab registry ...
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "up":
		err = up(os.Args[2:])
	case "down":
		err = down(os.Args[2:])
	case "status":
		err = status(os.Args[2:])
	case "wan":
		err = wan(os.Args[2:])
	case "exec":
		err = execIn(os.Args[2:], false)
	case "shell":
		err = execIn(os.Args[2:], true)
	case "supervise":
		err = supervise(os.Args[2:])
	case "node", "node-init":
		err = runNode(os.Args[1], os.Args[2:])
	case "registry":
		err = runRegistry(os.Args[2:])
	case "push":
		err = push(os.Args[2:])
	case "push-here":
		err = pushHere(os.Args[2:])
	case "-h", "--help", "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "lab: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "lab %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func flags(name string) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet("lab "+name, flag.ExitOnError)
	prefix := fs.String("prefix", "skl", "name prefix of the lab's namespaces, state dir (/var/tmp/skein-lab-PREFIX) and cgroups: a lower-case letter and at most 11 lower-case letters or digits (two labs need two prefixes)")
	return fs, prefix
}

// parse parses a command's flags and checks its prefix.
func parse(fs *flag.FlagSet, args []string, prefix *string) {
	_ = fs.Parse(args)
	if err := lab.CheckPrefix(*prefix); err != nil {
		fmt.Fprintf(os.Stderr, "%s: --prefix: %v\n", fs.Name(), err)
		os.Exit(2)
	}
}

func up(args []string) error {
	fs, prefix := flags("up")
	clusters := fs.Int("clusters", 2, "number of clusters")
	nodes := fs.Int("nodes", 2, "nodes per cluster")
	blocks := fs.Bool("pod-blocks", false, "give pods addresses from per-node blocks of 10.245.0.0/16 and 10.246.0.0/16, outside every Node's spec.podCIDRs (as Calico's IPAM does); install skein with ipam.podCIDR={10.245.0.0/16,10.246.0.0/16}")
	dual := fs.Bool("dual-stack", false, "dual-stack clusters: pods and Services get IPv6 addresses too (pod CIDR fd00:244::/56 in every cluster, service CIDR fd00:96::/112), nodes an IPv6 address on their underlay, and the lab's host-gw pod network of both families replaces flannel; install skein with ipam.podCIDR={10.244.0.0/16,fd00:244::/56}")
	v6only := fs.Bool("ipv6-only", false, "IPv6-only clusters: pods and Services get IPv6 addresses only (pod CIDR fd00:244::/56 in every cluster, service CIDR fd00:96::/112), every lab namespace is addressed by IPv6 alone (underlays 2001:db8:0:<10+cluster>::/64, the API servers, the workstation and the registry at [2001:db8:0:ff::1]:5000), and the lab's host-gw pod network of IPv6 replaces flannel; install skein with ipam.podCIDR=fd00:244::/56, ipam.serviceCIDR=fd00:96::/112 and imageRegistry=[2001:db8:0:ff::1]:5000/skein-net")
	layoutDir := fs.String("images", "", "OCI image layout to serve from the lab's registry too (10.255.0.1:5000/skein-net/NAME:TAG), such as make images writes in bin/images")
	binDir := fs.String("bin-dir", "", "directory with the lab's pause binary (bench/cmd/pause; default: the directory of this lab binary)")
	wanMTU := fs.Int("wan-mtu", 0, "narrow the path between the clusters to this many bytes (1280-1500; 0: 1500); each cluster's own traffic and the workstation's keep 1500")
	wanDropICMP := fs.Bool("wan-drop-icmp", false, "drop the router's fragmentation needed (IPv6: Packet Too Big) on the path between the clusters (with --wan-mtu: a path MTU black hole)")
	keep := fs.Bool("keep-on-failure", false, "leave a lab that failed to start in place, to read its logs (then lab down)")
	parse(fs, args, prefix)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if *binDir == "" {
		*binDir = filepath.Dir(self)
	}
	k8s, ok := k8sbin.Ready()
	if !ok {
		return fmt.Errorf("the Kubernetes binaries are not built: run make k8s-binaries")
	}
	nodeStack, ok := k8sbin.NodeStackReady()
	if !ok {
		return fmt.Errorf("the node stack (kubelet, containerd, runc, CNI plugins, flannel) is not built: run make k8s-binaries")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	l, err := lab.Start(ctx, lab.Config{Options: lab.Options{Prefix: *prefix, Clusters: *clusters, Nodes: *nodes, PodBlocks: *blocks, DualStack: *dual, IPv6Only: *v6only,
		WANMTU: *wanMTU, WANDropICMP: *wanDropICMP}, ImageLayout: *layoutDir,
		K8sBin: k8s, LabBinary: self, BinDir: *binDir, Log: os.Stdout, KeepOnFailure: *keep, NodeStack: nodeStack})
	if err != nil {
		return err
	}
	fmt.Printf("lab: up in %.1fs\n", l.Ready.Sub(l.Started).Seconds())
	return printStatus(l, *prefix)
}

func down(args []string) error {
	fs, prefix := flags("down")
	parse(fs, args, prefix)
	if err := lab.Down(*prefix); err != nil {
		return err
	}
	fmt.Printf("lab %s: down (its namespaces, links, processes and state are gone)\n", *prefix)
	return nil
}

func wan(args []string) error {
	fs, prefix := flags("wan")
	mtu := fs.Int("mtu", 0, "the path MTU between the clusters (1280-1500; 0: 1500)")
	drop := fs.Bool("drop-icmp", false, "drop the router's fragmentation needed (IPv6: Packet Too Big) on the path between the clusters")
	parse(fs, args, prefix)
	l, err := lab.Load(lab.DefaultStateDir(*prefix))
	if err != nil {
		return err
	}
	if err := l.Topology.NarrowWAN(*mtu, *drop); err != nil {
		return err
	}
	st, err := l.Topology.WAN()
	if err != nil {
		return err
	}
	fmt.Printf("lab %s: WAN between the clusters: MTU %s, ICMP frag-needed %s\n", *prefix,
		map[bool]string{true: strconv.Itoa(st.MTU), false: "1500 (full)"}[st.MTU > 0], map[bool]string{true: "dropped", false: "delivered"}[st.DropICMP])
	return nil
}

func status(args []string) error {
	fs, prefix := flags("status")
	parse(fs, args, prefix)
	l, err := lab.Load(lab.DefaultStateDir(*prefix))
	if err != nil {
		return err
	}
	return printStatus(l, *prefix)
}

func printStatus(l *lab.Lab, prefix string) error {
	fmt.Printf("workstation namespace: %s\n", l.Topology.Workstation.Name)
	for i, c := range l.Clusters {
		fmt.Printf("cluster %d (%s): API server %s, kubeconfig %s\n", i, c.Name, c.APIServer, c.Kubeconfig)
		fmt.Printf("  control plane: %s (%s)\n", c.ControlPlane.Name, c.ControlPlane.Addr)
		for j, n := range c.Nodes {
			fmt.Printf("  node %s: namespace %s (%s)\n", c.NodeName(j), n.Name, n.Addr)
		}
	}
	fmt.Printf("logs: %s\n", filepath.Join(l.StateDir, "logs"))
	fmt.Printf("use: lab exec --prefix %s -c 0 -- kubectl get nodes;  lab down --prefix %s\n", prefix, prefix)
	return nil
}

func execIn(args []string, shell bool) error {
	fs, prefix := flags("exec")
	c := fs.Int("c", 0, "cluster index (0 is c0)")
	parse(fs, args, prefix)
	l, err := lab.Load(lab.DefaultStateDir(*prefix))
	if err != nil {
		return err
	}
	if *c < 0 || *c >= len(l.Clusters) {
		return fmt.Errorf("-c %d: the lab has clusters 0 to %d", *c, len(l.Clusters)-1)
	}
	cmdArgs := fs.Args()
	if shell {
		cmdArgs = []string{"bash", "--norc", "-i"}
	}
	if len(cmdArgs) == 0 {
		return fmt.Errorf("no command: lab exec -c I -- CMD [ARGS]")
	}
	cmd := l.Command(context.Background(), *c, cmdArgs...)
	if shell {
		cmd.Env = append(cmd.Env, fmt.Sprintf("PS1=lab(%s)# ", l.Clusters[*c].Name))
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			os.Exit(ee.ExitCode())
		}
		return err
	}
	return nil
}

// supervise runs a command and starts it again a second after it exits, until killed: the
// control plane's components exit when they start before the API server is ready.
func supervise(args []string) error {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		return fmt.Errorf("usage: lab supervise -- CMD [ARGS]")
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	for {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case sig := <-sigs:
			_ = cmd.Process.Signal(sig)
			<-done
			return nil
		case err := <-done:
			fmt.Fprintf(os.Stderr, "lab supervise: %s exited (%v); starting it again in 1s\n", filepath.Base(args[0]), err)
		}
		select {
		case <-sigs:
			return nil
		case <-time.After(time.Second):
		}
	}
}

// runNode is lab node (which starts node-init in namespaces of its own) and lab node-init.
func runNode(which string, args []string) error {
	fs := flag.NewFlagSet("lab "+which, flag.ExitOnError)
	config := fs.String("config", "", "the node's node.json (written by lab up)")
	_ = fs.Parse(args)
	if *config == "" {
		return fmt.Errorf("--config is required")
	}
	if which == "node" {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		return lab.RunNode(self, args)
	}
	c, err := lab.LoadNodeConfig(*config)
	if err != nil {
		return err
	}
	return lab.NodeInit(c)
}
