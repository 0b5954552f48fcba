// Package docgen writes the reference documentation that is generated from the code, so that it
// cannot drift from it: a page per rlctl command from its cobra help text, rlctl-enforcer's page
// from its flag set, and the enforcer's metric list from the registry of a running enforcer.
//
// `make docs` writes them (rlctl write-docs and internal/docgen/cmd/enforcer-docs); tests fail
// when the committed files differ from what these functions write now.
package docgen

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// CommandPages writes one markdown page per available command of root's tree into dir
// (root.md, root_sub.md, ...), as cobra/doc writes them, without the date cobra would stamp on
// each page, so that the same commands always give the same bytes.
func CommandPages(root *cobra.Command, dir string) error {
	disableAutoGenTag(root)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("docgen: %w", err)
	}
	if err := doc.GenMarkdownTree(root, dir); err != nil {
		return fmt.Errorf("docgen: %w", err)
	}
	return nil
}

func disableAutoGenTag(c *cobra.Command) {
	c.DisableAutoGenTag = true
	for _, sub := range c.Commands() {
		disableAutoGenTag(sub)
	}
}

// Stale compares the files matching pattern (a filepath.Match pattern) in committed with those
// in fresh, a directory just generated, and describes every difference: a page that changed,
// one that is missing, and one that is no longer generated. None means committed is current.
func Stale(committed, fresh, pattern string) ([]string, error) {
	have, err := readPages(committed, pattern)
	if err != nil {
		return nil, err
	}
	want, err := readPages(fresh, pattern)
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, name := range sortedKeys(want) {
		old, ok := have[name]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s: missing", filepath.Join(committed, name)))
		case !bytes.Equal(old, want[name]):
			problems = append(problems, fmt.Sprintf("%s: out of date", filepath.Join(committed, name)))
		}
	}
	for _, name := range sortedKeys(have) {
		if _, ok := want[name]; !ok {
			problems = append(problems, fmt.Sprintf("%s: no longer generated", filepath.Join(committed, name)))
		}
	}
	return problems, nil
}

func readPages(dir, pattern string) (map[string][]byte, error) {
	paths, err := filepath.Glob(filepath.Join(dir, pattern))
	if err != nil {
		return nil, fmt.Errorf("docgen: %w", err)
	}
	pages := map[string][]byte{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("docgen: %w", err)
		}
		pages[filepath.Base(p)] = b
	}
	return pages, nil
}

func sortedKeys(m map[string][]byte) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Markers around a generated block inside a hand-written document.
func beginMarker(name string) string {
	return fmt.Sprintf("<!-- BEGIN GENERATED %s: make docs rewrites this block -->\n", name)
}
func endMarker(name string) string { return fmt.Sprintf("<!-- END GENERATED %s -->\n", name) }

// ReplaceBlock returns doc with the text between the markers of the generated block name
// replaced by content. The markers must each be on a line of their own, once.
func ReplaceBlock(doc []byte, name string, content []byte) ([]byte, error) {
	begin, end := beginMarker(name), endMarker(name)
	s := string(doc)
	i := strings.Index(s, begin)
	j := strings.Index(s, end)
	if i < 0 || j < i || strings.Count(s, begin) != 1 || strings.Count(s, end) != 1 {
		return nil, fmt.Errorf("docgen: want one %q line and one %q line after it", strings.TrimSpace(begin), strings.TrimSpace(end))
	}
	var b bytes.Buffer
	b.WriteString(s[:i+len(begin)])
	b.Write(content)
	b.WriteString(s[j:])
	return b.Bytes(), nil
}
