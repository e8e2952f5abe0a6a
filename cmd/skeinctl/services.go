package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/controller"
	"github.com/skein-net/skein/control/identity"
)

// Multi-cluster services: connect gives each cluster a read-only identity in the other (the
// services reader, control/identity) and stores its token where the other's skein-controller
// reads it; disconnect removes both; rotate-credentials issues new ones and ends the old.

// servicesOpts are connect's flags for multi-cluster services.
type servicesOpts struct {
	skip bool
	// How each cluster's controller reaches the other's API server (default: the server of
	// the kubeconfig skeinctl uses for that cluster).
	apiServerURL, remoteAPIServerURL string
	ttl                              time.Duration
}

func (o *servicesOpts) flags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.apiServerURL, "api-server-url", "", "URL of this cluster's API server as the remote cluster's skein-controller reaches it, to import the services this cluster exports (default: the server of the local kubeconfig)")
	cmd.Flags().StringVar(&o.remoteAPIServerURL, "remote-api-server-url", "", "URL of the remote cluster's API server as this cluster's skein-controller reaches it (default: the server of the remote kubeconfig)")
	cmd.Flags().DurationVar(&o.ttl, "services-token-ttl", identity.DefaultServiceReaderTTL, "lifetime of the tokens each cluster's skein-controller reads the other's exported services with: at least 10m (the API server's minimum), which the API server may shorten; each controller renews its token when two thirds of it have passed, and skeinctl network rotate-credentials issues new ones (after a lapse, or to end the old ones)")
}

// credentialsName is the Secret in a cluster holding its reader credentials for peer peerID.
func credentialsName(peerID string) string { return "skein-services-" + identity.PeerName(peerID) }

