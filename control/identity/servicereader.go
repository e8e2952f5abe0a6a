package identity

import (
	"context"
	"errors"
	"fmt"
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
// in the peer's tenant namespace here, bound to ServiceReaderRole: read ServiceExports,
// Services and EndpointSlices, nothing else.

// ServiceReaderRoleName is the ClusterRole every services reader is bound to.
const ServiceReaderRoleName = "skein-service-reader"

// ServiceReaderName is the ServiceAccount of peer peerID's services reader (in the peering's
// namespace, which the manual flow may share between peers: hence the peer's name in it).
func ServiceReaderName(peerID string) string { return ServiceReaderRoleName + "-" + PeerName(peerID) }

// ServiceReaderBindingName is the ClusterRoleBinding of peer peerID's services reader.
func ServiceReaderBindingName(peerID string) string { return ServiceReaderRoleName + "-" + peerID }

// ServiceReaderRole is the services reader's ClusterRole: get, list and watch on the three kinds
// the import reads, cluster-wide (an export may be in any namespace).
func ServiceReaderRole() *rbacv1.ClusterRole {
	read := []string{"get", "list", "watch"}
	return &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: ServiceReaderRoleName, Labels: map[string]string{"app.kubernetes.io/part-of": "skein", "app.kubernetes.io/managed-by": "skeinctl"}},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"multicluster.x-k8s.io"}, Resources: []string{"serviceexports"}, Verbs: read},
			{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: read},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: read},
		},
	}
}

// ServiceReaderToken is a services reader's credentials for the peer.
type ServiceReaderToken struct {
	Token   string
	Expires time.Time
}

// GrantServiceReader makes (or keeps) peer peerID's services reader in namespace ns: the
// ClusterRole, the ServiceAccount and its ClusterRoleBinding; then it issues a token valid for
// ttl (TokenRequest: it ends with the ServiceAccount, so RevokeServiceReader ends it too).
// With renew, the ServiceAccount is made anew first, ending every token issued before.
func GrantServiceReader(ctx context.Context, c client.Client, ns, peerID string, ttl time.Duration, renew bool) (ServiceReaderToken, error) {
	if peerID == "" {
		return ServiceReaderToken{}, errors.New("services reader: no peer cluster id")
	}
	if renew {
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
	}
	labels := map[string]string{"app.kubernetes.io/part-of": "skein", "app.kubernetes.io/managed-by": "skeinctl", "liqo.io/remote-cluster-id": peerID}
	role := ServiceReaderRole()
	if err := c.Create(ctx, role); err != nil && !apierrors.IsAlreadyExists(err) {
		return ServiceReaderToken{}, fmt.Errorf("services reader: ClusterRole %s: %w", role.Name, err)
	} else if err != nil {
		var have rbacv1.ClusterRole
		if err := c.Get(ctx, client.ObjectKeyFromObject(role), &have); err != nil {
			return ServiceReaderToken{}, err
		}
		have.Rules, have.AggregationRule = role.Rules, nil // never broader than this, whatever it was edited to
		if err := c.Update(ctx, &have); err != nil {
			return ServiceReaderToken{}, fmt.Errorf("services reader: ClusterRole %s: %w", role.Name, err)
		}
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ServiceReaderName(peerID), Labels: labels},
		AutomountServiceAccountToken: new(bool)}
	if err := c.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		return ServiceReaderToken{}, fmt.Errorf("services reader: ServiceAccount %s/%s: %w", ns, sa.Name, err)
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ServiceReaderBindingName(peerID), Labels: labels},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ServiceReaderRoleName},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: ServiceReaderName(peerID)}}}
	if err := c.Create(ctx, crb); apierrors.IsAlreadyExists(err) {
		var have rbacv1.ClusterRoleBinding
		if err := c.Get(ctx, client.ObjectKeyFromObject(crb), &have); err != nil {
			return ServiceReaderToken{}, err
		}
		if have.RoleRef != crb.RoleRef {
			return ServiceReaderToken{}, fmt.Errorf("services reader: ClusterRoleBinding %s binds %s, not %s: delete it and connect again", crb.Name, have.RoleRef.Name, ServiceReaderRoleName)
		}
		have.Subjects = crb.Subjects
		if err := c.Update(ctx, &have); err != nil {
			return ServiceReaderToken{}, err
		}
	} else if err != nil {
		return ServiceReaderToken{}, fmt.Errorf("services reader: ClusterRoleBinding %s: %w", crb.Name, err)
	}
	secs := int64(ttl / time.Second)
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}
	if err := c.SubResource("token").Create(ctx, sa, tr); err != nil {
		return ServiceReaderToken{}, fmt.Errorf("services reader: token for %s/%s: %w", ns, ServiceReaderName(peerID), err)
	}
	return ServiceReaderToken{Token: tr.Status.Token, Expires: tr.Status.ExpirationTimestamp.Time}, nil
}

// RevokeServiceReader removes peer peerID's services reader from namespace ns: its binding and
// its ServiceAccount (every token issued to it stops working). The ClusterRole stays for the
// other peers.
func RevokeServiceReader(ctx context.Context, c client.Client, ns, peerID string) error {
	for _, o := range []client.Object{
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ServiceReaderBindingName(peerID)}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ServiceReaderName(peerID)}},
	} {
		if err := c.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("services reader: delete %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}
