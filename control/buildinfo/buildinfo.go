// Package buildinfo says which build of skein is running: the version and commit stamped at
// link time (-ldflags "-X github.com/skein-net/skein/control/buildinfo.Version=v0.2.0 -X
// ...Commit=<sha>"), else what the Go toolchain recorded (the module version, the VCS revision
// of a build from a checkout). Every daemon exports it as skein_<component>_build_info (Metric)
// and skeinctl prints it. It depends on nothing but the standard library, so the gateway links
// no metrics library through it.
package buildinfo

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
)

// Set at link time; empty means "ask the toolchain".
var (
	Version string
	Commit  string
)

// Info is one build's identity.
type Info struct {
	Version   string // a release tag, or "dev"
	Commit    string // the VCS revision, "+dirty" appended for a modified tree; "unknown" if none
	GoVersion string
}

var (
	once sync.Once
	info Info
)

// Get returns this binary's Info.
func Get() Info {
	once.Do(func() { info = resolve(Version, Commit, debug.ReadBuildInfo) })
	return info
}

func resolve(version, commit string, read func() (*debug.BuildInfo, bool)) Info {
	in := Info{Version: version, Commit: commit, GoVersion: runtime.Version()}
	if bi, ok := read(); ok {
		settings := map[string]string{}
		for _, s := range bi.Settings {
			settings[s.Key] = s.Value
		}
		if in.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			in.Version = bi.Main.Version
		}
		if in.Commit == "" && settings["vcs.revision"] != "" {
			in.Commit = settings["vcs.revision"]
			if settings["vcs.modified"] == "true" {
				in.Commit += "+dirty"
			}
		}
	}
	// Label values must be UTF-8: a stamp that is not would stop the daemons registering
	// their metrics.
	in.Version, in.Commit = strings.ToValidUTF8(in.Version, "?"), strings.ToValidUTF8(in.Commit, "?")
	if in.Version == "" {
		in.Version = "dev"
	}
	if in.Commit == "" {
		in.Commit = "unknown"
	}
	return in
}

// String is the one-line form skeinctl version and the daemons' start-up log print.
func (i Info) String() string {
	return i.Version + " (commit " + i.Commit + ", " + i.GoVersion + ")"
}

// Metric returns the name and help text of the constant skein_<component>_build_info gauge
// every daemon exports (value 1, labels version, commit and goversion), so dashboards can show
// and join on the build. The controller and the agent register buildmetric.Collector; the
// gateway writes it itself (appliance/metrics.go).
func Metric(component string) (name, help string) {
	return "skein_" + component + "_build_info", "Always 1; the labels name the running build of skein-" + component + "."
}

// ParseFlags parses a daemon's command line into fs, adding --version: --help prints the
// usage to stdout and --version name and the build, both exit 0; a bad flag exits 2 after fs
// has said why on its output (stderr unless set).
func ParseFlags(fs *flag.FlagSet, name string, args []string) {
	version := fs.Bool("version", false, "print the version and exit")
	if err := Parse(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	if *version {
		fmt.Printf("%s %s\n", name, Get())
		os.Exit(0)
	}
}

// Parse is fs.Parse with the usage that --help asks for written to stdout, where a reader
// pipes it to a pager or grep; what fs says about a bad flag still goes to fs's output. Every
// command of skein parses its flags with it (through ParseFlags for the daemons).
func Parse(fs *flag.FlagSet, args []string) error {
	return parseTo(fs, args, os.Stdout)
}

func parseTo(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	out := fs.Output()
	var said bytes.Buffer
	fs.SetOutput(&said)
	err := fs.Parse(args)
	fs.SetOutput(out)
	if errors.Is(err, flag.ErrHelp) {
		out = stdout
	}
	if _, werr := out.Write(said.Bytes()); werr != nil && err == nil {
		return werr
	}
	return err
}
