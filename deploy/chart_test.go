// Package deploy holds the tests of what deploy/ ships: the Helm chart in deploy/chart (lint,
// rendering with default and varied values, every rendered object checked by a real
// kube-apiserver, and an install whose RBAC runs the real components), its copies of the
// CRDs, gateway templates and gateway roles kept equal to their sources, and the gateway
// templates of examples/networking against the gateway policy the chart installs.
//
// helm comes from skein's cache (internal/k8sbin.EnsureHelm, built by `make k8s-binaries`); the
// tests that need it skip, saying so, when it is not built yet.
package deploy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/skein-net/skein/internal/apitest"

	"github.com/skein-net/skein/internal/k8sbin"
)

const (
	chartDir    = "chart"
	releaseName = "skein"
	// fullname is the chart's object prefix for releaseName (templates/_helpers.tpl).
	fullname = "skein"
)

var (
	envOnce   sync.Once
	sharedEnv *apitest.Env
	stopEnv   func()
	errEnv    error

	helmHome string // HELM_{CACHE,CONFIG,DATA}_HOME of every helm the tests run
	binDir   string // where binaries built the commands, removed by TestMain
)

func TestMain(m *testing.M) {
	var err error
	if helmHome, err = os.MkdirTemp("", "skein-helm-home-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if stopEnv != nil {
		stopEnv()
	}
	_ = os.RemoveAll(helmHome)
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// apiServer starts the test binary's API server (with skein's CRDs) on first use.
func apiServer(t *testing.T) *apitest.Env {
	t.Helper()
	if testing.Short() {
		t.Skip(apitest.ShortSkip)
	}
	envOnce.Do(func() { sharedEnv, stopEnv, errEnv = apitest.StartMain() })
	if errEnv != nil {
		t.Fatal(errEnv)
	}
	return sharedEnv
}

// helmBinary returns the cached helm, or skips the test when it is not built.
func helmBinary(t *testing.T) string {
	t.Helper()
	p, ok := k8sbin.HelmReady()
	if !ok {
		t.Skipf("helm %s is not built in skein's cache (%s): run 'make k8s-binaries' (go run ./bench/cmd/k8s-binaries) to build it from the Go module proxy", k8sbin.HelmVersion, p)
	}
	return p
}

// helm runs the cached helm with a private home and returns its standard output; the error
// carries its standard error. kubeconfig may be empty for commands that need no cluster.
func helm(t *testing.T, kubeconfig string, args ...string) (string, error) {
	t.Helper()
	bin := helmBinary(t)
	if kubeconfig != "" {
		args = append(args, "--kubeconfig", kubeconfig)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + helmHome,
		"HELM_CACHE_HOME=" + filepath.Join(helmHome, "cache"), "HELM_CONFIG_HOME=" + filepath.Join(helmHome, "config"),
		"HELM_DATA_HOME=" + filepath.Join(helmHome, "data"), "KUBECONFIG=" + filepath.Join(helmHome, "no-kubeconfig")}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// valuesFile writes values as a YAML values file in the test's temp directory.
func valuesFile(t *testing.T, values map[string]any) string {
	t.Helper()
	b, err := yaml.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// parseManifests splits a multi-document YAML stream into objects, skipping empty documents.
func parseManifests(s string) ([]*unstructured.Unstructured, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(s)))
	var objs []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		m := map[string]any{}
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return nil, fmt.Errorf("%w in document:\n%s", err, doc)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetAPIVersion() == "" || u.GetKind() == "" || u.GetName() == "" {
			return nil, fmt.Errorf("document without apiVersion, kind or name:\n%s", doc)
		}
		objs = append(objs, u)
	}
}

// renderChart runs `helm template` with values in namespace ns, CRDs included.
func renderChart(t *testing.T, ns string, values map[string]any) []*unstructured.Unstructured {
	t.Helper()
	out, err := helm(t, "", "template", releaseName, chartDir, "--namespace", ns, "--include-crds", "-f", valuesFile(t, values))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := parseManifests(out)
	if err != nil {
		t.Fatalf("helm template output: %v", err)
	}
	return objs
}

