package k8sbin

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

func TestStagingModules(t *testing.T) {
	gomod := `module k8s.io/kubernetes

require (
	k8s.io/api v0.0.0
	github.com/spf13/cobra v1.10.2
)

replace (
	k8s.io/api => ./staging/src/k8s.io/api
	k8s.io/client-go => ./staging/src/k8s.io/client-go
	github.com/example/fork => github.com/example/fork v1.2.3
)

replace k8s.io/kubectl => ./staging/src/k8s.io/kubectl
`
	got, err := stagingModules([]byte(gomod))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"k8s.io/api", "k8s.io/client-go", "k8s.io/kubectl"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("stagingModules = %q, want %q", got, want)
	}
	if _, err := stagingModules([]byte("module x\n")); err == nil || !strings.Contains(err.Error(), "no staging modules") {
		t.Errorf("a go.mod without staging replaces: err = %v, want one saying so", err)
	}
}

// TestVersionsAgree keeps the Kubernetes binaries on the minor of the k8s.io/client-go skein
// builds against (client v0.X.Y talks to server v1.X.Z), so tests exercise the pairing we ship.
func TestVersionsAgree(t *testing.T) {
	gomod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*k8s\.io/client-go v0\.(\d+)\.\d+`).FindSubmatch(gomod)
	if m == nil {
		t.Fatal("go.mod requires no k8s.io/client-go v0.X.Y")
	}
	if minor := strings.Split(KubernetesVersion, ".")[1]; minor != string(m[1]) {
		t.Errorf("KubernetesVersion %s is on minor %s but go.mod has k8s.io/client-go v0.%s", KubernetesVersion, minor, m[1])
	}
}

func TestKubeVersionOfClientGo(t *testing.T) {
	for v, want := range map[string]string{"v0.37.0": "37", "v0.37.1": "37", "v0.40.0-rc.1": "40"} {
		major, minor, err := kubeVersionOfClientGo(v)
		if err != nil || major != "1" || minor != want {
			t.Errorf("kubeVersionOfClientGo(%q) = %q, %q, %v; want 1, %s", v, major, minor, err, want)
		}
	}
	for _, v := range []string{"v1.37.0", "v0.x.1", "v0", "", "v0..1"} {
		if _, _, err := kubeVersionOfClientGo(v); err == nil {
			t.Errorf("kubeVersionOfClientGo(%q) accepted", v)
		}
	}
}

// TestHelmHasItsOwnCacheEntry: helm's directory and stamp are not the Kubernetes build's, so
// adding or bumping helm never invalidates that build (and the other way round).
func TestHelmHasItsOwnCacheEntry(t *testing.T) {
	t.Setenv("SKEIN_CACHE", t.TempDir())
	k8s, err := Dir()
	if err != nil {
		t.Fatal(err)
	}
	helm, err := HelmDir()
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(helm, k8s) || strings.HasPrefix(k8s, helm) {
		t.Errorf("helm's cache %s overlaps the Kubernetes build's %s", helm, k8s)
	}
	if !strings.Contains(helm, HelmVersion) {
		t.Errorf("helm's cache %s is not versioned by %s", helm, HelmVersion)
	}
	if p, ok := HelmReady(); ok {
		t.Errorf("HelmReady in an empty cache: %s", p)
	}
	k8sStamp, err := stamp()
	if err != nil {
		t.Fatal(err)
	}
	hs, err := helmStamp()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(k8sStamp), "helm") || !strings.Contains(string(hs), HelmVersion) {
		t.Errorf("stamps: k8s %s, helm %s", k8sStamp, hs)
	}
}

// TestCoreDNSMain: the CoreDNS wrapper's main links every plugin of the lab's Corefile and
// runs CoreDNS's own main.
func TestCoreDNSMain(t *testing.T) {
	m := corednsMain()
	for _, p := range []string{"kubernetes", "errors", "health", "ready", "metrics", "cache", "loop", "reload", "loadbalance"} {
		if !strings.Contains(m, "\t_ \"github.com/coredns/coredns/plugin/"+p+"\"\n") {
			t.Errorf("the CoreDNS main does not link plugin %s:\n%s", p, m)
		}
	}
	if !strings.Contains(m, "coremain.Run()") {
		t.Errorf("the CoreDNS main does not run coremain:\n%s", m)
	}
}
