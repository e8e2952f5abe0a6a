package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/identity"
)

// side is one cluster of a peering as skeinctl works on it.
type side struct {
	label string // "local" or "remote"
	c     client.Client
	id    string
	net   *identity.Network
}

// tenantNamespace is where a cluster keeps the objects of its peering with the cluster id.
func tenantNamespace(peerID string) string { return "liqo-tenant-" + identity.ClusterName(peerID) }

type networkOpts struct {
	remoteKubeconfig string
	wait             bool
	yes              bool
}

func (g *globals) info(s *side, format string, a ...any) {
	fmt.Fprintf(g.out, "INFO   (%s) %s\n", s.label, fmt.Sprintf(format, a...))
}

func networkCmd(g *globals) *cobra.Command {
	o := &networkOpts{}
	cmd := &cobra.Command{Use: "network", Short: "Set up and tear down the network between this cluster and a peer"}
	cmd.PersistentFlags().StringVar(&o.remoteKubeconfig, "remote-kubeconfig", "", "kubeconfig of the remote cluster (required)")
	cmd.PersistentFlags().BoolVar(&o.wait, "wait", false, "wait until what was set up is ready")

	initCmd := &cobra.Command{
		Use:   "init",
		Short: "Exchange the two clusters' network configurations",
		Long: `Read both clusters' identities and networks and apply, in each, the other's Configuration
(in namespace liqo-tenant-<peer name>), so that each cluster decides how it sees the other's CIDRs.
Running it again changes nothing.`,
		Example: `  skeinctl network init --kubeconfig PATH_TO_CLUSTER_1_KUBECONFIG --remote-kubeconfig PATH_TO_CLUSTER_2_KUBECONFIG --wait`,
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(c.Context(), g.timeout)
			defer cancel()
			l, r, err := g.sides(ctx, o)
			if err != nil {
				return err
			}
			return g.init(ctx, l, r, o.wait)
		},
	}
	resetCmd := &cobra.Command{
		Use:   "reset",
		Short: "Remove everything skein set up between the two clusters",
		Long: `Delete both clusters' gateways of the peering and their Configurations of each other. This
is destructive: skeinctl asks for confirmation on a terminal; pass --yes to skip the question.`,
		Example: `  skeinctl network reset --kubeconfig PATH_TO_CLUSTER_1_KUBECONFIG --remote-kubeconfig PATH_TO_CLUSTER_2_KUBECONFIG --wait`,
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := g.confirm("network reset", o.yes); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(c.Context(), g.timeout)
			defer cancel()
			l, r, err := g.sides(ctx, o)
			if err != nil {
				return err
			}
			return g.reset(ctx, l, r, o.wait)
		},
	}
	resetCmd.Flags().BoolVarP(&o.yes, "yes", "y", false, "do not ask for confirmation")
	cmd.AddCommand(initCmd, resetCmd)
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
	if o.remoteKubeconfig == "" {
		return nil, nil, fmt.Errorf("--remote-kubeconfig is required: the kubeconfig of the peer cluster")
	}
	l, r := &side{label: "local"}, &side{label: "remote"}
	for _, s := range []struct {
		sd *side
		kc string
	}{{l, g.kubeconfig}, {r, o.remoteKubeconfig}} {
		c, err := g.client(ctx, s.kc)
		if err != nil {
			return nil, nil, fmt.Errorf("(%s) %w", s.sd.label, err)
		}
		s.sd.c = c
		if s.sd.id, err = identity.ReadClusterID(ctx, c, g.namespace); err != nil {
			return nil, nil, fmt.Errorf("(%s) %w", s.sd.label, err)
		}
		g.info(s.sd, "Cluster identity correctly retrieved")
	}
	if l.id == r.id {
		return nil, nil, fmt.Errorf("both kubeconfigs reach cluster %s: a cluster cannot be peered with itself", l.id)
	}
	return l, r, nil
}

