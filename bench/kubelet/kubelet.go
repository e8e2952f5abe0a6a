// Package kubelet is the lab's kubelet: a small process that registers a Node, keeps its Lease,
// and runs the pods bound to it as local processes. Host-network pods run in the node's network
// namespace; every other pod gets a network namespace of its own on a veth, with an address from
// the node's pod CIDR (routes to other nodes' pod CIDRs are host-gw routes, traffic leaving the
// cluster is masqueraded to the node address). A container's image names a local binary (see
// Options.Images); its command, args, environment, volumes (configMap, secret, projected
// service-account tokens, downwardAPI, emptyDir) and securityContext (user, group,
// capabilities, read-only root, no_new_privs) are honoured; readiness and liveness probes of
// kind httpGet and tcpSocket run; restartPolicy is followed; deletion stops the processes with
// the grace period, then SIGKILL.
//
// It is a test fixture for the lab, not a product component: no container isolation beyond
// namespaces, no images, no kubelet API (kubectl logs and exec do not work; the logs are files
// under Options.StateDir).
//
// The kubelet runs in the node's network namespace but in the machine's mount namespace
// (started with nsenter --net), so the namespaces it creates with ip netns add are visible to
// the lab, which removes them on teardown by their name prefix.
package kubelet

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

// PodBlockAnnotation on a Node names the block its pods' addresses come from (Options.PodBlock).
const PodBlockAnnotation = "lab.skein.dev/pod-block"

// Options configure a kubelet.
type Options struct {
	NodeName string
	NodeIP   netip.Addr
	// Kubeconfig holds the node's credentials (user system:node:<name>, group system:nodes).
	Kubeconfig string
	// ClusterCIDRs are the cluster's pod CIDRs: traffic from them to anywhere else that leaves
	// through eth0 is masqueraded (with MasqueradeAll, whatever the device).
	ClusterCIDRs []netip.Prefix
	// PodBlock, when valid, is where this node's pods get their addresses instead of the
	// Node's spec.podCIDR: the pod network of CNIs with their own IPAM (Calico's blocks).
	// The kubelet publishes it in the Node's PodBlockAnnotation, and the other nodes route it.
	PodBlock netip.Prefix
	// MasqueradeAll masquerades pod traffic to any destination outside the cluster CIDRs,
	// whatever device it leaves by (an overlay device included), as CNIs that masquerade
	// without an interface match do.
	MasqueradeAll bool
	// APIServer is the address pods reach the API server at (the kubernetes Service's
	// ClusterIP, 443 by default), given to them as KUBERNETES_SERVICE_HOST/PORT.
	APIServer netip.AddrPort
	// StateDir holds the pods' volumes and logs; it must not lie under /run or /tmp, which
	// containers see privately.
	StateDir string
	// NodeNetns is the name of the node's network namespace (host-network pods run in it).
	NodeNetns string
	// NetnsPrefix starts the name of every pod network namespace.
	NetnsPrefix string
	// Images maps an image name (the last path element, without tag or digest) to a binary.
	// Names not in it are looked up in BinDir, then on PATH.
	Images map[string]string
	// Registry, when set, is the lab's registry (host:port): an image whose reference starts
	// with it is pulled from there and its own entrypoint runs, instead of a binary by name.
	Registry string
	BinDir   string
	// Shim is the command that starts the shim (see Shim), such as ["/path/lab", "shim"].
	Shim []string
	Log  *slog.Logger
}

// Kubelet is a running kubelet.
type Kubelet struct {
	o       Options
	cs      kubernetes.Interface
	log     *slog.Logger
	podCIDR netip.Prefix

	pullMu sync.Mutex // one pull and unpack at a time

	mu   sync.Mutex
	pods map[types.UID]*podWorker
	ips  map[netip.Addr]types.UID
}

