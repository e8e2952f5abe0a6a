// Package apitest starts a real Kubernetes API server (etcd and kube-apiserver built by
// internal/k8sbin, driven by controller-runtime's envtest) with skein's CRDs installed, for tests
// that need admission, status subresources, generations or finalizers to behave for real.
//
// Every test that needs an API server uses this package, so all of them run against the same
// pinned Kubernetes version as the lab. The binaries come from the cache that `make k8s-binaries`
// fills; when they are missing the test fails (it does not skip) and says how to build them.
//
// A server takes a few seconds to start; share one per test binary from TestMain with StartMain,
// or start one per test with Start. Each test should work in namespaces of its own.
package apitest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/skein-net/skein/control/kube"
	"github.com/skein-net/skein/internal/k8sbin"
)

// Env is a running API server with skein's CRDs installed.
type Env struct {
	// Config reaches the API server as an administrator.
	Config *rest.Config
	// Client is a controller-runtime client over Config whose scheme knows the core kinds and
	// networking.liqo.io/v1alpha1.
	Client client.Client
	// Scheme is Client's scheme.
	Scheme *k8sruntime.Scheme

	env    *envtest.Environment
	binDir string
}

// CRDDir is the directory holding skein's generated CRDs (deploy/crds in the repository).
func CRDDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "deploy", "crds")
}

// Scheme returns a scheme with the core Kubernetes kinds and networking.liqo.io/v1alpha1.
func Scheme() *k8sruntime.Scheme { return kube.Scheme() }

// StartMain starts an API server for a whole test binary; call the returned stop function
// when m.Run returns.
func StartMain() (*Env, func(), error) {
	bin, ok := k8sbin.Ready()
	if !ok && os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return nil, nil, fmt.Errorf("the Kubernetes test binaries are not built in %s: run 'make k8s-binaries' (or set KUBEBUILDER_ASSETS)", bin)
	}
	shims, err := deathShims(bin)
	if err != nil {
		return nil, nil, err
	}
	scheme := Scheme()
	env := &envtest.Environment{
		ControlPlane: envtest.ControlPlane{
			APIServer: &envtest.APIServer{Path: filepath.Join(shims, "kube-apiserver")},
			Etcd:      &envtest.Etcd{Path: filepath.Join(shims, "etcd")},
		},
		BinaryAssetsDirectory:    bin,
		CRDDirectoryPaths:        []string{CRDDir()},
		ErrorIfCRDPathMissing:    true,
		Scheme:                   scheme,
		ControlPlaneStartTimeout: 90 * time.Second,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	// envtest's default service range, a /24, runs out of ClusterIPs at about 250 Services
	// (BenchmarkPeerings1000 makes a gateway Service per peering).
	env.ControlPlane.APIServer.Configure().Set("service-cluster-ip-range", "10.0.0.0/16")
	stop := func() {
		_ = env.Stop()
		_ = os.RemoveAll(shims)
	}
	cfg, err := env.Start()
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("start kube-apiserver and etcd from %s: %w", bin, err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("client for the test API server: %w", err)
	}
	e := &Env{Config: cfg, Client: c, Scheme: scheme, env: env, binDir: bin}
	return e, stop, nil
}

// deathShims writes tiny wrappers that start etcd and kube-apiserver with a parent-death
// signal (util-linux setpriv), so that they die with the test binary even when it panics or
// times out before its cleanup runs. envtest alone only puts them in their own process group.
func deathShims(bin string) (string, error) {
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		return "", fmt.Errorf("setpriv (Debian package util-linux) is needed so the test API server dies with the test: %w", err)
	}
	dir, err := os.MkdirTemp("", "skein-apitest-")
	if err != nil {
		return "", err
	}
	for _, name := range []string{"etcd", "kube-apiserver"} {
		script := fmt.Sprintf("#!/bin/sh\nexec %s --pdeathsig KILL -- %s \"$@\"\n", setpriv, filepath.Join(bin, name))
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			_ = os.RemoveAll(dir)
			return "", err
		}
	}
	return dir, nil
}

// ShortSkip is why a test that needs the API server skips in -short mode.
const ShortSkip = "needs a kube-apiserver and etcd from skein's cache: skipped with -short (make test-unit); make test runs it"

// Start starts an API server for one test and stops it when the test ends. In -short mode
// (make test-unit) it skips the test instead.
func Start(tb testing.TB) *Env {
	tb.Helper()
	if testing.Short() {
		tb.Skip(ShortSkip)
	}
	e, stop, err := StartMain()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(stop)
	return e
}

// Namespace creates a namespace with a name derived from prefix and removes it when the test
// ends.
func (e *Env) Namespace(tb testing.TB, prefix string) string {
	tb.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.Client.Create(ctx, ns); err != nil {
		tb.Fatalf("create namespace %s-*: %v", prefix, err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := e.Client.Delete(ctx, ns); err != nil && !apierrors.IsNotFound(err) {
			tb.Errorf("delete namespace %s: %v", ns.Name, err)
		}
	})
	return ns.Name
}

// EnsureNamespace creates the named namespace unless it exists. It is left in place: use it for
// fixed names such as "default" or "liqo" that manifests refer to.
func (e *Env) EnsureNamespace(ctx context.Context, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := e.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}

// KubeconfigFile writes an administrator's kubeconfig for this server into the test's temp
// directory, for processes the test starts.
func (e *Env) KubeconfigFile(tb testing.TB) string {
	tb.Helper()
	kubeconfig := filepath.Join(tb.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, e.env.KubeConfig, 0o600); err != nil {
		tb.Fatal(err)
	}
	return kubeconfig
}

// Kubectl runs the kubectl of the cached Kubernetes build against this server and returns its
// standard output, to check what users see (`kubectl get` columns, error text).
func (e *Env) Kubectl(tb testing.TB, args ...string) (string, error) {
	tb.Helper()
	kubeconfig := e.KubeconfigFile(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(e.binDir, "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}
