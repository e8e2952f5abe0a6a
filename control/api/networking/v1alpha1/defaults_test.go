package v1alpha1_test

import (
	"fmt"
	"net/netip"
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

// TestForbiddenRangesInCRD: the CEL rule that refuses peers' CIDRs overlapping special ranges
// lists exactly ForbiddenRemoteRanges.
func TestForbiddenRangesInCRD(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "deploy", "crds", "networking.liqo.io_configurations.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// One rule per family, each listing that family's ranges.
	quoted := map[bool][]string{}
	for _, r := range netv1alpha1.ForbiddenRemoteRanges {
		is4 := netip.MustParsePrefix(r.Prefix).Addr().Is4()
		quoted[is4] = append(quoted[is4], "'"+r.Prefix+"'")
	}
	// The YAML folds and quotes the rule: compare with single spaces and plain quotes.
	text := strings.ReplaceAll(strings.Join(strings.Fields(string(b)), " "), "''", "'")
	for _, is4 := range []bool{true, false} {
		rule := "[" + strings.Join(quoted[is4], ", ") + "]"
		if n := strings.Count(text, rule); n < 4 {
			t.Errorf("the CRD carries the list %s %d times, want 4 (pod, external, additionalPods, additionalExternals): the CEL rules and ForbiddenRemoteRanges disagree", rule, n)
		}
	}
}