// Run registers the node and runs its pods until ctx ends. It leaves the pods running when it
// returns (as a real kubelet does); the lab's teardown removes them.
func Run(ctx context.Context, o Options) error {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	for _, d := range privateDirs {
		if o.StateDir == d || strings.HasPrefix(o.StateDir, d+"/") {
			return fmt.Errorf("kubelet: state dir %s lies under %s, which containers see privately", o.StateDir, d)
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	if err != nil {
		return fmt.Errorf("kubelet: kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	k := &Kubelet{o: o, cs: cs, log: o.Log, pods: map[types.UID]*podWorker{}, ips: map[netip.Addr]types.UID{}}
	// The API server may still be starting: retry for two minutes.
	for deadline := time.Now().Add(2 * time.Minute); ; {
		err := k.register(ctx)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return err
		}
		if !sleep(ctx, 500*time.Millisecond) {
			return ctx.Err()
		}
	}
	k.log.Info("node registered; waiting for its pod CIDR")
	if err := k.waitPodCIDR(ctx); err != nil {
		return err
	}
	if err := k.setupNode(); err != nil {
		return err
	}
	k.cleanOrphans()
	go k.heartbeat(ctx)

	nodes := informers.NewSharedInformerFactory(cs, time.Minute)
	nodes.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { k.routeTo(obj.(*corev1.Node)) },
		UpdateFunc: func(_, obj any) { k.routeTo(obj.(*corev1.Node)) },
	})
	pods := informers.NewSharedInformerFactoryWithOptions(cs, 5*time.Minute, informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
		lo.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", o.NodeName).String()
	}))
	pods.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { k.podChanged(ctx, obj.(*corev1.Pod)) },
		UpdateFunc: func(_, obj any) { k.podChanged(ctx, obj.(*corev1.Pod)) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				k.podGone(p.UID)
			}
		},
	})
	nodes.Start(ctx.Done())
	pods.Start(ctx.Done())
	k.log.Info("kubelet running", "node", o.NodeName, "podCIDR", k.podCIDR)
	<-ctx.Done()
	return nil
}

func (k *Kubelet) nodeStatus(n *corev1.Node) {
	now := metav1.Now()
	n.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: k.o.NodeIP.String()},
		{Type: corev1.NodeHostName, Address: k.o.NodeName},
	}
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	n.Status.Capacity, n.Status.Allocatable = res, res
	n.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "skein lab kubelet is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now,
	}}
	n.Status.NodeInfo = corev1.NodeSystemInfo{
		KubeletVersion: "v0.0.0-skein-lab", OperatingSystem: "linux", Architecture: "amd64",
		ContainerRuntimeVersion: "skein-lab://processes", OSImage: "skein lab",
	}
}

// register creates the Node, or takes over an existing one.
func (k *Kubelet) register(ctx context.Context) error {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: k.o.NodeName, Labels: map[string]string{
		"kubernetes.io/hostname": k.o.NodeName, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
	}}}
	if k.o.PodBlock.IsValid() {
		n.Annotations = map[string]string{PodBlockAnnotation: k.o.PodBlock.String()}
	}
	k.nodeStatus(n)
	_, err := k.cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kubelet: register node %s: %w", k.o.NodeName, err)
	}
	return k.updateStatus(ctx)
}

func (k *Kubelet) updateStatus(ctx context.Context) error {
	n, err := k.cs.CoreV1().Nodes().Get(ctx, k.o.NodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("kubelet: read node %s: %w", k.o.NodeName, err)
	}
	if k.o.PodBlock.IsValid() && n.Annotations[PodBlockAnnotation] != k.o.PodBlock.String() {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[PodBlockAnnotation] = k.o.PodBlock.String()
		if n, err = k.cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("kubelet: node %s pod block: %w", k.o.NodeName, err)
		}
	}
	k.nodeStatus(n)
	if _, err := k.cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("kubelet: node %s status: %w", k.o.NodeName, err)
	}
	return nil
}

