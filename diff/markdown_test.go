package diff

import (
	"strings"
	"testing"
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
		if got := mdEscape(s); strings.ContainsAny(got, "\r\n") || strings.Contains(got, "<!--") {
			t.Errorf("mdEscape(%q) = %q: want one line, no HTML", s, got)
		}
	}
	if got := mdEscape("owner @octocat, see #123"); strings.Contains(got, "@octocat") || strings.Contains(got, "#123") {
		t.Errorf("mdEscape kept a live mention or reference: %q", got)
	}
}

// TestBlastTextValuesStayOnTheirLine: a logged value with a line break is quoted in the text
// report, so that no line of it starts with a runner's workflow command ("::add-mask::").
func TestBlastTextValuesStayOnTheirLine(t *testing.T) {
	if got := oneLine("evil\n::warning title=Injected::x"); strings.Contains(got, "\n") {
		t.Errorf("oneLine kept a line break: %q", got)
	}
	if got := oneLine("tenant-a"); got != "tenant-a" {
		t.Errorf("oneLine(%q) = %q: a plain value prints as it is", "tenant-a", got)
	}
}
