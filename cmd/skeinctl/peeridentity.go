package main

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
)

// A cluster id is self-declared: any cluster's administrator may write any id into its
// liqo-clusterid-configmap. A peering is found by that id (its namespace, its objects, the
// services reader), so a cluster claiming the id of a cluster already peered here would take
// over that peering when an operator runs a network command against it: its Configuration
// (routes to the other cluster's pods sent to the impostor), its gateways and its reader.
//
// So a peering records who the peer is in a way the peer cannot fake: the CA its API server
// proved itself with when the peering was made, and the name it proved (a server can present
// a certificate of a CA for a name only if that CA issued one: where clusters share a CA, an
// organisation's or a fleet's issuer, the CA alone would let any of them stand for another). Every network command that acts on both clusters compares the
// peer it reached with the record, and refuses a different one unless told that the peer
// really changed (rebuilt, or its CA rotated).

// PeerIdentityAnnotation is set on a peering's Configuration: the identity (apiIdentity) of
// the peer's API server when the peering was set up.
const PeerIdentityAnnotation = "skein.dev/peer-identity"

// apiIdentity is how the API server cfg reaches proves itself: the SHA-256 of its CA bundle
// (each certificate, parsed, in a stable order, so formatting and order do not matter) and
// the server name its certificate was verified for (the kubeconfig's tls-server-name, else
// the host without its port); without a CA in the kubeconfig (the system's roots verify the
// server), the host name those roots verified; with TLS verification off, only the host,
// marked unverified.
func apiIdentity(cfg *rest.Config) (string, error) {
	host, name := cfg.Host, cfg.Host
	if u, err := url.Parse(cfg.Host); err == nil && u.Host != "" {
		host, name = u.Host, u.Hostname()
	}
	if cfg.ServerName != "" {
		name = cfg.ServerName
	}
	if cfg.Insecure {
		return "unverified:" + host, nil
	}
	ca := cfg.CAData
	if len(ca) == 0 && cfg.CAFile != "" {
		b, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return "", fmt.Errorf("reading the CA of %s: %w", cfg.Host, err)
		}
		ca = b
	}
	if len(ca) == 0 {
		return "tls-host:" + host, nil
	}
	var ders [][]byte
	for rest := ca; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			return "", fmt.Errorf("the CA of %s: %w", cfg.Host, err)
		}
		ders = append(ders, b.Bytes)
	}
	if len(ders) == 0 {
		return "", fmt.Errorf("the CA of %s holds no PEM certificate", cfg.Host)
	}
	slices.SortFunc(ders, func(a, b []byte) int { return slices.Compare(a, b) })
	ders = slices.CompactFunc(ders, slices.Equal)
	h := sha256.New()
	for _, d := range ders {
		_ = binary.Write(h, binary.BigEndian, uint32(len(d)))
		h.Write(d)
	}
	return "ca-sha256:" + hex.EncodeToString(h.Sum(nil)) + identityNameSep + name, nil
}

// identityNameSep separates an identity's CA from the server name it was verified for.
// Records made before the name was part of the identity have none.
const identityNameSep = "/name:"

// sameIdentity: an identity recorded (have) is the one proved now (want). A record without a
// server name (made by an older skeinctl) is compared by its CA alone, and is then recorded
// again with the name.
func sameIdentity(have, want string) bool {
	if have == want {
		return true
	}
	ca, _, _ := strings.Cut(want, identityNameSep)
	return !strings.Contains(have, identityNameSep) && strings.HasPrefix(have, "ca-sha256:") && have == ca
}

// checkPeerIdentity refuses to act on s's peering with s.peer when a Configuration here
// records another identity for the peer's cluster id (any namespace: the manual flow puts
// peerings where the user says). A Configuration without the record (made by hand, or by an
// older skeinctl) is trusted, and init records the identity on it.
func checkPeerIdentity(ctx context.Context, s *side, accept bool) error {
	want, err := apiIdentity(s.peer.api)
	if err != nil {
		return err
	}
	s.peer.identity = want
	var confs netv1alpha1.ConfigurationList
	err = s.c.List(ctx, &confs, client.MatchingLabels{netv1alpha1.RemoteClusterIDLabel: s.peer.id})
	if apierrors.IsForbidden(err) && s.ns != "" {
		// Allowed to read only the peering's namespace: the check covers that one.
		err = s.c.List(ctx, &confs, client.InNamespace(s.ns), client.MatchingLabels{netv1alpha1.RemoteClusterIDLabel: s.peer.id})
	}
	if err != nil {
		return fmt.Errorf("checking who cluster %s is: %w", s.peer.id, err)
	}
	for _, c := range confs.Items {
		have := c.Annotations[PeerIdentityAnnotation]
		if have == "" || sameIdentity(have, want) || accept {
			continue
		}
		haveCA, haveName, _ := strings.Cut(have, identityNameSep)
		wantCA, wantName, _ := strings.Cut(want, identityNameSep)
		if haveCA == wantCA && haveName != wantName {
			return fmt.Errorf("cluster id %s is already peered here (Configuration %s/%s) with the API server %s, but the %s kubeconfig now reaches %s, "+
				"with a certificate of the same CA: where clusters share a CA another cluster could be claiming that id. Check the %s kubeconfig; if it is the same cluster "+
				"at another address, use the address of the peering (%s) or run the command again with --accept-new-peer-identity",
				s.peer.id, c.Namespace, c.Name, haveName, s.peer.label, wantName, s.peer.label, haveName)
		}
		return fmt.Errorf("cluster id %s is already peered here (Configuration %s/%s) with a cluster whose API server proved itself as %s, "+
			"but the %s cluster reached now proves itself as %s: another cluster may be claiming that id (a cluster id is only what the cluster says it is). "+
			"Check the %s kubeconfig; if that peer really was rebuilt or its CA rotated, run the command again with --accept-new-peer-identity",
			s.peer.id, c.Namespace, c.Name, have, s.peer.label, want, s.peer.label)
	}
	return nil
}
