package main

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"reflect"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/gateway"
	"github.com/skein-net/skein/control/identity"
)

// side is one cluster of a peering as skeinctl works on it.
type side struct {
	label string // "local" or "remote"
	c     client.Client
	id    string
	net   *identity.Network
	peer  *side  // the other cluster
	ns    string // where this cluster keeps its objects of the peering (peerNamespace)
	liqo  string // where skein is installed in this cluster
	api   *rest.Config
	// identity is how this cluster's API server proved itself (apiIdentity), recorded on the
	// other cluster's Configuration of the peering.
	identity string
}

// tenantNamespace is where a cluster keeps the objects of a new peering with the cluster id:
// liqo-tenant-<peer name>-<suffix>, unique per peer (identity.PeerName).
func tenantNamespace(peerID string) string { return "liqo-tenant-" + identity.PeerName(peerID) }

// legacyTenantNamespace is the tenant namespace skeinctl used before the suffix: peerings
// made then keep working where they are, found by their Configuration's label.
func legacyTenantNamespace(peerID string) string {
	return "liqo-tenant-" + identity.ClusterName(peerID)
}

// peerNamespace finds where s keeps its objects of the peering with s.peer: the namespace of
// the Configuration labelled with the peer's id, wherever it is (the spec's manual flow puts it
// in the current namespace; earlier skeinctl versions in the legacy tenant namespace), or, for
// a new peering, the tenant namespace. The gateways read their Configuration and PublicKey
// from their own namespace, so everything of one peering lives in one namespace.
func (g *globals) peerNamespace(ctx context.Context, s *side) (string, error) {
	var confs netv1alpha1.ConfigurationList
	if err := s.c.List(ctx, &confs, client.MatchingLabels{netv1alpha1.RemoteClusterIDLabel: s.peer.id}); err != nil {
		return "", fmt.Errorf("(%s) list configurations of cluster %s: %w", s.label, s.peer.id, err)
	}
	switch len(confs.Items) {
	case 0:
		return tenantNamespace(s.peer.id), nil
	case 1:
		c := confs.Items[0]
		if c.Namespace != tenantNamespace(s.peer.id) {
			g.info(s, "Using the existing Configuration %s/%s of cluster %s", c.Namespace, c.Name, s.peer.id)
		}
		return c.Namespace, nil
	}
	names := make([]string, len(confs.Items))
	for i, c := range confs.Items {
		names[i] = c.Namespace + "/" + c.Name
	}
	return "", fmt.Errorf("(%s) %d Configurations describe cluster %s (%s): there must be one; delete the others",
		s.label, len(confs.Items), s.peer.id, strings.Join(names, ", "))
}

// objectName is the name of an object s creates for its peering: the peer's friendly name in
// a tenant namespace (one peer per namespace, as the spec shows), the peer name with its
// suffix in any other namespace (shared with other peers' objects).
func (s *side) objectName() string {
	if s.ns == tenantNamespace(s.peer.id) || s.ns == legacyTenantNamespace(s.peer.id) {
		return identity.ClusterName(s.peer.id)
	}
	return identity.PeerName(s.peer.id)
}

// belongs checks that an existing object skeinctl is about to change is of the peering with
// peerID (its liqo.io/remote-cluster-id label): another peering's or a stranger's object is
// never overwritten.
func belongs(kind string, obj client.Object, peerID string) error {
	switch got := obj.GetLabels()[netv1alpha1.RemoteClusterIDLabel]; got {
	case peerID:
		return nil
	case "":
		return fmt.Errorf("%s %s/%s exists without the %s label: it is not this peering's; refusing to change it (rename or delete it)",
			kind, obj.GetNamespace(), obj.GetName(), netv1alpha1.RemoteClusterIDLabel)
	default:
		return fmt.Errorf("%s %s/%s belongs to the peering with cluster %s, not %s: refusing to change it",
			kind, obj.GetNamespace(), obj.GetName(), got, peerID)
	}
}

// readyNote is what an object's Ready condition says, for the messages of a wait that failed.
func readyNote(conds []metav1.Condition) string {
	for _, c := range conds {
		if c.Type == netv1alpha1.ConditionReady {
			return fmt.Sprintf(" (Ready=%s, %s: %s)", c.Status, c.Reason, c.Message)
		}
	}
	return " (no Ready condition yet)"
}

type networkOpts struct {
	remoteKubeconfig, remoteContext, remoteLiqoNamespace string
	wait                                                 bool
	yes                                                  bool
	acceptNewPeerIdentity                                bool
}

// confirmFlags adds --yes (-y) and liqoctl's --skip-confirm, one switch under two names.
func confirmFlags(cmd *cobra.Command, o *networkOpts) {
	cmd.Flags().BoolVarP(&o.yes, "yes", "y", false, "do not ask for confirmation (for scripts)")
	cmd.Flags().BoolVar(&o.yes, "skip-confirm", false, "the same as --yes (liqoctl's name)")
}

// onPair is the RunE of a network command: it confirms first when destructive is set, then
// connects to both clusters and runs fn within --timeout.
func (g *globals) onPair(o *networkOpts, destructive string, fn func(ctx context.Context, l, r *side) error) func(*cobra.Command, []string) error {
	return func(c *cobra.Command, _ []string) error {
		if destructive != "" {
			if err := g.confirm(destructive, o.yes); err != nil {
				return err
			}
		}
		ctx, cancel := context.WithTimeout(c.Context(), g.timeout)
		defer cancel()
		l, r, err := g.sides(ctx, o)
		if err != nil {
			return err
		}
		for _, s := range []*side{l, r} {
			if s.ns, err = g.peerNamespace(ctx, s); err != nil {
				return err
			}
		}
		for _, s := range []*side{l, r} {
			if err := checkPeerIdentity(ctx, s, o.acceptNewPeerIdentity); err != nil {
				return fmt.Errorf("(%s) %w", s.label, err)
			}
		}
		return fn(ctx, l, r)
	}
}

