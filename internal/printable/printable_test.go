package printable

import "testing"

// TestPrintable: a value from the log reaches a terminal or a Markdown file without control
// characters (tabs and newlines included), which a client could use to recolour or rewrite the
// reader's terminal; printable text stays as it is.
func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"/q\x1b[31mRED\x1b[0m": `/q\x1b[31mRED\x1b[0m`,
		"a\tb\nc\x7f":          `a\x09b\x0ac\x7f`,
		"next\u0085line":       `next\u0085line`,
		"bad\xff":              `bad\xff`,
		"é ✓ \ufffd plain":     "é ✓ \ufffd plain",
	} {
		if got := String(in); got != want {
			t.Errorf("String(%q) = %q, want %q", in, got, want)
		}
	}
}
