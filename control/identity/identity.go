// Package identity is what a cluster publishes about itself for skeinctl and its peers: its
// id (ConfigMap liqo-clusterid-configmap), a friendly name derived from the id, and its
// network parameters (ConfigMap skein-network, written by skein-controller).
package identity

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
)

// ConfigMap names and keys.
const (
	ClusterIDConfigMap = "liqo-clusterid-configmap"
	ClusterIDKey       = "CLUSTER_ID"
	NetworkConfigMap   = "skein-network"
)

var adjectives = []string{"amber", "brave", "calm", "crimson", "damp", "dry", "eager", "fancy", "gentle", "hidden",
	"icy", "jolly", "keen", "lively", "misty", "noble", "odd", "proud", "quiet", "rapid", "silent", "tidy", "urban", "vivid",
	"wild", "young", "zesty", "bold", "cool", "dark", "early", "fresh"}
var nouns = []string{"field", "paper", "rain", "feather", "river", "stone", "cloud", "forest", "meadow", "harbor",
	"island", "lake", "mountain", "night", "ocean", "pine", "resonance", "shadow", "snow", "star", "sun", "thunder",
	"valley", "wave", "wind", "brook", "cliff", "dawn", "dune", "ember", "frost", "glade"}

// ClusterName is the friendly name of a cluster id (such as dry-paper): stable, derived from
// the id, used to name the objects a cluster hands to its peers.
func ClusterName(id string) string {
	h := sha256.Sum256([]byte(id))
	return adjectives[int(h[0])%len(adjectives)] + "-" + nouns[int(h[1])%len(nouns)]
}

// PeerName is ClusterName with a suffix of six hex digits also derived from the id (such as
// dry-paper-5d16c0, the spec's tenant namespaces): 1,024 friendly names are too few to tell
// peers apart (ids 4be03db0-... and f9341c68-... are both vivid-resonance), the suffix adds 24
// bits. It names the tenant namespace of a peer and the objects that share a namespace with
// other peers' (the generated Configuration and PublicKey); skeinctl still refuses an object
// whose liqo.io/remote-cluster-id label names another peer, so a collision is an error, never
// an overwrite.
func PeerName(id string) string {
	h := sha256.Sum256([]byte(id))
	return fmt.Sprintf("%s-%x", ClusterName(id), h[2:5])
}

// Network is a cluster's network parameters.
type Network struct {
	PodCIDRs, ServiceCIDRs, Reserved []netip.Prefix
	InternalCIDR                     netip.Prefix
	// ExternalCIDR and ExternalCIDR6 are the IPv4 and IPv6 external CIDRs in use: the IPv4 one
	// unset in an IPv6-only cluster, the IPv6 one unset in a cluster without IPv6 pods.
	ExternalCIDR, ExternalCIDR6 netip.Prefix
	// Gateway holds the defaults of this cluster's gateways (the chart's
	// peering.networking.gateway.* values); zero fields were not published.
	Gateway GatewayDefaults
}

// GatewayDefaults are what `skeinctl network connect` uses when its flags are not given: the
// tunnel MTU, and the type and port of a gateway server's Service in this cluster.
type GatewayDefaults struct {
	MTU               int32
	ServerServiceType string
	ServerPort        int32
}

// Published is how the network is published to peers (spec.remote.cidr of the Configuration
// they apply): every pod CIDR, the first as pod and the others as additionalPods; the
// external CIDRs, the IPv4 one as external (the IPv6 one in an IPv6-only cluster) and the
// IPv6 one of a dual-stack cluster as additionalExternals.
func (n Network) Published() netv1alpha1.ClusterConfigCIDR {
	var out netv1alpha1.ClusterConfigCIDR
	for _, e := range n.ExternalCIDRs() {
		if out.External == "" {
			out.External = netv1alpha1.CIDR(e.String())
		} else {
			out.AdditionalExternals = append(out.AdditionalExternals, netv1alpha1.CIDR(e.String()))
		}
	}
	for i, p := range n.PodCIDRs {
		if i == 0 {
			out.Pod = netv1alpha1.CIDR(p.String())
		} else {
			out.AdditionalPods = append(out.AdditionalPods, netv1alpha1.CIDR(p.String()))
		}
	}
	return out
}

// ExternalCIDRs are the external CIDRs in use, IPv4 first.
func (n Network) ExternalCIDRs() []netip.Prefix {
	var out []netip.Prefix
	for _, e := range []netip.Prefix{n.ExternalCIDR, n.ExternalCIDR6} {
		if e.IsValid() {
			out = append(out, e)
		}
	}
	return out
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

func splitPrefixes(key, s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a CIDR", key, f)
		}
		out = append(out, p)
	}
	return out, nil
}

