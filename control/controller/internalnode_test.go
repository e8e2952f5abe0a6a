package controller_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crconfig "sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/controller"
	"github.com/skein-net/skein/control/controller/ipam"
	"github.com/skein-net/skein/internal/apitest"
)

// startInternalNodes runs the InternalNode reconciler with the external CIDR 10.70.0.0/16 and,
// when ext6 is not empty, the IPv6 external CIDR ext6.
func startInternalNodes(t *testing.T, env *apitest.Env, ext6 string) func() {
	skip := true
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: crconfig.Controller{SkipNameValidation: &skip}})
	if err != nil {
		t.Fatal(err)
	}
	ov, _ := ipam.NewHosts(netip.MustParsePrefix("10.80.0.0/16"), 0)
	ext, _ := ipam.NewHosts(netip.MustParsePrefix("10.70.0.0/16"), 0)
	var ext6Hosts *ipam.Hosts
	if ext6 != "" {
		ext6Hosts, _ = ipam.NewHosts(netip.MustParsePrefix(ext6), 0)
	}
	overlay := &controller.OverlayAddresses{Hosts: ov, Reader: mgr.GetAPIReader()}
	if err := (&controller.InternalNodeReconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Overlay: overlay, External: ext, External6: ext6Hosts}).SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return func() { cancel(); <-done }
}

// waitInode waits for the InternalNode of name with an overlay and an external address, and
// an IPv6 external address when want6 (none when not).
func waitInode(t *testing.T, c client.Client, name string, want6 bool) *netv1alpha1.InternalNode {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		in := &netv1alpha1.InternalNode{}
		if err := c.Get(context.Background(), client.ObjectKey{Name: name}, in); err == nil && in.Spec.OverlayIP != nil && in.Spec.ExternalIP != nil && (in.Spec.ExternalIP6 != nil) == want6 {
			return in
		}
		if time.Now().After(deadline) {
			t.Fatalf("no InternalNode %s", name)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestInternalNodes(t *testing.T) {
	env := apitest.Start(t)
	c := env.Client
	ctx := context.Background()
	// A dual-stack cluster: an IPv6 external address per node too.
	stop := startInternalNodes(t, env, "fd00:70::/112")
	prefix := fmt.Sprintf("n%d", time.Now().UnixNano()%100000)
	seen := map[netv1alpha1.IP]string{}
	var names []string
	for i := range 3 {
		name := fmt.Sprintf("%s-%d", prefix, i)
		names = append(names, name)
		if err := c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	first := map[string]*netv1alpha1.InternalNode{}
	for _, n := range names {
		in := waitInode(t, c, n, true)
		first[n] = in
		if a := netip.MustParseAddr(string(*in.Spec.ExternalIP6)); !netip.MustParsePrefix("fd00:70::/112").Contains(a) {
			t.Errorf("%s: IPv6 external address %s outside fd00:70::/112", n, a)
		}
		for _, ip := range []netv1alpha1.IP{*in.Spec.OverlayIP, *in.Spec.ExternalIP, *in.Spec.ExternalIP6} {
			if other, dup := seen[ip]; dup {
				t.Errorf("%s and %s both got %s", n, other, ip)
			}
			seen[ip] = n
		}
		if len(in.OwnerReferences) != 1 || in.OwnerReferences[0].Kind != "Node" {
			t.Errorf("owner %v", in.OwnerReferences)
		}
	}
	// Restart: addresses stay.
	stop()
	stop = startInternalNodes(t, env, "fd00:70::/112")
	defer func() { stop() }()
	extra := prefix + "-x"
	if err := c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: extra}}); err != nil {
		t.Fatal(err)
	}
	x := waitInode(t, c, extra, true)
	for _, ip := range []netv1alpha1.IP{*x.Spec.OverlayIP, *x.Spec.ExternalIP6} {
		if _, dup := seen[ip]; dup {
			t.Errorf("after a restart %s got %s, already given out", extra, ip)
		}
	}
	for _, n := range names {
		if in := waitInode(t, c, n, true); *in.Spec.OverlayIP != *first[n].Spec.OverlayIP || *in.Spec.ExternalIP6 != *first[n].Spec.ExternalIP6 {
			t.Errorf("%s moved across a restart", n)
		}
	}
	// Node removed: its InternalNode goes.
	if err := c.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: names[0]}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := c.Get(ctx, client.ObjectKey{Name: names[0]}, &netv1alpha1.InternalNode{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("InternalNode of a deleted Node stays")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The cluster without IPv6 pods any more (no IPv6 external CIDR): the IPv6 external
	// addresses go, the IPv4 ones stay.
	stop()
	stop = startInternalNodes(t, env, "")
	for _, n := range names[1:] {
		if in := waitInode(t, c, n, false); *in.Spec.ExternalIP != *first[n].Spec.ExternalIP {
			t.Errorf("%s: external address %s, was %s", n, *in.Spec.ExternalIP, *first[n].Spec.ExternalIP)
		}
	}
	for _, n := range append(names[1:], extra) {
		c.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}})
		c.Delete(ctx, &netv1alpha1.InternalNode{ObjectMeta: metav1.ObjectMeta{Name: n}})
	}
}
