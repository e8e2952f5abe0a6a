package controller_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
	"github.com/skein-net/skein/control/controller"
	"github.com/skein-net/skein/control/gateway/config"
	"github.com/skein-net/skein/internal/apitest"
)

func serverGateway(ns, name string) *netv1alpha1.GatewayServer {
	return &netv1alpha1.GatewayServer{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{netv1alpha1.RemoteClusterIDLabel: "cluster-" + name}},
		Spec: netv1alpha1.GatewayServerSpec{MTU: netv1alpha1.DefaultMTU, Endpoint: netv1alpha1.ServerEndpoint{Port: netv1alpha1.DefaultPort, ServiceType: netv1alpha1.ServiceTypeClusterIP},
			ServerTemplateRef: netv1alpha1.TemplateRef{Kind: "WgGatewayServerTemplate", Name: "wireguard-server"}},
	}
}

// TestKeySecretsWithAScopedCache: the cache holds only Secrets marked as skein's, so a key
// Secret from before the mark (its ownerReference names the gateway) is found around the
// cache and marked, not replaced; a foreign Secret of the same name is left alone and the
// gateway's condition names the conflict.
func TestKeySecretsWithAScopedCache(t *testing.T) {
	env := apitest.Start(t)
	c := env.Client
	ns := env.Namespace(t, "keys-scoped")
	ctx := context.Background()
	installTemplates(t, c, ns)

	// The pre-existing key of gateway "old", owned by it but unmarked; a foreign Secret in the
	// way of gateway "taken".
	old, taken := serverGateway(ns, "old"), serverGateway(ns, "taken")
	apitest.Must(t, c.Create(ctx, old))
	apitest.Must(t, c.Create(ctx, taken))
	k, _ := config.GenerateKey()
	oldKey := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "old-wg-key", Namespace: ns,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: netv1alpha1.SchemeGroupVersion.String(), Kind: "GatewayServer", Name: "old", UID: old.UID, Controller: ptrTrue()}}},
		Data: map[string][]byte{config.SecretPrivateKey: []byte(k.String())}}
	apitest.Must(t, c.Create(ctx, oldKey))
	foreign := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "taken-wg-key", Namespace: ns}, Data: map[string][]byte{"password": []byte("hunter2")}}
	apitest.Must(t, c.Create(ctx, foreign))

	stop := startGateways(t, env)
	defer stop()
	apitest.Eventually(t, "the old key Secret marked and the gateway deployed", 30*time.Second, func() bool {
		s := &corev1.Secret{}
		g := &netv1alpha1.GatewayServer{}
		return c.Get(ctx, client.ObjectKeyFromObject(oldKey), s) == nil && s.Labels[controller.ManagedByLabel] == controller.FieldOwner &&
			string(s.Data[config.SecretPrivateKey]) == k.String() &&
			c.Get(ctx, client.ObjectKeyFromObject(old), g) == nil && g.Status.SecretRef != nil && g.Status.SecretRef.Name == "old-wg-key"
	})
	apitest.Eventually(t, "the conflict in the condition of gateway taken", 30*time.Second, func() bool {
		g := &netv1alpha1.GatewayServer{}
		if c.Get(ctx, client.ObjectKeyFromObject(taken), g) != nil {
			return false
		}
		cond := meta.FindStatusCondition(g.Status.Conditions, netv1alpha1.ConditionReady)
		return cond != nil && cond.Reason == "SecretConflict" && strings.Contains(cond.Message, "does not belong to this gateway")
	})
	s := &corev1.Secret{}
	apitest.Must(t, c.Get(ctx, client.ObjectKeyFromObject(foreign), s))
	if string(s.Data["password"]) != "hunter2" || len(s.Labels) != 0 || len(s.OwnerReferences) != 0 {
		t.Errorf("the foreign Secret was touched: %+v", s.ObjectMeta)
	}
}

func ptrTrue() *bool { b := true; return &b }

// BenchmarkControllerForeignObjects runs the real skein-controller with one peering, in a
// cluster with no other objects and with 5,000 Secrets and 5,000 Pods of others, and reports
// its RSS once the peering is deployed: with the cache scoped to skein's objects it must not
// grow with the cluster.
func BenchmarkControllerForeignObjects(b *testing.B) {
	for _, foreign := range []int{0, 5000} {
		b.Run(fmt.Sprintf("foreign=%d", foreign), func(b *testing.B) {
			for range b.N {
				rss := controllerRSS(b, foreign)
				b.ReportMetric(rss, "controller-RSS-MiB")
			}
		})
	}
}

func controllerRSS(b *testing.B, foreign int) float64 {
	env := apitest.Start(b)
	c := env.Client
	ctx := context.Background()
	if err := env.EnsureNamespace(ctx, "liqo"); err != nil {
		b.Fatal(err)
	}
	for _, f := range []string{"wireguard-server.yaml", "wireguard-client.yaml"} {
		apitest.CreateFromFile(b, c, filepath.Join("..", "..", "deploy", "templates", f), "liqo")
	}
	others := env.Namespace(b, "others")
	payload := []byte(strings.Repeat("x", 4096))
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	sem := make(chan struct{}, 32)
	for i := range foreign {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			name := fmt.Sprintf("other-%05d", i)
			var err error
			if err = c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: others}, Data: map[string][]byte{"blob": payload}}); err == nil {
				err = c.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: others, Labels: map[string]string{"app": "other"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1", Args: []string{string(payload[:1024])}}}}})
			}
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	// SKEIN_BENCH_CONTROLLER runs another build instead, to compare (an older commit's).
	bin := os.Getenv("SKEIN_BENCH_CONTROLLER")
	if bin == "" {
		bin = filepath.Join(b.TempDir(), "skein-controller")
		if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/skein-controller").CombinedOutput(); err != nil {
			b.Fatalf("build: %v\n%s", err, out)
		}
	}
	cmd := exec.Command(bin, "--kubeconfig", env.KubeconfigFile(b), "--namespace", "liqo", "--leader-elect=false", "--metrics-listen", "0", "--health-listen", "0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	ns := env.Namespace(b, "peering")
	gs := serverGateway(ns, "gw")
	gs.Spec.ServerTemplateRef.Namespace = "liqo"
	if err := c.Create(ctx, gs); err != nil {
		b.Fatal(err)
	}
	apitest.Eventually(b, "the peering's gateway deployed", 2*time.Minute, func() bool {
		return c.Get(ctx, client.ObjectKeyFromObject(gs), gs) == nil && gs.Status.InternalEndpoint != nil && gs.Status.Endpoint != nil
	})
	time.Sleep(3 * time.Second) // let the caches settle
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	for _, l := range strings.Split(string(status), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.Atoi(f[1])
			return float64(kb) / 1024
		}
	}
	b.Fatal("no VmRSS in /proc")
	return 0
}