// PublishNetwork writes n into the skein-network ConfigMap of namespace.
func PublishNetwork(ctx context.Context, c client.Client, namespace string, n Network) error {
	data := map[string]string{
		"podCIDRs": joinPrefixes(n.PodCIDRs), "serviceCIDRs": joinPrefixes(n.ServiceCIDRs), "reserved": joinPrefixes(n.Reserved),
		"internalCIDR": n.InternalCIDR.String(),
	}
	// Each external CIDR only when in use: an older skeinctl reads externalCIDR alone.
	if n.ExternalCIDR.IsValid() {
		data["externalCIDR"] = n.ExternalCIDR.String()
	}
	if n.ExternalCIDR6.IsValid() {
		data["externalCIDR6"] = n.ExternalCIDR6.String()
	}
	if g := n.Gateway; g.MTU != 0 {
		data["gatewayMTU"] = strconv.Itoa(int(g.MTU))
		data["gatewayServerServiceType"] = g.ServerServiceType
		data["gatewayServerPort"] = strconv.Itoa(int(g.ServerPort))
	}
	cm := &corev1.ConfigMap{}
	err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: NetworkConfigMap}, cm)
	if apierrors.IsNotFound(err) {
		return c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: NetworkConfigMap}, Data: data})
	}
	if err != nil {
		return err
	}
	cm.Data = data
	return c.Update(ctx, cm)
}

// ReadNetwork reads the skein-network ConfigMap of namespace.
func ReadNetwork(ctx context.Context, c client.Client, namespace string) (*Network, error) {
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: NetworkConfigMap}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("configmap %s/%s not found: is skein installed (and skein-controller running) in namespace %s?", namespace, NetworkConfigMap, namespace)
		}
		return nil, err
	}
	var n Network
	var err error
	if n.PodCIDRs, err = splitPrefixes("podCIDRs", cm.Data["podCIDRs"]); err != nil {
		return nil, err
	}
	if n.ServiceCIDRs, err = splitPrefixes("serviceCIDRs", cm.Data["serviceCIDRs"]); err != nil {
		return nil, err
	}
	if n.Reserved, err = splitPrefixes("reserved", cm.Data["reserved"]); err != nil {
		return nil, err
	}
	for key, dst := range map[string]*netip.Prefix{"externalCIDR": &n.ExternalCIDR, "externalCIDR6": &n.ExternalCIDR6} {
		if v, ok := cm.Data[key]; ok {
			if *dst, err = netip.ParsePrefix(v); err != nil {
				return nil, fmt.Errorf("configmap %s/%s: %s: %w", namespace, NetworkConfigMap, key, err)
			}
		}
	}
	if len(n.ExternalCIDRs()) == 0 {
		return nil, fmt.Errorf("configmap %s/%s has no externalCIDR", namespace, NetworkConfigMap)
	}
	if n.InternalCIDR, err = netip.ParsePrefix(cm.Data["internalCIDR"]); err != nil {
		return nil, fmt.Errorf("internalCIDR: %w", err)
	}
	if len(n.PodCIDRs) == 0 {
		return nil, fmt.Errorf("configmap %s/%s has no podCIDRs", namespace, NetworkConfigMap)
	}
	// The gateway defaults: absent from a ConfigMap of an older controller; a bad value is
	// reported, not guessed.
	for key, dst := range map[string]*int32{"gatewayMTU": &n.Gateway.MTU, "gatewayServerPort": &n.Gateway.ServerPort} {
		v, ok := cm.Data[key]
		if !ok {
			continue
		}
		x, err := strconv.ParseInt(v, 10, 32)
		if err != nil || x < 1 || x > 65535 {
			return nil, fmt.Errorf("configmap %s/%s: %s %q is not a number from 1 to 65535", namespace, NetworkConfigMap, key, v)
		}
		*dst = int32(x)
	}
	n.Gateway.ServerServiceType = cm.Data["gatewayServerServiceType"]
	return &n, nil
}

// ReadClusterID reads the cluster id.
func ReadClusterID(ctx context.Context, c client.Client, namespace string) (string, error) {
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ClusterIDConfigMap}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return "", fmt.Errorf("configmap %s/%s not found: is skein installed in namespace %s?", namespace, ClusterIDConfigMap, namespace)
		}
		return "", err
	}
	id := cm.Data[ClusterIDKey]
	if id == "" {
		return "", fmt.Errorf("configmap %s/%s has no %s", namespace, ClusterIDConfigMap, ClusterIDKey)
	}
	return id, nil
}

// EnsureClusterID returns this cluster's id, creating the ConfigMap (with a new UUID) in
// namespace if it is missing. An existing id is never changed.
func EnsureClusterID(ctx context.Context, c client.Client, namespace string) (string, error) {
	cm := &corev1.ConfigMap{}
	key := types.NamespacedName{Namespace: namespace, Name: ClusterIDConfigMap}
	err := c.Get(ctx, key, cm)
	if err == nil {
		if id := cm.Data[ClusterIDKey]; id != "" {
			return id, nil
		}
		return "", fmt.Errorf("configmap %s has no %s; set it or delete the ConfigMap to get a new id", key, ClusterIDKey)
	}
	if !apierrors.IsNotFound(err) {
		return "", err
	}
	id, err := uuid()
	if err != nil {
		return "", err
	}
	cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: ClusterIDConfigMap}, Data: map[string]string{ClusterIDKey: id}}
	if err := c.Create(ctx, cm); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return EnsureClusterID(ctx, c, namespace) // another replica was first
		}
		return "", fmt.Errorf("create configmap %s: %w", key, err)
	}
	return id, nil
}

func uuid() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}
