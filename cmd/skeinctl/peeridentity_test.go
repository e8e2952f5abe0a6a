package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/netip"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/identity"
	"github.com/skein-net/skein/internal/apitest"
)

func testCA(t *testing.T, name string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	apitest.Must(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	apitest.Must(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// TestAPIIdentity: the identity is the CA bundle's certificates whatever their order or
// formatting; another CA is another identity; without a CA the host, marked as such.
func TestAPIIdentity(t *testing.T) {
	ca1, ca2 := testCA(t, "one"), testCA(t, "two")
	id := func(cfg *rest.Config) string {
		t.Helper()
		s, err := apiIdentity(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	both := id(&rest.Config{Host: "https://a:6443", TLSClientConfig: rest.TLSClientConfig{CAData: append(append([]byte{}, ca1...), ca2...)}})
	if !strings.HasPrefix(both, "ca-sha256:") {
		t.Errorf("identity %q", both)
	}
	if other := id(&rest.Config{Host: "https://a:443", TLSClientConfig: rest.TLSClientConfig{CAData: append(append([]byte("\n\n"), ca2...), append(ca1, ca1...)...)}}); other != both {
		t.Errorf("the same CAs reordered, repeated and at another port: %s, want %s", other, both)
	}
	// Clusters whose API servers have certificates of one CA (an organisation's, a fleet's
	// issuer) are told apart by the name their certificate was verified for (found by the
	// attack review: the CA alone let any of them stand for another).
	if other := id(&rest.Config{Host: "https://b:6443", TLSClientConfig: rest.TLSClientConfig{CAData: append(append([]byte{}, ca1...), ca2...)}}); other == both {
		t.Errorf("another API server with a certificate of the same CA has the identity %s", other)
	}
	if named := id(&rest.Config{Host: "https://10.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{ServerName: "a", CAData: append(append([]byte{}, ca1...), ca2...)}}); named != both {
		t.Errorf("an address verified as server name a: %s, want %s", named, both)
	}
	// A record of an older skeinctl (the CA alone) is the same identity; a name on top of it
	// makes a record of another name another identity.
	ca, _, _ := strings.Cut(both, identityNameSep)
	if !sameIdentity(ca, both) || sameIdentity(ca+identityNameSep+"b", both) || sameIdentity("tls-host:a", both) {
		t.Errorf("sameIdentity: old record %v, other name %v, other kind %v", sameIdentity(ca, both), sameIdentity(ca+identityNameSep+"b", both), sameIdentity("tls-host:a", both))
	}
	if one := id(&rest.Config{Host: "https://a:6443", TLSClientConfig: rest.TLSClientConfig{CAData: ca1}}); one == both {
		t.Error("a bundle and one of its CAs have the same identity")
	}
	if s := id(&rest.Config{Host: "https://a.example:6443"}); s != "tls-host:a.example:6443" {
		t.Errorf("no CA: %s", s)
	}
	if s := id(&rest.Config{Host: "https://a.example:6443", TLSClientConfig: rest.TLSClientConfig{Insecure: true, CAData: ca1}}); s != "unverified:a.example:6443" {
		t.Errorf("insecure: %s", s)
	}
	if _, err := apiIdentity(&rest.Config{Host: "https://a", TLSClientConfig: rest.TLSClientConfig{CAData: []byte("not a certificate")}}); err == nil {
		t.Error("a CA without a certificate accepted")
	}
}

// TestPeerIdentityClaim: a cluster that claims the id of a cluster already peered here (its
// administrator wrote that id into its ConfigMap) does not take the peering over: init,
// connect and reset against it are refused before anything is written on either side, the
// peering's Configuration keeps its CIDRs; --accept-new-peer-identity is the explicit way
// to say the peer really changed. A peering recorded before the record existed is trusted
// and gets it.
func TestPeerIdentityClaim(t *testing.T) {
	const idA, idC = "0b1c2d3e-4f50-4617-8899-aabbccddeeff", "c0ffee00-1234-4567-89ab-cdef01234567"
	a, kcA := cluster(t, idA)
	_, kcC := cluster(t, idC)
	m, kcM := cluster(t, idC) // the impostor: another cluster, the same id
	ctx := context.Background()
	nm, err := identity.ReadNetwork(ctx, m.Client, "liqo")
	apitest.Must(t, err)
	nm.PodCIDRs = []netip.Prefix{netip.MustParsePrefix("10.245.0.0/16")}
	apitest.Must(t, identity.PublishNetwork(ctx, m.Client, "liqo", *nm))

	if out, err := run(t, "--kubeconfig", kcA, "network", "init", "--remote-kubeconfig", kcC); err != nil {
		t.Fatalf("init with C: %v\n%s", err, out)
	}
	conf := func() netv1alpha1.Configuration {
		t.Helper()
		var confs netv1alpha1.ConfigurationList
		apitest.Must(t, a.Client.List(ctx, &confs, client.MatchingLabels{netv1alpha1.RemoteClusterIDLabel: idC}))
		if len(confs.Items) != 1 {
			t.Fatalf("%d Configurations of %s in A", len(confs.Items), idC)
		}
		return confs.Items[0]
	}
	pinned := conf().Annotations[PeerIdentityAnnotation]
	if !strings.HasPrefix(pinned, "ca-sha256:") {
		t.Fatalf("C's identity recorded as %q", pinned)
	}
	for _, args := range [][]string{
		{"network", "init"},
		{"network", "connect", "--server-service-type", "ClusterIP", "--skip-services"},
		{"network", "reset", "--yes"},
	} {
		out, err := run(t, append(append([]string{"--kubeconfig", kcA, "--timeout", "30s"}, args...), "--remote-kubeconfig", kcM)...)
		if err == nil || !strings.Contains(err.Error()+out, "--accept-new-peer-identity") || !strings.Contains(err.Error()+out, "claiming") {
			t.Errorf("%s against the impostor: %v\n%s", args[1], err, out)
		}
		c := conf()
		if c.Annotations[PeerIdentityAnnotation] != pinned || c.Spec.Remote.CIDR.Pod != "10.244.0.0/16" {
			t.Errorf("after %s against the impostor, A's Configuration of C: %v, %+v", args[1], c.Annotations, c.Spec.Remote.CIDR)
		}
		var confs netv1alpha1.ConfigurationList
		apitest.Must(t, m.Client.List(ctx, &confs))
		if len(confs.Items) != 0 {
			t.Errorf("after %s, the impostor got %d Configurations", args[1], len(confs.Items))
		}
		var gcs netv1alpha1.GatewayClientList
		apitest.Must(t, a.Client.List(ctx, &gcs))
		if len(gcs.Items) != 0 {
			t.Errorf("after %s, A has %d GatewayClients", args[1], len(gcs.Items))
		}
	}
	// The peer really changed: said so, and recorded.
	if out, err := run(t, "--kubeconfig", kcA, "network", "init", "--remote-kubeconfig", kcM, "--accept-new-peer-identity"); err != nil {
		t.Fatalf("init with --accept-new-peer-identity: %v\n%s", err, out)
	}
	if c := conf(); c.Annotations[PeerIdentityAnnotation] == pinned || c.Spec.Remote.CIDR.Pod != "10.245.0.0/16" {
		t.Errorf("accepted: %v, %+v", c.Annotations, c.Spec.Remote.CIDR)
	}
	// A Configuration without the record (an older skeinctl, or made by hand) is trusted once.
	c := conf()
	delete(c.Annotations, PeerIdentityAnnotation)
	apitest.Must(t, a.Client.Update(ctx, &c))
	if out, err := run(t, "--kubeconfig", kcA, "network", "init", "--remote-kubeconfig", kcC); err != nil || !strings.Contains(out, "Configuration updated successfully") {
		t.Fatalf("init with C over an unrecorded peering: %v\n%s", err, out)
	}
	if got := conf().Annotations[PeerIdentityAnnotation]; got != pinned {
		t.Errorf("recorded %q, want C's %q", got, pinned)
	}
}