func (g *globals) info(s *side, format string, a ...any) {
	fmt.Fprintf(g.out, "INFO   (%s) %s\n", s.label, fmt.Sprintf(format, a...))
}

func networkCmd(g *globals) *cobra.Command {
	o := &networkOpts{}
	cmd := &cobra.Command{Use: "network", Short: "Set up and tear down the network between this cluster and a peer"}

	initCmd := &cobra.Command{
		Use:   "init",
		Short: "Exchange the two clusters' network configurations",
		Long: `Read both clusters' identities and networks and apply, in each, the other's Configuration
(in namespace liqo-tenant-<peer name>), so that each cluster decides how it sees the other's CIDRs.
Running it again changes nothing.`,
		Example: `  skeinctl network init --kubeconfig PATH_TO_CLUSTER_1_KUBECONFIG --remote-kubeconfig PATH_TO_CLUSTER_2_KUBECONFIG --wait`,
		Args:    cobra.NoArgs,
		RunE:    g.onPair(o, "", func(ctx context.Context, l, r *side) error { return g.init(ctx, l, r, o.wait) }),
	}
	resetCmd := &cobra.Command{
		Use:   "reset",
		Short: "Remove everything skein set up between the two clusters",
		Long: `Delete both clusters' gateways of the peering and their Configurations of each other. This
is destructive: skeinctl asks for confirmation on a terminal; pass --yes to skip the question.`,
		Example: `  skeinctl network reset --kubeconfig PATH_TO_CLUSTER_1_KUBECONFIG --remote-kubeconfig PATH_TO_CLUSTER_2_KUBECONFIG --wait`,
		Args:    cobra.NoArgs,
		RunE:    g.onPair(o, "network reset", func(ctx context.Context, l, r *side) error { return g.reset(ctx, l, r, o.wait) }),
	}
	confirmFlags(resetCmd, o)
	pairs := []*cobra.Command{initCmd, connectCmd(g, o), disconnectCmd(g, o), resetCmd, rotateCredentialsCmd(g, o)}
	for _, c := range pairs {
		// The commands that act on both clusters; network status reads this one only.
		c.Flags().StringVar(&o.remoteKubeconfig, "remote-kubeconfig", "", "kubeconfig of the remote cluster (this or --remote-context is required)")
		c.Flags().StringVar(&o.remoteContext, "remote-context", "", "kubeconfig context of the remote cluster (in --remote-kubeconfig, else in the local kubeconfig)")
		c.Flags().StringVar(&o.remoteLiqoNamespace, "remote-liqo-namespace", "liqo", "namespace skein is installed in, in the remote cluster")
		c.Flags().BoolVar(&o.wait, "wait", false, "wait until what was set up is ready")
		c.Flags().BoolVar(&o.acceptNewPeerIdentity, "accept-new-peer-identity", false,
			"act even though the peer's API server proves itself with another CA than when the peering was made (the peer was rebuilt or its CA rotated); without it skeinctl refuses, since another cluster may be claiming the peer's id")
		cmd.AddCommand(c)
	}
	cmd.AddCommand(networkStatusCmd(g))
	return cmd
}

// confirm asks on a terminal; without one, --yes is required.
func (g *globals) confirm(what string, yes bool) error {
	if yes {
		return nil
	}
	if !term.IsTerminal(int(os.Stdin.Fd())) {
		return fmt.Errorf("%s is a potentially destructive command and there is no terminal to confirm it: pass --yes", what)
	}
	fmt.Fprintf(g.out, "%s is a potentially destructive command. Are you sure you want to continue? [y/N] ", what)
	answer, _ := bufio.NewReader(os.Stdin).ReadString('\n')
	if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
		return fmt.Errorf("aborted")
	}
	return nil
}

// sides connects to both clusters and reads their identities and networks.
func (g *globals) sides(ctx context.Context, o *networkOpts) (*side, *side, error) {
	if o.remoteKubeconfig == "" && o.remoteContext == "" {
		return nil, nil, fmt.Errorf("--remote-kubeconfig is required (or --remote-context, a context of the local kubeconfig): the peer cluster")
	}
	remote := target{kubeconfig: o.remoteKubeconfig, context: o.remoteContext, liqoNamespace: o.remoteLiqoNamespace}
	if remote.kubeconfig == "" {
		remote.kubeconfig = g.kubeconfig // --remote-context names a context of the local kubeconfig
	}
	l, r := &side{label: "local", liqo: g.liqoNamespace}, &side{label: "remote", liqo: o.remoteLiqoNamespace}
	for _, s := range []struct {
		sd *side
		t  target
	}{{l, g.local()}, {r, remote}} {
		var err error
		if s.sd.c, s.sd.id, err = g.cluster(ctx, s.t); err != nil {
			return nil, nil, fmt.Errorf("(%s) %w", s.sd.label, err)
		}
		if s.sd.api, err = g.restConfig(s.t); err != nil {
			return nil, nil, fmt.Errorf("(%s) %w", s.sd.label, err)
		}
		g.info(s.sd, "Cluster identity correctly retrieved")
	}
	if l.id == r.id {
		return nil, nil, fmt.Errorf("both kubeconfigs reach cluster %s: a cluster cannot be peered with itself", l.id)
	}
	l.peer, r.peer = r, l
	return l, r, nil
}

