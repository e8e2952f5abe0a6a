package lab

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestClusterDNSAddress: the kube-dns Service sits at the tenth address of each service CIDR,
// as kubeadm puts it.
func TestClusterDNSAddress(t *testing.T) {
	for _, tc := range []struct {
		cidrs []netip.Prefix
		want  []string
	}{
		{[]netip.Prefix{ServiceCIDR}, []string{"10.96.0.10"}},
		{[]netip.Prefix{ServiceCIDR6}, []string{"fd00:96::a"}},
		{[]netip.Prefix{ServiceCIDR, ServiceCIDR6}, []string{"10.96.0.10", "fd00:96::a"}},
		{[]netip.Prefix{netip.MustParsePrefix("10.100.7.0/20")}, []string{"10.100.0.10"}},
	} {
		var got []string
		for _, a := range clusterDNS(tc.cidrs) {
			got = append(got, a.String())
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("clusterDNS(%v) = %v, want %v", tc.cidrs, got, tc.want)
		}
	}
}

// TestKubeletClusterDNS: each node's kubelet gives ClusterFirst pods the cluster DNS Service
// and cluster.local; the node's own resolver (for dnsPolicy Default) has no search list that
// would repeat cluster.local in every pod's.
func TestKubeletClusterDNS(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    NodeConfig
		want string
	}{
		{"IPv4", NodeConfig{ClusterDNS: netip.MustParseAddr("10.96.0.10")}, "10.96.0.10"},
		{"IPv6 only", NodeConfig{IPv6Only: true, ClusterDNS: netip.MustParseAddr("fd00:96::a")}, "fd00:96::a"},
		{"none", NodeConfig{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.c
			c.Name, c.Dir, c.Registry = "n0", t.TempDir(), RegistryAddr
			if err := c.writeConfigs(); err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(filepath.Join(c.Dir, "kubelet.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			var kc struct {
				ClusterDNS    []string `json:"clusterDNS"`
				ClusterDomain string   `json:"clusterDomain"`
			}
			if err := yaml.Unmarshal(data, &kc); err != nil {
				t.Fatalf("kubelet.yaml: %v\n%s", err, data)
			}
			var want []string
			if tc.want != "" {
				want = []string{tc.want}
			}
			if !slices.Equal(kc.ClusterDNS, want) || kc.ClusterDomain != ClusterDomain {
				t.Errorf("kubelet clusterDNS %q, clusterDomain %q; want %q, %q\n%s", kc.ClusterDNS, kc.ClusterDomain, want, ClusterDomain, data)
			}
			resolv, err := os.ReadFile(filepath.Join(c.Dir, "resolv.conf"))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(resolv), "search") || !strings.HasPrefix(string(resolv), "nameserver ") {
				t.Errorf("the node's resolv.conf: %q, want a nameserver and no search list", resolv)
			}
		})
	}
}

// TestCorefile: the lab's Corefile serves cluster.local and the reverse zones from the API, and
// sends nothing out of the lab: no forward, no other upstream.
func TestCorefile(t *testing.T) {
	cf := Corefile("clusterset.local:53 {\n    forward . 10.96.0.53\n}\n")
	main, extra, _ := strings.Cut(cf, "\n}\n")
	for _, want := range []string{".:53 {", "kubernetes cluster.local in-addr.arpa ip6.arpa {", "fallthrough in-addr.arpa ip6.arpa", "health", "ready", "loop", "cache 30"} {
		if !strings.Contains(main, want) {
			t.Errorf("the Corefile lacks %q:\n%s", want, cf)
		}
	}
	for _, bad := range []string{"forward", "/etc/resolv.conf", "grpc ", "proxy "} {
		if strings.Contains(main, bad) {
			t.Errorf("the Corefile's main block has %q (a way out of the lab):\n%s", bad, cf)
		}
	}
	if !strings.HasPrefix(extra, "clusterset.local:53 {") {
		t.Errorf("the extra server block is not a block of its own after the main one:\n%s", cf)
	}
	if strings.Count(cf, "{") != strings.Count(cf, "}") {
		t.Errorf("unbalanced braces:\n%s", cf)
	}
}
