package v1alpha1_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	netv1alpha1 "github.com/skein-net/skein/control/api/networking/v1alpha1"
)

// TestMarkersMatchDefaults: the kubebuilder default markers repeat the spec's MTU and port as
// literals; the generated CRDs must carry the values of the constants.
func TestMarkersMatchDefaults(t *testing.T) {
	crds := filepath.Join("..", "..", "..", "..", "deploy", "crds")
	for file, want := range map[string][]string{
		"networking.liqo.io_gatewayservers.yaml": {fmt.Sprintf("default: %d", netv1alpha1.DefaultMTU), fmt.Sprintf("default: %d", netv1alpha1.DefaultPort)},
		"networking.liqo.io_gatewayclients.yaml": {fmt.Sprintf("default: %d", netv1alpha1.DefaultMTU)},
	} {
		b, err := os.ReadFile(filepath.Join(crds, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if !strings.Contains(string(b), w) {
				t.Errorf("%s has no %q: a default marker and the constant in defaults.go disagree", file, w)
			}
		}
	}
}
