package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	"github.com/skein-net/skein/control/controller/mcs"
)

// Multi-cluster services in the mesh: c1 and c2 export shop/orders (two skein-probe servers
// each, answering with their pod name), c0 imports it and calls it by the derived Service's
// ClusterIP through kube-proxy and the fabric.

const shopNS = "shop"

// ordersDeployment runs two skein-probe servers behind Service shop/orders in cluster i.
func (e *env) orders(ctx context.Context, i int) *appsv1.Deployment {
	labels := map[string]string{"app": "orders"}
	two := int32(2)
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: shopNS, Name: "orders"},
		Spec: appsv1.DeploymentSpec{Replicas: &two, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: new(int64),
				Containers: []corev1.Container{{Name: "orders", Image: e.probeImage(), Args: []string{"serve"},
					ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{
						HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(7072)}}}}}}}}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: shopNS, Name: "orders"},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "call", Port: 7070, TargetPort: intstr.FromInt32(7070), Protocol: corev1.ProtocolTCP}}}}
	for _, o := range []client.Object{dep, svc} {
		if err := e.c[i].Create(ctx, o); err != nil {
			e.t.Fatalf("c%d: %v", i, err)
		}
	}
	return dep
}

// readyPods are the names of cluster i's ready orders pods.
func (e *env) readyOrders(ctx context.Context, i int) []string {
	var pods corev1.PodList
	if err := e.c[i].List(ctx, &pods, client.InNamespace(shopNS), client.MatchingLabels{"app": "orders"}); err != nil {
		return nil
	}
	var names []string
	for _, p := range pods.Items {
		if podReady(&p) && p.DeletionTimestamp == nil {
			names = append(names, p.Name)
		}
	}
	sort.Strings(names)
	return names
}

// importedEndpoints are c0's imported endpoints of shop/orders by source cluster id: the ready
// addresses.
func (e *env) importedEndpoints(ctx context.Context) map[string][]string {
	var sls discoveryv1.EndpointSliceList
	if err := e.c[0].List(ctx, &sls, client.InNamespace(shopNS), client.MatchingLabels{mcs.ImportLabel: "orders"}); err != nil {
		return nil
	}
	out := map[string][]string{}
	for _, s := range sls.Items {
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready != nil && *ep.Conditions.Ready {
				out[s.Labels[mcs.SourceClusterLabel]] = append(out[s.Labels[mcs.SourceClusterLabel]], ep.Addresses[0])
			}
		}
	}
	return out
}

// callOrders makes n calls to the ClusterIP from c0's first probe pod and counts the answers
// by pod name; failures are counted and the first three reported.
func (e *env) callOrders(ctx context.Context, target string, n int) (map[string]int, int) {
	ns := e.podNS(0, e.probePods(ctx, 0)[0])
	got, failed := map[string]int{}, 0
	for range n {
		start := time.Now()
		out, err := e.probe(ctx, ns, "call", "--timeout", "3s", "tcp", target)
		if f := strings.Fields(out); err == nil && len(f) >= 1 {
			got[f[0]]++
			continue
		}
		if failed++; failed <= 3 {
			e.reportf("services: call %d to %s failed after %s: %v: %s", failed, target, time.Since(start).Round(time.Millisecond), err, out)
		}
	}
	return got, failed
}

