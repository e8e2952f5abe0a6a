package skein_test

import (
	"bufio"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// The pages a newcomer reads: README.md and everything in docs/, plus the pages they link to
// at the root. Their relative links must lead somewhere.
func docPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append([]string{"README.md", "CHANGELOG.md", "CONTRIBUTING.md", "SECURITY.md"}, pages...)
	return pages
}

// TestDocLinks fails when a relative link of README.md or docs/*.md names a file that does
// not exist, or a heading anchor that the target page does not have.
func TestDocLinks(t *testing.T) {
	pages := docPages(t)
	if len(pages) < 6 {
		t.Fatalf("found only %v: run the test from the repository root", pages)
	}
	problems, checked := checkLinks(t, pages)
	for _, p := range problems {
		t.Error(p)
	}
	t.Logf("checked %d relative links in %d pages", checked, len(pages))
	if checked < 20 {
		t.Errorf("checked only %d relative links in %d pages: is the link parser broken?", checked, len(pages))
	}
}

// TestDocLinksFindBroken runs the checker on pages written to fail it: a missing file, a
// missing anchor in another page, a missing anchor in the page itself; and links it must
// accept: an anchor made of punctuation-laden heading text, a duplicate heading's "-1" anchor,
// a directory, external links, links inside code.
func TestDocLinksFindBroken(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("sub/target.md", "# Target\n\n## 4. Peer: two clusters (the `connect` way)\n\n## Notes\n\n## Notes\n\n```\n## not a heading\n```\n")
	write("page.md", strings.Join([]string{
		"# Page",
		"[ok](sub/target.md#4-peer-two-clusters-the-connect-way)",
		"[ok, the second Notes](sub/target.md#notes-1) and [ok, a directory](sub)",
		"[ok, here](#page) [ok](https://example.com/missing.md) [ok](mailto:a@b.c)",
		"`[in code](missing-in-code.md)`",
		"```",
		"[in a fence](missing-in-fence.md)",
		"```",
		"[broken file](sub/nothere.md)",
		"[broken anchor](sub/target.md#not-a-heading)",
		"[broken own anchor](#nowhere)",
		"![broken image](img/none.png)",
		"[ref]: sub/gone.md",
		"",
	}, "\n"))
	problems, checked := checkLinks(t, []string{filepath.Join(dir, "page.md")})
	for i, p := range problems {
		problems[i] = strings.ReplaceAll(p, dir+string(filepath.Separator), "")
	}
	want := []string{
		"page.md:9: sub/nothere.md: no such file",
		"page.md:10: sub/target.md#not-a-heading: sub/target.md has no heading with anchor \"not-a-heading\"",
		"page.md:11: #nowhere: page.md has no heading with anchor \"nowhere\"",
		"page.md:12: img/none.png: no such file",
		"page.md:13: sub/gone.md: no such file",
	}
	if strings.Join(problems, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(problems, "\n"), strings.Join(want, "\n"))
	}
	if checked != 9 {
		t.Errorf("checked %d relative links, want 10", checked)
	}
}

func TestHeadingAnchor(t *testing.T) {
	for _, c := range []struct{ heading, anchor string }{
		{"4. Peer", "4-peer"},
		{"DNS: `<svc>.<ns>.svc.clusterset.local`", "dns-svcnssvcclustersetlocal"},
		{"skeinctl's commands", "skeinctls-commands"},
		{"The node agent (Liqo-Route)", "the-node-agent-liqo-route"},
		{"Flannel (tested: v0.28.10, VXLAN backend, `--ip-masq`, nftables mode)", "flannel-tested-v02810-vxlan-backend---ip-masq-nftables-mode"},
		{"Where a pod's node comes from (gateway.watchPods)", "where-a-pods-node-comes-from-gatewaywatchpods"},
		{"See [the lab](lab.md) and **more**", "see-the-lab-and-more"},
		{"snake_case kept", "snake_case-kept"},
	} {
		if got := headingAnchor(c.heading); got != c.anchor {
			t.Errorf("headingAnchor(%q) = %q, want %q", c.heading, got, c.anchor)
		}
	}
}

