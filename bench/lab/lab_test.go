package lab_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/skein-net/skein/bench/lab"
	"github.com/skein-net/skein/bench/lab/labtest"
)

// needLab checks the machine and builds the lab's binaries.
func needLab(t *testing.T) (k8s, stack, bin string) {
	t.Helper()
	k8s, stack = labtest.NeedNodeStack(t)
	bin = labtest.Build(t, "skein-lab-test-bin")
	t.Cleanup(func() { os.RemoveAll(bin) })
	return k8s, stack, bin
}

// labPIDs lists the processes in the lab's namespaces.
func labPIDs(t *testing.T, prefix string) []int {
	names, err := lab.Namespaces(prefix)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, n := range names {
		out, _ := exec.Command("ip", "netns", "pids", n).Output()
		for _, f := range strings.Fields(string(out)) {
			if p, err := strconv.Atoi(f); err == nil {
				pids = append(pids, p)
			}
		}
	}
	return pids
}

func procField(pid int, field string) string {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// hostPathsNodesMayMake are paths of the machine a node's containerd or kubelet would make if
// the lab did not point them at the node's own directory.
var hostPathsNodesMayMake = append([]string{"/opt/containerd", "/usr/libexec/kubernetes", "/run/containerd", "/run/flannel",
	"/var/log/pods", "/var/log/containers"}, hostMountpoints...)

// hostMountpoints are the mountpoints the nodes make on the machine while a lab is up.
var hostMountpoints = []string{"/var/lib/kubelet", "/var/lib/containerd", "/var/lib/cni", "/etc/cni", "/etc/containerd"}

// hostPathsBefore says which of hostPathsNodesMayMake the machine had before the tests.
var hostPathsBefore = func() map[string]bool {
	m := map[string]bool{}
	for _, p := range hostPathsNodesMayMake {
		if _, err := os.Stat(p); err == nil {
			m[p] = true
		}
	}
	return m
}()

// leftovers reports what a lab with prefix left on the machine.
func leftovers(t *testing.T, prefix, linksBefore string) []string {
	var left []string
	if names, _ := lab.Namespaces(prefix); len(names) > 0 {
		left = append(left, fmt.Sprintf("namespaces %v", names))
	}
	if _, err := os.Stat(lab.DefaultStateDir(prefix)); err == nil {
		left = append(left, "state dir "+lab.DefaultStateDir(prefix))
	}
	if out, _ := exec.Command("pgrep", "-f", lab.DefaultStateDir(prefix)).Output(); len(strings.TrimSpace(string(out))) > 0 {
		left = append(left, "processes "+strings.Join(strings.Fields(string(out)), ","))
	}
	others, _ := filepath.Glob("/var/tmp/skein-lab-*")
	for _, p := range hostPathsNodesMayMake {
		if slices.Contains(hostMountpoints, p) && len(others) > 0 {
			continue // another lab's nodes still use it
		}
		if _, err := os.Stat(p); err == nil && !hostPathsBefore[p] {
			left = append(left, p+" on the machine")
		}
	}
	if got := hostLinks(t); got != linksBefore {
		left = append(left, "links of the machine's namespace changed:\n"+got)
	}
	if mounts, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mounts), lab.DefaultStateDir(prefix)) {
		left = append(left, "mounts under the state dir")
	}
	if cg, _ := filepath.Glob("/sys/fs/cgroup/*/skein-lab/" + prefix + "-*"); len(cg) > 0 {
		left = append(left, fmt.Sprintf("cgroups %v", cg))
	}
	// Every process the lab starts inherits its tag (containerd's shims too; the containers,
	// which do not, die with their node's PID namespace).
	tag := "SKEIN_LAB_STATE=" + lab.DefaultStateDir(prefix) + "\x00"
	procs, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, p := range procs {
		if env, err := os.ReadFile(p); err == nil && strings.Contains(string(env), tag) && filepath.Dir(p) != fmt.Sprintf("/proc/%d", os.Getpid()) {
			left = append(left, "process "+filepath.Base(filepath.Dir(p))+" tagged with the lab's state dir")
		}
	}
	return left
}

