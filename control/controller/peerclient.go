package controller

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
)

// How skein-controller talks to a peer's API server with the services reader's credentials:
// a REST config from the PeerCredentialsLabel Secret, and a transport that refuses redirects
// and stops reading a response beyond its size bound (a peer is untrusted).

// peerRESTConfig reads a credentials Secret: an https server, its CA and a bearer token,
// nothing else (a kubeconfig could run an exec plugin or read files in this pod).
func peerRESTConfig(s *corev1.Secret) (*rest.Config, error) {
	server, ca, token := string(s.Data[PeerServerKey]), s.Data[PeerCAKey], string(s.Data[PeerTokenKey])
	if server == "" || token == "" || len(ca) == 0 {
		return nil, fmt.Errorf("secret %s/%s needs the keys %s, %s and %s", s.Namespace, s.Name, PeerServerKey, PeerCAKey, PeerTokenKey)
	}
	u, err := url.Parse(server)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("secret %s/%s: server %q: want https://HOST[:PORT][/PATH] (the token is never sent in clear)", s.Namespace, s.Name, server)
	}
	// No client timeout: it would cut every watch; the reflectors time their own requests.
	return &rest.Config{Host: "https://" + u.Host + u.EscapedPath(), BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: ca},
		QPS: 20, Burst: 40, UserAgent: "skein-controller (service import)", WrapTransport: peerTransport}, nil
}

// peerTransport is how the controller talks to a peer's API server: no redirect followed, and
// no response longer than MaxPeerResponseBytes read.
func peerTransport(rt http.RoundTripper) http.RoundTripper {
	return limitResponses(refuseRedirects(rt))
}

// MaxPeerResponseBytes bounds one response of a peer's API server (a list, or a watch
// stream over its life). The object cap counts objects, not bytes, and the informers decode
// a whole list before they trim it: 200 published Services of half a megabyte each grew the
// controller's heap by 185 MiB. A peer at its budgets publishes about 3 MB in all; a
// response past the bound fails (a list: the peer is not read and says why; a watch: it
// starts again from where it was).
const MaxPeerResponseBytes = 8 << 20

// errResponseTooLarge: a peer's API server answered with more than MaxPeerResponseBytes.
var errResponseTooLarge = fmt.Errorf("the peer's API server sent more than %d bytes in one response (a list, or a watch over its life): not read further", MaxPeerResponseBytes)

// responseTooLarge: err is, or says it is (client-go passes some errors on as text),
// errResponseTooLarge.
func responseTooLarge(err error) bool {
	return err != nil && (errors.Is(err, errResponseTooLarge) || strings.Contains(err.Error(), errResponseTooLarge.Error()))
}

func limitResponses(rt http.RoundTripper) http.RoundTripper { return responseLimiter{rt} }

type responseLimiter struct{ next http.RoundTripper }

func (r responseLimiter) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	if resp.ContentLength > MaxPeerResponseBytes {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("%s %s: %d bytes: %w", req.Method, req.URL.Redacted(), resp.ContentLength, errResponseTooLarge)
	}
	resp.Body = &limitedBody{rc: resp.Body, left: MaxPeerResponseBytes, what: req.URL.Redacted()}
	return resp, nil
}

// WrappedRoundTripper lets client-go's transport debugging see through the wrapper.
func (r responseLimiter) WrappedRoundTripper() http.RoundTripper { return r.next }

// limitedBody fails a read past left bytes (io.LimitReader would end it quietly: a list cut
// short must not look like a short list).
type limitedBody struct {
	rc   io.ReadCloser
	left int64
	what string
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		var one [1]byte
		if n, err := b.rc.Read(one[:]); n == 0 && err == io.EOF {
			return 0, io.EOF // exactly at the bound
		}
		return 0, fmt.Errorf("%s: %w", b.what, errResponseTooLarge)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

// refuseRedirects makes every redirect a peer's API server answers an error. Go's HTTP client
// follows redirects, and client-go adds the bearer token inside the transport, so a followed
// redirect would send the peer's token, in clear if the target is http, and this controller's
// requests to any address the peer names (this cluster's services, a cloud's metadata server):
// an API server has no reason to redirect a client, so none is followed.
func refuseRedirects(rt http.RoundTripper) http.RoundTripper { return redirectRefuser{rt} }

type redirectRefuser struct{ next http.RoundTripper }

func (r redirectRefuser) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err != nil || resp.StatusCode < 300 || resp.StatusCode > 399 || resp.StatusCode == http.StatusNotModified {
		return resp, err
	}
	_ = resp.Body.Close()
	return nil, fmt.Errorf("%s %s: the peer's API server answered %s with a redirect to %q: not followed (a peer's API server must answer itself)",
		req.Method, req.URL.Redacted(), resp.Status, resp.Header.Get("Location"))
}

// WrappedRoundTripper lets client-go's transport debugging see through the wrapper.
func (r redirectRefuser) WrappedRoundTripper() http.RoundTripper { return r.next }