// waitPodCIDR waits for kube-controller-manager to give the node its pod CIDR.
func (k *Kubelet) waitPodCIDR(ctx context.Context) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		n, err := k.cs.CoreV1().Nodes().Get(ctx, k.o.NodeName, metav1.GetOptions{})
		if err == nil && n.Spec.PodCIDR != "" {
			p, err := netip.ParsePrefix(n.Spec.PodCIDR)
			if err != nil || !p.Addr().Is4() {
				return fmt.Errorf("kubelet: node %s pod CIDR %q is not IPv4", k.o.NodeName, n.Spec.PodCIDR)
			}
			k.podCIDR = p
			if k.o.PodBlock.IsValid() {
				k.podCIDR = k.o.PodBlock.Masked()
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kubelet: node %s got no pod CIDR in 2 minutes: is kube-controller-manager running with --allocate-node-cidrs?", k.o.NodeName)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// setupNode turns on forwarding and masquerades pod traffic that leaves the cluster.
func (k *Kubelet) setupNode() error {
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		return fmt.Errorf("kubelet: enable forwarding: %w", err)
	}
	cidrs := make([]string, len(k.o.ClusterCIDRs))
	for i, c := range k.o.ClusterCIDRs {
		cidrs[i] = c.String()
	}
	oif := `oifname "eth0" `
	if k.o.MasqueradeAll {
		oif = ""
	}
	rules := fmt.Sprintf(`table ip skein-lab-masq
delete table ip skein-lab-masq
table ip skein-lab-masq {
	chain postrouting {
		type nat hook postrouting priority srcnat + 10; policy accept;
		%[2]sip saddr { %[1]s } ip daddr != { %[1]s } masquerade
	}
}
`, strings.Join(cidrs, ", "), oif)
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kubelet: masquerade rule (is the nftables package installed?): %w: %s", err, out)
	}
	return nil
}

// heartbeat renews the node's Lease every 10 s and its status every minute.
func (k *Kubelet) heartbeat(ctx context.Context) {
	leases := k.cs.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	last := time.Now()
	for {
		now := metav1.NewMicroTime(time.Now())
		l, err := leases.Get(ctx, k.o.NodeName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: k.o.NodeName, Namespace: corev1.NamespaceNodeLease},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(k.o.NodeName), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &now}}
			_, err = leases.Create(ctx, l, metav1.CreateOptions{})
		case err == nil:
			l.Spec.RenewTime = &now
			_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		}
		if err != nil && ctx.Err() == nil {
			k.log.Warn("node lease", "err", err)
		}
		// Every minute, and at once when someone else changed the node's Ready condition (as
		// kube-controller-manager does when the Lease was not renewed, say after an API
		// server outage): the real kubelet compares its status with the API's every 10 s and
		// patches when they differ, so a node is NotReady for seconds, not a minute.
		if time.Since(last) > time.Minute || k.readyOverwritten(ctx) {
			if err := k.updateStatus(ctx); err != nil && ctx.Err() == nil {
				k.log.Warn("node status", "err", err)
			}
			last = time.Now()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// readyOverwritten reports whether the Node's Ready condition is not the one this kubelet posts.
func (k *Kubelet) readyOverwritten(ctx context.Context) bool {
	n, err := k.cs.CoreV1().Nodes().Get(ctx, k.o.NodeName, metav1.GetOptions{})
	if err != nil {
		return false
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status != corev1.ConditionTrue || c.Reason != "KubeletReady"
		}
	}
	return true
}

// cleanOrphans stops what an earlier kubelet of this node left running (its pids are in the
// pods' directories) and removes its pod namespaces and files; pods still in the API start
// again, as after a node reboot.
func (k *Kubelet) cleanOrphans() {
	pids, _ := filepath.Glob(filepath.Join(k.o.StateDir, "pods", "*", "*.pid"))
	for _, f := range pids {
		if b, err := os.ReadFile(f); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
				_ = syscall.Kill(-pid, syscall.SIGKILL)
			}
		}
	}
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for _, l := range strings.Split(string(out), "\n") {
			if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], k.o.NetnsPrefix) {
				if pids, err := exec.Command("ip", "netns", "pids", f[0]).Output(); err == nil {
					for _, p := range strings.Fields(string(pids)) {
						if pid, err := strconv.Atoi(p); err == nil {
							_ = syscall.Kill(pid, syscall.SIGKILL)
						}
					}
				}
				_ = exec.Command("ip", "netns", "del", f[0]).Run()
			}
		}
	}
	_ = os.RemoveAll(filepath.Join(k.o.StateDir, "pods"))
}

