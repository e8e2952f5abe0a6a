package cmd_test

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The commands, built once into a temporary directory.
var commands = []string{"skein-gateway", "skein-agent", "skein-controller", "skein-probe", "skeinctl"}

func buildCommands(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds every command (-short)")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build the commands: %v", err)
	}
	dir := t.TempDir()
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	for _, c := range commands {
		args = append(args, "./"+c)
	}
	build := exec.Command(gobin, args...)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return dir
}

// run runs a built command and returns its stdout, its stderr and its exit code.
func run(t *testing.T, dir string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	c := exec.Command(filepath.Join(dir, args[0]), args[1:]...)
	c.Stdout, c.Stderr = &o, &e
	err := c.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("%s: %v", strings.Join(args, " "), err)
	}
	return o.String(), e.String(), code
}

// TestHelp: every command's --help (and -h) prints its usage to stdout, nothing to stderr, and
// exits 0, so that `skein-gateway --help | less` works; a bad flag still goes to stderr with
// exit 2.
func TestHelp(t *testing.T) {
	dir := buildCommands(t)
	for _, c := range []struct {
		args []string
		want string // what the usage must mention
	}{
		{[]string{"skein-gateway", "--help"}, "--print-peer-config"},
		{[]string{"skein-gateway", "-h"}, "-gateway-name"},
		{[]string{"skein-agent", "--help"}, "-node-name"},
		{[]string{"skein-agent", "-h"}, "-node-ip"},
		{[]string{"skein-controller", "--help"}, "-namespace"},
		{[]string{"skein-controller", "-h"}, "-kubeconfig"},
		{[]string{"skein-probe", "--help"}, "skein-probe serve"},
		{[]string{"skein-probe", "serve", "--help"}, "-tcp"},
		{[]string{"skein-probe", "check", "-h"}, "-mtu"},
		{[]string{"skein-probe", "resolve", "-h"}, "-srv"},
		{[]string{"skeinctl", "--help"}, "network"},
		{[]string{"skeinctl", "network", "connect", "--help"}, "--remote-kubeconfig"},
	} {
		name := strings.Join(c.args, " ")
		stdout, stderr, code := run(t, dir, c.args...)
		if code != 0 {
			t.Errorf("%s: exit %d, want 0", name, code)
		}
		if stderr != "" {
			t.Errorf("%s: wrote to stderr, want nothing there:\n%s", name, stderr)
		}
		if !strings.Contains(stdout, c.want) {
			t.Errorf("%s: stdout does not mention %q:\n%s", name, c.want, stdout)
		}
	}
	for _, args := range [][]string{
		{"skein-gateway", "--no-such-flag"},
		{"skein-agent", "--no-such-flag"},
		{"skein-controller", "--no-such-flag"},
		{"skein-probe", "serve", "--no-such-flag"},
	} {
		name := strings.Join(args, " ")
		stdout, stderr, code := run(t, dir, args...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, "no-such-flag") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 2, nothing on stdout, the flag named on stderr", name, code, stdout, stderr)
		}
	}
}
