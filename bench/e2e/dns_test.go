package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	"github.com/skein-net/skein/bench/lab"
)

// clusterDNS: cluster 0 runs cluster DNS as a kubeadm cluster does (CoreDNS, the kube-dns
// Service at the service CIDR's tenth address) and a probe pod, through its resolv.conf as the
// kubelet wrote it, resolves the kubernetes Service by its full name and by a short one (the
// search list), a Service of its own (A, SRV of its named port, a headless one's pod
// addresses), calls it by name, and gets a quick failure for a name outside the cluster (the
// lab's DNS forwards nothing out of the lab).
func (e *env) clusterDNS(ctx context.Context) {
	start := time.Now()
	for i := range e.l.Clusters {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err := e.l.WaitDNS(dctx, i)
		cancel()
		if err != nil {
			e.t.Fatal(err)
		}
	}
	ready := time.Since(start)
	var dnsSvc corev1.Service
	if err := e.c[0].Get(ctx, client.ObjectKey{Namespace: lab.DNSNamespace, Name: lab.DNSService}, &dnsSvc); err != nil {
		e.t.Fatal(err)
	}
	if want := e.l.ClusterDNS()[0].String(); dnsSvc.Spec.ClusterIP != want {
		e.t.Errorf("Service %s/%s has ClusterIP %s, want %s (the service CIDR's tenth address)", lab.DNSNamespace, lab.DNSService, dnsSvc.Spec.ClusterIP, want)
	}

	labels := map[string]string{"app": "probe"}
	ports := []corev1.ServicePort{{Name: "echo", Port: 7070, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(7070)}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "dns-probe", Namespace: "default"},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: ports}}
	headless := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "dns-probe-headless", Namespace: "default"},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: ports, ClusterIP: corev1.ClusterIPNone}}
	for _, s := range []*corev1.Service{svc, headless} {
		if err := e.c[0].Create(ctx, s); err != nil {
			e.t.Fatal(err)
		}
		defer func() { _ = e.c[0].Delete(context.Background(), s) }()
	}
	pods := e.probePods(ctx, 0)
	if len(pods) != 2 {
		e.t.Fatalf("%d ready probe pods in cluster 0, want 2", len(pods))
	}
	src := pods[0]
	var podIPs []string
	for _, p := range pods {
		podIPs = append(podIPs, p.Status.PodIP)
	}
	slices.Sort(podIPs)

	// resolve runs skein-probe resolve in src; it returns the sorted lines and the error.
	resolve := func(args ...string) ([]string, error) {
		out, err := e.l.Exec(ctx, 0, append([]string{"kubectl", "exec", "-n", "default", src.Name, "--", "/usr/local/bin/skein-probe", "resolve", "--timeout", "5s"}, args...)...)
		lines := strings.Fields(strings.TrimSpace(out))
		if len(args) > 0 && args[0] == "--srv" {
			lines = slices.DeleteFunc(strings.Split(strings.TrimSpace(out), "\n"), func(s string) bool { return s == "" })
		}
		slices.Sort(lines)
		return lines, err
	}
	// Lookups right after a Service is created can miss it until CoreDNS's watch has it.
	expect := func(what string, want []string, args ...string) {
		var got []string
		var err error
		deadline := time.Now().Add(30 * time.Second)
		for {
			got, err = resolve(args...)
			if err == nil && slices.Equal(got, want) || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Second)
		}
		if err != nil || !slices.Equal(got, want) {
			e.t.Errorf("%s: skein-probe resolve %s in %s: %q (%v), want %q", what, strings.Join(args, " "), src.Name, got, err, want)
		}
	}
	apiIP := e.l.ServiceCIDRs[0].Masked().Addr().Next().String()
	expect("the kubernetes Service by its full name", []string{apiIP}, "kubernetes.default.svc.cluster.local")
	expect("the kubernetes Service by a short name (the search list)", []string{apiIP}, "kubernetes.default")
	if err := e.c[0].Get(ctx, client.ObjectKeyFromObject(svc), svc); err != nil {
		e.t.Fatal(err)
	}
	expect("a ClusterIP Service", []string{svc.Spec.ClusterIP}, "dns-probe.default.svc.cluster.local")
	expect("a ClusterIP Service by its name in its namespace", []string{svc.Spec.ClusterIP}, "dns-probe")
	expect("the SRV record of the Service's named port", []string{"dns-probe.default.svc.cluster.local. 7070 0 100"},
		"--srv", "_echo._tcp.dns-probe.default.svc.cluster.local")
	expect("a headless Service (one address per ready pod)", podIPs, "dns-probe-headless.default.svc.cluster.local")

	// The data path by name: the Service's ClusterIP through kube-proxy, to one of the probes
	// (once kube-proxy has the new Service's endpoints: until then it refuses the connection).
	var out string
	var err error
	e.waitFor(ctx, 30*time.Second, "a call to dns-probe.default.svc.cluster.local:7070 answered", func() bool {
		out, err = e.l.Exec(ctx, 0, "kubectl", "exec", "-n", "default", src.Name, "--", "/usr/local/bin/skein-probe", "call", "--timeout", "3s", "tcp",
			"dns-probe.default.svc.cluster.local:7070")
		return err == nil
	})
	out = strings.TrimSpace(out)
	if !strings.HasPrefix(out, pods[0].Name+" saw ") && !strings.HasPrefix(out, pods[1].Name+" saw ") {
		e.t.Errorf("skein-probe call tcp dns-probe.default.svc.cluster.local:7070: %q, want a probe pod's answer", out)
	}

	// A name outside the cluster: no resolver outside the lab is asked, the answer is a
	// failure, and it comes at once (no forward waiting on an upstream).
	t0 := time.Now()
	got, err := resolve("skein-lab-outside.example.")
	outside := time.Since(t0)
	if err == nil {
		e.t.Errorf("skein-lab-outside.example. resolved to %q; the lab's DNS must answer nothing outside the cluster", got)
	}
	if outside > 4*time.Second {
		e.t.Errorf("a name outside the cluster took %s to fail, want a quick answer (kubectl exec included)", outside.Round(time.Millisecond))
	}
	// The two replicas spread over the nodes, as kubeadm's preferred anti-affinity asks.
	var dnsPods corev1.PodList
	if err := e.c[0].List(ctx, &dnsPods, client.InNamespace(lab.DNSNamespace), client.MatchingLabels{"k8s-app": lab.DNSService}); err != nil {
		e.t.Fatal(err)
	}
	nodes := map[string]bool{}
	for _, p := range dnsPods.Items {
		nodes[p.Spec.NodeName] = true
	}
	e.reportf("cluster DNS: CoreDNS available in %d clusters %.1fs after the step began (%d pods on %d nodes in cluster 0), kube-dns at %s; "+
		"kubernetes, a Service (A, SRV), a headless Service (%d addresses) resolved in a probe pod; a name outside failed in %s",
		len(e.l.Clusters), ready.Seconds(), len(dnsPods.Items), len(nodes), netip.MustParseAddr(dnsSvc.Spec.ClusterIP), len(podIPs), outside.Round(time.Millisecond))
}

