package schema

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUnclosedBrace checks that a missing '}' names the brace left open, not only the end of the
// file where CUE notices it.
func TestUnclosedBrace(t *testing.T) {
	tests := []struct {
		name, src string
		line      int // of the brace left open; 0 when the file parses
	}{
		{"inner block", "package p\n\nd: {\n\ta: {\n\t\tx: 1\n\n\tb: {\n\t\ty: 2\n\t}\n}\n", 4},
		{"outermost block", "package p\n\nd: {\n\ta: {x: 1}\n", 3},
		{"innermost without indentation clues", "package p\nd: {a: {b: {x: 1}\n", 2},
		{"closed", "package p\n\nd: {\n\ta: {x: \"}\"}\n}\n", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			at, ok := unclosedBrace("p.cue", []byte(tc.src))
			if got, want := ok, tc.line > 0; got != want {
				t.Fatalf("found: got %v, want %v", got, want)
			}
			if ok && at.Line != tc.line {
				t.Errorf("line: got %d, want %d", at.Line, tc.line)
			}
		})
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.cue"), []byte(tests[0].src), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(dir)
	probs, ok := err.(Problems)
	if !ok || len(probs) != 1 {
		t.Fatalf("Load: got %v, want one problem", err)
	}
	if p := probs[0]; !strings.Contains(p.Message, "the '{' at line 4 is not closed") || len(p.Related) != 1 || p.Related[0].Line != 4 {
		t.Errorf("problem: got %q related %v, want the brace at line 4 named", p.Message, p.Related)
	}
}
