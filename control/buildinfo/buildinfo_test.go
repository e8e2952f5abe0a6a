package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestResolve(t *testing.T) {
	fromGo := func(version string, settings ...string) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) {
			bi := &debug.BuildInfo{Main: debug.Module{Version: version}}
			for i := 0; i+1 < len(settings); i += 2 {
				bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
			}
			return bi, true
		}
	}
	none := func() (*debug.BuildInfo, bool) { return nil, false }
	for _, tc := range []struct {
		name                    string
		version, commit         string
		read                    func() (*debug.BuildInfo, bool)
		wantVersion, wantCommit string
	}{
		{"stamped wins", "v0.2.0", "abc", fromGo("v9.9.9", "vcs.revision", "def"), "v0.2.0", "abc"},
		{"from a checkout", "", "", fromGo("(devel)", "vcs.revision", "def", "vcs.modified", "true"), "dev", "def+dirty"},
		{"go install of a tag", "", "", fromGo("v0.3.1"), "v0.3.1", "unknown"},
		{"nothing known", "", "", none, "dev", "unknown"},
	} {
		got := resolve(tc.version, tc.commit, tc.read)
		if got.Version != tc.wantVersion || got.Commit != tc.wantCommit || !strings.HasPrefix(got.GoVersion, "go") {
			t.Errorf("%s: got %+v, want version %s commit %s", tc.name, got, tc.wantVersion, tc.wantCommit)
		}
	}
}
