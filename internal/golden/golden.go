// Package golden compares test output with golden files in testdata. Run a package's tests with
// -update to rewrite its golden files, then review the diff; never edit them by hand.
package golden

import (
	"bytes"
	"flag"
	"os"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata")

// Check fails t unless got equals the contents of the file at path. With -update it writes got
// to path instead.
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
	if !bytes.Equal(got, want) {
		t.Errorf("%s: got\n%s\nwant\n%s\n(run go test -update and review the diff if the change is intended)", path, got, want)
	}
}
