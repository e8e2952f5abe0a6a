package gateway

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/gateway/config"
	"github.com/skein-net/skein/dataplane"
	"github.com/skein-net/skein/dataplane/overlay"
)

// Objects are the API objects an in-cluster gateway is configured from. Exactly one of
// Server and Client is set.
type Objects struct {
	Server *netv1alpha1.GatewayServer
	Client *netv1alpha1.GatewayClient
	// Configuration of the remote cluster (labelled with its cluster id).
	Configuration *netv1alpha1.Configuration
	// PeerKey is the PublicKey labelled with the remote cluster id.
	PeerKey *netv1alpha1.PublicKey
	// Secret holds this gateway's key pair (the gateway's status.secretRef).
	Secret *corev1.Secret
	// InternalNodes, Nodes and Pods map local pods to node VTEPs: a node's pod CIDRs (both
	// families) come from its Node; Pods add /32 and /128 routes for pods outside their node's
	// CIDRs (CNIs that do not allocate per-node ranges). PodAddrOf makes a Pod's entry.
	InternalNodes []netv1alpha1.InternalNode
	Nodes         []corev1.Node
	Pods          []PodAddr
}

// Local is what the gateway knows about itself from flags and its pod.
type Local struct {
	// PodIP is where the overlay socket binds (the nodes send overlay frames there).
	PodIP netip.Addr
	// Overlay kind, UDP port (0: the kind's), VNI and MTU (0: default) of the nodes' devices.
	OverlayKind overlay.Kind
	OverlayPort uint16
	VNI         uint32
	OverlayMTU  int
	// CompleteChecksums: see the file's overlay.completeChecksums.
	CompleteChecksums bool
	// ListenPort is the WireGuard port of a server (0: the GatewayServer's endpoint port).
	ListenPort uint16
	// TunnelCIDR is the tunnel's /30 (default 169.254.100.0/30).
	TunnelCIDR netip.Prefix
	// Keepalive of a client (default 25 s).
	Keepalive     int
	ProbeInterval time.Duration
	ProbeFail     int
	HTTPListen    string
	// MemoryLimitMiB: 0 the default, -1 none (config.Spec).
	MemoryLimitMiB int
	GCPercent      int
	Window         int
	// Resolve turns a host name of a GatewayClient's endpoint into an address.
	Resolve func(host string) (netip.Addr, error)
	// EndpointIndex picks which of a GatewayClient's endpoint addresses a client dials
	// (modulo their number): the Watcher moves it on when the server does not answer
	// (NextEndpoint), so every address is tried in order.
	EndpointIndex int
}

// ErrNotReady wraps what FromObjects is still waiting for (objects the controller or the
// peer has yet to create or fill in); anything else is a configuration error.
var ErrNotReady = errors.New("not ready")

func notReady(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrNotReady, fmt.Sprintf(format, a...))
}

