package golden

import (
	"strings"
	"testing"
)

func TestDiff(t *testing.T) {
	got := Diff("a\nb\nc\n", "a\nB\nc\nd\n")
	for _, want := range []string{"line 2:", `got:  "b"`, `want: "B"`, "line 4:", `want: "d"`, "2 lines differ (got 4 lines, want 5)"} {
		if !strings.Contains(got, want) {
			t.Errorf("Diff output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "line 1:") || strings.Contains(got, "line 3:") {
		t.Errorf("Diff lists equal lines:\n%s", got)
	}

	var g, w strings.Builder
	for i := range 100 {
		g.WriteString("x\n")
		if i%2 == 0 {
			w.WriteString("y\n")
		} else {
			w.WriteString("x\n")
		}
	}
	long := Diff(g.String(), w.String())
	if n := strings.Count(long, "line "); n != maxDiffLines {
		t.Errorf("Diff of 50 differing lines shows %d, want %d", n, maxDiffLines)
	}
	if !strings.Contains(long, "50 lines differ") {
		t.Errorf("Diff does not count every differing line:\n%s", long)
	}
}
