package dns

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The block ConfigureCoreDNS keeps in CoreDNS's Corefile, between these two lines.
const (
	blockBegin = "# skein: clusterset.local, forwarded to skein-controller's DNS (managed by skein-controller; edits between these lines are replaced)"
	blockEnd   = "# skein: end"
)

// CorefileBlock is the server block that makes CoreDNS forward the clusterset.local zone to
// skein's DNS at the given addresses (the skein-dns Service's ClusterIPs), with a short cache.
func CorefileBlock(servers []netip.Addr) string {
	var to []string
	for _, a := range servers {
		to = append(to, netip.AddrPortFrom(a, 53).String())
	}
	return fmt.Sprintf("%s\n%s:53 {\n    errors\n    cache 5\n    forward . %s\n}\n%s\n", blockBegin, strings.TrimSuffix(Zone, "."), strings.Join(to, " "), blockEnd)
}

// WithBlock returns corefile with skein's block set to block: replaced where it is, appended
// where it is not, removed when block is empty.
func WithBlock(corefile, block string) string {
	before, rest, found := strings.Cut(corefile, blockBegin)
	after := ""
	if found {
		if _, a, ok := strings.Cut(rest, blockEnd); ok {
			after = strings.TrimPrefix(a, "\n")
		}
	} else {
		before = corefile
	}
	out := before + after
	if block == "" {
		return out
	}
	if out != "" && !strings.HasSuffix(out, "\n") {
		out += "\n"
	}
	return out + block
}

// ConfigureCoreDNS sets skein's block in the Corefile of CoreDNS's ConfigMap (namespace/name,
// key Corefile), forwarding clusterset.local to servers; nil servers removes it. CoreDNS's
// reload plugin applies the change within its interval (30 s by default). It writes only when
// the Corefile changes, and reports whether it did.
func ConfigureCoreDNS(ctx context.Context, c client.Client, namespace, name string, servers []netip.Addr) (bool, error) {
	var cm corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &cm); err != nil {
		return false, fmt.Errorf("CoreDNS ConfigMap %s/%s: %w", namespace, name, err)
	}
	have, ok := cm.Data["Corefile"]
	if !ok {
		return false, fmt.Errorf("CoreDNS ConfigMap %s/%s has no Corefile", namespace, name)
	}
	block := ""
	if len(servers) > 0 {
		block = CorefileBlock(servers)
	}
	want := WithBlock(have, block)
	if want == have {
		return false, nil
	}
	cm.Data["Corefile"] = want
	if err := c.Update(ctx, &cm); err != nil {
		return false, fmt.Errorf("CoreDNS ConfigMap %s/%s: %w", namespace, name, err)
	}
	return true, nil
}

// KeepCoreDNS keeps CoreDNS's ConfigMap (cm, namespace/name) forwarding clusterset.local to
// the ClusterIPs of skein's DNS Service (svc): at once, then every interval until ctx ends, so
// that a Corefile rewritten by someone else (an addon manager, a CoreDNS upgrade) or a Service
// recreated with another address is set right again. Errors are logged and tried again.
func KeepCoreDNS(ctx context.Context, c client.Client, svc, cm client.ObjectKey, interval time.Duration, log logr.Logger) {
	for {
		changed, ips, err := keepOnce(ctx, c, svc, cm)
		switch {
		case err != nil:
			log.Error(err, "configuring CoreDNS")
		case changed:
			log.Info("CoreDNS forwards clusterset.local to skein", "configMap", cm.String(), "servers", ips)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

// keepOnce is one round of KeepCoreDNS.
func keepOnce(ctx context.Context, c client.Client, svcKey, cm client.ObjectKey) (bool, []netip.Addr, error) {
	var svc corev1.Service
	if err := c.Get(ctx, svcKey, &svc); err != nil {
		return false, nil, fmt.Errorf("skein's DNS Service %s: %w", svcKey, err)
	}
	var ips []netip.Addr
	for _, ip := range svc.Spec.ClusterIPs {
		if a, err := netip.ParseAddr(ip); err == nil {
			ips = append(ips, a)
		}
	}
	if len(ips) == 0 {
		return false, nil, fmt.Errorf("skein's DNS Service %s has no ClusterIP", svcKey)
	}
	changed, err := ConfigureCoreDNS(ctx, c, cm.Namespace, cm.Name, ips)
	return changed, ips, err
}
