package controller

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestPeerRESTConfig: a peer's credentials give an https server, its CA and a token, nothing
// else: the token never goes in clear or to a URL carrying someone else's user or query.
func TestPeerRESTConfig(t *testing.T) {
	secret := func(server string) *corev1.Secret {
		return &corev1.Secret{Data: map[string][]byte{PeerServerKey: []byte(server), PeerCAKey: []byte("ca"), PeerTokenKey: []byte("token")}}
	}
	for server, want := range map[string]string{
		"https://192.168.11.10:6443":             "https://192.168.11.10:6443",
		"https://rancher.example/k8s/clusters/c": "https://rancher.example/k8s/clusters/c",
		"http://192.168.11.10:6443":              "",
		"https://user:pw@192.168.11.10":          "",
		"https://192.168.11.10?x=1":              "",
		"192.168.11.10:6443":                     "",
		"":                                       "",
	} {
		cfg, err := peerRESTConfig(secret(server))
		switch {
		case want == "" && err == nil:
			t.Errorf("%q accepted as %q", server, cfg.Host)
		case want != "" && (err != nil || cfg.Host != want || cfg.BearerToken != "token" || string(cfg.CAData) != "ca" || cfg.Timeout != 0):
			t.Errorf("%q: %+v, %v; want host %s, the token and CA, no client timeout", server, cfg, err, want)
		case want == "" && !strings.Contains(err.Error(), "https://") && server != "":
			t.Errorf("%q: %v does not say what is wanted", server, err)
		}
	}
	if _, err := peerRESTConfig(&corev1.Secret{Data: map[string][]byte{PeerServerKey: []byte("https://a")}}); err == nil {
		t.Error("credentials without CA and token accepted")
	}
}
