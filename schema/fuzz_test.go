package schema

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad writes arbitrary bytes as a policy file and loads it: Load must never panic, and must
// return either a model or problems (a file that exists is never a tool error).
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