func (g *globals) init(ctx context.Context, l, r *side, wait bool) error {
	var err error
	for _, s := range []*side{l, r} {
		if s.net, err = identity.ReadNetwork(ctx, s.c, s.liqo); err != nil {
			return fmt.Errorf("(%s) %w", s.label, err)
		}
		g.info(s, "Network configuration correctly retrieved")
	}
	for _, s := range []*side{l, r} {
		if err := ensureNamespace(ctx, s.c, s.ns, s.peer.id); err != nil {
			return fmt.Errorf("(%s) %w", s.label, err)
		}
		g.info(s, "Network configuration correctly set up")
	}
	for _, s := range []*side{l, r} {
		peer := s.peer
		// The peering's own, whatever its name.
		name, err := labelledName(ctx, s.c, &netv1alpha1.ConfigurationList{}, "Configuration", s.ns, peer.id, s.objectName())
		if err != nil {
			return fmt.Errorf("(%s) %w", s.label, err)
		}
		conf := &netv1alpha1.Configuration{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns,
				Labels: map[string]string{netv1alpha1.RemoteClusterIDLabel: peer.id}},
			Spec: netv1alpha1.ConfigurationSpec{Remote: netv1alpha1.ClusterConfig{CIDR: peer.net.Published()}},
		}
		if peer.identity != "" {
			conf.Annotations = map[string]string{PeerIdentityAnnotation: peer.identity}
		}
		existing := &netv1alpha1.Configuration{}
		err = s.c.Get(ctx, client.ObjectKeyFromObject(conf), existing)
		switch {
		case apierrors.IsNotFound(err):
			if err := createOrGet(ctx, s.c, conf); err != nil {
				return fmt.Errorf("(%s) create configuration %s/%s: %w", s.label, conf.Namespace, conf.Name, err)
			}
			g.info(s, "Configuration applied successfully")
		case err != nil:
			return fmt.Errorf("(%s) %w", s.label, err)
		case belongs("configuration", existing, peer.id) != nil:
			return fmt.Errorf("(%s) %w", s.label, belongs("configuration", existing, peer.id))
		case !equality.Semantic.DeepEqual(existing.Spec, conf.Spec) || existing.Annotations[PeerIdentityAnnotation] != peer.identity:
			changed := !equality.Semantic.DeepEqual(existing.Spec, conf.Spec)
			existing.Spec = conf.Spec
			if peer.identity != "" {
				if existing.Annotations == nil {
					existing.Annotations = map[string]string{}
				}
				existing.Annotations[PeerIdentityAnnotation] = peer.identity // recorded on a peering made before the record existed
			}
			if err := s.c.Update(ctx, existing); err != nil {
				return fmt.Errorf("(%s) update configuration %s/%s: %w", s.label, conf.Namespace, conf.Name, err)
			}
			if changed {
				g.info(s, "Configuration updated successfully")
			} else {
				g.info(s, "Configuration already applied")
			}
		default:
			g.info(s, "Configuration already applied")
		}
	}
	if !wait {
		return nil
	}
	for _, s := range []*side{l, r} {
		var confs netv1alpha1.ConfigurationList
		c := &netv1alpha1.Configuration{}
		err := waitFor(ctx, func() (bool, error) {
			if err := s.c.List(ctx, &confs, client.InNamespace(s.ns), client.MatchingLabels{netv1alpha1.RemoteClusterIDLabel: s.peer.id}); err != nil || len(confs.Items) != 1 {
				return false, err
			}
			c = &confs.Items[0]
			cond := meta.FindStatusCondition(c.Status.Conditions, netv1alpha1.ConditionReady)
			if cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == "DuplicateClusterID" {
				return false, fmt.Errorf("configuration %s/%s is not used: %s", c.Namespace, c.Name, cond.Message)
			}
			// Mapped, and mapped for the spec as it is now (an updated spec is mapped again).
			return c.Status.Remote != nil && cond != nil && cond.Status == metav1.ConditionTrue && cond.ObservedGeneration == c.Generation, nil
		})
		if err != nil {
			return fmt.Errorf("(%s) waiting for configuration %s/%s to be mapped%s (is skein-controller running?): %w",
				s.label, s.ns, c.Name, readyNote(c.Status.Conditions), err)
		}
	}
	return nil
}

func disconnectCmd(g *globals, o *networkOpts) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "disconnect",
		Short: "Remove the tunnel between the two clusters, keeping their network configurations",
		Long: `Delete the GatewayClient here and the GatewayServer in the remote cluster (with everything
they created), the public keys exchanged for them, and each cluster's services reader in the
other with its credentials (the services imported from the peer go at once). skeinctl asks for
confirmation on a terminal; pass --yes to skip the question.`,
		Example: `  skeinctl network disconnect --kubeconfig PATH_TO_CLUSTER_1_KUBECONFIG --remote-kubeconfig PATH_TO_CLUSTER_2_KUBECONFIG --wait`,
		Args:    cobra.NoArgs,
		RunE:    g.onPair(o, "network disconnect", func(ctx context.Context, l, r *side) error { return g.disconnect(ctx, l, r, o.wait) }),
	}
	confirmFlags(cmd, o)
	return cmd
}

func (g *globals) reset(ctx context.Context, l, r *side, wait bool) error {
	if err := g.disconnect(ctx, l, r, wait); err != nil {
		return err
	}
	return g.deleteConfigurations(ctx, l, r, wait)
}

