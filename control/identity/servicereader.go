package identity

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The services reader: the identity a peer's skein-controller uses in this cluster to import
// the services this cluster exports (Multi-Cluster Services API). One ServiceAccount per peer,
// in the peer's tenant namespace here, bound in the published namespace (where this cluster's
// skein-controller publishes its exports: a PublishedService and EndpointSlice copies for each)
// to ServiceReaderRole, get/list/watch on those two kinds there and nothing else; and in its own
// namespace to a Role that lets it request tokens for itself alone, so that the peer's
// controller renews its short-lived token before it expires.

// ServiceReaderRoleName is the Role every services reader is bound to in the published
// namespace (and the ClusterRole of the readers before issue #40, removed on a grant).
const ServiceReaderRoleName = "skein-service-reader"

// DefaultPublishedNamespace is where skein-controller publishes this cluster's exports unless
// told otherwise (--published-namespace; the chart's multiclusterServices.publishedNamespace).
const DefaultPublishedNamespace = "skein-published"

// PublishedNamespaceLabel marks the published namespace (the chart labels it; GrantServiceReader
// labels the one it makes): PublishedNamespace finds it by it.
const PublishedNamespaceLabel = "services.skein.io/published"

// DefaultServiceReaderTTL is the default lifetime of a services reader token: a day. The peer's
// controller renews it when two thirds of it have passed (ServiceReaderRenewAt), so a token
// copied out of the peer (a backup, a log, a decommissioned cluster) is good for a day at most
// unless renewed, and the peer's controller may be down, or this API server unreachable, for
// eight hours before the token lapses (then skeinctl network rotate-credentials issues anew).
const DefaultServiceReaderTTL = 24 * time.Hour

// ServiceReaderName is the ServiceAccount of peer peerID's services reader (in the peering's
// namespace, which the manual flow may share between peers: hence the peer's name in it).
func ServiceReaderName(peerID string) string { return ServiceReaderRoleName + "-" + PeerName(peerID) }

// ServiceReaderBindingName is the RoleBinding of peer peerID's services reader in the published
// namespace (and the name of its ClusterRoleBinding before issue #40).
func ServiceReaderBindingName(peerID string) string { return ServiceReaderRoleName + "-" + peerID }

// ServiceReaderTokenRoleName is the Role and RoleBinding, in the reader's own namespace, that let
// peer peerID's reader request tokens for its own ServiceAccount and no other.
func ServiceReaderTokenRoleName(peerID string) string { return ServiceReaderName(peerID) + "-token" }

// PublishedGroup is the API group of the published kinds.
const PublishedGroup = "services.skein.io"

// ServiceReaderRole is the services reader's Role in the published namespace ns: get, list and
// watch on PublishedServices and EndpointSlices there.
func ServiceReaderRole(ns string) *rbacv1.Role {
	read := []string{"get", "list", "watch"}
	return &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ServiceReaderRoleName, Labels: map[string]string{"app.kubernetes.io/part-of": "skein", "app.kubernetes.io/managed-by": "skeinctl"}},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{PublishedGroup}, Resources: []string{"publishedservices"}, Verbs: read},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: read},
		},
	}
}

// serviceReaderTokenRole lets peer peerID's reader, in namespace ns, request its own tokens.
func serviceReaderTokenRole(ns, peerID string, labels map[string]string) *rbacv1.Role {
	return &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ServiceReaderTokenRoleName(peerID), Labels: labels},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, Verbs: []string{"create"},
			ResourceNames: []string{ServiceReaderName(peerID)}}}}
}

// PublishedNamespace is this cluster's published namespace: the one namespace labelled
// PublishedNamespaceLabel=true, else DefaultPublishedNamespace.
func PublishedNamespace(ctx context.Context, c client.Client) (string, error) {
	var l corev1.NamespaceList
	if err := c.List(ctx, &l, client.MatchingLabels{PublishedNamespaceLabel: "true"}); err != nil {
		return "", fmt.Errorf("services reader: the published namespace: %w", err)
	}
	switch len(l.Items) {
	case 0:
		return DefaultPublishedNamespace, nil
	case 1:
		return l.Items[0].Name, nil
	}
	return "", fmt.Errorf("services reader: %d namespaces are labelled %s=true: want one, the namespace skein-controller publishes exports in", len(l.Items), PublishedNamespaceLabel)
}

