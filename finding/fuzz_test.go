package finding

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rlctl/rlctl/policy"
)

// FuzzLineFormats checks that text and github output keep one finding per line whatever the
// message and file name hold, and that github output never lets a value end its property or
// command early.
func FuzzLineFormats(f *testing.F) {
	for _, s := range []string{"plain", "100% over", "a\nb\r\nc", "file,with:colons", "::error::x", "%0A"} {
		f.Add(s, s)
	}
	f.Fuzz(func(t *testing.T, file, msg string) {
		r := &Report{Findings: []Finding{
			{ID: "RL001", Severity: Error, Pos: policy.Pos{File: file, Line: 1, Col: 2}, Message: msg},
			{ID: "RL002", Severity: Warning, Message: msg},
		}}
		for _, format := range []Format{Text{}, GitHub{}} {
			var buf bytes.Buffer
			if err := format.Write(&buf, r); err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(buf.String(), "\n"); n != 2 || strings.Contains(buf.String(), "\r") {
				t.Fatalf("%T: got %d lines in %q, want 2 and no CR", format, n, buf.String())
			}
		}
		var buf bytes.Buffer
		GitHub{}.Write(&buf, r)
		first, _, _ := strings.Cut(buf.String(), "\n")
		props, data, ok := strings.Cut(strings.TrimPrefix(first, "::error "), "::")
		want := 3 // file, line, col, title
		if file == "" {
			want = 2 // no file property
		}
		if !ok || strings.Count(props, ",") != want || strings.Contains(data, "\n") {
			t.Fatalf("got %q, want %d property separators and one message", first, want)
		}
	})
}
