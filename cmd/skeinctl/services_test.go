package main

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	svcv1alpha1 "github.com/skein-net/skein/control/api/services/v1alpha1"
	"github.com/skein-net/skein/control/controller"
	"github.com/skein-net/skein/control/identity"
	"github.com/skein-net/skein/internal/apitest"
)

// credentials reads the services reader credentials cluster env holds for peer, and a client
// of the peer (peerEnv) that authenticates with them.
func credentials(t *testing.T, env, peerEnv *apitest.Env, peer string) (*corev1.Secret, client.Client) {
	t.Helper()
	var secrets corev1.SecretList
	apitest.Must(t, env.Client.List(context.Background(), &secrets, client.MatchingLabels{controller.PeerCredentialsLabel: controller.PeerCredentialsServices}))
	if len(secrets.Items) != 1 {
		t.Fatalf("%d services reader credentials, want 1", len(secrets.Items))
	}
	s := &secrets.Items[0]
	if s.Labels[netv1alpha1.RemoteClusterIDLabel] != peer || string(s.Data[controller.PeerServerKey]) != peerEnv.Config.Host || len(s.Data[controller.PeerCAKey]) == 0 {
		t.Fatalf("credentials %s/%s: labels %v, server %q (want %s)", s.Namespace, s.Name, s.Labels, s.Data[controller.PeerServerKey], peerEnv.Config.Host)
	}
	cfg := &rest.Config{Host: string(s.Data[controller.PeerServerKey]), BearerToken: string(s.Data[controller.PeerTokenKey]),
		TLSClientConfig: rest.TLSClientConfig{CAData: s.Data[controller.PeerCAKey]}}
	c, err := client.New(cfg, client.Options{Scheme: peerEnv.Scheme})
	apitest.Must(t, err)
	return s, c
}

