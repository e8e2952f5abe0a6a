package dns_test

import (
	"context"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	skeindns "github.com/skein-net/skein/control/dns"
	"github.com/skein-net/skein/internal/apitest"
)

const kubeadmCorefile = `.:53 {
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        fallthrough in-addr.arpa ip6.arpa
    }
    forward . /etc/resolv.conf
    cache 30
    reload
}
`

// TestWithBlock: skein's block is appended once, replaced in place, and removed, leaving the
// rest of the Corefile as it was.
func TestWithBlock(t *testing.T) {
	a := skeindns.CorefileBlock([]netip.Addr{netip.MustParseAddr("10.96.0.53")})
	b := skeindns.CorefileBlock([]netip.Addr{netip.MustParseAddr("10.96.0.54"), netip.MustParseAddr("fd00:96::54")})
	if !strings.Contains(a, "clusterset.local:53 {") || !strings.Contains(a, "forward . 10.96.0.53:53\n") {
		t.Errorf("block: %q", a)
	}
	if !strings.Contains(b, "forward . 10.96.0.54:53 [fd00:96::54]:53\n") {
		t.Errorf("block of two families: %q", b)
	}
	once := skeindns.WithBlock(kubeadmCorefile, a)
	if once != kubeadmCorefile+a || skeindns.WithBlock(once, a) != once {
		t.Errorf("appended: %q; again: %q", once, skeindns.WithBlock(once, a))
	}
	replaced := skeindns.WithBlock(once, b)
	if replaced != kubeadmCorefile+b {
		t.Errorf("replaced: %q", replaced)
	}
	// A block in the middle, with the user's own block after it, is replaced in place.
	mid := kubeadmCorefile + a + "example.org:53 {\n    whoami\n}\n"
	if got := skeindns.WithBlock(mid, b); got != kubeadmCorefile+"example.org:53 {\n    whoami\n}\n"+b {
		t.Errorf("replaced from the middle: %q", got)
	}
	if got := skeindns.WithBlock(replaced, ""); got != kubeadmCorefile {
		t.Errorf("removed: %q, want the Corefile as it was", got)
	}
	if got := skeindns.WithBlock(strings.TrimSuffix(kubeadmCorefile, "\n"), a); got != kubeadmCorefile+a {
		t.Errorf("appended to a Corefile without a final newline: %q", got)
	}
}

// TestConfigureCoreDNS: the controller's edit of CoreDNS's ConfigMap, on a real API server.
func TestConfigureCoreDNS(t *testing.T) {
	requireAPI(t)
	ctx := context.Background()
	ns := env.Namespace(t, "coredns")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coredns"}, Data: map[string]string{"Corefile": kubeadmCorefile}}
	apitest.Must(t, env.Client.Create(ctx, cm))
	ip := []netip.Addr{netip.MustParseAddr("10.96.0.53")}
	for i, want := range []bool{true, false} {
		changed, err := skeindns.ConfigureCoreDNS(ctx, env.Client, ns, "coredns", ip)
		if err != nil || changed != want {
			t.Errorf("call %d: changed %v, %v; want %v", i+1, changed, err, want)
		}
	}
	apitest.Must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(cm), cm))
	if cm.Data["Corefile"] != kubeadmCorefile+skeindns.CorefileBlock(ip) {
		t.Errorf("Corefile: %q", cm.Data["Corefile"])
	}
	if changed, err := skeindns.ConfigureCoreDNS(ctx, env.Client, ns, "coredns", nil); err != nil || !changed {
		t.Errorf("removal: changed %v, %v", changed, err)
	}
	apitest.Must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(cm), cm))
	if cm.Data["Corefile"] != kubeadmCorefile {
		t.Errorf("Corefile after removal: %q", cm.Data["Corefile"])
	}
	if _, err := skeindns.ConfigureCoreDNS(ctx, env.Client, ns, "missing", ip); err == nil {
		t.Error("no error for a missing ConfigMap")
	}
}

// TestKeepCoreDNS: the keep-loop sets the block from skein's DNS Service, sets it again when
// someone else rewrites the Corefile, follows a new ClusterIP, and reports a Service without
// one (and keeps trying) without touching the Corefile.
func TestKeepCoreDNS(t *testing.T) {
	requireAPI(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := env.Namespace(t, "keep")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "coredns"}, Data: map[string]string{"Corefile": kubeadmCorefile}}
	apitest.Must(t, env.Client.Create(ctx, cm))
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "skein-dns"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}}}}
	apitest.Must(t, env.Client.Create(ctx, svc))
	var logged atomic.Int64
	log := funcr.New(func(prefix, args string) {
		if strings.Contains(args, "configuring CoreDNS") {
			logged.Add(1)
		}
	}, funcr.Options{})
	kctx, kcancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		skeindns.KeepCoreDNS(kctx, env.Client, client.ObjectKeyFromObject(svc), client.ObjectKeyFromObject(cm), 200*time.Millisecond, log)
	}()
	defer func() { kcancel(); <-done }()
	corefile := func() string {
		var got corev1.ConfigMap
		apitest.Must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(cm), &got))
		return got.Data["Corefile"]
	}
	apitest.Must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(svc), svc))
	want := kubeadmCorefile + skeindns.CorefileBlock([]netip.Addr{netip.MustParseAddr(svc.Spec.ClusterIP)})
	apitest.Eventually(t, "the block set", 10*time.Second, func() bool { return corefile() == want })
	// Someone else rewrites the Corefile without the block.
	apitest.Must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(cm), cm))
	cm.Data["Corefile"] = kubeadmCorefile
	apitest.Must(t, env.Client.Update(ctx, cm))
	apitest.Eventually(t, "the block set again", 10*time.Second, func() bool { return corefile() == want })
	// The Service is gone: reported, the Corefile left as it is.
	apitest.Must(t, env.Client.Delete(ctx, svc))
	apitest.Eventually(t, "the missing Service reported", 10*time.Second, func() bool { return logged.Load() > 0 })
	if got := corefile(); got != want {
		t.Errorf("the Corefile changed while skein's Service was missing: %q", got)
	}
	// Made again with another address: followed.
	svc = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "skein-dns"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}}}}
	apitest.Must(t, env.Client.Create(ctx, svc))
	want = kubeadmCorefile + skeindns.CorefileBlock([]netip.Addr{netip.MustParseAddr(svc.Spec.ClusterIP)})
	apitest.Eventually(t, "the new address followed", 10*time.Second, func() bool { return corefile() == want })
}
