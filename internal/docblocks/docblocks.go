// Package docblocks reads the fenced code blocks of skein's Markdown docs and what each is
// marked as, so that no shell block in docs/ goes unrun or unjudged.
//
// A shell block (a fence with no language, or sh, bash, shell, console) is preceded by one of
// these HTML comments, invisible when the page is rendered:
//
//	<!-- doc-test: run -->                 the doc test runs it in the lab (bench/e2e TestDocs)
//	<!-- doc-test: run in each cluster --> ... once against each of the lab's two clusters
//	<!-- doc-test: run last -->            ... after every other page's blocks (an uninstall)
//	<!-- doc-test: output -->              "$ command" lines with the output they print: the doc
//	                                       test runs the commands and compares the output's shape
//	<!-- on: HOST -->                      docs/standalone.md's recipes, run by the appliance's
//	                                       doc test in network namespaces
//	<!-- illustration: WHY -->             not run: a diagram, an example for other clusters, a
//	                                       command that needs what the lab has not (WHY says what)
package docblocks

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// Block is one fenced code block of a page.
type Block struct {
	File string
	Line int // of the opening fence
	// Info is the fence's language ("" for none).
	Info string
	// Marker is the HTML comment on the last non-blank line before the fence ("" when none),
	// without its <!-- and -->.
	Marker string
	Body   string
}

// Shell reports whether the block is a shell block: a fence with no language, or sh, bash,
// shell, console.
func (b Block) Shell() bool {
	switch b.Info {
	case "", "sh", "bash", "shell", "console":
		return true
	}
	return false
}

// Kind is what the marker says: "run", "run in each cluster", "run last", "output", "on",
// "illustration",
// or "" when the block carries no marker this package knows.
func (b Block) Kind() string {
	m := strings.TrimSpace(b.Marker)
	switch {
	case m == "doc-test: run", m == "doc-test: run in each cluster", m == "doc-test: run last", m == "doc-test: output":
		return strings.TrimPrefix(m, "doc-test: ")
	case strings.HasPrefix(m, "on: "):
		return "on"
	case strings.HasPrefix(m, "illustration: ") && len(strings.TrimSpace(strings.TrimPrefix(m, "illustration: "))) > 0:
		return "illustration"
	}
	return ""
}

var markerRE = regexp.MustCompile(`^<!--\s*(.*?)\s*-->$`)

// Parse reads the fenced blocks of the Markdown file at path.
func Parse(path string) ([]Block, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		out      []Block
		cur      *Block
		body     strings.Builder
		lastText string // the last non-blank line outside blocks
		n        int
	)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		n++
		line := sc.Text()
		fence := strings.HasPrefix(line, "```")
		switch {
		case cur == nil && fence:
			cur = &Block{File: path, Line: n, Info: strings.TrimSpace(strings.TrimPrefix(line, "```"))}
			if m := markerRE.FindStringSubmatch(strings.TrimSpace(lastText)); m != nil {
				cur.Marker = m[1]
			}
			body.Reset()
		case cur != nil && fence && strings.TrimSpace(line) == "```":
			cur.Body = body.String()
			out = append(out, *cur)
			cur, lastText = nil, ""
		case cur != nil:
			body.WriteString(line)
			body.WriteByte('\n')
		case strings.TrimSpace(line) != "":
			lastText = line
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: a code block that never closes", path, cur.Line)
	}
	return out, nil
}
