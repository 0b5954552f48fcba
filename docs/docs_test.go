// Package docs_test checks the project's documentation: every relative link in README.md and
// docs/ names a file of the project, and every #anchor a heading of the file it points into, by
// GitHub's rules, so that links cannot rot as documents move.
package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// markdownFiles are the documents whose links are checked, relative to the repository root.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	err := filepath.WalkDir("../docs", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, strings.TrimPrefix(path, "../"))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

var (
	// inline links and images: [text](target) or [text](target "title")
	linkRE     = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	headingRE  = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	fenceRE    = regexp.MustCompile("^\\s*(```|~~~)")
	codeSpanRE = regexp.MustCompile("`[^`]*`")
	mdLinkRE   = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// stripCode removes fenced code blocks and inline code spans, where brackets are not links.
func stripCode(text string) string {
	var b strings.Builder
	inFence := false
	for _, line := range strings.Split(text, "\n") {
		if fenceRE.MatchString(line) {
			inFence = !inFence
			b.WriteString("\n")
			continue
		}
		if inFence {
			b.WriteString("\n")
			continue
		}
		b.WriteString(codeSpanRE.ReplaceAllString(line, "``"))
		b.WriteString("\n")
	}
	return b.String()
}

// Anchor is the id GitHub gives a heading: lower case, inline markup dropped, punctuation other
// than '-' and '_' dropped, each space a '-'.
func Anchor(heading string) string {
	heading = mdLinkRE.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors are the ids of a markdown file's headings; a repeated heading gets -1, -2, ... as on
// GitHub.
func anchors(text string) map[string]bool {
	ids := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(text, "\n") {
		if fenceRE.MatchString(line) {
			inFence = !inFence
			continue
		}
		m := headingRE.FindStringSubmatch(line)
		if inFence || m == nil {
			continue
		}
		id := Anchor(m[2])
		if n := seen[id]; n > 0 {
			ids[id+"-"+strconv.Itoa(n)] = true
		} else {
			ids[id] = true
		}
		seen[id]++
	}
	return ids
}

func TestAnchor(t *testing.T) {
	for _, tc := range []struct{ heading, want string }{
		{"Quick start", "quick-start"},
		{"`rlctl lint`", "rlctl-lint"},
		{"Migrating from envoyproxy/ratelimit", "migrating-from-envoyproxyratelimit"},
		{"Distributing policies over xDS: `rlctl serve-xds`", "distributing-policies-over-xds-rlctl-serve-xds"},
		{"The engine (`go test ./engine -bench .`)", "the-engine-go-test-engine--bench-"},
		{"Using rlctl in a policy repository's CI", "using-rlctl-in-a-policy-repositorys-ci"},
		{"rlctl_lint", "rlctl_lint"},
	} {
		if got := Anchor(tc.heading); got != tc.want {
			t.Errorf("Anchor(%q): got %q, want %q", tc.heading, got, tc.want)
		}
	}
}

// TestLinks fails on a relative link to a file that is not in the project, or an #anchor that
// no heading of its file has.
func TestLinks(t *testing.T) {
	root := ".."
	cache := map[string]map[string]bool{}
	for _, file := range markdownFiles(t) {
		raw, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range linkRE.FindAllStringSubmatch(stripCode(string(raw)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), path)
				if _, err := os.Stat(filepath.Join(root, dest)); err != nil {
					t.Errorf("%s: link %s: %s is not in the project", file, target, dest)
					continue
				}
			}
			if frag == "" {
				continue
			}
			if !strings.HasSuffix(dest, ".md") {
				t.Errorf("%s: link %s: an anchor into a file that is not markdown", file, target)
				continue
			}
			ids, ok := cache[dest]
			if !ok {
				b, err := os.ReadFile(filepath.Join(root, dest))
				if err != nil {
					t.Fatal(err)
				}
				ids = anchors(string(b))
				cache[dest] = ids
			}
			if !ids[frag] {
				t.Errorf("%s: link %s: %s has no heading with anchor #%s", file, target, dest, frag)
			}
		}
	}
}