// disconnect removes both sides' gateways of the peering and the public keys: every
// GatewayClient, GatewayServer and PublicKey labelled with the peer's id, wherever it is (the
// manual flow's, an earlier skeinctl's), and says which objects of the peering's namespace it
// leaves alone because they are not labelled for this peer.
func (g *globals) disconnect(ctx context.Context, l, r *side, wait bool) error {
	for _, s := range []*side{l, r} {
		byPeer := client.MatchingLabels{netv1alpha1.RemoteClusterIDLabel: s.peer.id}
		var clients netv1alpha1.GatewayClientList
		var servers netv1alpha1.GatewayServerList
		var keys netv1alpha1.PublicKeyList
		for _, list := range []client.ObjectList{&clients, &servers, &keys} {
			if err := s.c.List(ctx, list, byPeer); err != nil {
				return fmt.Errorf("(%s) %w", s.label, err)
			}
		}
		for i := range clients.Items {
			if err := deleteAndWait(ctx, s.c, &clients.Items[i], wait); err != nil {
				return fmt.Errorf("(%s) %w", s.label, err)
			}
			g.info(s, "Gateway client correctly deleted")
		}
		for i := range servers.Items {
			if err := deleteAndWait(ctx, s.c, &servers.Items[i], wait); err != nil {
				return fmt.Errorf("(%s) %w", s.label, err)
			}
			g.info(s, "Gateway server correctly deleted")
		}
		for i := range keys.Items {
			if err := deleteAndWait(ctx, s.c, &keys.Items[i], wait); err != nil {
				return fmt.Errorf("(%s) %w", s.label, err)
			}
		}
		if len(clients.Items)+len(servers.Items)+len(keys.Items) == 0 {
			g.info(s, "No gateway or public key of cluster %s found", s.peer.id)
		}
		if err := g.leftAlone(ctx, s, &netv1alpha1.GatewayClientList{}, &netv1alpha1.GatewayServerList{}, &netv1alpha1.PublicKeyList{}); err != nil {
			return err
		}
	}
	return g.removeServiceReaders(ctx, l, r)
}

// leftAlone reports the objects of these kinds in the peering's namespace that are not
// labelled for the peer (someone else's, or made by hand without the label): skeinctl does not
// delete them.
func (g *globals) leftAlone(ctx context.Context, s *side, lists ...client.ObjectList) error {
	for _, list := range lists {
		if err := s.c.List(ctx, list, client.InNamespace(s.ns)); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return fmt.Errorf("(%s) %w", s.label, err)
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return err
		}
		for _, it := range items {
			o, ok := it.(client.Object)
			if !ok || o.GetLabels()[netv1alpha1.RemoteClusterIDLabel] == s.peer.id {
				continue
			}
			kind := strings.TrimSuffix(fmt.Sprintf("%T", list), "List")
			kind = kind[strings.LastIndex(kind, ".")+1:]
			g.info(s, "Left alone: %s %s/%s (not labelled %s=%s)", kind, o.GetNamespace(), o.GetName(), netv1alpha1.RemoteClusterIDLabel, s.peer.id)
		}
	}
	return nil
}

// deleteConfigurations removes both sides' Configurations of each other, wherever they are.
func (g *globals) deleteConfigurations(ctx context.Context, l, r *side, wait bool) error {
	for _, s := range []*side{l, r} {
		var confs netv1alpha1.ConfigurationList
		if err := s.c.List(ctx, &confs, client.MatchingLabels{netv1alpha1.RemoteClusterIDLabel: s.peer.id}); err != nil {
			return fmt.Errorf("(%s) %w", s.label, err)
		}
		for i := range confs.Items {
			if err := deleteAndWait(ctx, s.c, &confs.Items[i], wait); err != nil {
				return fmt.Errorf("(%s) %w", s.label, err)
			}
		}
		if len(confs.Items) == 0 {
			g.info(s, "No network configuration of cluster %s found", s.peer.id)
		} else {
			g.info(s, "Network configuration correctly deleted")
		}
		if err := g.leftAlone(ctx, s, &netv1alpha1.ConfigurationList{}); err != nil {
			return err
		}
	}
	return nil
}

func deleteAndWait(ctx context.Context, c client.Client, obj client.Object, wait bool) error {
	if err := c.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
	}
	if !wait {
		return nil
	}
	return waitFor(ctx, func() (bool, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// ensureNamespace creates the peering's namespace, labelled with the peer's id, or checks that
// an existing one is not labelled for another peer.
func ensureNamespace(ctx context.Context, c client.Client, name, peerID string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		netv1alpha1.RemoteClusterIDLabel: peerID, "app.kubernetes.io/managed-by": "skeinctl"}}}
	err := c.Create(ctx, ns)
	if apierrors.IsAlreadyExists(err) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(ns), ns); err != nil {
			return err
		}
		if got := ns.Labels[netv1alpha1.RemoteClusterIDLabel]; got != "" && got != peerID {
			return fmt.Errorf("namespace %s is labelled for the peering with cluster %s, not %s: refusing to use it", name, got, peerID)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}

