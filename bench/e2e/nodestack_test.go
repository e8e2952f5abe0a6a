package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
)

// What only the real node stack can show: the gateway as the container runtime runs it, kubectl
// logs and exec, the gateway's memory limit under load, and the node stack's own restarts.

// activeGateway is cluster i's active gateway pod.
func (e *env) activeGateway(ctx context.Context, i int) corev1.Pod {
	var pods corev1.PodList
	if err := e.c[i].List(ctx, &pods, client.MatchingLabels{"networking.liqo.io/active": "true"}); err != nil || len(pods.Items) != 1 {
		e.t.Fatalf("cluster %d: want one active gateway pod, got %d (%v)", i, len(pods.Items), err)
	}
	return pods.Items[0]
}

// activeGatewayFor is cluster at's active gateway towards cluster of (in the tenant
// namespace of the peering, where its Configuration is).
func (e *env) activeGatewayFor(ctx context.Context, at, of int) corev1.Pod {
	e.t.Helper()
	var confs netv1alpha1.ConfigurationList
	if err := e.c[at].List(ctx, &confs, client.MatchingLabels{"liqo.io/remote-cluster-id": e.clusterID(ctx, of)}); err != nil || len(confs.Items) != 1 {
		e.t.Fatalf("cluster %d: want one Configuration for cluster %d, got %d (%v)", at, of, len(confs.Items), err)
	}
	var pods corev1.PodList
	if err := e.c[at].List(ctx, &pods, client.InNamespace(confs.Items[0].Namespace), client.MatchingLabels{"networking.liqo.io/active": "true"}); err != nil || len(pods.Items) != 1 {
		e.t.Fatalf("cluster %d: want one active gateway pod in %s, got %d (%v)", at, confs.Items[0].Namespace, len(pods.Items), err)
	}
	return pods.Items[0]
}

// gatewayProcess is the skein-gateway process of a gateway pod, as the machine sees it.
func (e *env) gatewayProcess(i int, p corev1.Pod) int {
	for _, s := range e.containerPIDs(i, p) {
		pid, _ := strconv.Atoi(s)
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); filepath.Base(exe) == "skein-gateway" {
			return pid
		}
	}
	e.t.Fatalf("no skein-gateway process in pod %s", p.Name)
	return 0
}

// containerSecurity: the gateway runs with no capability, as a non-root user, on a read-only
// root file system, under the memory limit of the chart (a cgroup the kernel enforces).
func (e *env) containerSecurity(ctx context.Context) {
	for i := range 2 {
		gw := e.activeGateway(ctx, i)
		pid := e.gatewayProcess(i, gw)
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			e.t.Fatal(err)
		}
		fields := map[string]string{}
		for _, l := range strings.Split(string(status), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok {
				fields[k] = strings.TrimSpace(v)
			}
		}
		for _, k := range []string{"CapEff", "CapPrm", "CapAmb"} {
			if fields[k] != "0000000000000000" {
				e.t.Errorf("cluster %d gateway %s: %s %s, want none", i, gw.Name, k, fields[k])
			}
		}
		for _, id := range strings.Fields(fields["Uid"]) {
			if id == "0" {
				e.t.Errorf("cluster %d gateway %s runs as root (Uid %s)", i, gw.Name, fields["Uid"])
			}
		}
		if fields["NoNewPrivs"] != "1" {
			e.t.Errorf("cluster %d gateway %s: NoNewPrivs %s, want 1 (allowPrivilegeEscalation: false)", i, gw.Name, fields["NoNewPrivs"])
		}
		rootOpts := ""
		mi, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
		if err != nil {
			e.t.Fatal(err)
		}
		for _, l := range strings.Split(string(mi), "\n") {
			if f := strings.Fields(l); len(f) > 5 && f[4] == "/" {
				rootOpts = f[5]
			}
		}
		if !strings.HasPrefix(rootOpts, "ro") {
			e.t.Errorf("cluster %d gateway %s: root file system mounted %q, want read-only", i, gw.Name, rootOpts)
		}
		limit := e.memoryCgroupFile(pid, "memory.limit_in_bytes")
		want := gw.Spec.Containers[0].Resources.Limits.Memory()
		if want.IsZero() || limit != want.Value() {
			e.t.Errorf("cluster %d gateway %s: memory cgroup limit %d bytes, want the pod's limit %s", i, gw.Name, limit, want)
		}
		e.reportf("node stack: c%d gateway %s (pid %d on %s): Uid %s, CapEff %s, NoNewPrivs %s, root %s, memory limit %d MiB (cgroup)",
			i, gw.Name, pid, gw.Spec.NodeName, fields["Uid"], fields["CapEff"], fields["NoNewPrivs"], rootOpts, limit>>20)
	}
}

