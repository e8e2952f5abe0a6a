package controller

import (
	"encoding/base64"
	"testing"
	"time"
)

// TestTokenClaims: what the renewal reads of a token, and when it renews: a service account
// JWT's issue and expiry times and account; anything else (a static token of the manual flow,
// a token without a lifetime or an account) is never renewed.
func TestTokenClaims(t *testing.T) {
	jwt := func(claims string) string {
		return "e30." + base64.RawURLEncoding.EncodeToString([]byte(claims)) + ".c2ln"
	}
	notJSON := jwt(`{"iat":1000,"exp":1000+0,"kubernetes.io":{}}`)
	if _, err := readTokenClaims(notJSON); err == nil {
		t.Error("claims that are not JSON accepted")
	}
	c, err := readTokenClaims(jwt(`{"iat":1000,"exp":87400,"kubernetes.io":{"namespace":"liqo-tenant","serviceaccount":{"name":"skein-service-reader-a"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.K8s.Namespace != "liqo-tenant" || c.K8s.ServiceAccount.Name != "skein-service-reader-a" {
		t.Errorf("claims %+v", c)
	}
	if got, want := renewAt(c, DefaultTokenRenewFraction), time.Unix(1000+57600, 0); !got.Equal(want) {
		t.Errorf("a day's token renewed at %v, want %v (two thirds of it)", got, want)
	}
	for _, bad := range []string{
		"a-static-token",
		"a.b.c",
		jwt(`{"iat":1000,"exp":1000,"kubernetes.io":{"namespace":"n","serviceaccount":{"name":"s"}}}`),
		jwt(`{"iat":1000,"exp":2000,"kubernetes.io":{"namespace":"","serviceaccount":{"name":"s"}}}`),
		jwt(`{"iat":1000,"exp":2000,"kubernetes.io":{"namespace":"n","serviceaccount":{"name":""}}}`),
	} {
		if _, err := readTokenClaims(bad); err == nil {
			t.Errorf("token %q: claims accepted, want refused (never renewed)", bad)
		}
	}
}