// FromObjects translates the API objects into the gateway's configuration (config.Build fills
// the defaults and validates).
func FromObjects(o Objects, l Local) (*config.Gateway, error) {
	s := config.Spec{
		ListenPort: l.ListenPort, TunnelCIDR: l.TunnelCIDR,
		ProbeInterval: l.ProbeInterval, ProbeFail: l.ProbeFail,
		HTTPListen: l.HTTPListen, MemoryLimitMiB: l.MemoryLimitMiB, GCPercent: l.GCPercent, Window: l.Window,
		Overlay: config.Overlay{Kind: l.OverlayKind, Port: l.OverlayPort, Listen: l.PodIP, MTU: l.OverlayMTU, CompleteChecksums: &l.CompleteChecksums},
	}
	if l.Keepalive != 0 {
		s.Keepalive = &l.Keepalive
	}
	if l.VNI != 0 {
		s.Overlay.VNI = &l.VNI
	}
	var internal *netv1alpha1.InternalEndpoint
	switch {
	case o.Server != nil && o.Client == nil:
		s.Server = true
		s.TunnelMTU, internal = int(o.Server.Spec.MTU), o.Server.Status.InternalEndpoint
		if s.ListenPort == 0 {
			s.ListenPort = uint16(o.Server.Spec.Endpoint.Port)
		}
	case o.Client != nil && o.Server == nil:
		s.TunnelMTU, internal = int(o.Client.Spec.MTU), o.Client.Status.InternalEndpoint
		ep := o.Client.Spec.Endpoint
		if len(ep.Addresses) == 0 {
			return nil, errors.New("gatewayclient spec.endpoint.addresses is empty")
		}
		host := string(ep.Addresses[l.EndpointIndex%len(ep.Addresses)])
		a, err := netip.ParseAddr(host)
		if err != nil {
			if l.Resolve == nil {
				return nil, fmt.Errorf("gatewayclient endpoint %q is not an IP address and no resolver is configured", host)
			}
			if a, err = l.Resolve(host); err != nil {
				return nil, notReady("resolving the server's address %q: %v", host, err)
			}
		}
		s.PeerEndpoint = netip.AddrPortFrom(a.Unmap(), uint16(ep.Port))
	default:
		return nil, errors.New("exactly one of a GatewayServer and a GatewayClient configures a gateway")
	}

	// Keys.
	if o.Secret == nil {
		return nil, notReady("the gateway's key Secret does not exist yet")
	}
	priv, ok := o.Secret.Data[config.SecretPrivateKey]
	if !ok {
		return nil, fmt.Errorf("secret %s/%s has no %q key", o.Secret.Namespace, o.Secret.Name, config.SecretPrivateKey)
	}
	var err error
	if s.PrivateKey, err = config.ParseKey(string(priv)); err != nil {
		return nil, fmt.Errorf("secret %s/%s %s: %w", o.Secret.Namespace, o.Secret.Name, config.SecretPrivateKey, err)
	}
	if o.PeerKey == nil {
		return nil, notReady("no PublicKey of the peer gateway yet")
	}
	if s.PeerPublicKey, err = config.ParseKey(o.PeerKey.Spec.PublicKey); err != nil {
		return nil, fmt.Errorf("publickey %s/%s: %w", o.PeerKey.Namespace, o.PeerKey.Name, err)
	}

	// The gateway's overlay address.
	if internal == nil || internal.IP == nil {
		return nil, notReady("the controller has not assigned the gateway's overlay address (status.internalEndpoint.ip)")
	}
	if s.Overlay.IP, err = netip.ParseAddr(string(*internal.IP)); err != nil {
		return nil, fmt.Errorf("status.internalEndpoint.ip %q is not an IP address", *internal.IP)
	}

	// The remote cluster's networks.
	c := o.Configuration
	if c == nil {
		return nil, notReady("no Configuration for the remote cluster yet")
	}
	if c.Status.Remote == nil {
		return nil, notReady("configuration %s/%s has no status.remote yet (the controller has not mapped its CIDRs)", c.Namespace, c.Name)
	}
	seen := c.Status.Remote.CIDR.All()
	for i, r := range c.Spec.Remote.CIDR.All() {
		if r.CIDR == "" {
			continue
		}
		// Status lists the same fields in the same order once the controller has mapped the
		// current spec; a spec that grew since is not used until it has.
		if i >= len(seen) || seen[i].Field != r.Field {
			return nil, notReady("configuration %s/%s: %s is not mapped yet", c.Namespace, c.Name, r.Field)
		}
		real, err1 := netip.ParsePrefix(string(r.CIDR))
		as, err2 := netip.ParsePrefix(string(seen[i].CIDR))
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("configuration %s/%s: %s CIDR %q is remapped to %q; want two CIDRs", c.Namespace, c.Name, r.Field, r.CIDR, seen[i].CIDR)
		}
		s.Remote = append(s.Remote, config.Remote{
			Field: fmt.Sprintf("configuration %s/%s %s CIDR %s remapped to %s", c.Namespace, c.Name, r.Field, r.CIDR, as),
			Real:  real.Masked(), Seen: as.Masked()})
	}
	// Addresses no pod's /32 may take: the gateway's own and the peer's networks as seen here.
	tunnel := l.TunnelCIDR
	if !tunnel.IsValid() {
		tunnel = netip.MustParsePrefix(config.DefaultTunnelCIDR)
	}
	reserved := func(a netip.Addr) bool {
		if a == s.Overlay.IP || tunnel.Contains(a) || internal6.Contains(a) {
			return true
		}
		for _, r := range s.Remote {
			if r.Seen.Contains(a) {
				return true
			}
		}
		return false
	}
	if s.Nodes, err = nodes(o, reserved); err != nil {
		return nil, err
	}
	return config.Build(s)
}

// internal6 holds the gateways' own IPv6 addresses (netv1alpha1.Internal6Prefix).
var internal6 = netip.MustParsePrefix(netv1alpha1.Internal6Prefix)