func (g *globals) init(ctx context.Context, l, r *side, wait bool) error {
	var err error
	for _, s := range []*side{l, r} {
		if s.net, err = identity.ReadNetwork(ctx, s.c, g.namespace); err != nil {
			return fmt.Errorf("(%s) %w", s.label, err)
		}
		g.info(s, "Network configuration correctly retrieved")
	}
	for _, s := range []*side{l, r} {
		peer := r
		if s == r {
			peer = l
		}
		if err := ensureNamespace(ctx, s.c, tenantNamespace(peer.id)); err != nil {
			return fmt.Errorf("(%s) %w", s.label, err)
		}
		g.info(s, "Network configuration correctly set up")
	}
	for _, s := range []*side{l, r} {
		peer := r
		if s == r {
			peer = l
		}
		conf := &netv1alpha1.Configuration{
			ObjectMeta: metav1.ObjectMeta{Name: identity.ClusterName(peer.id), Namespace: tenantNamespace(peer.id),
				Labels: map[string]string{netv1alpha1.RemoteClusterIDLabel: peer.id}},
			Spec: netv1alpha1.ConfigurationSpec{Remote: netv1alpha1.ClusterConfig{CIDR: netv1alpha1.ClusterConfigCIDR{
				Pod: netv1alpha1.CIDR(peer.net.PodCIDRs[0].String()), External: netv1alpha1.CIDR(peer.net.ExternalCIDR.String())}}},
		}
		existing := &netv1alpha1.Configuration{}
		err := s.c.Get(ctx, client.ObjectKeyFromObject(conf), existing)
		switch {
		case apierrors.IsNotFound(err):
			if err := s.c.Create(ctx, conf); err != nil {
				return fmt.Errorf("(%s) create configuration %s/%s: %w", s.label, conf.Namespace, conf.Name, err)
			}
			g.info(s, "Configuration applied successfully")
		case err != nil:
			return fmt.Errorf("(%s) %w", s.label, err)
		case existing.Spec != conf.Spec:
			existing.Spec = conf.Spec
			if err := s.c.Update(ctx, existing); err != nil {
				return fmt.Errorf("(%s) update configuration %s/%s: %w", s.label, conf.Namespace, conf.Name, err)
			}
			g.info(s, "Configuration updated successfully")
		default:
			g.info(s, "Configuration already applied")
		}
	}
	if !wait {
		return nil
	}
	for _, s := range []*side{l, r} {
		peer := r
		if s == r {
			peer = l
		}
		key := client.ObjectKey{Namespace: tenantNamespace(peer.id), Name: identity.ClusterName(peer.id)}
		if err := waitFor(ctx, func() (bool, error) {
			c := &netv1alpha1.Configuration{}
			if err := s.c.Get(ctx, key, c); err != nil {
				return false, err
			}
			return c.Status.Remote != nil, nil
		}); err != nil {
			return fmt.Errorf("(%s) waiting for configuration %s to be mapped (is skein-controller running?): %w", s.label, key, err)
		}
	}
	return nil
}

func (g *globals) reset(ctx context.Context, l, r *side, wait bool) error {
	for _, s := range []*side{l, r} {
		peer := r
		if s == r {
			peer = l
		}
		ns := tenantNamespace(peer.id)
		var clients netv1alpha1.GatewayClientList
		var servers netv1alpha1.GatewayServerList
		if err := s.c.List(ctx, &clients, client.InNamespace(ns)); err != nil {
			return fmt.Errorf("(%s) %w", s.label, err)
		}
		if err := s.c.List(ctx, &servers, client.InNamespace(ns)); err != nil {
			return fmt.Errorf("(%s) %w", s.label, err)
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
	}
	for _, s := range []*side{l, r} {
		peer := r
		if s == r {
			peer = l
		}
		var confs netv1alpha1.ConfigurationList
		if err := s.c.List(ctx, &confs, client.InNamespace(tenantNamespace(peer.id)), client.MatchingLabels{netv1alpha1.RemoteClusterIDLabel: peer.id}); err != nil {
			return fmt.Errorf("(%s) %w", s.label, err)
		}
		for i := range confs.Items {
			if err := deleteAndWait(ctx, s.c, &confs.Items[i], wait); err != nil {
				return fmt.Errorf("(%s) %w", s.label, err)
			}
		}
		g.info(s, "Network configuration correctly deleted")
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

func ensureNamespace(ctx context.Context, c client.Client, name string) error {
	err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
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