// waitFor polls ok until it reports true, fails, or ctx ends.
func waitFor(ctx context.Context, ok func() (bool, error)) error {
	for {
		done, err := ok()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

type connectOpts struct {
	serviceType, lbIP string
	port, nodePort    int32
	mtu               int32
	// The templates' names and namespaces (default: the chart's, in each side's install
	// namespace).
	serverTemplate, serverTemplateNS, clientTemplate, clientTemplateNS string
	// What the client dials instead of the server's own status.endpoint (a NAT, a load
	// balancer's public name).
	clientAddresses []string
	clientPort      int32
	// Which of --mtu, --server-service-type and --server-port were given: the others come
	// from the clusters' published gateway defaults (the chart's peering.networking.gateway).
	mtuSet, serviceTypeSet, portSet bool
}

// clusterDefaults fills what the flags did not give from the clusters' published gateway
// defaults: the server's Service type and port from the remote cluster (it runs the server),
// the MTU from both, which must agree.
func (c *connectOpts) clusterDefaults(l, r *side) error {
	if !c.mtuSet {
		lm, rm := l.net.Gateway.MTU, r.net.Gateway.MTU
		switch {
		case lm != 0 && rm != 0 && lm != rm:
			return fmt.Errorf("the clusters' default tunnel MTUs differ (peering.networking.gateway.mtu: %d here, %d in the remote cluster): pass --mtu", lm, rm)
		case lm != 0:
			c.mtu = lm
		case rm != 0:
			c.mtu = rm
		}
	}
	if d := r.net.Gateway; !c.serviceTypeSet && d.ServerServiceType != "" {
		c.serviceType = d.ServerServiceType
	}
	if d := r.net.Gateway; !c.portSet && d.ServerPort != 0 {
		c.port = d.ServerPort
	}
	return nil
}

// checkClientEndpoint checks --client-address and --client-port: IP addresses or DNS names,
// a port in range.
// dnsName is the DNS-name half of the API's Address validation.
var dnsName = regexp.MustCompile(`^([a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?[.])*[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$`)

func checkClientEndpoint(addresses []string, port int32) error {
	for _, a := range addresses {
		a = strings.TrimSpace(a)
		if _, err := netip.ParseAddr(a); err == nil {
			continue
		}
		// As the API's Address type says: a DNS name's last label starts with a letter, so
		// 10.0.0.256 or 123 are refused here rather than by the API server after the
		// remote cluster's GatewayServer was made.
		if errs := validation.IsDNS1123Subdomain(a); len(errs) > 0 || !dnsName.MatchString(a) {
			return fmt.Errorf("--client-address %q: want an IP address or a DNS name such as gw.example.com", a)
		}
	}
	if port != 0 && (port < 1 || port > 65535) {
		return fmt.Errorf("--client-port %d: want 1-65535 (or 0: the server's own port)", port)
	}
	return nil
}

func connectCmd(g *globals, o *networkOpts) *cobra.Command {
	c := &connectOpts{}
	so := &servicesOpts{}
	cmd := &cobra.Command{
		Use:   "connect",
		Short: "Connect this cluster (client) to the remote cluster (server) through a tunnel",
		Long: `Initialise the network if needed, create a GatewayServer in the remote cluster and a
GatewayClient here pointing at it, and exchange the gateways' public keys. With --wait, wait
until the gateway pods are ready and the Connection is established on both sides. Then each
cluster gets a read-only services reader in the other, so that each imports the services the
other exports (docs/services.md; --skip-services leaves that out). Running it again changes
nothing of the tunnel; it issues new services tokens.`,
		Example: `  skeinctl network connect --kubeconfig PATH_TO_CLUSTER_1_KUBECONFIG --remote-kubeconfig PATH_TO_CLUSTER_2_KUBECONFIG --server-service-type NodePort --wait`,
		Args:    cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			c.mtuSet, c.serviceTypeSet, c.portSet = cmd.Flags().Changed("mtu"), cmd.Flags().Changed("server-service-type"), cmd.Flags().Changed("server-port")
			if err := checkMTU(c.mtu); err != nil {
				return err
			}
			if err := checkClientEndpoint(c.clientAddresses, c.clientPort); err != nil {
				return err
			}
			if c.nodePort != 0 && (c.nodePort < 30000 || c.nodePort > 32767) {
				return fmt.Errorf("--node-port %d: want 30000-32767 (the default node port range), or 0 to let Kubernetes choose", c.nodePort)
			}
			return checkServiceType("--server-service-type", c.serviceType)
		},
		RunE: g.onPair(o, "", func(ctx context.Context, l, r *side) error {
			if err := g.connect(ctx, l, r, c, o.wait); err != nil || so.skip {
				return err
			}
			return g.exchangeServiceReaders(ctx, l, r, so, false)
		}),
	}
	so.flags(cmd)
	cmd.Flags().BoolVar(&so.skip, "skip-services", false, "do not let the clusters read each other's exported services (multi-cluster services: ServiceExport/ServiceImport)")
	cmd.Flags().StringVar(&c.serviceType, "server-service-type", "LoadBalancer", "type of the gateway server's Service: NodePort, LoadBalancer or ClusterIP; when not given, the remote cluster's peering.networking.gateway.server.service.type comes before this default")
	cmd.Flags().Int32Var(&c.port, "server-port", netv1alpha1.DefaultPort, "port of the gateway server's Service; when not given, the remote cluster's peering.networking.gateway.server.service.port comes before this default")
	cmd.Flags().Int32Var(&c.nodePort, "node-port", 0, "force this node port; 0 lets Kubernetes choose")
	cmd.Flags().StringVar(&c.lbIP, "load-balancer-ip", "", "ask the load balancer for this IP; empty lets it choose")
	cmd.Flags().Int32Var(&c.mtu, "mtu", netv1alpha1.DefaultMTU, "MTU of the tunnel, the same on both sides; when not given, the clusters' peering.networking.gateway.mtu comes before this default")
	cmd.Flags().StringSliceVar(&c.clientAddresses, "client-address", nil,
		"address(es) the client dials instead of the server's own (status.endpoint.addresses): a NAT's or load balancer's public IP or DNS name; tried in order")
	cmd.Flags().Int32Var(&c.clientPort, "client-port", 0, "port the client dials instead of the server's own (status.endpoint.port); 0 keeps the server's")
	cmd.Flags().StringVar(&c.serverTemplate, "server-template-name", "wireguard-server", "WgGatewayServerTemplate of the gateway server, in the remote cluster")
	cmd.Flags().StringVar(&c.serverTemplateNS, "server-template-namespace", "", "namespace of the server template (default: --remote-liqo-namespace)")
	cmd.Flags().StringVar(&c.clientTemplate, "client-template-name", "wireguard-client", "WgGatewayClientTemplate of the gateway client, in the local cluster")
	cmd.Flags().StringVar(&c.clientTemplateNS, "client-template-namespace", "", "namespace of the client template (default: --liqo-namespace)")
	return cmd
}

// phases times the steps of a connect, for the breakdown --wait prints at the end.
type phases struct {
	start, last time.Time
	steps       []string
}

func newPhases() *phases { now := time.Now(); return &phases{start: now, last: now} }

// done ends the step called what.
func (p *phases) done(what string) {
	now := time.Now()
	p.steps = append(p.steps, fmt.Sprintf("%s %.1fs", what, now.Sub(p.last).Seconds()))
	p.last = now
}

func (p *phases) String() string {
	return fmt.Sprintf("%.1fs (%s)", p.last.Sub(p.start).Seconds(), strings.Join(p.steps, ", "))
}

func (g *globals) connect(ctx context.Context, l, r *side, c *connectOpts, wait bool) error {
	took := newPhases()
	quiet := &globals{kubeconfig: g.kubeconfig, context: g.context, liqoNamespace: g.liqoNamespace, namespace: g.namespace,
		timeout: g.timeout, out: io.Discard, err: g.err}
	if err := quiet.init(ctx, l, r, true); err != nil {
		return err
	}
	if err := c.clusterDefaults(l, r); err != nil {
		return err
	}
	g.info(l, "Network correctly initialized")
	g.info(r, "Network correctly initialized")
	took.done("network init")

	// The server, in the remote cluster, for this (local) cluster: the peering's own if there
	// is one (labelled with our id in the remote's namespace of the peering), else a new one.
	srvNS := r.ns
	srvName, err := labelledName(ctx, r.c, &netv1alpha1.GatewayServerList{}, "GatewayServer", r.ns, l.id, "gw-"+r.objectName())
	if err != nil {
		return fmt.Errorf("(remote) %w", err)
	}
	gs := &netv1alpha1.GatewayServer{}
	err = r.c.Get(ctx, client.ObjectKey{Namespace: srvNS, Name: srvName}, gs)
	switch {
	case apierrors.IsNotFound(err):
		gs = &netv1alpha1.GatewayServer{
			ObjectMeta: metav1.ObjectMeta{Name: srvName, Namespace: srvNS, Labels: map[string]string{netv1alpha1.RemoteClusterIDLabel: l.id}},
			Spec: netv1alpha1.GatewayServerSpec{
				Endpoint: netv1alpha1.ServerEndpoint{Port: c.port, ServiceType: netv1alpha1.ServiceType(c.serviceType)}, MTU: c.mtu,
				ServerTemplateRef: netv1alpha1.TemplateRef{APIVersion: netv1alpha1.SchemeGroupVersion.String(), Kind: "WgGatewayServerTemplate", Name: c.serverTemplate, Namespace: cmp.Or(c.serverTemplateNS, r.liqo)},
			},
		}
		if c.nodePort != 0 {
			gs.Spec.Endpoint.NodePort = &c.nodePort
		}
		if c.lbIP != "" {
			gs.Spec.Endpoint.LoadBalancerIP = &c.lbIP
		}
		if err := createOrGet(ctx, r.c, gs); err != nil {
			return fmt.Errorf("(remote) create gatewayserver %s/%s: %w", srvNS, srvName, err)
		}
		if err := belongs("gatewayserver", gs, l.id); err != nil {
			return fmt.Errorf("(remote) %w", err) // another connect's, for another peer
		}
		g.info(r, "Gateway server correctly set up")
	case err != nil:
		return fmt.Errorf("(remote) %w", err)
	case belongs("gatewayserver", gs, l.id) != nil:
		return fmt.Errorf("(remote) %w", belongs("gatewayserver", gs, l.id))
	case gs.Spec.MTU != c.mtu:
		return fmt.Errorf("(remote) gatewayserver %s/%s has MTU %d, not %d: the MTU must be the same on both sides (disconnect first to change it)", srvNS, srvName, gs.Spec.MTU, c.mtu)
	default:
		// A connect run again with other service flags (a LoadBalancer that never got an
		// address, now NodePort) changes the existing server's Service; without them the
		// server stays as it is.
		want := gs.Spec.Endpoint
		if c.serviceTypeSet {
			want.ServiceType = netv1alpha1.ServiceType(c.serviceType)
		}
		if c.portSet {
			want.Port = c.port
		}
		if c.nodePort != 0 {
			want.NodePort = &c.nodePort
		} else if c.serviceTypeSet && want.ServiceType == netv1alpha1.ServiceTypeClusterIP {
			want.NodePort = nil
		}
		if c.lbIP != "" {
			want.LoadBalancerIP = &c.lbIP
		} else if c.serviceTypeSet && want.ServiceType != netv1alpha1.ServiceTypeLoadBalancer {
			want.LoadBalancerIP = nil
		}
		if !reflect.DeepEqual(want, gs.Spec.Endpoint) {
			old := gs.Spec.Endpoint
			gs.Spec.Endpoint = want
			if err := r.c.Update(ctx, gs); err != nil {
				return fmt.Errorf("(remote) update gatewayserver %s/%s: %w", srvNS, srvName, err)
			}
			g.info(r, "Gateway server updated: service %s port %d (was %s port %d)", want.ServiceType, want.Port, old.ServiceType, old.Port)
			break
		}
		g.info(r, "Gateway server already set up")
	}
	if wait {
		if err := g.waitGatewayPod(ctx, r, srvNS, srvName); err != nil {
			return err
		}
		took.done("server and its pod")
	}
	if err := waitFor(ctx, func() (bool, error) {
		err := r.c.Get(ctx, client.ObjectKeyFromObject(gs), gs)
		return err == nil && gs.Status.Endpoint != nil && len(gs.Status.Endpoint.Addresses) > 0, err
	}); err != nil {
		return fmt.Errorf("(remote) waiting for gatewayserver %s/%s to get an endpoint (its Service, a load balancer, a ready gateway pod)%s: %w",
			srvNS, srvName, readyNote(gs.Status.Conditions), err)
	}
	g.info(r, "Gateway server Service created successfully")
	took.done("server endpoint")

	// The client, here, for the remote cluster.
	cliNS := l.ns
	cliName, err := labelledName(ctx, l.c, &netv1alpha1.GatewayClientList{}, "GatewayClient", l.ns, r.id, "gw-"+l.objectName())
	if err != nil {
		return fmt.Errorf("(local) %w", err)
	}
	gc := &netv1alpha1.GatewayClient{}
	err = l.c.Get(ctx, client.ObjectKey{Namespace: cliNS, Name: cliName}, gc)
	endpoint := netv1alpha1.Endpoint{Addresses: gs.Status.Endpoint.Addresses, Port: gs.Status.Endpoint.Port, Protocol: "UDP"}
	if len(c.clientAddresses) > 0 {
		endpoint.Addresses = nil
		for _, a := range c.clientAddresses {
			endpoint.Addresses = append(endpoint.Addresses, netv1alpha1.Address(strings.TrimSpace(a)))
		}
	}
	if c.clientPort != 0 {
		endpoint.Port = c.clientPort
	}
	override := len(c.clientAddresses) > 0 || c.clientPort != 0
	switch {
	case apierrors.IsNotFound(err):
		gc = &netv1alpha1.GatewayClient{
			ObjectMeta: metav1.ObjectMeta{Name: cliName, Namespace: cliNS, Labels: map[string]string{netv1alpha1.RemoteClusterIDLabel: r.id}},
			Spec: netv1alpha1.GatewayClientSpec{Endpoint: endpoint, MTU: c.mtu,
				ClientTemplateRef: netv1alpha1.TemplateRef{APIVersion: netv1alpha1.SchemeGroupVersion.String(), Kind: "WgGatewayClientTemplate", Name: c.clientTemplate, Namespace: cmp.Or(c.clientTemplateNS, l.liqo)}},
		}
		if override {
			gc.Annotations = map[string]string{EndpointOverrideAnnotation: "true"}
		}
		if err := createOrGet(ctx, l.c, gc); err != nil {
			return fmt.Errorf("(local) create gatewayclient %s/%s: %w", cliNS, cliName, err)
		}
		if err := belongs("gatewayclient", gc, r.id); err != nil {
			return fmt.Errorf("(local) %w", err)
		}
		g.info(l, "Gateway client correctly set up")
	case err != nil:
		return fmt.Errorf("(local) %w", err)
	case belongs("gatewayclient", gc, r.id) != nil:
		return fmt.Errorf("(local) %w", belongs("gatewayclient", gc, r.id))
	case gc.Spec.MTU != c.mtu:
		return fmt.Errorf("(local) gatewayclient %s/%s has MTU %d, not %d: the MTU must be the same on both sides (disconnect first to change it)", cliNS, cliName, gc.Spec.MTU, c.mtu)
	case !override && gc.Annotations[EndpointOverrideAnnotation] == "true" && !equalEndpoints(gc.Spec.Endpoint, endpoint):
		// An earlier connect set where the client dials; a connect without the flags keeps it.
		g.info(l, "Gateway client already set up; it keeps dialing %v port %d as an earlier --client-address/--client-port said (pass them again to change it)",
			gc.Spec.Endpoint.Addresses, gc.Spec.Endpoint.Port)
	default:
		if !equalEndpoints(gc.Spec.Endpoint, endpoint) || (override && gc.Annotations[EndpointOverrideAnnotation] != "true") {
			gc.Spec.Endpoint = endpoint
			if override {
				if gc.Annotations == nil {
					gc.Annotations = map[string]string{}
				}
				gc.Annotations[EndpointOverrideAnnotation] = "true"
			}
			if err := l.c.Update(ctx, gc); err != nil {
				return fmt.Errorf("(local) update gatewayclient %s/%s: %w", cliNS, cliName, err)
			}
		}
		g.info(l, "Gateway client already set up")
	}
	// Keys: the server's to the local cluster, the client's to the remote one, while the
	// client's pod starts: a client that handshakes before the server knows its key is
	// ignored and tries again only after WireGuard's 5 s.
	srvSecret, err := gatewaySecret(ctx, r, gs.Namespace, func() *netv1alpha1.ObjectRef {
		r.c.Get(ctx, client.ObjectKeyFromObject(gs), gs)
		return gs.Status.SecretRef
	})
	if err != nil {
		return err
	}
	g.info(r, "Gateway server Secret created successfully")
	if err := applyPublicKey(ctx, l, srvSecret); err != nil {
		return err
	}
	g.info(l, "Public key correctly created")
	cliSecret, err := gatewaySecret(ctx, l, gc.Namespace, func() *netv1alpha1.ObjectRef {
		l.c.Get(ctx, client.ObjectKeyFromObject(gc), gc)
		return gc.Status.SecretRef
	})
	if err != nil {
		return err
	}
	g.info(l, "Gateway client Secret created successfully")
	if err := applyPublicKey(ctx, r, cliSecret); err != nil {
		return err
	}
	g.info(r, "Public key correctly created")
	if !wait {
		return nil
	}
	took.done("client and keys")
	if err := g.waitGatewayPod(ctx, l, cliNS, cliName); err != nil {
		return err
	}
	took.done("client pod")
	for _, s := range []struct {
		sd       *side
		ns, name string
	}{{r, srvNS, srvName}, {l, cliNS, cliName}} {
		if err := waitFor(ctx, func() (bool, error) {
			err := s.sd.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: s.name}, &netv1alpha1.Connection{})
			return err == nil, client.IgnoreNotFound(err)
		}); err != nil {
			return fmt.Errorf("(%s) waiting for the Connection (created by the gateway): %w", s.sd.label, err)
		}
		g.info(s.sd, "Connection created successfully")
	}
	took.done("connections created")
	for _, s := range []struct {
		sd       *side
		ns, name string
	}{{l, cliNS, cliName}, {r, srvNS, srvName}} {
		if err := waitFor(ctx, func() (bool, error) {
			conn := &netv1alpha1.Connection{}
			err := s.sd.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: s.name}, conn)
			return err == nil && conn.Status.Value == netv1alpha1.Connected, err
		}); err != nil {
			conn := &netv1alpha1.Connection{}
			_ = s.sd.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: s.name}, conn)
			return fmt.Errorf("(%s) waiting for Connection %s/%s to be established (status %q%s; check the gateway's logs): %w",
				s.sd.label, s.ns, s.name, conn.Status.Value, readyNote(conn.Status.Conditions), err)
		}
		g.info(s.sd, "Connection is established")
		took.done(s.sd.label + " connected")
	}
	fmt.Fprintf(g.out, "INFO   Connected in %s\n", took)
	return nil
}

