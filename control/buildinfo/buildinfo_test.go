package buildinfo

import (
	"errors"
	"flag"
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

// TestParseHelp: --help's usage goes to stdout, a bad flag's complaint to the flag set's
// output, and neither to the other.
func TestParseHelp(t *testing.T) {
	for _, tc := range []struct {
		args           []string
		stdout, output string
		help           bool
	}{
		{args: []string{"--help"}, stdout: "Usage of d:\n  -n int", help: true},
		{args: []string{"-h"}, stdout: "Usage of d:\n  -n int", help: true},
		{args: []string{"--nope"}, output: "flag provided but not defined: -nope\nUsage of d:"},
		{args: []string{"-n", "3"}},
	} {
		var stdout, output strings.Builder
		fs := flag.NewFlagSet("d", flag.ContinueOnError)
		fs.Int("n", 1, "a number")
		fs.SetOutput(&output)
		err := parseTo(fs, tc.args, &stdout)
		if got := errors.Is(err, flag.ErrHelp); got != tc.help {
			t.Errorf("%v: error %v, want help %v", tc.args, err, tc.help)
		}
		if !strings.HasPrefix(stdout.String(), tc.stdout) || (tc.stdout == "") != (stdout.Len() == 0) {
			t.Errorf("%v: stdout %q, want it to start with %q", tc.args, stdout.String(), tc.stdout)
		}
		if !strings.HasPrefix(output.String(), tc.output) || (tc.output == "") != (output.Len() == 0) {
			t.Errorf("%v: flag set output %q, want it to start with %q", tc.args, output.String(), tc.output)
		}
		if fs.Output() != &output {
			t.Errorf("%v: the flag set's output was not restored", tc.args)
		}
	}
}