var (
	inlineLinkRE = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refLinkRE    = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$`)
	codeSpanRE   = regexp.MustCompile("`+[^`]*`+")
	headingRE    = regexp.MustCompile(`^\s{0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$`)
	htmlAnchorRE = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	schemeRE     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	mdLinkRE     = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// mdLine is a line of a markdown page outside fenced code blocks.
type mdLine struct {
	n    int
	text string
}

// proseLines returns the lines of a markdown file that are not inside fenced code blocks.
func proseLines(name string) ([]mdLine, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines []mdLine
	fence := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]+" ") == "" {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		lines = append(lines, mdLine{n, line})
	}
	return lines, sc.Err()
}

// headingAnchor is the anchor GitHub gives a heading: the text as rendered (code marks and
// link syntax gone), lowercased, every character that is not a letter, digit, space, '-' or
// '_' dropped, spaces turned into '-'.
func headingAnchor(heading string) string {
	text := mdLinkRE.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// pageAnchors returns the anchors of a markdown page: one per heading (a repeated one gets
// "-1", "-2", ... as on GitHub) and every <a name> or id.
func pageAnchors(name string) (map[string]bool, error) {
	lines, err := proseLines(name)
	if err != nil {
		return nil, err
	}
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, l := range lines {
		for _, m := range htmlAnchorRE.FindAllStringSubmatch(l.text, -1) {
			anchors[m[1]] = true
		}
		m := headingRE.FindStringSubmatch(l.text)
		if m == nil {
			continue
		}
		a := headingAnchor(m[2])
		if k := seen[a]; k > 0 {
			anchors[fmt.Sprintf("%s-%d", a, k)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors, nil
}

// checkLinks checks every relative link of pages: its file exists and, for a markdown file
// with an anchor, the file has that heading. It returns the problems as "page:line: link:
// what is wrong" and how many relative links it checked.
func checkLinks(t *testing.T, pages []string) (problems []string, checked int) {
	t.Helper()
	anchorsOf := map[string]map[string]bool{}
	anchors := func(name string) map[string]bool {
		if a, ok := anchorsOf[name]; ok {
			return a
		}
		a, err := pageAnchors(name)
		if err != nil {
			t.Fatal(err)
		}
		anchorsOf[name] = a
		return a
	}
	for _, page := range pages {
		lines, err := proseLines(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			text := codeSpanRE.ReplaceAllString(l.text, "")
			var targets []string
			for _, m := range inlineLinkRE.FindAllStringSubmatch(text, -1) {
				targets = append(targets, m[1])
			}
			if m := refLinkRE.FindStringSubmatch(text); m != nil {
				targets = append(targets, m[1])
			}
			for _, target := range targets {
				if schemeRE.MatchString(target) || strings.HasPrefix(target, "//") {
					continue // external
				}
				checked++
				file, anchor, _ := strings.Cut(target, "#")
				fail := func(format string, args ...any) {
					problems = append(problems, fmt.Sprintf("%s:%d: %s: %s", page, l.n, target, fmt.Sprintf(format, args...)))
				}
				dest := page
				if file != "" {
					p, err := url.PathUnescape(file)
					if err != nil {
						fail("bad escape: %v", err)
						continue
					}
					dest = filepath.Join(filepath.Dir(page), filepath.FromSlash(p))
					if strings.HasPrefix(p, "/") {
						fail("absolute path: write it relative to %s", page)
						continue
					}
					if _, err := os.Stat(dest); err != nil {
						fail("no such file")
						continue
					}
				}
				if anchor == "" || !strings.HasSuffix(strings.ToLower(dest), ".md") {
					continue
				}
				if !anchors(dest)[anchor] {
					named := file // the page as the link names it
					if named == "" {
						named = filepath.Base(page)
					}
					fail("%s has no heading with anchor %q", named, anchor)
				}
			}
		}
	}
	return problems, checked
}