func equalEndpoints(a, b netv1alpha1.Endpoint) bool {
	if a.Port != b.Port || len(a.Addresses) != len(b.Addresses) {
		return false
	}
	for i := range a.Addresses {
		if a.Addresses[i] != b.Addresses[i] {
			return false
		}
	}
	return true
}

// waitGatewayPod waits for the gateway's Deployment to have a ready pod and names it.
func (g *globals) waitGatewayPod(ctx context.Context, s *side, ns, name string) error {
	var ready string
	err := waitFor(ctx, func() (bool, error) {
		var pods corev1.PodList
		if err := s.c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"networking.liqo.io/gateway": name}); err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					ready = p.Name
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("(%s) waiting for a ready pod of gateway %s/%s: %w", s.label, ns, name, err)
	}
	g.info(s, "Gateway pod %s is ready", ready)
	return nil
}

// gatewaySecret waits for a gateway's key Secret and returns it.
func gatewaySecret(ctx context.Context, s *side, ns string, ref func() *netv1alpha1.ObjectRef) (*corev1.Secret, error) {
	secret := &corev1.Secret{}
	err := waitFor(ctx, func() (bool, error) {
		r := ref()
		if r == nil {
			return false, nil
		}
		err := s.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: r.Name}, secret)
		return err == nil, client.IgnoreNotFound(err)
	})
	if err != nil {
		return nil, fmt.Errorf("(%s) waiting for the gateway's key Secret (is skein-controller running?): %w", s.label, err)
	}
	return secret, nil
}