// clustersetDNS: cluster 1 exports a Service of its probes; in cluster 0, whose CoreDNS skein
// configured to forward clusterset.local to skein-controller (the chart's
// multiclusterServices.dns.configureCoreDNS), a probe pod resolves
// NAME.default.svc.clusterset.local to the ServiceImport's ClusterSetIP, the SRV record of its
// named port to that name, calls the service by the name (cluster 1's probes answer), and the
// name is gone (NXDOMAIN) once the export is withdrawn.
func (e *env) clustersetDNS(ctx context.Context) {
	const name = "clusterset-probe"
	labels := map[string]string{"app": "probe"}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "call", Port: 7070, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(7070)}}}}
	if err := e.c[1].Create(ctx, svc); err != nil {
		e.t.Fatal(err)
	}
	defer func() { _ = e.c[1].Delete(context.Background(), svc) }()
	start := time.Now()
	out := e.run(ctx, 1, "skeinctl", "export", name, "-n", "default", "--wait")
	if !strings.Contains(out, "Valid=True") {
		e.t.Fatalf("skeinctl export %s --wait:\n%s", name, out)
	}
	exported := true
	defer func() {
		if exported {
			_, _ = e.l.Exec(context.Background(), 1, "skeinctl", "unexport", name, "-n", "default")
		}
	}()
	var si mcsv1a1.ServiceImport
	e.waitFor(ctx, time.Minute, "cluster 0 imports default/"+name, func() bool {
		return e.c[0].Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, &si) == nil && len(si.Spec.IPs) > 0
	})
	src := e.probePods(ctx, 0)[0]
	fqdn := name + ".default.svc.clusterset.local"
	resolve := func(args ...string) ([]string, error) {
		out, err := e.l.Exec(ctx, 0, append([]string{"kubectl", "exec", "-n", "default", src.Name, "--", "/usr/local/bin/skein-probe", "resolve", "--timeout", "5s"}, args...)...)
		lines := slices.DeleteFunc(strings.Split(strings.TrimSpace(out), "\n"), func(s string) bool { return s == "" })
		slices.Sort(lines)
		return lines, err
	}
	want := slices.Sorted(slices.Values(si.Spec.IPs))
	var got []string
	var err error
	// CoreDNS takes the Corefile skein-controller wrote at its start once the kubelet has
	// updated the ConfigMap's volume and the reload plugin has seen it (up to about 90 s), each
	// replica on its own: wait until every one answers, asking each directly.
	var dnsPods corev1.PodList
	if err := e.c[0].List(ctx, &dnsPods, client.InNamespace(lab.DNSNamespace), client.MatchingLabels{"k8s-app": lab.DNSService}); err != nil || len(dnsPods.Items) == 0 {
		e.t.Fatalf("CoreDNS pods of cluster 0: %v (%d)", err, len(dnsPods.Items))
	}
	took := e.waitFor(ctx, 3*time.Minute, fmt.Sprintf("%s resolves to the ClusterSetIP %v at each of cluster 0's %d CoreDNS pods", fqdn, want, len(dnsPods.Items)), func() bool {
		for _, p := range dnsPods.Items {
			got, err = resolve("--server", net.JoinHostPort(p.Status.PodIP, "53"), fqdn)
			if err != nil || !slices.Equal(got, want) {
				return false
			}
		}
		return true
	})
	// And through the pod's resolv.conf (the kube-dns Service).
	if got, err = resolve(fqdn); err != nil || !slices.Equal(got, want) {
		e.t.Errorf("%s through resolv.conf: %q (%v), want %q", fqdn, got, err, want)
	}
	resolvedIn := time.Since(start)
	srv, err := resolve("--srv", "_call._tcp."+fqdn)
	if wantSRV := []string{fqdn + ". 7070 0 100"}; err != nil || !slices.Equal(srv, wantSRV) {
		e.t.Errorf("SRV _call._tcp.%s: %q (%v), want %q", fqdn, srv, err, wantSRV)
	}
	if _, err := resolve("missing.default.svc.clusterset.local"); err == nil || !strings.Contains(err.Error(), "no such host") {
		e.t.Errorf("missing.default.svc.clusterset.local: %v, want no such host (NXDOMAIN)", err)
	}
	peers := map[string]bool{}
	for _, p := range e.probePods(ctx, 1) {
		peers[p.Name] = true
	}
	e.waitFor(ctx, 30*time.Second, "a call to "+fqdn+":7070 answered", func() bool {
		out, err = e.l.Exec(ctx, 0, "kubectl", "exec", "-n", "default", src.Name, "--", "/usr/local/bin/skein-probe", "call", "--timeout", "3s", "tcp", fqdn+":7070")
		return err == nil
	})
	out = strings.TrimSpace(out)
	answeredBy := strings.Fields(out + " -")[0]
	if !peers[answeredBy] {
		e.t.Errorf("skein-probe call tcp %s:7070 from cluster 0: %q, want a cluster 1 probe's answer", fqdn, out)
	}
	// Withdrawal: the name goes.
	e.run(ctx, 1, "skeinctl", "unexport", name, "-n", "default")
	exported = false
	unexported := time.Now()
	e.waitFor(ctx, time.Minute, fqdn+" NXDOMAIN after the unexport", func() bool {
		_, err := resolve(fqdn)
		return err != nil && strings.Contains(err.Error(), "no such host")
	})
	e.reportf("clusterset.local: %s resolved in cluster 0 to %v (%.1fs after the export, %.1fs of it waiting for CoreDNS), SRV, a call by name answered by %s; NXDOMAIN %.1fs after the unexport",
		fqdn, got, resolvedIn.Seconds(), took.Seconds(), answeredBy, time.Since(unexported).Seconds())
}
