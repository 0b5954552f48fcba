package schema

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad writes arbitrary bytes as a policy file and loads it: Load must never panic, and must
// return either a model or problems (a file that exists is never a tool error).
//
// Each new input that widens coverage is minimized before fuzzing goes on, for up to
// -fuzzminimizetime (60s by default), and the execs count stands still meanwhile: almost every
// byte of a CUE file changes the evaluator's coverage, so minimization rarely finishes early.
// Run with a short limit, such as
//
//	go test ./schema -run XXX -fuzz FuzzLoad -fuzztime 60s -fuzzminimizetime 5s
func FuzzLoad(f *testing.F) {
	for _, dir := range []string{"../policies", "testdata/good/defaults", "testdata/good/split"} {
		names, _ := filepath.Glob(filepath.Join(dir, "*.cue"))
		for _, n := range names {
			if b, err := os.ReadFile(n); err == nil {
				f.Add(b)
			}
		}
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		name := filepath.Join(t.TempDir(), "policy.cue")
		if err := os.WriteFile(name, src, 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := Load(name)
		if err != nil {
			var probs Problems
			if !errors.As(err, &probs) {
				t.Fatalf("got tool error %v, want problems", err)
			}
			return
		}
		if m == nil {
			t.Fatal("got nil model and nil error")
		}
	})
}
