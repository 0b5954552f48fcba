// Package golden compares test output with golden files in testdata. Run a package's tests with
// -update to rewrite its golden files, then review the diff; never edit them by hand.
package golden

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata")

// Check fails t unless got equals the contents of the file at path. With -update it writes got
// to path instead. A short file's mismatch shows both texts whole; a long one's, the lines that
// differ (Diff).
func Check(t testing.TB, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if bytes.Equal(got, want) {
		return
	}
	const hint = "(run go test -update and review the diff if the change is intended)"
	if bytes.Count(got, []byte("\n")) <= shortLines && bytes.Count(want, []byte("\n")) <= shortLines {
		t.Errorf("%s: got\n%s\nwant\n%s\n%s", path, got, want, hint)
		return
	}
	t.Errorf("%s differs:\n%s%s", path, Diff(string(got), string(want)), hint)
}

// shortLines is the most lines a golden file may have for Check to show it whole.
const shortLines = 40

// maxDiffLines is the most differing lines Diff shows.
const maxDiffLines = 20

// Diff lists the lines that differ between got and want, compared line by line (line n of one
// with line n of the other): each as its number, then got's and want's text, at most
// maxDiffLines of them, and how many differ in all. It suits files of one record a line,
// where a change alters lines rather than inserting them.
func Diff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	var b strings.Builder
	differ := 0
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl == wl {
			continue
		}
		if differ++; differ <= maxDiffLines {
			fmt.Fprintf(&b, "line %d:\n  got:  %q\n  want: %q\n", i+1, gl, wl)
		}
	}
	fmt.Fprintf(&b, "%d lines differ (got %d lines, want %d)\n", differ, len(g), len(w))
	return b.String()
}
