package skein_test

import (
	"path/filepath"
	"testing"

	"github.com/skein-net/skein/internal/docblocks"
)

// TestDocBlocksMarked: every shell block in docs/ is run by a doc test (bench/e2e TestDocs in
// the lab, or the appliance's standalone doc test) or marked as an illustration with the
// reason it is not run (internal/docblocks says how): docs that cannot rot.
func TestDocBlocksMarked(t *testing.T) {
	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, p := range pages {
		blocks, err := docblocks.Parse(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range blocks {
			if !b.Shell() {
				continue
			}
			k := b.Kind()
			if k == "" {
				t.Errorf("%s:%d: a shell block marked neither as run by a doc test nor as an illustration (marker %q; internal/docblocks lists the markers)", b.File, b.Line, b.Marker)
			}
			counts[k]++
		}
	}
	t.Logf("shell blocks in docs/ by kind: %v", counts)
}