// TestLab starts two clusters of two nodes, runs a DaemonSet of probes with a restricted
// securityContext and a Service, checks pod-to-pod, ClusterIP and NodePort traffic and what
// the kubelet gave the containers, and tears down, checking nothing is left.
func TestLab(t *testing.T) {
	k8s, stack, bin := needLab(t)
	prefix := fmt.Sprintf("slt%d", os.Getpid())
	linksBefore := hostLinks(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var progress strings.Builder
	layout, _ := labtest.ImageLayout(t, bin, "lab")
	l, err := lab.Start(ctx, lab.Config{Options: lab.Options{Prefix: prefix}, K8sBin: k8s, LabBinary: filepath.Join(bin, "lab"),
		BinDir: bin, Log: &progress, NodeStack: stack, ImageLayout: layout})
	t.Cleanup(func() {
		if !errors.Is(err, lab.ErrAlreadyUp) { // else somebody else's lab
			lab.Down(prefix)
		}
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	var rss int
	for _, pid := range labPIDs(t, prefix) {
		kb, _ := strconv.Atoi(strings.TrimSuffix(procField(pid, "VmRSS"), " kB"))
		rss += kb
	}
	t.Logf("lab of 2 clusters x 2 nodes (kubelet, containerd, flannel) ready in %.1fs, RSS of its processes %d MiB (targets 90 s, 4096 MiB)",
		l.Ready.Sub(l.Started).Seconds(), rss/1024)
	probeImage := lab.RegistryAddr + "/skein-net/skein-probe:lab"

	cfg, err := l.RESTConfig(0)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	labels := map[string]string{"app": "probe"}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "default"},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](65534), RunAsGroup: ptr.To[int64](65534), RunAsNonRoot: ptr.To(true)},
				Containers: []corev1.Container{{Name: "probe", Image: probeImage, Args: []string{"serve"},
					Env: []corev1.EnvVar{{Name: "MY_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(7072)}},
						PeriodSeconds: 1},
					SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
						Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
				}},
			}}}}
	if _, err := cs.AppsV1().DaemonSets("default").Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "default"}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeNodePort, Selector: labels, Ports: []corev1.ServicePort{
			{Name: "tcp", Port: 7070, Protocol: corev1.ProtocolTCP}, {Name: "udp", Port: 7071, Protocol: corev1.ProtocolUDP}}}}
	if svc, err = cs.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	deadline := time.Now().Add(time.Minute)
	for {
		list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=probe"})
		ready := 0
		if err == nil {
			for _, p := range list.Items {
				for _, c := range p.Status.Conditions {
					if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
						ready++
					}
				}
			}
		}
		if ready == 2 && len(list.Items) == 2 {
			pods = list.Items
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("probe pods not ready in a minute: %d ready; logs in %s", ready, filepath.Join(l.StateDir, "logs"))
		}
		time.Sleep(300 * time.Millisecond)
	}
	if pods[0].Spec.NodeName == pods[1].Spec.NodeName || pods[0].Status.PodIP == pods[1].Status.PodIP {
		t.Fatalf("DaemonSet pods share a node or an IP: %s/%s %s/%s", pods[0].Spec.NodeName, pods[0].Status.PodIP, pods[1].Spec.NodeName, pods[1].Status.PodIP)
	}
	// podNS is a pod's network namespace as a path, found through its processes.
	podNS := func(p corev1.Pod) string {
		ns, _, err := lab.PodProcesses(prefix+"-"+p.Spec.NodeName, p.Name, netip.MustParseAddr(p.Status.PodIP))
		if err != nil {
			t.Fatal(err)
		}
		return ns
	}
	probe := filepath.Join(bin, "skein-probe")
	// call retries for 15 s: kube-proxy programs a Service's endpoints a moment after the
	// pods become Ready.
	call := func(ns string, args ...string) string {
		t.Helper()
		if !strings.HasPrefix(ns, "/") {
			ns = "/run/netns/" + ns
		}
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			out, err := exec.Command("nsenter", append([]string{"--net=" + ns, "--", probe, "call"}, args...)...).CombinedOutput()
			if err == nil {
				return strings.TrimSpace(string(out))
			}
			if time.Now().After(deadline) {
				t.Fatalf("skein-probe call %v from %s: %v: %s", args, ns, err, out)
			}
		}
	}
	// Pod to pod across nodes: no NAT inside the cluster.
	a, b := pods[0], pods[1]
	got := call(podNS(a), "tcp", b.Status.PodIP+":7070")
	if want := fmt.Sprintf("%s saw %s:", b.Name, a.Status.PodIP); !strings.HasPrefix(got, want) {
		t.Errorf("pod to pod: got %q, want %q...", got, want)
	}
	got = call(podNS(b), "udp", a.Status.PodIP+":7071")
	if want := fmt.Sprintf("%s saw %s:", a.Name, b.Status.PodIP); !strings.HasPrefix(got, want) {
		t.Errorf("pod to pod UDP: got %q, want %q...", got, want)
	}
	// ClusterIP from a pod, through kube-proxy's nftables rules.
	for range 4 {
		if got := call(podNS(a), "tcp", svc.Spec.ClusterIP+":7070"); !strings.Contains(got, " saw ") {
			t.Errorf("ClusterIP: got %q", got)
		}
	}
	// NodePort from the workstation, outside the cluster.
	var nodePort int32
	for _, p := range svc.Spec.Ports {
		if p.Protocol == corev1.ProtocolUDP {
			nodePort = p.NodePort
		}
	}
	got = call(l.Topology.Workstation.Name, "udp", fmt.Sprintf("%s:%d", l.Clusters[0].Nodes[1].Addr, nodePort))
	if !strings.HasPrefix(got, "probe-") {
		t.Errorf("NodePort from the workstation: got %q", got)
	}
	// Pod traffic leaving the cluster is masqueraded to the node's address.
	ws := l.Topology.Workstation
	srv := exec.Command("nsenter", "--net=/run/netns/"+ws.Name, probe, "serve", "--tcp", ws.Addr.String()+":7070",
		"--udp", ws.Addr.String()+":7071", "--http", ws.Addr.String()+":7072")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	time.Sleep(300 * time.Millisecond)
	got = call(podNS(a), "tcp", ws.Addr.String()+":7070")
	var nodeAddr string
	for _, n := range l.Clusters[0].Nodes {
		if strings.HasSuffix(n.Name, strings.TrimPrefix(a.Spec.NodeName, "c0")) {
			nodeAddr = n.Addr.String()
		}
	}
	if want := " saw " + nodeAddr + ":"; !strings.Contains(got, want) {
		t.Errorf("pod to the workstation: got %q, want the node address (%q)", got, want)
	}

	// What the container got: user, capabilities, no_new_privs, read-only root, environment.
	_, pids, err := lab.PodProcesses(prefix+"-"+a.Spec.NodeName, a.Name, netip.MustParseAddr(a.Status.PodIP))
	if err != nil {
		t.Fatal(err)
	}
	pid := 0
	for _, p := range pids {
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", p)); filepath.Base(exe) == "skein-probe" {
			pid = p
		}
	}
	if pid == 0 || len(pids) != 2 {
		t.Fatalf("pod %s: want the sandbox's pause and skein-probe in its namespace, got processes %v", a.Name, pids)
	}
	if uid := procField(pid, "Uid"); !strings.HasPrefix(uid, "65534\t") {
		t.Errorf("container uid: %q, want 65534", uid)
	}
	for _, f := range []string{"CapEff", "CapPrm", "CapBnd"} {
		if v := procField(pid, f); v != "0000000000000000" {
			t.Errorf("container %s = %s, want none (drop ALL)", f, v)
		}
	}
	if v := procField(pid, "NoNewPrivs"); v != "1" {
		t.Errorf("container NoNewPrivs = %s, want 1", v)
	}
	mounts, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		t.Fatal(err)
	}
	procSysRO := false
	for _, line := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(line); len(f) > 5 && f[4] == "/" && !strings.HasPrefix(f[5], "ro") {
			t.Errorf("container root is not read-only: %s", line)
		}
		if f := strings.Fields(line); len(f) > 5 && f[4] == "/proc/sys" && strings.HasPrefix(f[5], "ro") {
			procSysRO = true
		}
	}
	if !procSysRO {
		t.Errorf("/proc/sys is not read-only in an unprivileged container:\n%s", mounts)
	}
	env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	for _, want := range []string{"MY_IP=" + a.Status.PodIP, "KUBERNETES_SERVICE_HOST=10.96.0.1", "HOSTNAME=" + a.Name} {
		if !strings.Contains(string(env), want+"\x00") {
			t.Errorf("container environment lacks %s", want)
		}
	}
	// The service account token is mounted where client-go looks for it.
	tokenPath := fmt.Sprintf("/proc/%d/root/var/run/secrets/kubernetes.io/serviceaccount/token", pid)
	if tok, err := os.ReadFile(tokenPath); err != nil || len(tok) < 100 {
		t.Errorf("service account token at %s: %v (%d bytes)", tokenPath, err, len(tok))
	}

	// restartPolicy: a container that exits 1 is restarted under Always and leaves the pod
	// Failed under Never; an image the registry does not have fails with a clear reason.
	podOf := func(name, image string, policy corev1.RestartPolicy, args ...string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.PodSpec{
			RestartPolicy: policy, NodeName: pods[0].Spec.NodeName,
			Containers: []corev1.Container{{Name: "c", Image: image, Args: args}}}}
	}
	failing := []string{"call", "--timeout", "100ms", "tcp", "127.0.0.1:1"}
	for _, p := range []*corev1.Pod{
		podOf("always", probeImage, corev1.RestartPolicyAlways, failing...),
		podOf("never", probeImage, corev1.RestartPolicyNever, failing...),
		podOf("noimage", lab.RegistryAddr+"/skein-net/no-such-tool:v1", corev1.RestartPolicyAlways),
	} {
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		get := func(name string) *corev1.Pod {
			p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
		always, never, noimage := get("always"), get("never"), get("noimage")
		restarted := len(always.Status.ContainerStatuses) == 1 && always.Status.ContainerStatuses[0].RestartCount >= 2
		failed := never.Status.Phase == corev1.PodFailed && len(never.Status.ContainerStatuses) == 1 &&
			never.Status.ContainerStatuses[0].State.Terminated != nil && never.Status.ContainerStatuses[0].State.Terminated.ExitCode == 1
		var waiting *corev1.ContainerStateWaiting
		if len(noimage.Status.ContainerStatuses) == 1 {
			waiting = noimage.Status.ContainerStatuses[0].State.Waiting
		}
		unknown := waiting != nil && (waiting.Reason == "ErrImagePull" || waiting.Reason == "ImagePullBackOff") &&
			strings.Contains(waiting.Message, "no-such-tool") && strings.Contains(waiting.Message, "not found")
		if restarted && failed && unknown {
			t.Logf("restartPolicy Always: %d restarts; Never: phase %s; unknown image: %s: %s",
				always.Status.ContainerStatuses[0].RestartCount, never.Status.Phase, waiting.Reason, waiting.Message)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("restart policies and unknown images: Always restarted %v, Never failed %v (phase %s), unknown image reported %v (%+v)",
				restarted, failed, never.Status.Phase, unknown, waiting)
		}
	}
	for _, name := range []string{"always", "never", "noimage"} {
		if err := cs.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// Deleting the DaemonSet stops the processes.
	if err := cs.AppsV1().DaemonSets("default").Delete(ctx, "probe", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(45 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=probe"})
		alive := 0
		for _, p := range pids {
			if syscall.Kill(p, 0) == nil {
				alive++
			}
		}
		if err == nil && len(list.Items) == 0 && alive == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after deleting the DaemonSet: %d pods, %d of pod %s's processes left (err %v)", len(list.Items), alive, a.Name, err)
		}
	}

	start := time.Now()
	if err := lab.Down(prefix); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(t, prefix, linksBefore); len(left) > 0 {
		t.Fatalf("lab down left: %v", left)
	}
	t.Logf("lab down in %.1fs, nothing left", time.Since(start).Seconds())
}

// TestLabInterrupted sends SIGINT to "lab up" while the clusters start: it must remove all
// it made.
func TestLabInterrupted(t *testing.T) {
	_, _, bin := needLab(t)
	prefix := fmt.Sprintf("sli%d", os.Getpid())
	linksBefore := hostLinks(t)
	t.Cleanup(func() { lab.Down(prefix) })
	cmd := exec.Command(filepath.Join(bin, "lab"), "up", "--prefix", prefix)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Interrupt once the control planes are starting.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if len(labPIDs(t, prefix)) >= 6 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lab up started no processes in 30 s:\n%s", out.String())
		}
	}
	_ = cmd.Process.Signal(os.Interrupt)
	err := cmd.Wait()
	if err == nil {
		t.Fatalf("lab up succeeded though interrupted:\n%s", out.String())
	}
	if left := leftovers(t, prefix, linksBefore); len(left) > 0 {
		t.Fatalf("interrupted lab up left: %v\n%s", left, out.String())
	}
}