// routeTo keeps the host-gw route to another node's pods: its pod block when it publishes
// one, otherwise its pod CIDR.
func (k *Kubelet) routeTo(n *corev1.Node) {
	dst := n.Spec.PodCIDR
	if b := n.Annotations[PodBlockAnnotation]; b != "" {
		if p, err := netip.ParsePrefix(b); err == nil && p.Addr().Is4() {
			dst = p.Masked().String()
		}
	}
	if n.Name == k.o.NodeName || dst == "" {
		return
	}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			if out, err := exec.Command("ip", "route", "replace", dst, "via", a.Address).CombinedOutput(); err != nil {
				k.log.Warn("route to node", "node", n.Name, "err", err, "out", strings.TrimSpace(string(out)))
			}
			return
		}
	}
}

func (k *Kubelet) podChanged(ctx context.Context, p *corev1.Pod) {
	k.mu.Lock()
	w := k.pods[p.UID]
	if w == nil {
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			// Nothing of it runs here (cleanOrphans removed what an earlier kubelet left).
			k.mu.Unlock()
			if p.DeletionTimestamp != nil {
				k.forget(ctx, p)
			}
			return
		}
		w = newPodWorker(k, p)
		k.pods[p.UID] = w
		k.mu.Unlock()
		go w.run(ctx)
		return
	}
	k.mu.Unlock()
	w.update(p)
}

func (k *Kubelet) podGone(uid types.UID) {
	k.mu.Lock()
	w := k.pods[uid]
	k.mu.Unlock()
	if w != nil {
		w.gone()
	}
}

// forget removes a finished pod's API object once it is being deleted.
func (k *Kubelet) forget(ctx context.Context, p *corev1.Pod) {
	err := k.cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: &p.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		k.log.Warn("delete pod", "pod", p.Namespace+"/"+p.Name, "err", err)
	}
}

// allocIP gives a pod the lowest free address of the node's pod CIDR (the first host and the
// broadcast address excepted).
func (k *Kubelet) allocIP(uid types.UID) (netip.Addr, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	a := k.podCIDR.Masked().Addr().Next().Next()
	for ; k.podCIDR.Contains(a.Next()); a = a.Next() {
		if _, used := k.ips[a]; !used {
			k.ips[a] = uid
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("no free address left in %s", k.podCIDR)
}

func (k *Kubelet) releaseIP(a netip.Addr) {
	k.mu.Lock()
	delete(k.ips, a)
	k.mu.Unlock()
}

func (k *Kubelet) removeWorker(uid types.UID) {
	k.mu.Lock()
	delete(k.pods, uid)
	k.mu.Unlock()
}

// resolveImage maps an image to what runs: its entrypoint pulled from the lab's registry, or a
// local binary of the image's name; id is the image ID the pod's status reports.
func (k *Kubelet) resolveImage(image string) (bin, id string, err error) {
	if k.fromRegistry(image) {
		return k.pull(image)
	}
	bin, err = k.localImage(image)
	return bin, "skein-lab://" + image, err
}

// localImage maps an image to a binary by its name (the last path element, without tag or
// digest).
func (k *Kubelet) localImage(image string) (string, error) {
	name := image
	if i := strings.LastIndex(name, "/"); i >= 0 {
		name = name[i+1:]
	}
	if i := strings.IndexAny(name, ":@"); i >= 0 {
		name = name[:i]
	}
	if p, ok := k.o.Images[name]; ok {
		return p, nil
	}
	if k.o.BinDir != "" {
		p := filepath.Join(k.o.BinDir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("image %q: the lab has no binary named %q (looked in %s and on PATH)", image, name, k.o.BinDir)
}