// mcsInstalled reports whether the Multi-Cluster Services API is served by the cluster.
func mcsInstalled(ctx context.Context, c client.Client) (bool, error) {
	err := c.List(ctx, &mcsv1a1.ServiceExportList{}, client.Limit(1))
	if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// errLoopback: a kubeconfig's server is a loopback address (a kind cluster, a tunnel to the API
// server); the peer's controller cannot use it.
var errLoopback = errors.New("loopback API server address")

// apiURL is how s's API server is given to its peer's controller.
func apiURL(s *side, override string) (string, error) {
	raw := override
	if raw == "" {
		raw = s.api.Host
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("API server URL %q: want https://HOST[:PORT][/PATH]", raw)
	}
	if override == "" {
		if ip := net.ParseIP(u.Hostname()); (ip != nil && ip.IsLoopback()) || u.Hostname() == "localhost" {
			flag := "--api-server-url"
			if s.label == "remote" {
				flag = "--remote-api-server-url"
			}
			return "", fmt.Errorf("%w: the %s kubeconfig's server %s is a loopback address the peer's skein-controller cannot reach; pass %s with one it can (skeinctl network rotate-credentials takes it too)", errLoopback, s.label, raw, flag)
		}
	}
	return u.String(), nil
}

// caData is the certificate authority s's kubeconfig trusts for its API server.
func caData(s *side) ([]byte, error) {
	switch {
	case len(s.api.CAData) > 0:
		return s.api.CAData, nil
	case s.api.CAFile != "":
		b, err := os.ReadFile(s.api.CAFile)
		if err != nil {
			return nil, fmt.Errorf("certificate authority of the %s kubeconfig: %w", s.label, err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("the %s kubeconfig names no certificate authority for %s (it trusts the system's or skips verification): the peer's skein-controller needs one", s.label, s.api.Host)
}

// exchangeServiceReaders gives each cluster's skein-controller a services reader in the other
// cluster: the reader in the other, its token in a Secret here. With renew the readers are
// made anew, ending the tokens issued before.
func (g *globals) exchangeServiceReaders(ctx context.Context, l, r *side, o *servicesOpts, renew bool) error {
	if o.ttl < 10*time.Minute {
		return fmt.Errorf("--services-token-ttl %s: at least 10m (the API server issues no shorter token)", o.ttl)
	}
	for _, s := range []*side{l, r} {
		if ok, err := mcsInstalled(ctx, s.c); err != nil {
			return fmt.Errorf("(%s) %w", s.label, err)
		} else if !ok {
			g.warn(s, "Multi-cluster services not set up: the MCS API (ServiceExport, ServiceImport) is not installed here (skein's chart installs it)")
			return nil
		}
	}
	urls := map[*side]string{}
	for _, x := range []struct {
		s        *side
		override string
	}{{l, o.apiServerURL}, {r, o.remoteAPIServerURL}} {
		u, err := apiURL(x.s, x.override)
		if errors.Is(err, errLoopback) {
			g.warn(x.s, "Multi-cluster services not set up: %s", strings.TrimPrefix(err.Error(), errLoopback.Error()+": "))
			return nil
		} else if err != nil {
			return err
		}
		urls[x.s] = u
	}
	for _, s := range []*side{l, r} {
		p := s.peer // s reads p's exports
		ca, err := caData(p)
		if err != nil {
			return err
		}
		published, err := identity.PublishedNamespace(ctx, p.c)
		if err != nil {
			return fmt.Errorf("(%s) %w", p.label, err)
		}
		tok, err := identity.GrantServiceReader(ctx, p.c, p.ns, s.id, published, o.ttl, renew)
		if err != nil {
			return fmt.Errorf("(%s) %w", p.label, err)
		}
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: credentialsName(p.id),
			Labels: map[string]string{controller.PeerCredentialsLabel: controller.PeerCredentialsServices,
				netv1alpha1.RemoteClusterIDLabel: p.id, "app.kubernetes.io/managed-by": "skeinctl"}},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{controller.PeerServerKey: []byte(urls[p]), controller.PeerCAKey: ca, controller.PeerTokenKey: []byte(tok.Token),
				controller.PeerNamespaceKey: []byte(published)}}
		var have corev1.Secret
		switch err := s.c.Get(ctx, client.ObjectKeyFromObject(secret), &have); {
		case apierrors.IsNotFound(err):
			if err := s.c.Create(ctx, secret); err != nil {
				return fmt.Errorf("(%s) create secret %s/%s: %w", s.label, secret.Namespace, secret.Name, err)
			}
		case err != nil:
			return fmt.Errorf("(%s) %w", s.label, err)
		case have.Labels[netv1alpha1.RemoteClusterIDLabel] != p.id:
			return fmt.Errorf("(%s) secret %s/%s exists and is not labelled %s=%s: skeinctl leaves it alone; delete or rename it", s.label, secret.Namespace, secret.Name, netv1alpha1.RemoteClusterIDLabel, p.id)
		default:
			have.Labels, have.Data = secret.Labels, secret.Data
			if err := s.c.Update(ctx, &have); err != nil {
				return fmt.Errorf("(%s) update secret %s/%s: %w", s.label, secret.Namespace, secret.Name, err)
			}
		}
		g.info(p, "Services reader for the remote cluster set up")
		g.info(s, "Services reader credentials stored (valid until %s)", tok.Expires.UTC().Format(time.RFC3339))
	}
	return nil
}

// removeServiceReaders undoes exchangeServiceReaders: the credentials here, the readers there.
func (g *globals) removeServiceReaders(ctx context.Context, l, r *side) error {
	for _, s := range []*side{l, r} {
		var secrets corev1.SecretList
		err := s.c.List(ctx, &secrets, client.MatchingLabels{controller.PeerCredentialsLabel: controller.PeerCredentialsServices, netv1alpha1.RemoteClusterIDLabel: s.peer.id})
		if err != nil {
			return fmt.Errorf("(%s) %w", s.label, err)
		}
		for i := range secrets.Items {
			if err := s.c.Delete(ctx, &secrets.Items[i]); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("(%s) %w", s.label, err)
			}
		}
		published, err := identity.PublishedNamespace(ctx, s.peer.c)
		if err != nil {
			return fmt.Errorf("(%s) %w", s.peer.label, err)
		}
		if err := identity.RevokeServiceReader(ctx, s.peer.c, s.peer.ns, s.id, published); err != nil {
			return fmt.Errorf("(%s) %w", s.peer.label, err)
		}
		if len(secrets.Items) > 0 {
			g.info(s, "Services reader credentials correctly deleted")
		}
	}
	return nil
}

func (g *globals) warn(s *side, format string, a ...any) {
	fmt.Fprintf(g.out, "WARN   (%s) %s\n", s.label, fmt.Sprintf(format, a...))
}

func rotateCredentialsCmd(g *globals, o *networkOpts) *cobra.Command {
	so := &servicesOpts{}
	cmd := &cobra.Command{
		Use:   "rotate-credentials",
		Short: "Renew the tokens the two clusters read each other's exported services with",
		Long: `Make each cluster's services reader in the other anew (ending every token issued to it
before) and store the new tokens where each skein-controller reads them. The controllers switch
to the new token at once; exported services stay imported throughout. The clusters must be
connected (skeinctl network connect). Also the way to give new --api-server-url or
--remote-api-server-url values.`,
		Example: `  skeinctl network rotate-credentials --kubeconfig PATH_TO_CLUSTER_1_KUBECONFIG --remote-kubeconfig PATH_TO_CLUSTER_2_KUBECONFIG`,
		Args:    cobra.NoArgs,
		RunE: g.onPair(o, "", func(ctx context.Context, l, r *side) error {
			// Only a connected pair: after a disconnect, new credentials would give back the
			// read access the disconnect took away.
			for _, s := range []*side{l, r} {
				var servers netv1alpha1.GatewayServerList
				var clients netv1alpha1.GatewayClientList
				for _, list := range []client.ObjectList{&servers, &clients} {
					if err := s.c.List(ctx, list, client.MatchingLabels{netv1alpha1.RemoteClusterIDLabel: s.peer.id}); err != nil {
						return fmt.Errorf("(%s) %w", s.label, err)
					}
				}
				if len(servers.Items)+len(clients.Items) == 0 {
					return errors.New("the clusters are not connected (no gateway of the pair): skeinctl network connect sets up the tunnel and the credentials")
				}
			}
			return g.exchangeServiceReaders(ctx, l, r, so, true)
		}),
	}
	so.flags(cmd)
	return cmd
}