// memoryCgroupFile reads an integer file of a process's cgroup v1 memory controller.
func (e *env) memoryCgroupFile(pid int, name string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		e.t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) == 3 && (f[1] == "memory" || strings.Contains(","+f[1]+",", ",memory,")) {
			v, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", f[2], name))
			if err != nil {
				e.t.Fatal(err)
			}
			n, err := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
			if err != nil {
				e.t.Fatal(err)
			}
			return n
		}
	}
	e.t.Fatalf("process %d is in no memory cgroup", pid)
	return 0
}

// logsExec: kubectl logs of a gateway and kubectl exec into a probe pod work (API server ->
// kubelet -> containerd's stream server).
func (e *env) logsExec(ctx context.Context) {
	gw := e.activeGateway(ctx, 0)
	out := e.run(ctx, 0, "kubectl", "logs", "-n", gw.Namespace, gw.Name, "--tail", "5")
	if strings.TrimSpace(out) == "" {
		e.t.Errorf("kubectl logs %s: no output", gw.Name)
	}
	src := e.probePods(ctx, 0)[0]
	dstAs, _ := e.peerView(ctx, 0)
	dst := e.probePods(ctx, 1)[0]
	target := dstAs.of(netip.MustParseAddr(dst.Status.PodIP)).String() + ":7070"
	out = e.run(ctx, 0, "kubectl", "exec", "-n", "default", src.Name, "--", "/usr/local/bin/skein-probe", "call", "--timeout", "3s", "tcp", target)
	if !strings.HasPrefix(strings.TrimSpace(out), dst.Name+" saw ") {
		e.t.Errorf("kubectl exec %s -- skein-probe call tcp %s: %q, want %s's answer", src.Name, target, out, dst.Name)
	}
	e.reportf("node stack: kubectl logs %s (%d lines); kubectl exec %s -- skein-probe call tcp %s: %s", gw.Name,
		len(strings.Split(strings.TrimSpace(e.run(ctx, 0, "kubectl", "logs", "-n", gw.Namespace, gw.Name, "--tail", "5")), "\n")),
		src.Name, target, strings.TrimSpace(out))
}