// applyPublicKey creates or updates, in s, the PublicKey of the peer's gateway whose key pair
// is secret: the peering's own if there is one (labelled with the peer's id in s.ns), else a
// new one.
func applyPublicKey(ctx context.Context, s *side, secret *corev1.Secret) error {
	pk, err := gateway.PeerPublicKey(secret, s.peer.id, s.ns)
	if err != nil {
		return fmt.Errorf("(%s) %w", s.label, err)
	}
	if pk.Name, err = labelledName(ctx, s.c, &netv1alpha1.PublicKeyList{}, "PublicKey", s.ns, s.peer.id, s.objectName()); err != nil {
		return fmt.Errorf("(%s) %w", s.label, err)
	}
	existing := &netv1alpha1.PublicKey{}
	err = s.c.Get(ctx, client.ObjectKeyFromObject(pk), existing)
	switch {
	case apierrors.IsNotFound(err):
		if err = createOrGet(ctx, s.c, pk); err == nil {
			err = belongs("publickey", pk, s.peer.id)
		}
	case err != nil:
	case belongs("publickey", existing, s.peer.id) != nil:
		err = belongs("publickey", existing, s.peer.id)
	case existing.Spec != pk.Spec:
		existing.Spec = pk.Spec
		err = s.c.Update(ctx, existing)
	}
	if err != nil {
		return fmt.Errorf("(%s) publickey %s/%s: %w", s.label, s.ns, pk.Name, err)
	}
	return nil
}