// ServiceReaderToken is a services reader's credentials for the peer.
type ServiceReaderToken struct {
	Token   string
	Expires time.Time
}

// The reader's ServiceAccount records what its tokens may be (the chart's admission policy
// RELEASE-reader-tokens holds the reader's own token requests to them): ServiceReaderLabel
// marks it, TokenTTLAnnotation is the lifetime granted (seconds), TokenAudiencesAnnotation the
// audiences of the token granted (the API server's own, comma-separated).
const (
	ServiceReaderLabel       = "services.skein.io/reader"
	TokenTTLAnnotation       = "services.skein.io/token-ttl-seconds"
	TokenAudiencesAnnotation = "services.skein.io/token-audiences"
)

// TokenAuthCacheTTL is how long a kube-apiserver may keep accepting a ServiceAccount token it
// authenticated once after the ServiceAccount is gone (its token authentication cache keeps
// successes 10 s), with a second of margin.
const TokenAuthCacheTTL = 11 * time.Second

// GrantServiceReader makes (or keeps) peer peerID's services reader in namespace ns: the
// published namespace (made when missing), the Role there, the ServiceAccount, its RoleBinding
// there and its token Role here; it removes what readers were given before issue #40 (a
// ClusterRoleBinding to the ClusterRole skein-service-reader, which read every Service and
// EndpointSlice of the cluster); then it issues a token valid for ttl (TokenRequest: it ends
// with the ServiceAccount, so RevokeServiceReader ends it too). With renew, the bindings and
// the ServiceAccount are made anew first, TokenAuthCacheTTL apart, ending every token issued
// before and every token those could still ask for.
func GrantServiceReader(ctx context.Context, c client.Client, ns, peerID, published string, ttl time.Duration, renew bool) (ServiceReaderToken, error) {
	if peerID == "" {
		return ServiceReaderToken{}, errors.New("services reader: no peer cluster id")
	}
	if published == "" || published == ns {
		return ServiceReaderToken{}, fmt.Errorf("services reader: published namespace %q: want one of its own, not the peering's", published)
	}
	if renew {
		// The bindings go first: from then on no token of the old ServiceAccount may ask for
		// a token of that name, nor read. The API server keeps accepting a token it has
		// seen for up to TokenAuthCacheTTL after its ServiceAccount is gone, and the new
		// ServiceAccount has the same name, so the new grant waits that long: a holder of an
		// old token asking for tokens during a rotation gets none of the new one.
		for _, b := range []client.Object{
			&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ServiceReaderTokenRoleName(peerID)}},
			&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: published, Name: ServiceReaderBindingName(peerID)}},
		} {
			if err := c.Delete(ctx, b); client.IgnoreNotFound(err) != nil {
				return ServiceReaderToken{}, fmt.Errorf("services reader: delete RoleBinding %s/%s: %w", b.GetNamespace(), b.GetName(), err)
			}
		}
		revoked := time.Now()
		old := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ServiceReaderName(peerID)}}
		if err := c.Delete(ctx, old); client.IgnoreNotFound(err) != nil {
			return ServiceReaderToken{}, fmt.Errorf("services reader: delete ServiceAccount %s/%s: %w", ns, old.Name, err)
		}
		// The deletion is done when the name is free (a ServiceAccount has no finalizer).
		for range 50 {
			if err := c.Get(ctx, client.ObjectKeyFromObject(old), old); apierrors.IsNotFound(err) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		select {
		case <-ctx.Done():
			return ServiceReaderToken{}, fmt.Errorf("services reader: waiting for the old tokens to lapse: %w", ctx.Err())
		case <-time.After(time.Until(revoked.Add(TokenAuthCacheTTL))):
		}
	}
	if err := removeClusterWideReader(ctx, c, peerID); err != nil {
		return ServiceReaderToken{}, err
	}
	labels := map[string]string{"app.kubernetes.io/part-of": "skein", "app.kubernetes.io/managed-by": "skeinctl", "liqo.io/remote-cluster-id": peerID}
	pns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: published, Labels: map[string]string{PublishedNamespaceLabel: "true",
		"app.kubernetes.io/part-of": "skein", "app.kubernetes.io/managed-by": "skeinctl"}}}
	if err := c.Create(ctx, pns); err != nil && !apierrors.IsAlreadyExists(err) {
		return ServiceReaderToken{}, fmt.Errorf("services reader: namespace %s: %w", published, err)
	}
	saLabels := maps.Clone(labels)
	saLabels[ServiceReaderLabel] = "true"
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ServiceReaderName(peerID), Labels: saLabels},
		AutomountServiceAccountToken: new(bool)}
	if err := c.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		return ServiceReaderToken{}, fmt.Errorf("services reader: ServiceAccount %s/%s: %w", ns, sa.Name, err)
	}
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: ServiceReaderName(peerID)}}
	for _, g := range []struct {
		role    *rbacv1.Role
		binding string
	}{{ServiceReaderRole(published), ServiceReaderBindingName(peerID)}, {serviceReaderTokenRole(ns, peerID, labels), ServiceReaderTokenRoleName(peerID)}} {
		if err := ensureRole(ctx, c, g.role); err != nil {
			return ServiceReaderToken{}, err
		}
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: g.role.Namespace, Name: g.binding, Labels: labels},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: g.role.Name}, Subjects: subjects}
		if err := c.Create(ctx, rb); apierrors.IsAlreadyExists(err) {
			var have rbacv1.RoleBinding
			if err := c.Get(ctx, client.ObjectKeyFromObject(rb), &have); err != nil {
				return ServiceReaderToken{}, err
			}
			if have.RoleRef != rb.RoleRef {
				return ServiceReaderToken{}, fmt.Errorf("services reader: RoleBinding %s/%s binds %s, not %s: delete it and connect again", rb.Namespace, rb.Name, have.RoleRef.Name, rb.RoleRef.Name)
			}
			have.Subjects = subjects
			if err := c.Update(ctx, &have); err != nil {
				return ServiceReaderToken{}, err
			}
		} else if err != nil {
			return ServiceReaderToken{}, fmt.Errorf("services reader: RoleBinding %s/%s: %w", rb.Namespace, rb.Name, err)
		}
	}
	secs := int64(ttl / time.Second)
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}
	if err := c.SubResource("token").Create(ctx, sa, tr); err != nil {
		return ServiceReaderToken{}, fmt.Errorf("services reader: token for %s/%s: %w", ns, ServiceReaderName(peerID), err)
	}
	if err := recordTokenBounds(ctx, c, sa, secs, tr.Status.Token); err != nil {
		return ServiceReaderToken{}, err
	}
	return ServiceReaderToken{Token: tr.Status.Token, Expires: tr.Status.ExpirationTimestamp.Time}, nil
}

