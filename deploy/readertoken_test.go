package deploy

import (
	"context"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/skein-net/skein/control/identity"
	"github.com/skein-net/skein/control/kube"
	"github.com/skein-net/skein/internal/apitest"
)

// TestReaderTokenAdmission (found by the attack review of issue #40): a peer's services reader
// may ask for tokens for itself (its holder renews the token it reads this cluster with), and
// RBAC cannot bound what it asks: it minted itself ten-year tokens and tokens for other
// audiences (a cloud's workload identity trusting this cluster's issuer). With the chart's
// policy the reader's own requests are held to the lifetime and audiences it was granted
// (recorded on its ServiceAccount); a renewal as the importing controller asks passes, and an
// administrator's grant is not judged.
func TestReaderTokenAdmission(t *testing.T) {
	helmBinary(t)
	env := apiServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	install := env.Namespace(t, "reader-install")
	installChartRBAC(t, env, install, "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
	tenant := env.Namespace(t, "reader-tenant")
	published := env.Namespace(t, "reader-published")
	// The administrator's grant, of two days: not the reader asking, so not judged.
	tok, err := identity.GrantServiceReader(ctx, env.Client, tenant, "peer-x", published, 48*time.Hour, false)
	if err != nil {
		t.Fatalf("an administrator's grant of a two-day reader token: %v", err)
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.CertData, cfg.KeyData, cfg.CertFile, cfg.KeyFile, cfg.BearerToken = nil, nil, "", "", tok.Token
	reader, err := client.New(cfg, client.Options{Scheme: kube.Scheme()})
	apitest.Must(t, err)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: identity.ServiceReaderName("peer-x")}}
	ask := func(secs int64, audiences ...string) error {
		return reader.SubResource("token").Create(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs, Audiences: audiences}})
	}
	refused := func(err error) bool { return err != nil && strings.Contains(err.Error(), "services reader's token") }
	// The policy takes a moment to be in force.
	tenYears := int64(10 * 365 * 24 * 3600)
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := ask(tenYears)
		if refused(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reader asks itself for a ten-year token: %v", err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if err := ask(48*3600 + 3600); !refused(err) {
		t.Errorf("the reader asks itself for a token longer than granted: %v", err)
	}
	for _, aud := range [][]string{{"sts.amazonaws.com"}, {"vault", "https://kubernetes.default.svc.cluster.local"}} {
		if err := ask(3600, aud...); !refused(err) {
			t.Errorf("the reader asks itself for a token for audiences %v: %v", aud, err)
		}
	}
	// A renewal as the importing controller asks for it: the lifetime granted, the API
	// server's audiences (defaulted).
	if err := ask(48 * 3600); err != nil {
		t.Errorf("the reader renews its token: %v", err)
	}
	// Another reader's records are not this one's: a second peer's reader granted ten minutes
	// in the same namespace does not shorten the first one's renewals.
	if _, err := identity.GrantServiceReader(ctx, env.Client, tenant, "peer-y", published, 10*time.Minute, false); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // the policy's parameters are read from a cache
	if err := ask(48 * 3600); err != nil {
		t.Errorf("the reader renews its token beside another reader: %v", err)
	}
}