// createOrGet creates obj, or, when another skeinctl created it first (two connects run at
// once), reads what that one made into obj: concurrent runs converge instead of failing with
// "already exists".
func createOrGet(ctx context.Context, c client.Client, obj client.Object) error {
	err := c.Create(ctx, obj)
	if apierrors.IsAlreadyExists(err) {
		return c.Get(ctx, client.ObjectKeyFromObject(obj), obj)
	}
	return err
}

// labelledName is the name of the one object of list's kind in ns labelled for the peer id (a
// peering's own object, whatever its name), or def when there is none; more than one is an
// error, for the user to sort out.
func labelledName(ctx context.Context, c client.Client, list client.ObjectList, kind, ns, id, def string) (string, error) {
	if err := c.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{netv1alpha1.RemoteClusterIDLabel: id}); err != nil {
		return "", err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return "", err
	}
	switch len(items) {
	case 0:
		return def, nil
	case 1:
		if o, ok := items[0].(client.Object); ok {
			return o.GetName(), nil
		}
		return "", fmt.Errorf("%s list holds a %T", kind, items[0])
	}
	return "", fmt.Errorf("%d %ss in %s for cluster %s: there must be one", len(items), kind, ns, id)
}

// EndpointOverrideAnnotation on a GatewayClient says that `network connect --client-address` or
// `--client-port` chose where it dials: a later connect without them keeps it.
const EndpointOverrideAnnotation = "skein.dev/client-endpoint-override"
