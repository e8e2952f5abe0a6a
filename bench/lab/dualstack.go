package lab

// This file is the pod network of a dual-stack lab (Options.DualStack), run by a node's
// node-init in place of flannel: the bridge and host-local CNI plugins give each pod an address
// of each family from the Node's spec.podCIDRs (a /24 of PodCIDR and a /64 of PodCIDR6, both
// from kube-controller-manager), and the node routes every other node's pod CIDRs to that node,
// IPv4 ones via its IPv4 address and IPv6 ones via its IPv6 address on the same link (host-gw,
// as flannel's host-gw backend does for IPv4). Pod traffic leaving PodCIDR for IPv4 is
// masqueraded (pods reach the API server at its node address, which has no route back to the
// pods); IPv6 pod traffic never is: it goes only to pods of the cluster and, through skein, to
// the peer's.
//
// A lab with IPv6Only runs the same network with the IPv6 family only. There the pods reach
// the API server, the registry and the peer cluster's nodes (its gateway's NodePort) over
// IPv6, so IPv6 pod traffic to the lab's underlay (LabNet6) is masqueraded instead, for the
// same reason; pod traffic to anything else (the cluster's pods, the peer's pods as remapped
// here) keeps its source.

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// dualStackMasquerade installs the IPv4 masquerade of pod traffic leaving the cluster's IPv4
// pod CIDR (the table blockNetwork installs, for the same reason), or on an IPv6-only node
// the IPv6 masquerade of pod traffic to the lab's underlay.
func (c NodeConfig) dualStackMasquerade() error {
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(c.masqueradeRules())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft: %w: %s", err, out)
	}
	return nil
}

// masqueradeRules is the nftables table dualStackMasquerade installs.
func (c NodeConfig) masqueradeRules() string {
	if c.IPv6Only {
		return fmt.Sprintf(`table ip6 skein-lab-podnet {
	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		ip6 saddr %s ip6 daddr %s masquerade
	}
}
`, c.ClusterCIDR6.Masked(), LabNet6)
	}
	return fmt.Sprintf(`table ip skein-lab-podnet {
	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		ip saddr %[1]s ip daddr != %[1]s masquerade
	}
}
`, c.ClusterCIDR.Masked())
}

// dualStackNetwork watches the Nodes (every second, with flanneld's credentials: it may read
// every Node) and keeps the CNI configuration on this node's pod CIDRs and the routes to the
// other nodes' pod CIDRs. It never returns.
func (c NodeConfig) dualStackNetwork(logf func(string, ...any)) {
	var cs kubernetes.Interface
	for cs == nil {
		cfg, err := clientcmd.BuildConfigFromFlags("", c.FlannelKubeconfig)
		if err == nil {
			cs, err = kubernetes.NewForConfig(cfg)
		}
		if err != nil {
			logf("dual-stack pod network: API client: %v; again in 1s", err)
			time.Sleep(time.Second)
		}
	}
	neighbours := map[string]Neighbour{}
	for _, n := range c.Neighbours {
		neighbours[n.Name] = n
	}
	var lastConf string
	routed := map[netip.Prefix]netip.Addr{}
	for ; ; time.Sleep(time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		cancel()
		if err != nil {
			continue
		}
		for _, n := range nodes.Items {
			var cidrs []netip.Prefix
			for _, s := range n.Spec.PodCIDRs {
				if p, err := netip.ParsePrefix(s); err == nil {
					cidrs = append(cidrs, p.Masked())
				}
			}
			if n.Name == c.Name {
				conf, ok := c.dualStackCNIConfig(cidrs)
				if !ok || conf == lastConf {
					continue
				}
				if err := writeFileAtomic("/etc/cni/net.d/10-dualstack.conflist", conf); err != nil {
					logf("dual-stack pod network: write the CNI configuration: %v", err)
					continue
				}
				lastConf = conf
				logf("dual-stack pod network: CNI configuration written: bridge cni0 on %v", cidrs)
				continue
			}
			nb, ok := neighbours[n.Name]
			if !ok {
				continue
			}
			for _, p := range cidrs {
				via := nb.Addr
				if p.Addr().Is6() {
					via = nb.Addr6
				}
				if !via.IsValid() || routed[p] == via {
					continue
				}
				args := []string{"ip", "route", "replace", p.String(), "via", via.String(), "dev", "eth0"}
				if p.Addr().Is6() {
					args = slices.Insert(args, 1, "-6")
				}
				if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
					logf("dual-stack pod network: %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
					continue
				}
				routed[p] = via
				logf("dual-stack pod network: %s's pods %v via %v", n.Name, p, via)
			}
		}
	}
}

// dualStackCNIConfig is the CNI configuration of a node whose Node has pod CIDRs cidrs: the
// bridge plugin on cni0 (the pods' default gateway of each family) with one host-local range
// per family the node has a cluster CIDR of (ClusterCIDR, ClusterCIDR6; IPv6 alone on an
// IPv6-only node), IPv4 first, chained with portmap; not ok until the Node has a pod CIDR of
// each of those families.
func (c NodeConfig) dualStackCNIConfig(cidrs []netip.Prefix) (string, bool) {
	var v4, v6 netip.Prefix
	for _, p := range cidrs {
		switch {
		case p.Addr().Is4() && c.ClusterCIDR.Overlaps(p):
			v4 = p
		case p.Addr().Is6() && c.ClusterCIDR6.Overlaps(p):
			v6 = p
		}
	}
	var ranges []string
	for _, f := range []struct{ cluster, node netip.Prefix }{{c.ClusterCIDR, v4}, {c.ClusterCIDR6, v6}} {
		if !f.cluster.IsValid() {
			continue
		}
		if !f.node.IsValid() {
			return "", false
		}
		ranges = append(ranges, fmt.Sprintf(`[{"subnet": %q}]`, f.node))
	}
	if len(ranges) == 0 {
		return "", false
	}
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "dualstack",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "isDefaultGateway": true, "hairpinMode": true,
     "ipMasq": false, "mtu": 1500,
     "ipam": {"type": "host-local", "ranges": [%s]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, strings.Join(ranges, ", ")), true
}

// writeFileAtomic writes path through a temporary file in its directory and a rename, so that
// a reader never sees it half written.
func writeFileAtomic(path, text string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