// TestServicesCredentials: connect gives each cluster a services reader in the other and its
// credentials (server, CA, token) here, which read exports and nothing else; a loopback server
// is refused with a warning that names the flag; rotate-credentials ends the old tokens;
// network status counts imported services per peer; disconnect removes readers and
// credentials.
func TestServicesCredentials(t *testing.T) {
	const idA, idB = "8d1b1e7a-5f0c-4f55-9a57-3c8a2f3e6b10", "c2b7e4d9-1a3f-4c8e-b6d2-7e9f0a1b2c3d"
	a, kcA := cluster(t, idA)
	b, kcB := cluster(t, idB)
	ctx := context.Background()

	// The kubeconfigs name 127.0.0.1: no services, said so, and the tunnel is set up anyway.
	out, err := run(t, "--kubeconfig", kcA, "network", "connect", "--remote-kubeconfig", kcB, "--server-service-type", "ClusterIP")
	if err != nil || !strings.Contains(out, "WARN   (local) Multi-cluster services not set up") || !strings.Contains(out, "--api-server-url") {
		t.Fatalf("connect with loopback API servers: %v\n%s", err, out)
	}
	var none corev1.SecretList
	apitest.Must(t, a.Client.List(ctx, &none, client.MatchingLabels{controller.PeerCredentialsLabel: controller.PeerCredentialsServices}))
	if len(none.Items) != 0 {
		t.Errorf("credentials stored though the warning said no: %d", len(none.Items))
	}

	urls := []string{"--api-server-url", a.Config.Host, "--remote-api-server-url", b.Config.Host}
	out, err = run(t, append([]string{"--kubeconfig", kcA, "network", "connect", "--remote-kubeconfig", kcB, "--server-service-type", "ClusterIP"}, urls...)...)
	if err != nil || strings.Count(out, "Services reader credentials stored (valid until") != 2 {
		t.Fatalf("connect: %v\n%s", err, out)
	}
	secretA, readB := credentials(t, a, b, idB) // A reads B
	_, readA := credentials(t, b, a, idA)
	pub := client.InNamespace(identity.DefaultPublishedNamespace)
	for name, c := range map[string]client.Client{"A's reader in B": readB, "B's reader in A": readA} {
		if err := c.List(ctx, &svcv1alpha1.PublishedServiceList{}, pub); err != nil {
			t.Errorf("%s cannot list the published exports: %v", name, err)
		}
		for what, err := range map[string]error{
			"list Secrets":  c.List(ctx, &corev1.SecretList{}),
			"list Services": c.List(ctx, &corev1.ServiceList{}),
			"list exports":  c.List(ctx, &mcsv1a1.ServiceExportList{}),
		} {
			if !apierrors.IsForbidden(err) {
				t.Errorf("%s may %s: %v", name, what, err)
			}
		}
	}
	if string(secretA.Data[controller.PeerNamespaceKey]) != identity.DefaultPublishedNamespace {
		t.Errorf("credentials name the published namespace %q, want %s", secretA.Data[controller.PeerNamespaceKey], identity.DefaultPublishedNamespace)
	}
	// What the reader is and where: the peering's namespace in B, named for A.
	sa := &corev1.ServiceAccount{}
	apitest.Must(t, b.Client.Get(ctx, client.ObjectKey{Namespace: tenantNamespace(idA), Name: identity.ServiceReaderName(idA)}, sa))

	// rotate-credentials: new tokens, the old ones end.
	out, err = run(t, append([]string{"--kubeconfig", kcA, "network", "rotate-credentials", "--remote-kubeconfig", kcB}, urls...)...)
	if err != nil || strings.Count(out, "Services reader credentials stored") != 2 {
		t.Fatalf("rotate-credentials: %v\n%s", err, out)
	}
	rotated, readB2 := credentials(t, a, b, idB)
	if string(rotated.Data[controller.PeerTokenKey]) == string(secretA.Data[controller.PeerTokenKey]) {
		t.Error("rotate-credentials kept the token")
	}
	if err := readB2.List(ctx, &svcv1alpha1.PublishedServiceList{}, pub); err != nil {
		t.Errorf("the rotated token: %v", err)
	}
	waitFor(ctx, func() (bool, error) {
		return apierrors.IsUnauthorized(readB.List(ctx, &svcv1alpha1.PublishedServiceList{}, pub)), nil
	})
	if err := readB.List(ctx, &svcv1alpha1.PublishedServiceList{}, pub); !apierrors.IsUnauthorized(err) {
		t.Errorf("the token from before the rotation: %v, want Unauthorized", err)
	}

	// network status: imported services per peer (a ServiceImport listing B).
	apitest.Must(t, a.EnsureNamespace(ctx, "shop"))
	si := &mcsv1a1.ServiceImport{}
	si.Namespace, si.Name = "shop", "orders"
	si.Spec.Type, si.Spec.Ports = mcsv1a1.ClusterSetIP, []mcsv1a1.ServicePort{{Port: 80}}
	apitest.Must(t, a.Client.Create(ctx, si))
	si.Status.Clusters = []mcsv1a1.ClusterStatus{{Cluster: idB}}
	apitest.Must(t, a.Client.Status().Update(ctx, si))
	if out, err := run(t, "--kubeconfig", kcA, "network", "status"); err != nil || !strings.Contains(out, "IMPORTED SERVICES") || !strings.Contains(out, "shop/orders") ||
		!strings.Contains(out, "  orders.shop.svc.clusterset.local\n") {
		t.Errorf("network status: %v\n%s", err, out)
	}

	// disconnect: no reader, no credentials, either side.
	out, err = run(t, "--kubeconfig", kcA, "network", "disconnect", "--remote-kubeconfig", kcB, "--yes", "--wait")
	if err != nil || strings.Count(out, "Services reader credentials correctly deleted") != 2 {
		t.Fatalf("disconnect: %v\n%s", err, out)
	}
	for _, env := range []*apitest.Env{a, b} {
		var left corev1.SecretList
		apitest.Must(t, env.Client.List(ctx, &left, client.MatchingLabels{controller.PeerCredentialsLabel: controller.PeerCredentialsServices}))
		if len(left.Items) != 0 {
			t.Errorf("credentials left after disconnect: %d", len(left.Items))
		}
	}
	if err := b.Client.Get(ctx, client.ObjectKeyFromObject(sa), sa); !apierrors.IsNotFound(err) {
		t.Errorf("A's reader in B after disconnect: %v", err)
	}
	// Disconnected: no new credentials (they would give back what disconnect took away).
	if out, err := run(t, append([]string{"--kubeconfig", kcA, "network", "rotate-credentials", "--remote-kubeconfig", kcB}, urls...)...); err == nil || !strings.Contains(err.Error(), "not connected") {
		t.Errorf("rotate-credentials after disconnect: %v\n%s", err, out)
	}
	if err := b.Client.Get(ctx, client.ObjectKeyFromObject(sa), sa); !apierrors.IsNotFound(err) {
		t.Errorf("A's reader in B after a refused rotation: %v", err)
	}
	// A token lifetime the API server would refuse is refused before any reader changes.
	if _, err := run(t, append([]string{"--kubeconfig", kcA, "network", "connect", "--remote-kubeconfig", kcB, "--server-service-type", "ClusterIP", "--services-token-ttl", "1m"}, urls...)...); err == nil || !strings.Contains(err.Error(), "at least 10m") {
		t.Errorf("connect --services-token-ttl 1m: %v", err)
	}
}