// parallelStreams: 32 TCP streams for 30 s from a c0 pod to an iperf3 server in c1, through
// both gateways: neither gateway restarts or is OOM-killed, and their memory stays under the
// limit (the cgroup's peak is reported).
func (e *env) parallelStreams(ctx context.Context) {
	dep, srv := e.iperfServer(ctx, "iperf3-parallel", corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")})
	defer func() { _ = e.c[1].Delete(context.Background(), dep) }()
	gws := [2]corev1.Pod{e.activeGateway(ctx, 0), e.activeGateway(ctx, 1)}
	restarts := func(p corev1.Pod, i int) (int32, string) {
		var cur corev1.Pod
		if err := e.c[i].Get(ctx, client.ObjectKeyFromObject(&p), &cur); err != nil {
			e.t.Fatal(err)
		}
		if len(cur.Status.ContainerStatuses) == 0 {
			return -1, ""
		}
		st := cur.Status.ContainerStatuses[0]
		reason := ""
		if st.LastTerminationState.Terminated != nil {
			reason = st.LastTerminationState.Terminated.Reason
		}
		return st.RestartCount, reason
	}
	var before [2]int32
	var pids [2]int
	for i := range 2 {
		before[i], _ = restarts(gws[i], i)
		pids[i] = e.gatewayProcess(i, gws[i])
	}
	dstAs, _ := e.peerView(ctx, 0)
	target := dstAs.of(netip.MustParseAddr(srv.Status.PodIP)).String()
	src := e.probePods(ctx, 0)[0]
	out, err := inNS(ctx, e.podNS(0, src), "iperf3", "-c", target, "-P", "32", "-t", "30", "-J").Output()
	if err != nil {
		e.t.Fatalf("iperf3 -c %s -P 32 -t 30: %v: %s", target, err, out)
	}
	var res struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal(out, &res); err != nil || res.End.SumReceived.BitsPerSecond == 0 {
		e.t.Fatalf("iperf3 result: %v: %.300s", err, out)
	}
	report := fmt.Sprintf("node stack: iperf3 -P 32 -t 30 c0 %s -> c1 %s: %.0f Mbit/s received", src.Name, target, res.End.SumReceived.BitsPerSecond/1e6)
	for i := range 2 {
		after, reason := restarts(gws[i], i)
		if after != before[i] || reason == "OOMKilled" {
			e.t.Errorf("c%d gateway %s restarted during the load (%d -> %d restarts, last termination %q)", i, gws[i].Name, before[i], after, reason)
		}
		peak := e.memoryCgroupFile(pids[i], "memory.max_usage_in_bytes")
		limit := e.memoryCgroupFile(pids[i], "memory.limit_in_bytes")
		failcnt := e.memoryCgroupFile(pids[i], "memory.failcnt")
		report += fmt.Sprintf("; c%d gateway peak %.1f MiB of %d MiB (failcnt %d), restarts %d", i, float64(peak)/(1<<20), limit>>20, failcnt, after)
	}
	e.reportf("%s", report)
}

// nodeStackRestart: restarting a node's flanneld, then its containerd (SIGKILL; lab node-init
// starts it again a second later) while a pod on that node streams UDP to c1: the longest gap
// is reported, and the cross-cluster matrix passes afterwards.
func (e *env) nodeStackRestart(ctx context.Context) {
	src := e.probePods(ctx, 0)[0]
	dstAs, _ := e.peerView(ctx, 0)
	dst := e.probePods(ctx, 1)[0]
	target := dstAs.of(netip.MustParseAddr(dst.Status.PodIP)).String() + ":7071"
	ns := e.nodeNS(0, src.Spec.NodeName)
	for _, program := range []string{"flanneld", "containerd"} {
		gapc, textc := e.stream(ctx, e.podNS(0, src), target, 10*time.Second)
		time.Sleep(2 * time.Second)
		pid := e.nodeProcess(ns, program)
		if err := exec.Command("kill", "-9", strconv.Itoa(pid)).Run(); err != nil {
			e.t.Fatalf("kill %s (pid %d) on %s: %v", program, pid, src.Spec.NodeName, err)
		}
		start := time.Now()
		e.waitFor(ctx, 30*time.Second, program+" running again on "+src.Spec.NodeName, func() bool {
			p := e.nodeProcessOrZero(ns, program)
			return p != 0 && p != pid
		})
		back := time.Since(start)
		gap, text := <-gapc, <-textc
		e.reportf("node stack: SIGKILL of %s on %s: running again after %s; UDP from %s to c1 meanwhile: longest gap %s (%s)",
			program, src.Spec.NodeName, back.Round(100*time.Millisecond), src.Name, gap, text)
		if gap < 0 {
			e.t.Errorf("traffic from %s did not resume after %s restarted: %s", src.Name, program, text)
		}
	}
	e.waitFor(ctx, time.Minute, "node Ready and probe pods Ready after the restarts", func() bool {
		return len(e.probePods(ctx, 0)) == 2
	})
	e.matrix(ctx)
}

// nodeProcess is the pid of a node stack program of the node in network namespace ns.
func (e *env) nodeProcess(ns, program string) int {
	if pid := e.nodeProcessOrZero(ns, program); pid != 0 {
		return pid
	}
	e.t.Fatalf("no %s process in %s", program, ns)
	return 0
}

func (e *env) nodeProcessOrZero(ns, program string) int {
	out, err := exec.Command("ip", "netns", "pids", ns).Output()
	if err != nil {
		return 0
	}
	for _, s := range strings.Fields(string(out)) {
		if exe, _ := os.Readlink("/proc/" + s + "/exe"); filepath.Base(exe) == program {
			pid, _ := strconv.Atoi(s)
			return pid
		}
	}
	return 0
}
