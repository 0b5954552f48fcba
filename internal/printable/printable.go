// Package printable writes text that a client or a pull request chose so that it stays text on
// its line: a log value, a file name, a policy's free text.
package printable

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// String is s for a terminal, a Markdown file or a line of any text: control characters (C0, DEL, C1) and bytes
// that are not UTF-8 written as Go escapes (\x1b, \u0085), so that a value from the log, which
// a client chose, cannot move the cursor, recolour or rewrite the reader's terminal.
func String(s string) string {
	clean := true
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == utf8.RuneError {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r >= 0x80 && r < 0xa0:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}