// readValues parses a values YAML file.
func readValues(path string) (map[string]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := map[string]any{}
	if err := yaml.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// mergeValues returns base with over merged in as helm merges values: maps recursively,
// anything else (lists included) replaced.
func mergeValues(base, over map[string]any) map[string]any {
	out := maps.Clone(base)
	for k, v := range over {
		if vm, ok := v.(map[string]any); ok {
			if bm, ok := out[k].(map[string]any); ok {
				out[k] = mergeValues(bm, vm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// TestChartSourcesInSync keeps one source of truth for what the chart carries as copies
// (helm can read only files inside the chart): the CRDs (`make generate` copies them, `make
// verify` catches drift), the default gateway templates (deploy/templates, which tests and
// tools read too) and the gateway roles (deploy/rbac).
func TestChartSourcesInSync(t *testing.T) {
	pairs := []struct{ src, dst, fix string }{
		{"crds", "chart/crds", "make generate"},
		{"templates", "chart/files/templates", "cp deploy/templates/*.yaml deploy/chart/files/templates/"},
		{"rbac", "chart/files/rbac", "cp deploy/rbac/*.yaml deploy/chart/files/rbac/"},
	}
	for _, p := range pairs {
		for _, problem := range compareDirs(p.src, p.dst) {
			t.Errorf("deploy/%s is not a copy of deploy/%s (%s): %s", p.dst, p.src, p.fix, problem)
		}
	}
}

// compareDirs lists the differences between the *.yaml files of two directories.
func compareDirs(src, dst string) []string {
	list := func(dir string) ([]string, error) {
		m, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		for i := range m {
			m[i] = filepath.Base(m[i])
		}
		return m, err
	}
	a, errA := list(src)
	b, errB := list(dst)
	if err := errors.Join(errA, errB); err != nil {
		return []string{err.Error()}
	}
	if len(a) == 0 {
		return []string{"no YAML files in " + src}
	}
	var problems []string
	if !slices.Equal(a, b) {
		problems = append(problems, fmt.Sprintf("files %q, want %q", b, a))
	}
	for _, f := range a {
		want, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		got, err := os.ReadFile(filepath.Join(dst, f))
		if err == nil && !bytes.Equal(got, want) {
			problems = append(problems, f+" differs")
		}
	}
	return problems
}

func TestCompareDirsCatches(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	write := func(dir, name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(src, "a.yaml", "a: 1\n")
	write(dst, "a.yaml", "a: 1\n")
	if p := compareDirs(src, dst); len(p) != 0 {
		t.Fatalf("equal directories: %q", p)
	}
	write(dst, "a.yaml", "a: 2\n")
	if p := compareDirs(src, dst); len(p) != 1 || !strings.Contains(p[0], "a.yaml differs") {
		t.Errorf("edited copy: %q", p)
	}
	write(dst, "a.yaml", "a: 1\n")
	write(src, "b.yaml", "b: 1\n")
	if p := compareDirs(src, dst); len(p) == 0 || !strings.Contains(p[0], "files") {
		t.Errorf("missing copy: %q", p)
	}
}

// valueCases are the values the chart is linted, rendered and dry-run applied with.
var valueCases = []struct {
	name   string
	ns     string // release namespace; empty: a fresh one
	values map[string]any
}{
	{name: "defaults", ns: "liqo", values: map[string]any{}},
	{name: "nodeport-mtu-port", values: map[string]any{"peering": map[string]any{"networking": map[string]any{"gateway": map[string]any{
		"mtu": 1400, "server": map[string]any{"service": map[string]any{"type": "NodePort", "port": 51821}}}}}}},
	{name: "geneve", values: map[string]any{"overlay": map[string]any{"kind": "geneve", "port": 6082, "vni": 4242, "device": "skein.gnv", "mtu": 1400}}},
	{name: "cidrs", values: map[string]any{"ipam": map[string]any{
		"podCIDR": []any{"10.1.0.0/16", "10.2.0.0/16"}, "serviceCIDR": "10.112.0.0/12", "externalCIDR": "10.171.0.0/16",
		"internalCIDR": "10.181.0.0/16", "reserved": []any{"192.168.50.0/24", "172.31.0.0/16"}, "pools": []any{"100.64.0.0/10"}}}},
	{name: "images", values: map[string]any{
		"controller": map[string]any{"image": map[string]any{"registry": "registry.example.com/skein", "tag": "v0.2.0", "pullPolicy": "Always"}},
		"agent":      map[string]any{"image": map[string]any{"tag": "v0.2.0"}, "metricsPort": 19472, "logLevel": "debug", "masqueradeBypass": true},
		"gateway": map[string]any{"image": map[string]any{"registry": "registry.example.com/skein/", "tag": "sha-1234abc",
			"digest": "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "pullPolicy": "Never"},
			"resources": map[string]any{"requests": map[string]any{"cpu": "250m", "memory": "100Mi"}, "limits": map[string]any{"memory": "300Mi"}}}}},
	{name: "air-gapped", values: map[string]any{"imageRegistry": "mirror.internal:5000/skein"}},
	{name: "local-images", values: map[string]any{"imageRegistry": ""}},
	// An IPv6-only cluster (the lab's): its registry at a bracketed IPv6 address, its pod and
	// service CIDRs IPv6 only.
	{name: "ipv6-only", values: map[string]any{"imageRegistry": "[2001:db8:0:ff::1]:5000/skein-net",
		"ipam": map[string]any{"podCIDR": "fd00:244::/56", "serviceCIDR": "fd00:96::/112"}}},
	{name: "ha-clusterid", values: map[string]any{"clusterID": "3c8c2a8e-5d7b-4e47-9f1e-0a6b2f3d4c5e",
		"controller": map[string]any{"replicas": 2, "metricsPort": 19473, "kubeAPI": map[string]any{"qps": 12.5, "burst": 25}},
		"gateway":    map[string]any{"replicas": 2, "watchPods": true}}},
	{name: "scheduling", values: map[string]any{"imagePullSecrets": []any{map[string]any{"name": "registry-a"}},
		"agent": map[string]any{"priorityClassName": "system-cluster-critical"},
		"gateway": map[string]any{"nodeSelector": map[string]any{"skein.example/edge": "true"},
			"tolerations":       []any{map[string]any{"key": "edge", "operator": "Exists", "effect": "NoSchedule"}},
			"priorityClassName": "gateway-critical", "annotations": map[string]any{"service.beta.kubernetes.io/aws-load-balancer-type": "nlb"},
			"imagePullSecrets": []any{map[string]any{"name": "registry-b"}}}}},
	// What gateway templates of the users' own may choose beyond the chart's defaults.
	{name: "template-policy", values: map[string]any{"gateway": map[string]any{"replicas": 4, "maxReplicas": 2,
		"allowedImageRepositories": []any{"registry.example.com:5000/skein/skein-gateway"},
		"allowedPriorityClasses":   []any{"gateway-critical"}, "allowedTolerations": []any{map[string]any{"key": "edge", "operator": "Exists"}},
		"maxResources":              map[string]any{"cpu": "500m", "memory": "512Mi"},
		"allowedServiceAnnotations": []any{"service.beta.kubernetes.io/", "metallb.universe.tf/address-pool"}}}},
}

// TestChartLint runs `helm lint --strict` with every case's values.
func TestChartLint(t *testing.T) {
	helmBinary(t)
	for _, c := range valueCases {
		t.Run(c.name, func(t *testing.T) {
			ns := c.ns
			if ns == "" {
				ns = "skein-" + c.name
			}
			out, err := helm(t, "", "lint", "--strict", chartDir, "--namespace", ns, "-f", valuesFile(t, c.values))
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}

// TestChartRefusesBadValues: the schema and the templates' own checks turn mistakes into
// errors at install time instead of pods that crash.
func TestChartRefusesBadValues(t *testing.T) {
	cases := []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"unknown overlay kind", map[string]any{"overlay": map[string]any{"kind": "gre"}}, "/overlay/kind"},
		{"vni out of range", map[string]any{"overlay": map[string]any{"vni": 1 << 24}}, "/overlay/vni"},
		{"not a CIDR", map[string]any{"ipam": map[string]any{"internalCIDR": "10.80.0.0"}}, "/ipam/internalCIDR"},
		{"mtu too small", map[string]any{"peering": map[string]any{"networking": map[string]any{"gateway": map[string]any{"mtu": 100}}}}, "/peering/networking/gateway/mtu"},
		{"service type", map[string]any{"peering": map[string]any{"networking": map[string]any{"gateway": map[string]any{"server": map[string]any{"service": map[string]any{"type": "ExternalName"}}}}}}, "/peering/networking/gateway/server/service/type"},
		{"misspelt value", map[string]any{"overlay": map[string]any{"devices": "x"}}, "devices"},
		{"cluster id not a label value", map[string]any{"clusterID": "no spaces allowed"}, "/clusterID"},
		{"replicas without election", map[string]any{"controller": map[string]any{"replicas": 2, "leaderElection": false}}, "leaderElection"},
		{"scrape interval not a duration", map[string]any{"monitoring": map[string]any{"podMonitor": map[string]any{"interval": "thirty seconds"}}}, "/monitoring/podMonitor/interval"},
		{"digest in the tag", map[string]any{"agent": map[string]any{"image": map[string]any{"tag": "v0.2.0@sha256:0123"}}}, "/agent/image/tag"},
		{"gateway max replicas zero", map[string]any{"gateway": map[string]any{"maxReplicas": 0}}, "/gateway/maxReplicas"},
		{"gateway image repository with a tag", map[string]any{"gateway": map[string]any{"allowedImageRepositories": []any{"registry.example.com/skein-gateway:v1"}}}, "/gateway/allowedImageRepositories"},
		{"dashboard label not a string", map[string]any{"monitoring": map[string]any{"dashboard": map[string]any{"labels": map[string]any{"grafana_dashboard": 1}}}}, "/monitoring/dashboard/labels"},
	}
	helmBinary(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := helm(t, "", "template", releaseName, chartDir, "-n", "liqo", "-f", valuesFile(t, c.values))
			if err == nil {
				t.Fatalf("helm template accepted %v:\n%s", c.values, out)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error does not mention %q: %v", c.want, err)
			}
		})
	}
}

// TestChartTemplate renders the chart with every case's values, checks the objects against the
// values and the chart's invariants (checkRender), checks that every flag the rendered objects
// pass exists in the command they run, and has a real kube-apiserver validate every object with
// a server-side dry-run apply (CRDs first).
func TestChartTemplate(t *testing.T) {
	helmBinary(t)
	defaults, err := readValues(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	env := apiServer(t)
	for _, c := range valueCases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			ns := c.ns
			if ns == "" {
				ns = env.Namespace(t, "chart-"+c.name)
			} else if err := env.EnsureNamespace(ctx, ns); err != nil {
				t.Fatal(err)
			}
			objs := renderChart(t, ns, c.values)
			v, err := decodeValues(mergeValues(defaults, c.values))
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range checkRender(v, ns, objs) {
				t.Error(p)
			}
			for _, p := range checkFlags(t, objs, v) {
				t.Error(p)
			}
			for _, p := range checkPodSecurity(v, objs) {
				t.Error(p)
			}
			for _, p := range checkScheduling(v, objs) {
				t.Error(p)
			}
			if err := dryRunApply(ctx, env, objs); err != nil {
				t.Error(err)
			}
		})
	}
}

// binaries builds skein-controller, skein-agent and skein-gateway once per test binary.
var binaries = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "skein-chart-bin-")
	if err != nil {
		return "", err
	}
	binDir = dir
	cmd := exec.Command("go", "build", "-o", dir+"/", "./cmd/skein-controller", "./cmd/skein-agent", "./cmd/skein-gateway")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build the commands: %w\n%s", err, out)
	}
	return dir, nil
})

var flagLine = regexp.MustCompile(`(?m)^  -([A-Za-z0-9][-A-Za-z0-9.]*)`)

// definedFlags are the flags a command's -h lists.
func definedFlags(bin string) (map[string]bool, error) {
	out, _ := exec.Command(bin, "-h").CombinedOutput() // exits 2 after printing the usage
	flags := map[string]bool{}
	for _, m := range flagLine.FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if len(flags) < 3 {
		return nil, fmt.Errorf("%s -h lists %d flags:\n%s", bin, len(flags), out)
	}
	return flags, nil
}

// unknownFlags returns the --flags of args that bin does not define.
func unknownFlags(bin string, args []string) ([]string, error) {
	defined, err := definedFlags(bin)
	if err != nil {
		return nil, err
	}
	var bad []string
	for _, a := range args {
		name, ok := strings.CutPrefix(a, "--")
		if !ok {
			name, ok = strings.CutPrefix(a, "-")
		}
		if !ok {
			continue
		}
		name, _, _ = strings.Cut(name, "=")
		if !defined[name] {
			bad = append(bad, a)
		}
	}
	return bad, nil
}

// TestChartVersion: the chart's version and appVersion are the VERSION file's (without and
// with its leading v), so the images' default tag is the version `make images` builds, and no
// image reference of the default values uses latest.
func TestChartVersion(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(string(b))
	chart, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\nversion: " + strings.TrimPrefix(version, "v") + "\n", "\nappVersion: " + version + "\n"} {
		if !strings.Contains(string(chart), want) {
			t.Errorf("Chart.yaml lacks %q (VERSION is %s)", strings.TrimSpace(want), version)
		}
	}
	if !strings.HasPrefix(version, "v") || chartAppVersion() != version {
		t.Errorf("VERSION %q, appVersion %q: want one version starting with v", version, chartAppVersion())
	}
	// The templates for a manual install (kubectl apply) name the same image.
	for _, f := range []string{"wireguard-server.yaml", "wireguard-client.yaml"} {
		b, err := os.ReadFile(filepath.Join("templates", f))
		if err != nil {
			t.Fatal(err)
		}
		if want := "image: ghcr.io/skein-net/skein-gateway:" + version + "\n"; !strings.Contains(string(b), want) {
			t.Errorf("deploy/templates/%s lacks %q", f, strings.TrimSpace(want))
		}
	}
}

// TestChartPackagePush: the chart packages with the VERSION's version (what make chart does)
// and a push to an OCI registry (in process, on loopback) pulls back as the same chart.
func TestChartPackagePush(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(string(b))
	dir := t.TempDir()
	if out, err := helm(t, "", "package", chartDir, "--destination", dir, "--version", strings.TrimPrefix(version, "v"), "--app-version", version); err != nil {
		t.Fatalf("helm package: %v\n%s", err, out)
	}
	pkg := filepath.Join(dir, "skein-"+strings.TrimPrefix(version, "v")+".tgz")
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	repo := "oci://" + strings.TrimPrefix(srv.URL, "http://") + "/charts"
	if out, err := helm(t, "", "push", pkg, repo, "--plain-http"); err != nil {
		t.Fatalf("helm push: %v\n%s", err, out)
	}
	out, err := helm(t, "", "show", "chart", repo+"/skein", "--version", strings.TrimPrefix(version, "v"), "--plain-http")
	if err != nil {
		t.Fatalf("helm show chart: %v\n%s", err, out)
	}
	if !strings.Contains(out, "appVersion: "+version) || !strings.Contains(out, "name: skein") {
		t.Errorf("the pushed chart says:\n%s", out)
	}
}
