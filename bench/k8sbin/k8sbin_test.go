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
