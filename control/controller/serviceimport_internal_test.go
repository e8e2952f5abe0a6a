package controller

import (
	"context"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
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

// TestPeerRedirectRefused: a peer's API server that answers with a redirect (to an address in
// this cluster's network, the cloud's metadata service, or a server that collects tokens) is
// not followed: the controller sends nothing there, neither the request nor the peer's token,
// and the request fails saying why.
func TestPeerRedirectRefused(t *testing.T) {
	var reached atomic.Int32
	var tokenSeen atomic.Bool
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		if strings.Contains(r.Header.Get("Authorization"), "peer-token") {
			tokenSeen.Store(true)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"ServiceExportList","apiVersion":"multicluster.x-k8s.io/v1alpha1","items":[]}`))
	}))
	defer target.Close()
	for _, code := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		peer := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, target.URL+r.URL.RequestURI(), code)
		}))
		ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: peer.Certificate().Raw})
		cfg, err := peerRESTConfig(&corev1.Secret{Data: map[string][]byte{PeerServerKey: []byte(peer.URL), PeerCAKey: ca, PeerTokenKey: []byte("peer-token")}})
		if err != nil {
			t.Fatal(err)
		}
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Get(peer.URL + "/apis/multicluster.x-k8s.io/v1alpha1/serviceexports")
		if err == nil {
			resp.Body.Close()
			t.Errorf("%d: the redirect was followed (%s from %s)", code, resp.Status, resp.Request.URL)
		} else if !strings.Contains(err.Error(), "redirect") {
			t.Errorf("%d: %v does not name the redirect", code, err)
		}
		// Through the clients the exporter uses too (discovery, typed lists).
		scheme := runtime.NewScheme()
		_ = mcsv1a1.Install(scheme)
		if c, err := client.New(cfg, client.Options{Scheme: scheme}); err == nil {
			if err := c.List(context.Background(), &mcsv1a1.ServiceExportList{}); err == nil {
				t.Errorf("%d: a list through the redirect succeeded", code)
			}
		}
		peer.Close()
	}
	if n := reached.Load(); n != 0 || tokenSeen.Load() {
		t.Errorf("the redirect target got %d requests (the peer's token among them: %v)", n, tokenSeen.Load())
	}
}

// TestPeerResponseLimited: a peer's API server cannot make the controller read (and decode)
// more than MaxPeerResponseBytes in one response, whether it says so in advance
// (Content-Length) or streams it (a watch, chunked); a response at the bound is read whole.
func TestPeerResponseLimited(t *testing.T) {
	list := func(n int) []byte {
		// A ServiceExportList padded with an annotation of n bytes.
		return []byte(`{"kind":"ServiceExportList","apiVersion":"multicluster.x-k8s.io/v1alpha1","metadata":{},"items":[{"metadata":{"name":"a","namespace":"b","annotations":{"x":"` +
			strings.Repeat("y", n) + `"}}}]}`)
	}
	var mu sync.Mutex
	var body []byte
	chunked := false
	set := func(b []byte, c bool) { mu.Lock(); body, chunked = b, c; mu.Unlock() }
	peer := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		body, chunked := body, chunked
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if chunked {
			for off := 0; off < len(body); off += 1 << 20 {
				_, _ = w.Write(body[off:min(off+1<<20, len(body))])
				w.(http.Flusher).Flush()
			}
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	}))
	defer peer.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: peer.Certificate().Raw})
	cfg, err := peerRESTConfig(&corev1.Secret{Data: map[string][]byte{PeerServerKey: []byte(peer.URL), PeerCAKey: ca, PeerTokenKey: []byte("t")}})
	if err != nil {
		t.Fatal(err)
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	get := func() (int, error) {
		resp, err := hc.Get(peer.URL + "/apis/multicluster.x-k8s.io/v1alpha1/serviceexports")
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return len(b), err
	}
	for _, c := range []struct {
		size    int
		chunked bool
		ok      bool
	}{
		{1 << 10, false, true},
		{MaxPeerResponseBytes + 1, false, false},
		{MaxPeerResponseBytes + 1, true, false},
		{4 * MaxPeerResponseBytes, true, false},
	} {
		body := list(c.size)
		set(body, c.chunked)
		n, err := get()
		switch {
		case c.ok && err != nil:
			t.Errorf("%d bytes (chunked %v): %v", len(body), c.chunked, err)
		case !c.ok && err == nil:
			t.Errorf("%d bytes (chunked %v) read whole: %d", len(body), c.chunked, n)
		case !c.ok && n > MaxPeerResponseBytes:
			t.Errorf("%d bytes (chunked %v): %d read, more than the bound", len(body), c.chunked, n)
		case !c.ok && !strings.Contains(err.Error(), "more than"):
			t.Errorf("%d bytes: %v does not say why", len(body), err)
		}
	}
	// Exactly at the bound.
	exact := list(0)
	exact = append(exact, make([]byte, MaxPeerResponseBytes-len(exact))...)
	set(exact, true)
	if n, err := get(); err != nil || n != MaxPeerResponseBytes {
		t.Errorf("a response of exactly %d bytes: %d, %v", MaxPeerResponseBytes, n, err)
	}
}

// TestPublishedRoundTrip: what a peer reads of a PublishedService is the Service as the import
// uses it, traffic policies included (the ServiceImport carries them: KEP-1645).
func TestPublishedRoundTrip(t *testing.T) {
	local, preferClose, one := corev1.ServiceInternalTrafficPolicyLocal, "PreferClose", int32(30)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: corev1.ClusterIPNone, SessionAffinity: corev1.ServiceAffinityClientIP,
			SessionAffinityConfig: &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &one}},
			InternalTrafficPolicy: &local, TrafficDistribution: &preferClose,
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}}
	key := types.NamespacedName{Namespace: "shop", Name: "orders"}
	exp := &mcsv1a1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders", CreationTimestamp: metav1.Now()},
		Spec: mcsv1a1.ServiceExportSpec{ExportedLabels: map[string]string{"tier": "gold"}, ExportedAnnotations: map[string]string{"owner": "shop-team"}}}
	p := publishedService("skein-published", key, exp, svc)
	got := serviceOfPublished(p)
	want := trimService(svc)
	want.ResourceVersion = ""
	if !equality.Semantic.DeepEqual(got.Spec, want.Spec) {
		t.Errorf("read back %+v, want %+v", got.Spec, want.Spec)
	}
	if e := exportOfPublished(p); !equality.Semantic.DeepEqual(e.Spec, exp.Spec) {
		t.Errorf("the export read back %+v, want %+v", e.Spec, exp.Spec)
	}
}
