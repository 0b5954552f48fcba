package diff

import (
	"strings"
	"testing"

	"github.com/rlctl/rlctl/internal/printable"
)

// TestMarkdownCellsHoldTheirText: what a pull request chooses, a file's name or a logged value,
// stays in its table cell: a line break had ended the cell and the code span, and a file named
// "a\n\n_No policy changes._\n\n<!--.cue" hid every row after it in an HTML comment. A mention
// or an issue reference in a policy's text notifies nobody.
func TestMarkdownCellsHoldTheirText(t *testing.T) {
	for _, s := range []string{"a\n\n_No policy changes._\n\n<!--.cue", "x\r\n## Injected", "y\r[link](https://evil.example)"} {
		got := codeOrDash(s)
		if strings.ContainsAny(got, "\r\n") || strings.Count(got, "`") != 2 {
			t.Errorf("codeOrDash(%q) = %q: want one code span on one line", s, got)
		}
		if got := MarkdownCell(s); strings.ContainsAny(got, "\r\n") || strings.Contains(got, "<!--") {
			t.Errorf("MarkdownCell(%q) = %q: want one line, no HTML", s, got)
		}
	}
	if got := MarkdownCell("owner @octocat, see #123"); strings.Contains(got, "@octocat") || strings.Contains(got, "#123") {
		t.Errorf("MarkdownCell kept a live mention or reference: %q", got)
	}
}

// TestBlastTextValuesStayOnTheirLine: a logged value with a line break is quoted in the text
// report, so that no line of it starts with a runner's workflow command ("::add-mask::").
func TestBlastTextValuesStayOnTheirLine(t *testing.T) {
	if got := printable.String("evil\n::warning title=Injected::x"); strings.Contains(got, "\n") {
		t.Errorf("printable.String kept a line break: %q", got)
	}
	if got := printable.String("tenant-a"); got != "tenant-a" {
		t.Errorf("printable.String(%q) = %q: a plain value prints as it is", "tenant-a", got)
	}
}