// services: export in c1 and c2, call from c0; scale c1 to 0; unexport in c2; scale c1 back.
func (e *env) services(ctx context.Context) {
	for i := range e.c {
		if err := e.c[i].Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: shopNS}}); err != nil {
			e.t.Fatalf("c%d: %v", i, err)
		}
	}
	deps := map[int]*appsv1.Deployment{1: e.orders(ctx, 1), 2: e.orders(ctx, 2)}
	for _, i := range []int{1, 2} {
		e.waitFor(ctx, 2*time.Minute, fmt.Sprintf("c%d: two orders pods ready", i), func() bool { return len(e.readyOrders(ctx, i)) == 2 })
	}
	start := time.Now()
	for _, i := range []int{1, 2} {
		out := e.run(ctx, i, "skeinctl", "export", "orders", "-n", shopNS, "--wait")
		if !strings.Contains(out, "Valid=True") || !strings.Contains(out, "Conflict=False") {
			e.t.Errorf("c%d: skeinctl export orders --wait:\n%s", i, out)
		}
	}
	id1, id2 := e.clusterID(ctx, 1), e.clusterID(ctx, 2)
	var si mcsv1a1.ServiceImport
	took := e.waitFor(ctx, time.Minute, "c0 imports shop/orders from c1 and c2 with 4 ready endpoints", func() bool {
		eps := e.importedEndpoints(ctx)
		return e.c[0].Get(ctx, client.ObjectKey{Namespace: shopNS, Name: "orders"}, &si) == nil && len(si.Spec.IPs) == 1 &&
			len(si.Status.Clusters) == 2 && len(eps[id1]) == 2 && len(eps[id2]) == 2
	})
	e.reportf("services: c1 and c2 export shop/orders; c0 imported 4 endpoints %.1fs after the first export (%.1fs after both): ServiceImport %v, ClusterIP %s",
		time.Since(start).Seconds(), took.Seconds(), si.Status.Clusters, si.Spec.IPs[0])
	// The endpoints are the exporters' pods as c0 reaches them.
	for i, id := range map[int]string{1: id1, 2: id2} {
		seenAs, _ := e.viewOf(ctx, 0, i)
		var pods corev1.PodList
		if err := e.c[i].List(ctx, &pods, client.InNamespace(shopNS), client.MatchingLabels{"app": "orders"}); err != nil {
			e.t.Fatal(err)
		}
		var want []string
		for _, p := range pods.Items {
			want = append(want, seenAs.of(netip.MustParseAddr(p.Status.PodIP)).String())
		}
		got := e.importedEndpoints(ctx)[id]
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			e.t.Errorf("c0's endpoints from c%d: %v, want its pods as c0 sees them: %v", i, got, want)
		}
	}
	target := si.Spec.IPs[0] + ":7070"
	// kube-proxy programs the new Service on its own period: until then calls are refused
	// ("no endpoints"). Wait for the first answer, then count.
	ns := e.podNS(0, e.probePods(ctx, 0)[0])
	took = e.waitFor(ctx, 30*time.Second, "kube-proxy in c0 serving the imported ClusterIP", func() bool {
		_, err := e.probe(ctx, ns, "call", "--timeout", "1s", "tcp", target)
		return err == nil
	})
	e.reportf("services: the first call to the imported ClusterIP answered %.1fs after the slices were complete (kube-proxy's sync)", took.Seconds())
	byPod, failed := e.callOrders(ctx, target, 100)
	all := append(e.readyOrders(ctx, 1), e.readyOrders(ctx, 2)...)
	for _, p := range all {
		if byPod[p] == 0 {
			e.t.Errorf("100 calls to %s from c0: pod %s never answered (%v, %d failed)", target, p, byPod, failed)
		}
	}
	if failed > 0 {
		e.t.Errorf("100 calls to %s from c0: %d failed (%v)", target, failed, byPod)
	}
	e.reportf("services: 100 calls from c0 to shop/orders at %s answered by %v, %d failed", target, byPod, failed)

	// c1 scales to 0: within 5 s no call reaches c1.
	c1Pods := e.readyOrders(ctx, 1)
	scale := func(i int, n int32) {
		if err := e.c[i].Get(ctx, client.ObjectKeyFromObject(deps[i]), deps[i]); err != nil {
			e.t.Fatal(err)
		}
		deps[i].Spec.Replicas = &n
		if err := e.c[i].Update(ctx, deps[i]); err != nil {
			e.t.Fatal(err)
		}
	}
	scale(1, 0)
	start = time.Now()
	var lastC1 time.Duration
	for time.Since(start) < 8*time.Second {
		got, _ := e.callOrders(ctx, target, 5) // calls to a pod that just went may fail: that is the window measured
		for p := range got {
			if slices.Contains(c1Pods, p) {
				lastC1 = time.Since(start)
			}
		}
	}
	if lastC1 > 5*time.Second {
		e.t.Errorf("c1 scaled to 0: calls still reached c1 %.1fs later", lastC1.Seconds())
	}
	sliceGone := e.waitFor(ctx, 30*time.Second, "c0 has no ready endpoint of c1's", func() bool { return len(e.importedEndpoints(ctx)[id1]) == 0 })
	e.reportf("services: c1 scaled to 0: the last call answered by c1 %.1fs after the scale (none after 5 s), c0's slices had no ready c1 endpoint %.1fs after the 8 s of calls",
		lastC1.Seconds(), sliceGone.Seconds())

	// c2 unexports: its endpoints leave c0; c1 (exporting, 0 pods) keeps the import.
	e.run(ctx, 2, "skeinctl", "unexport", "orders", "-n", shopNS)
	took = e.waitFor(ctx, 30*time.Second, "c0 has no slice from c2 and the import lists c1 alone", func() bool {
		var sls discoveryv1.EndpointSliceList
		return e.c[0].List(ctx, &sls, client.InNamespace(shopNS), client.MatchingLabels{mcs.SourceClusterLabel: id2}) == nil && len(sls.Items) == 0 &&
			e.c[0].Get(ctx, client.ObjectKey{Namespace: shopNS, Name: "orders"}, &si) == nil && len(si.Status.Clusters) == 1 && si.Status.Clusters[0].Cluster == id1
	})
	e.reportf("services: c2 unexported: its slices gone from c0 after %.1fs", took.Seconds())

	// c1 back to two pods, for the disconnect that follows.
	scale(1, 2)
	took = e.waitFor(ctx, 2*time.Minute, "c0 imports c1's two pods again", func() bool { return len(e.importedEndpoints(ctx)[id1]) == 2 })
	e.reportf("services: c1 scaled back to 2: both endpoints in c0 after %.1fs", took.Seconds())
}

// noSlicesInto: after the c0-c1 disconnect, no slice of c0's points into what c0 saw as c1's
// pods (old), and no slice is labelled as coming from c1.
func (e *env) noSlicesInto(ctx context.Context, old view) {
	id1 := e.clusterID(ctx, 1)
	took := e.waitFor(ctx, 30*time.Second, "no slice in c0 from c1 after the disconnect", func() bool {
		var sls discoveryv1.EndpointSliceList
		if e.c[0].List(ctx, &sls) != nil {
			return false
		}
		for _, s := range sls.Items {
			if s.Labels[mcs.SourceClusterLabel] == id1 {
				return false
			}
			for _, ep := range s.Endpoints {
				a := netip.MustParseAddr(ep.Addresses[0])
				for _, m := range old {
					if m.seen.Contains(a) {
						return false
					}
				}
			}
		}
		return true
	})
	e.reportf("services: after the c0-c1 disconnect, no slice in c0 points into c1's former %v (%.1fs)", old[0].seen, took.Seconds())
}
