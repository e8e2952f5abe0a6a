package skein_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The README's set-up commands are what a newcomer types on a fresh machine: the demo, the
// CI entry point and the test command that entry point must run. They are indented code
// lines of README.md, and .ci/run and the Makefile must do what the README says.
var readmeSetUp = []string{
	"bash .ci/install-deps && make demo",
	"bash .ci/run",
	"make test",
}

// TestReadmeSetUp fails when README.md loses one of its set-up commands, when .ci/run stops
// calling the test command the README gives, or when a make target they name is gone.
func TestReadmeSetUp(t *testing.T) {
	readme := readFile(t, "README.md")
	commands := map[string]bool{}
	for _, line := range strings.Split(readme, "\n") {
		if strings.HasPrefix(line, "    ") && strings.TrimSpace(line) != "" {
			commands[strings.TrimSpace(line)] = true
		}
	}
	for _, c := range readmeSetUp {
		if !commands[c] {
			t.Errorf("README.md has no set-up command %q (an indented line of its own)", c)
		}
	}
	if problems := checkSetUp(readFile(t, ".ci/run"), readFile(t, "Makefile"), readmeSetUp); len(problems) > 0 {
		t.Error(strings.Join(problems, "\n"))
	}
	if _, err := os.Stat(".ci/install-deps"); err != nil {
		t.Errorf("README.md's demo command runs .ci/install-deps: %v", err)
	}
}

// TestReadmeSetUpCheck feeds checkSetUp a .ci/run that runs another test command and a
// Makefile without the demo target.
func TestReadmeSetUpCheck(t *testing.T) {
	run := "#!/usr/bin/env bash\nset -e\nbash .ci/install-deps\nmake test-unit\n# make test\n"
	makefile := "test: k8s-binaries ## all\n\tgo test ./...\ntest-unit:\n\tgo test -short ./...\n"
	got := strings.Join(checkSetUp(run, makefile, readmeSetUp), "\n")
	want := ".ci/run does not run README.md's test command \"make test\"\nMakefile has no target \"demo\" (README.md runs make demo)"
	if got != want {
		t.Errorf("problems:\n%s\nwant:\n%s", got, want)
	}
}

var (
	makeCallRE   = regexp.MustCompile(`\bmake ([a-z][a-z0-9-]*)`)
	makeTargetRE = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
)

// checkSetUp compares the CI script and the Makefile with the README's set-up commands, the
// last of which is the test command .ci/run must run on a line of its own.
func checkSetUp(run, makefile string, setUp []string) []string {
	var problems []string
	testCommand := setUp[len(setUp)-1]
	runs := false
	for _, line := range strings.Split(run, "\n") {
		if strings.TrimSpace(line) == testCommand {
			runs = true
		}
	}
	if !runs {
		problems = append(problems, ".ci/run does not run README.md's test command \""+testCommand+"\"")
	}
	targets := map[string]bool{}
	for _, line := range strings.Split(makefile, "\n") {
		if name, _, ok := strings.Cut(line, ":"); ok && makeTargetRE.MatchString(name) {
			targets[name] = true
		}
	}
	for _, c := range setUp {
		for _, m := range makeCallRE.FindAllStringSubmatch(c, -1) {
			if !targets[m[1]] {
				problems = append(problems, "Makefile has no target \""+m[1]+"\" (README.md runs make "+m[1]+")")
			}
		}
	}
	return problems
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