// nodes maps local pods to node VTEPs. reserved reports the addresses no pod's /32 may take.
func nodes(o Objects, reserved func(netip.Addr) bool) ([]dataplane.Node, error) {
	var out []dataplane.Node
	nodes := map[string]*corev1.Node{}
	for i := range o.Nodes {
		nodes[o.Nodes[i].Name] = &o.Nodes[i]
	}
	index := map[string]int{}
	nodeAddrs := map[netip.Addr]bool{} // the nodes' VTEPs and external addresses
	var external []podClaim            // the nodes' external addresses
	for _, in := range o.InternalNodes {
		v := in.Status.VTEP
		if v == nil {
			continue // its agent has not published the VTEP yet
		}
		ip, err1 := netip.ParseAddr(string(v.IP))
		mac, err2 := overlay.ParseMAC(string(v.MAC))
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("internalnode %s: VTEP %s/%s does not parse", in.Name, v.IP, v.MAC)
		}
		// An agent may write only its own node's VTEP: one that is not an address of the Node
		// of that name (another node's agent pointing it at itself, to receive that node's
		// pods' traffic) is not used.
		if node := nodes[in.Name]; node != nil && !nodeHasAddress(node, ip.Unmap()) {
			continue
		}
		n := dataplane.Node{Name: in.Name, VTEP: ip.Unmap(), MAC: mac}
		if node := nodes[in.Name]; node != nil {
			cidrs := node.Spec.PodCIDRs
			if len(cidrs) == 0 && node.Spec.PodCIDR != "" {
				cidrs = []string{node.Spec.PodCIDR}
			}
			for _, s := range cidrs {
				if p, err := netip.ParsePrefix(s); err == nil && p.Addr().Zone() == "" && !p.Addr().Is4In6() {
					n.PodCIDRs = append(n.PodCIDRs, p.Masked())
				}
			}
		}
		// Host-network traffic of the node leaves with its external addresses (the agent's
		// SNAT, one per family): replies to them go back to this node (checked below).
		for _, ext := range []*netv1alpha1.IP{in.Spec.ExternalIP, in.Spec.ExternalIP6} {
			if ext == nil {
				continue
			}
			if a, err := netip.ParseAddr(string(*ext)); err == nil && a.Zone() == "" && !a.Is4In6() {
				external = append(external, podClaim{ip: a, node: len(out)})
			}
		}
		nodeAddrs[n.VTEP] = true
		index[in.Name] = len(out)
		out = append(out, n)
	}
	// An external address is routed by /32 or /128 like a pod's, so it must be nobody
	// else's: not a pod's of a node's pod CIDR (the route would win over the CIDR and take
	// that pod's traffic), not a VTEP, not a reserved address (the gateway's own, the peer's
	// networks), and not another node's (two InternalNodes with the same one, by hand or
	// left from an older CIDR: the route table refuses one address with two next hops, and
	// every change of this gateway's configuration would fail). Such an address is not
	// routed at all; a pod still may not take it.
	// Maps, not scans: at 5,000 nodes a scan of every node for every external address is
	// 50 million checks per configuration.
	owner := make(map[netip.Addr]int, len(external)) // external address -> its node, -1 for several
	for _, c := range external {
		nodeAddrs[c.ip] = true
		if o, ok := owner[c.ip]; !ok {
			owner[c.ip] = c.node
		} else if o != c.node {
			owner[c.ip] = -1
		}
	}
	vteps := make(map[netip.Addr]bool, len(out))
	podCIDRs := map[netip.Prefix]bool{}
	lengths := map[int]bool{} // of the pod CIDRs, IPv6 ones as 128 + bits
	for _, n := range out {
		vteps[n.VTEP] = true
		for _, p := range n.PodCIDRs {
			podCIDRs[p] = true
			if p.Addr().Is6() {
				lengths[128+p.Bits()] = true
			} else {
				lengths[p.Bits()] = true
			}
		}
	}
	inPodCIDR := func(a netip.Addr) bool {
		for l := range lengths {
			bits := l
			if a.Is6() {
				bits -= 128
			}
			if (l >= 128) == a.Is6() && podCIDRs[netip.PrefixFrom(a, bits).Masked()] {
				return true
			}
		}
		return false
	}
	for _, c := range external {
		if reserved(c.ip) || vteps[c.ip] || inPodCIDR(c.ip) || owner[c.ip] != c.node || slices.Contains(out[c.node].Pods, c.ip) {
			continue // slices.Contains: its two fields the same
		}
		out[c.node].Pods = append(out[c.node].Pods, c.ip)
	}
	// No node may have published its VTEP yet: the agents publish once a peering has an active
	// gateway VTEP to point at, which needs this gateway running. It starts without nodes (what
	// comes from the tunnel for the pods is dropped as unroutable) and gets them live.
	for _, c := range podClaims(o.Pods, index, out, nodeAddrs, reserved) {
		out[c.node].Pods = append(out[c.node].Pods, c.ip)
	}
	for i := range out {
		slices.SortFunc(out[i].Pods, func(a, b netip.Addr) int { return a.Compare(b) })
	}
	return out, nil
}

