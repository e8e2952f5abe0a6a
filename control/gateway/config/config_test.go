package config_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/skein-net/skein/control/gateway/config"
)

func TestUAPIUpdate(t *testing.T) {
	k1, _ := config.ParseKey("wOQfw2x5vxkjlCxwLbHc3p9sD/k8BnX1kE9sQ4ZlV2w=")
	k2, _ := config.ParseKey("HzH1bbs1WBq8nWS8qDXzDIVBOtKkVDjQbc8v4d1O9Dw=")
	base := config.Gateway{PrivateKey: k1, ListenPort: 51820, PeerPublicKey: k2, Keepalive: 25,
		AllowedIPs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}}
	same := base
	if u := same.UAPIUpdate(&base); u != "" {
		t.Errorf("no change rendered %q", u)
	}
	moreIPs := base
	moreIPs.AllowedIPs = append([]netip.Prefix{}, base.AllowedIPs...)
	moreIPs.AllowedIPs = append(moreIPs.AllowedIPs, netip.MustParsePrefix("10.70.0.0/16"))
	u := moreIPs.UAPIUpdate(&base)
	if strings.Contains(u, "replace_peers") || !strings.Contains(u, "allowed_ip=10.70.0.0/16") || strings.Contains(u, "private_key") {
		t.Errorf("allowed IPs change rendered %q; the session must survive it", u)
	}
	newPeer := base
	newPeer.PeerPublicKey = k1.Public()
	if u := newPeer.UAPIUpdate(&base); !strings.Contains(u, "replace_peers=true") {
		t.Errorf("peer key change rendered %q", u)
	}
	if u := base.UAPIUpdate(nil); !strings.HasPrefix(u, "private_key=") {
		t.Errorf("first config %q", u)
	}
	if _, err := config.ParseKey("short"); err == nil {
		t.Error("bad key accepted")
	}
}
