package identity_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	svcv1alpha1 "github.com/skein-net/skein/control/api/services/v1alpha1"
	"github.com/skein-net/skein/control/identity"
	"github.com/skein-net/skein/internal/apitest"
)

const (
	tenantNS    = "liqo-tenant"
	publishedNS = identity.DefaultPublishedNamespace
	peerID      = "cluster-a"
)

// readerRules is what SelfSubjectRulesReview tells the reader of its resource rules in ns, one
// line per rule as the expectation file writes them (the self reviews every authenticated user
// has left out).
func readerRules(t *testing.T, ctx context.Context, rc client.Client, ns string) []string {
	t.Helper()
	r := &authorizationv1.SelfSubjectRulesReview{Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: ns}}
	if err := rc.Create(ctx, r); err != nil {
		t.Fatalf("SelfSubjectRulesReview in %s as the reader: %v", ns, err)
	}
	var out []string
	for _, rule := range r.Status.ResourceRules {
		for _, g := range rule.APIGroups {
			if g == "authorization.k8s.io" || g == "authentication.k8s.io" {
				continue
			}
			verbs := slices.Clone(rule.Verbs)
			slices.Sort(verbs)
			for _, res := range rule.Resources {
				line := fmt.Sprintf("%s: %s %s/%s", ns, strings.Join(verbs, ","), g, res)
				if len(rule.ResourceNames) > 0 {
					line += " names=" + strings.Join(rule.ResourceNames, ",")
				}
				out = append(out, line)
			}
		}
	}
	return out
}