// podClaim is a pod's IPv4 or IPv6 address and the index of its node.
type podClaim struct {
	ip   netip.Addr
	node int
}

// podClaims are the pod addresses routed by /32 to the node each runs on: those outside
// their node's pod CIDRs (which route them already), each once. An address is routed to one
// node only, and not at all when pods on two nodes claim it: a finished pod's address handed
// to a new pod on another node before the first pod's status says it finished, a pod left
// on a node that went silent, or a kubelet that lies. Routing it to either could be wrong,
// and routing it to both is not possible (the route table refuses a /32 with two next hops,
// so one such pod made every change of the gateway's configuration fail, in any namespace).
// A pod on another node claiming an address of a node's pod CIDR that a pod of that node has
// leaves it to the CIDR: its /32 would win over the CIDR and take that pod's traffic. Nor
// may a pod take a node's VTEP or external address, or a reserved one (the gateway's own,
// the peer's networks).
func podClaims(pods []PodAddr, index map[string]int, out []dataplane.Node, nodeAddrs map[netip.Addr]bool, reserved func(netip.Addr) bool) []podClaim {
	inCIDRs := func(cidrs []netip.Prefix, a netip.Addr) bool {
		return slices.ContainsFunc(cidrs, func(c netip.Prefix) bool { return c.Contains(a) })
	}
	var claims []podClaim
	for _, p := range pods {
		i, ok := index[p.Node]
		if !ok {
			continue
		}
		for _, a := range [2]netip.Addr{p.IP, p.IP6} {
			if !a.IsValid() || inCIDRs(out[i].PodCIDRs, a) || nodeAddrs[a] || reserved(a) {
				continue
			}
			claims = append(claims, podClaim{ip: a, node: i})
		}
	}
	if len(claims) == 0 {
		return nil
	}
	slices.SortFunc(claims, func(x, y podClaim) int { return cmp.Or(x.ip.Compare(y.ip), cmp.Compare(x.node, y.node)) })
	claims = slices.Compact(claims) // the same address twice on one node
	// claimsOf is where the claims of ip are in claims.
	claimsOf := func(ip netip.Addr) (int, int) {
		lo, _ := slices.BinarySearchFunc(claims, ip, func(c podClaim, ip netip.Addr) int { return c.ip.Compare(ip) })
		hi := lo
		for hi < len(claims) && claims[hi].ip == ip {
			hi++
		}
		return lo, hi
	}
	for lo := 0; lo < len(claims); {
		_, hi := claimsOf(claims[lo].ip)
		if hi-lo > 1 {
			for k := lo; k < hi; k++ {
				claims[k].node = -1
			}
		}
		lo = hi
	}
	// A claim of an address its node's pod CIDR routes to a pod of that node.
	for _, p := range pods {
		i, ok := index[p.Node]
		if !ok || len(out[i].PodCIDRs) == 0 {
			continue
		}
		for _, a := range [2]netip.Addr{p.IP, p.IP6} {
			if !a.IsValid() || !inCIDRs(out[i].PodCIDRs, a) {
				continue
			}
			lo, hi := claimsOf(a)
			for k := lo; k < hi; k++ {
				claims[k].node = -1
			}
		}
	}
	return slices.DeleteFunc(claims, func(c podClaim) bool { return c.node < 0 })
}

// nodeHasAddress reports whether ip is one of node's addresses; a Node that lists none (not
// yet reported by its kubelet) cannot be checked and passes.
func nodeHasAddress(node *corev1.Node, ip netip.Addr) bool {
	if len(node.Status.Addresses) == 0 {
		return true
	}
	for _, a := range node.Status.Addresses {
		if got, err := netip.ParseAddr(a.Address); err == nil && got.Unmap() == ip {
			return true
		}
	}
	return false
}