// recordTokenBounds writes on the reader's ServiceAccount what its own token requests may ask
// for: the lifetime granted and the audiences of the token issued (the API server's own).
func recordTokenBounds(ctx context.Context, c client.Client, sa *corev1.ServiceAccount, secs int64, token string) error {
	aud, err := tokenAudiences(token)
	if err != nil {
		return fmt.Errorf("services reader: the token issued: %w", err)
	}
	var have corev1.ServiceAccount
	if err := c.Get(ctx, client.ObjectKeyFromObject(sa), &have); err != nil {
		return fmt.Errorf("services reader: ServiceAccount %s/%s: %w", sa.Namespace, sa.Name, err)
	}
	patch := client.MergeFrom(have.DeepCopy())
	if have.Labels == nil {
		have.Labels = map[string]string{}
	}
	if have.Annotations == nil {
		have.Annotations = map[string]string{}
	}
	have.Labels[ServiceReaderLabel] = "true"
	have.Annotations[TokenTTLAnnotation] = strconv.FormatInt(secs, 10)
	have.Annotations[TokenAudiencesAnnotation] = strings.Join(aud, ",")
	if err := c.Patch(ctx, &have, patch); err != nil {
		return fmt.Errorf("services reader: ServiceAccount %s/%s: %w", sa.Namespace, sa.Name, err)
	}
	return nil
}

