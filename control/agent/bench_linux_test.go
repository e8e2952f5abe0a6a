package agent_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/internal/apitest"
	"github.com/skein-net/skein/internal/netnstest"
)

// BenchmarkAgent250 runs the skein-agent binary against the test API server, programming a
// fresh network namespace for 250 peerings (500 remote CIDRs: pod and external each), and
// reports the time from start to all routes in table 18952 and the agent's peak RSS.
func BenchmarkAgent250(b *testing.B) { benchmarkAgent(b, 250) }

// BenchmarkAgent1000 is BenchmarkAgent250 with 1,000 peerings (2,000 routes and rules).
func BenchmarkAgent1000(b *testing.B) { benchmarkAgent(b, 1000) }

// benchmarkAgent runs the agent for n peerings and reports the time from its start to all 2n
// routes and its peak RSS.
func benchmarkAgent(b *testing.B, n int) {
	netnstest.RequireRoot(b)
	env := apitest.Start(b)
	c := env.Client
	ctx := context.Background()
	ns := env.Namespace(b, "agentbench")
	node := ns + "-n1"
	in := &netv1alpha1.InternalNode{ObjectMeta: metav1.ObjectMeta{Name: node}, Spec: netv1alpha1.InternalNodeSpec{OverlayIP: ipp("10.80.0.11")}}
	if err := c.Create(ctx, in); err != nil {
		b.Fatal(err)
	}
	for i := range n {
		id := fmt.Sprintf("cluster-%04d", i)
		labels := map[string]string{netv1alpha1.RemoteClusterIDLabel: id}
		conf := &netv1alpha1.Configuration{ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: ns, Labels: labels},
			Spec: netv1alpha1.ConfigurationSpec{Remote: netv1alpha1.ClusterConfig{CIDR: netv1alpha1.ClusterConfigCIDR{Pod: "10.244.0.0/16", External: "10.70.0.0/16"}}}}
		if err := c.Create(ctx, conf); err != nil {
			b.Fatal(err)
		}
		conf.Status.Remote = &netv1alpha1.ClusterConfig{CIDR: netv1alpha1.ClusterConfigCIDR{
			Pod: netv1alpha1.CIDR(fmt.Sprintf("100.%d.%d.0/24", i/128, 2*(i%128))), External: netv1alpha1.CIDR(fmt.Sprintf("100.%d.%d.0/24", i/128, 2*(i%128)+1))}}
		if err := c.Status().Update(ctx, conf); err != nil {
			b.Fatal(err)
		}
		gs := &netv1alpha1.GatewayServer{ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: ns, Labels: labels},
			Spec: netv1alpha1.GatewayServerSpec{ServerTemplateRef: netv1alpha1.TemplateRef{Kind: "WgGatewayServerTemplate", Name: "x"}}}
		if err := c.Create(ctx, gs); err != nil {
			b.Fatal(err)
		}
		gs.Status.InternalEndpoint = &netv1alpha1.InternalEndpoint{IP: ipp(fmt.Sprintf("10.80.%d.%d", 1+i/200, 1+i%200)),
			VTEP: &netv1alpha1.VTEP{IP: netv1alpha1.IP(fmt.Sprintf("10.244.%d.%d", 1+i/200, 1+i%200)), MAC: netv1alpha1.MAC(fmt.Sprintf("02:5b:00:00:%02x:%02x", i/256, i%256))}}
		if err := c.Status().Update(ctx, gs); err != nil {
			b.Fatal(err)
		}
	}
	kn := netnstest.New(b, "agentk")
	kn.Run(b, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth1")
	kn.Run(b, "ip", "addr", "add", "192.168.77.1/24", "dev", "eth0")
	kn.Run(b, "ip", "link", "set", "eth0", "up")
	bin := filepath.Join(b.TempDir(), "skein-agent")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/skein-agent").CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "--kubeconfig", env.KubeconfigFile(b), "--node-name", node, "--node-ip", "192.168.77.1",
		"--netns", "/var/run/netns/"+kn.Name, "--metrics-listen", "off", "--log-level", "warn")
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	for {
		out, _ := kn.Try("ip", "route", "show", "table", "18952")
		if strings.Count(out, "\n") >= 2*n {
			break
		}
		if time.Since(start) > time.Minute*time.Duration(max(1, n/250)) {
			b.Fatalf("%d of %d routes after %v", strings.Count(out, "\n"), 2*n, time.Since(start))
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.ReportMetric(time.Since(start).Seconds(), fmt.Sprintf("s/start-to-%d-routes", 2*n))
	time.Sleep(time.Second) // a resync's worth of steady state
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	for _, l := range strings.Split(string(status), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.Atoi(f[1])
			b.ReportMetric(float64(kb)/1024, "agent-peak-RSS-MiB")
		}
	}
	if roll, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", cmd.Process.Pid)); err == nil {
		for _, l := range strings.Split(string(roll), "\n") {
			if strings.HasPrefix(l, "Rss:") || strings.HasPrefix(l, "Pss_Anon:") || strings.HasPrefix(l, "Pss_File:") {
				b.Log(l)
			}
		}
	}
	if rules, _ := kn.Try("ip", "rule", "show"); strings.Count(rules, "lookup 18952") != 2*n {
		b.Errorf("%d rules", strings.Count(rules, "lookup 18952"))
	}
}
