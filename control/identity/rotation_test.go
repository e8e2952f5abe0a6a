package identity_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/skein-net/skein/control/identity"
	"github.com/skein-net/skein/internal/apitest"
)

// TestRotationEndsTokens (found by the attack review of issue #40, medium): rotate-credentials
// makes the reader's ServiceAccount anew under the same name, and the API server keeps
// accepting a token it authenticated for 10 s after its ServiceAccount is gone: a holder of the
// old token asking for tokens during a rotation got one for the new ServiceAccount. Now the
// bindings go first and the new grant waits the cache out: no token issued before a rotation
// leads to a token that works after it.
func TestRotationEndsTokens(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := apitest.Start(t)
	if err := e.EnsureNamespace(ctx, tenantNS); err != nil {
		t.Fatal(err)
	}
	tok, err := identity.GrantServiceReader(ctx, e.Client, tenantNS, peerID, publishedNS, time.Hour, false)
	if err != nil {
		t.Fatal(err)
	}
	readerAs := func(token string) client.Client {
		cfg := rest.CopyConfig(e.Config)
		cfg.CertData, cfg.KeyData, cfg.BearerToken = nil, nil, token
		rc, err := client.New(cfg, client.Options{Scheme: e.Scheme})
		if err != nil {
			t.Fatal(err)
		}
		return rc
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: tenantNS, Name: identity.ServiceReaderName(peerID)}}
	ttl := int64(3600)
	// The attacker: asks for a token with the old one every 100 ms, and keeps the last.
	old := readerAs(tok.Token)
	var mu sync.Mutex
	var stolen string
	actx, stop := context.WithCancel(ctx)
	finished := make(chan struct{})
	attackSA := sa.DeepCopy() // the goroutine's own: the client writes an object's kind
	go func() {
		defer close(finished)
		for actx.Err() == nil {
			tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl}}
			mu.Lock()
			with := old
			mu.Unlock()
			if err := with.SubResource("token").Create(actx, attackSA, tr); err == nil {
				mu.Lock()
				stolen = tr.Status.Token
				mu.Unlock()
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	// Try a few rotations: each lands somewhere in the cache's 10 s cycle.
	var escaped string
	for i := 0; i < 2 && escaped == ""; i++ {
		time.Sleep(time.Duration(1+3*i) * time.Second)
		if _, err := identity.GrantServiceReader(ctx, e.Client, tenantNS, peerID, publishedNS, time.Hour, true); err != nil {
			t.Fatal(err)
		}
		time.Sleep(12 * time.Second) // past the authentication cache of anything issued before
		mu.Lock()
		s := stolen
		mu.Unlock()
		if s == "" {
			continue
		}
		if err := readerAs(s).SubResource("token").Create(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl}}); err == nil {
			escaped = s
			var now corev1.ServiceAccount
			if err := e.Client.Get(ctx, client.ObjectKeyFromObject(sa), &now); err != nil {
				t.Fatal(err)
			}
			t.Logf("rotation %d: a token the old one obtained still works 12 s after it; it is bound to ServiceAccount uid %s, the rotation's new one is %s", i+1, jwtSAUID(t, s), now.UID)
		}
		// The next round attacks with the rotation's own token, as a holder would.
		next := readerAs(s)
		mu.Lock()
		old = next
		mu.Unlock()
	}
	stop()
	<-finished
	if escaped != "" {
		t.Errorf("a holder of the reader's token, asking for tokens while rotate-credentials ran, kept a working token for the new ServiceAccount")
	}
}

func jwtSAUID(t *testing.T, tok string) string {
	parts := strings.Split(tok, ".")
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		K8s struct {
			ServiceAccount struct {
				UID string `json:"uid"`
			} `json:"serviceaccount"`
		} `json:"kubernetes.io"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c.K8s.ServiceAccount.UID
}