// TestExport: export makes the ServiceExport and, with --wait, prints the controller's
// verdict (NoService before the Service exists, exit 1; Valid after); unexport deletes it, and
// says so when there is none.
func TestExport(t *testing.T) {
	a, kc := cluster(t, "0f3c9a2e-7b41-4d8a-9e6f-5a2b1c0d9e8f")
	ctx := context.Background()
	apitest.Must(t, a.EnsureNamespace(ctx, "shop"))
	out, err := run(t, "--kubeconfig", kc, "--timeout", "20s", "export", "orders", "-n", "shop", "--wait")
	if err == nil || !strings.Contains(out, "There is no Service shop/orders") || !strings.Contains(out, "Valid=False (NoService)") {
		t.Errorf("export without a Service: %v\n%s", err, out)
	}
	svc := &corev1.Service{}
	svc.Namespace, svc.Name = "shop", "orders"
	svc.Spec.Ports = []corev1.ServicePort{{Name: "http", Port: 80}}
	apitest.Must(t, a.Client.Create(ctx, svc))
	out, err = run(t, "--kubeconfig", kc, "--timeout", "20s", "export", "orders", "-n", "shop", "--wait")
	if err != nil || !strings.Contains(out, "already exists") || !strings.Contains(out, "Valid=True") || !strings.Contains(out, "Conflict=False (NoConflicts)") ||
		!strings.Contains(out, "as orders.shop.svc.clusterset.local") {
		t.Errorf("export: %v\n%s", err, out)
	}
	// The controller imports its own export: a ServiceImport listing this cluster.
	waitFor(ctx, func() (bool, error) {
		return a.Client.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "orders"}, &mcsv1a1.ServiceImport{}) == nil, nil
	})
	if out, err := run(t, "--kubeconfig", kc, "export", "Orders!", "-n", "shop"); err == nil {
		t.Errorf("export of an invalid name: %s", out)
	}
	if out, err := run(t, "--kubeconfig", kc, "unexport", "orders", "-n", "shop"); err != nil || !strings.Contains(out, "deleted") {
		t.Errorf("unexport: %v\n%s", err, out)
	}
	if _, err := run(t, "--kubeconfig", kc, "unexport", "orders", "-n", "shop"); err == nil || !strings.Contains(err.Error(), "no ServiceExport shop/orders") {
		t.Errorf("unexport again: %v", err)
	}
}