// DecodeTokenClaims decodes a JWT's claims (its middle part) into v, without verifying the
// token: the API server that issued it does, the claims only say what it was issued as.
func DecodeTokenClaims(token string, v any) error {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return errors.New("not a JWT")
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return fmt.Errorf("JWT claims: %w", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("JWT claims: %w", err)
	}
	return nil
}

// tokenAudiences reads a JWT's audiences (a string or a list).
func tokenAudiences(token string) ([]string, error) {
	var claims struct {
		Aud json.RawMessage `json:"aud"`
	}
	if err := DecodeTokenClaims(token, &claims); err != nil {
		return nil, err
	}
	var list []string
	if err := json.Unmarshal(claims.Aud, &list); err != nil {
		var one string
		if err := json.Unmarshal(claims.Aud, &one); err != nil {
			return nil, fmt.Errorf("JWT audiences %s: %w", claims.Aud, err)
		}
		list = []string{one}
	}
	if len(list) == 0 || slices.Contains(list, "") {
		return nil, errors.New("JWT without audiences")
	}
	return list, nil
}

// ensureRole makes role, or gives the one there its rules (never broader than these, whatever
// it was edited to).
func ensureRole(ctx context.Context, c client.Client, role *rbacv1.Role) error {
	if err := c.Create(ctx, role); err == nil {
		return nil
	} else if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("services reader: Role %s/%s: %w", role.Namespace, role.Name, err)
	}
	var have rbacv1.Role
	if err := c.Get(ctx, client.ObjectKeyFromObject(role), &have); err != nil {
		return err
	}
	have.Rules = role.Rules
	if err := c.Update(ctx, &have); err != nil {
		return fmt.Errorf("services reader: Role %s/%s: %w", role.Namespace, role.Name, err)
	}
	return nil
}

// removeClusterWideReader removes peer peerID's reader binding of before issue #40 (the
// ClusterRoleBinding to ClusterRole skein-service-reader), and the ClusterRole once no binding
// refers to it.
func removeClusterWideReader(ctx context.Context, c client.Client, peerID string) error {
	var crb rbacv1.ClusterRoleBinding
	if err := c.Get(ctx, client.ObjectKey{Name: ServiceReaderBindingName(peerID)}, &crb); err == nil {
		if crb.RoleRef.Kind == "ClusterRole" && crb.RoleRef.Name == ServiceReaderRoleName {
			if err := c.Delete(ctx, &crb); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("services reader: delete the cluster-wide ClusterRoleBinding %s: %w", crb.Name, err)
			}
		}
	} else if client.IgnoreNotFound(err) != nil {
		return err
	}
	var all rbacv1.ClusterRoleBindingList
	if err := c.List(ctx, &all); err != nil {
		return err
	}
	for _, b := range all.Items {
		if b.RoleRef.Kind == "ClusterRole" && b.RoleRef.Name == ServiceReaderRoleName && b.DeletionTimestamp == nil {
			return nil // another peer's reader, not granted again yet: its own grant removes it
		}
	}
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: ServiceReaderRoleName}}
	var have rbacv1.ClusterRole
	if err := c.Get(ctx, client.ObjectKeyFromObject(cr), &have); err == nil && have.Labels["app.kubernetes.io/part-of"] == "skein" {
		if err := c.Delete(ctx, &have); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("services reader: delete the cluster-wide ClusterRole %s: %w", cr.Name, err)
		}
	} else if client.IgnoreNotFound(err) != nil {
		return err
	}
	return nil
}

// RevokeServiceReader removes peer peerID's services reader from namespace ns: its bindings
// (in published and in ns), its token Role and its ServiceAccount (every token issued to it
// stops working), and a binding of before issue #40. The Role in published stays for the
// other peers.
func RevokeServiceReader(ctx context.Context, c client.Client, ns, peerID, published string) error {
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ServiceReaderName(peerID)}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ServiceReaderTokenRoleName(peerID)}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ServiceReaderTokenRoleName(peerID)}},
	}
	if published != "" {
		objs = append(objs, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: published, Name: ServiceReaderBindingName(peerID)}})
	}
	for _, o := range objs {
		if err := c.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("services reader: delete %T %s: %w", o, o.GetName(), err)
		}
	}
	return removeClusterWideReader(ctx, c, peerID)
}
