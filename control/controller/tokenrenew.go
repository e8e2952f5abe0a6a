package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/skein-net/skein/control/identity"
)

// Renewal of a peer's services reader token (issue #40). The token is short-lived (a day by
// default, identity.DefaultServiceReaderTTL); the peer lets its reader request tokens for its
// own ServiceAccount and no other (a Role in the reader's namespace there), so this cluster's
// controller requests a new one, of the same lifetime, once RenewFraction of the current
// token's lifetime has passed, and writes it into the credentials Secret. Only the peer holds
// the right to issue tokens; this cluster holds the token, so the renewal is made from here.

// DefaultTokenRenewFraction: a token is renewed when two thirds of its lifetime have passed.
const DefaultTokenRenewFraction = 2.0 / 3.0

// tokenClaims is what the renewal reads of a service account token (not verified: the peer's
// API server verifies it; the claims only say when to renew and for whom).
type tokenClaims struct {
	IssuedAt int64 `json:"iat"`
	Expiry   int64 `json:"exp"`
	K8s      struct {
		Namespace      string `json:"namespace"`
		ServiceAccount struct {
			Name string `json:"name"`
		} `json:"serviceaccount"`
	} `json:"kubernetes.io"`
}

// readTokenClaims decodes a JWT's claims.
func readTokenClaims(token string) (tokenClaims, error) {
	var c tokenClaims
	if err := identity.DecodeTokenClaims(token, &c); err != nil {
		return c, err
	}
	if c.Expiry <= c.IssuedAt || c.K8s.Namespace == "" || c.K8s.ServiceAccount.Name == "" {
		return c, errors.New("JWT claims: no service account, or no lifetime")
	}
	return c, nil
}

// renewAt is when a token issued at iat and expiring at exp is renewed.
func renewAt(c tokenClaims, fraction float64) time.Time {
	life := time.Duration(c.Expiry-c.IssuedAt) * time.Second
	return time.Unix(c.IssuedAt, 0).Add(time.Duration(float64(life) * fraction))
}

// renewToken renews x's token when it is due, and writes the new one into Secret s: true when
// it did (s then changed, and the exporter starts again with it). A token that says nothing of
// its lifetime (a static token of the manual flow) is left as it is.
func (r *ServiceImportReconciler) renewToken(ctx context.Context, x *exporter, s *corev1.Secret) (bool, error) {
	c, err := readTokenClaims(string(s.Data[PeerTokenKey]))
	if err != nil {
		return false, nil
	}
	fraction := r.RenewFraction
	if fraction <= 0 || fraction >= 1 {
		fraction = DefaultTokenRenewFraction
	}
	if time.Now().Before(renewAt(c, fraction)) {
		return false, nil
	}
	secs := c.Expiry - c.IssuedAt
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: c.K8s.Namespace, Name: c.K8s.ServiceAccount.Name}}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}
	if err := x.direct.SubResource("token").Create(ctx, sa, tr); err != nil {
		return false, fmt.Errorf("renewing the services reader token of cluster %s (expires %s): %w", x.id, time.Unix(c.Expiry, 0).UTC().Format(time.RFC3339), err)
	}
	patch := client.MergeFrom(s.DeepCopy())
	s.Data[PeerTokenKey] = []byte(tr.Status.Token)
	if err := r.Client.Patch(ctx, s, patch); err != nil {
		return false, fmt.Errorf("storing the renewed services reader token of cluster %s: %w", x.id, err)
	}
	r.Events.Eventf(s, nil, corev1.EventTypeNormal, "TokenRenewed", "Import", "services reader token of cluster %s renewed, valid until %s", x.id, tr.Status.ExpirationTimestamp.UTC().Format(time.RFC3339))
	return true, nil
}