// TestServiceReaderAccess (issue #40): a peer's services reader read every Service and
// EndpointSlice of the cluster (default/kubernetes, unexported slices naming pods and nodes),
// through a ClusterRole. Now it reads the published namespace and nothing else, and may request
// tokens for itself alone: checked by what the reader itself is told (SelfSubjectRulesReview,
// against testdata/service-reader-rules.txt), by SubjectAccessReviews for a table of requests,
// and by requests with its token. A reader granted before (the ClusterRole and its binding) is
// moved over on the next grant.
func TestServiceReaderAccess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := apitest.Start(t)
	c := e.Client
	for _, ns := range []string{"shop", tenantNS} {
		if err := e.EnsureNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	reader := identity.ServiceReaderName(peerID)
	// A reader as granted before issue #40: the ClusterRole over every Service and slice.
	read := []string{"get", "list", "watch"}
	old := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: identity.ServiceReaderRoleName, Labels: map[string]string{"app.kubernetes.io/part-of": "skein"}},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: read},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: read},
			{APIGroups: []string{mcsv1a1.GroupName}, Resources: []string{"serviceexports"}, Verbs: read}}}
	oldBinding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: identity.ServiceReaderBindingName(peerID)},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: identity.ServiceReaderRoleName},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: tenantNS, Name: reader}}}
	for _, o := range []client.Object{old, oldBinding} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := identity.GrantServiceReader(ctx, c, tenantNS, peerID, publishedNS, time.Hour, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{old, oldBinding} {
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
			t.Errorf("%T %s of the cluster-wide reader still there after a grant: %v", o, o.GetName(), err)
		}
	}

	// In shop: an exported Service and an unexported one with a slice naming a pod and a node;
	// in the published namespace, the copies skein-controller would publish of the first.
	objs := []client.Object{
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}},
		&mcsv1a1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "private"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}},
		&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "private-1", Labels: map[string]string{discoveryv1.LabelServiceName: "private"}},
			AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.1.9"}, NodeName: ptr("node-1"),
				TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: "private-0"}}}},
		&svcv1alpha1.PublishedService{ObjectMeta: metav1.ObjectMeta{Namespace: publishedNS, Name: "shop.orders"},
			Spec: svcv1alpha1.PublishedServiceSpec{Namespace: "shop", Name: "orders", ExportCreated: metav1.Now(), Ports: []svcv1alpha1.PublishedPort{{Port: 80}}}},
		&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: publishedNS, Name: "shop.orders-1", Labels: map[string]string{svcv1alpha1.SourceNamespaceLabel: "shop", svcv1alpha1.SourceServiceLabel: "orders"}},
			AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.1.5"}}}},
	}
	for _, o := range objs {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	// Requests as the reader, with its token.
	cfg := rest.CopyConfig(e.Config)
	cfg.CertData, cfg.KeyData, cfg.BearerToken = nil, nil, tok.Token
	rc, err := client.New(cfg, client.Options{Scheme: e.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	for what, err := range map[string]error{
		"get the PublishedService":   rc.Get(ctx, client.ObjectKey{Namespace: publishedNS, Name: "shop.orders"}, &svcv1alpha1.PublishedService{}),
		"list the PublishedServices": rc.List(ctx, &svcv1alpha1.PublishedServiceList{}, client.InNamespace(publishedNS)),
		"get the published slice":    rc.Get(ctx, client.ObjectKey{Namespace: publishedNS, Name: "shop.orders-1"}, &discoveryv1.EndpointSlice{}),
		"list the published slices":  rc.List(ctx, &discoveryv1.EndpointSliceList{}, client.InNamespace(publishedNS)),
		"request a token for itself": rc.SubResource("token").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: reader}}, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr[int64](600)}}),
	} {
		if err != nil {
			t.Errorf("the reader cannot %s: %v", what, err)
		}
	}
	other := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: "other"}}
	if err := c.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	for what, err := range map[string]error{
		"get default/kubernetes":            rc.Get(ctx, client.ObjectKey{Namespace: "default", Name: "kubernetes"}, &corev1.Service{}),
		"get the slice default/kubernetes":  rc.Get(ctx, client.ObjectKey{Namespace: "default", Name: "kubernetes"}, &discoveryv1.EndpointSlice{}),
		"list every Service":                rc.List(ctx, &corev1.ServiceList{}),
		"list every EndpointSlice":          rc.List(ctx, &discoveryv1.EndpointSliceList{}),
		"list every ServiceExport":          rc.List(ctx, &mcsv1a1.ServiceExportList{}),
		"get the unexported Service":        rc.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "private"}, &corev1.Service{}),
		"get the unexported slice":          rc.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "private-1"}, &discoveryv1.EndpointSlice{}),
		"get the exported Service":          rc.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "orders"}, &corev1.Service{}),
		"list the slices of shop":           rc.List(ctx, &discoveryv1.EndpointSliceList{}, client.InNamespace("shop")),
		"list Services of the published ns": rc.List(ctx, &corev1.ServiceList{}, client.InNamespace(publishedNS)),
		"list Secrets of its namespace":     rc.List(ctx, &corev1.SecretList{}, client.InNamespace(tenantNS)),
		"delete a published slice":          rc.Delete(ctx, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: publishedNS, Name: "shop.orders-1"}}),
		"write a PublishedService": rc.Create(ctx, &svcv1alpha1.PublishedService{ObjectMeta: metav1.ObjectMeta{Namespace: publishedNS, Name: "shop.evil"},
			Spec: svcv1alpha1.PublishedServiceSpec{Namespace: "shop", Name: "evil", ExportCreated: metav1.Now()}}),
		"request a token for another ServiceAccount": rc.SubResource("token").Create(ctx, other, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr[int64](600)}}),
	} {
		if !apierrors.IsForbidden(err) {
			t.Errorf("the reader may %s: %v, want Forbidden", what, err)
		}
	}

	// What the reader is told it may do, namespace by namespace, against the written expectation.
	raw, err := os.ReadFile("testdata/service-reader-rules.txt")
	if err != nil {
		t.Fatal(err)
	}
	checked := []string{tenantNS, publishedNS, "shop", "default", "kube-system"}
	var want []string
	for _, l := range strings.Split(strings.ReplaceAll(string(raw), "{reader}", reader), "\n") {
		if l = strings.TrimSpace(l); l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if rest, ok := strings.CutPrefix(l, "*: "); ok {
			for _, ns := range checked {
				want = append(want, ns+": "+rest)
			}
			continue
		}
		want = append(want, l)
	}
	var got []string
	for _, ns := range checked {
		got = append(got, readerRules(t, ctx, rc, ns)...)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the reader's rules:\n  %s\nwant (testdata/service-reader-rules.txt):\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}

	// The same, asked by an administrator (SubjectAccessReview, as kubectl auth can-i --as).
	user := "system:serviceaccount:" + tenantNS + ":" + reader
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + tenantNS, "system:authenticated"}
	for _, tc := range []struct {
		verb, group, resource, sub, ns, name string
		allowed                              bool
	}{
		{"list", "services.skein.io", "publishedservices", "", publishedNS, "", true},
		{"watch", "discovery.k8s.io", "endpointslices", "", publishedNS, "", true},
		{"create", "", "serviceaccounts", "token", tenantNS, reader, true},
		{"create", "", "serviceaccounts", "token", tenantNS, "other", false},
		{"get", "", "services", "", "default", "kubernetes", false},
		{"list", "", "services", "", "", "", false},
		{"list", "discovery.k8s.io", "endpointslices", "", "", "", false},
		{"list", "discovery.k8s.io", "endpointslices", "", "shop", "", false},
		{"get", "discovery.k8s.io", "endpointslices", "", "default", "kubernetes", false},
		{"list", mcsv1a1.GroupName, "serviceexports", "", "", "", false},
		{"list", "services.skein.io", "publishedservices", "", "", "", false},
		{"list", "services.skein.io", "publishedservices", "", "shop", "", false},
		{"create", "services.skein.io", "publishedservices", "", publishedNS, "", false},
		{"patch", "discovery.k8s.io", "endpointslices", "", publishedNS, "", false},
		{"get", "", "secrets", "", tenantNS, "", false},
		{"get", "", "secrets", "", publishedNS, "", false},
		{"list", "", "pods", "", "", "", false},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: tc.verb, Group: tc.group, Resource: tc.resource, Subresource: tc.sub, Namespace: tc.ns, Name: tc.name}}}
		if err := c.Create(ctx, sar); err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed != tc.allowed {
			t.Errorf("can-i %s %s/%s/%s in %q name %q as the reader: %v, want %v", tc.verb, tc.group, tc.resource, tc.sub, tc.ns, tc.name, sar.Status.Allowed, tc.allowed)
		}
	}

	// Revoked: nothing left, not even the token Role.
	if err := identity.RevokeServiceReader(ctx, c, tenantNS, peerID, publishedNS); err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: publishedNS, Name: identity.ServiceReaderBindingName(peerID)}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: identity.ServiceReaderTokenRoleName(peerID)}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: identity.ServiceReaderTokenRoleName(peerID)}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: reader}},
	} {
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); !apierrors.IsNotFound(err) {
			t.Errorf("%T %s/%s after RevokeServiceReader: %v", o, o.GetNamespace(), o.GetName(), err)
		}
	}
}

func ptr[T any](v T) *T { return &v }
