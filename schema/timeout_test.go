package schema

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLoadGivesUp: a policy whose evaluation explodes is a problem with a position, not a hang.
// The file asks CUE for a list of 2^32 elements.
func TestLoadGivesUp(t *testing.T) {
	const bomb = `package p
l0: [0, 0, 0, 0]
l1: [for a in l0 for b in l0 {0}]
l2: [for a in l1 for b in l1 {0}]
l3: [for a in l2 for b in l2 {0}]
l4: [for a in l3 for b in l3 {0}]
domains: {}
`
	dir := t.TempDir()
	file := filepath.Join(dir, "bomb.cue")
	if err := os.WriteFile(file, []byte(bomb), 0o644); err != nil {
		t.Fatal(err)
	}
	defer func(d time.Duration) { evalTimeout = d }(evalTimeout)
	evalTimeout = 200 * time.Millisecond

	_, err := Load(dir)
	probs, ok := err.(Problems)
	if !ok || len(probs) != 1 {
		t.Fatalf("Load: got %v, want one problem", err)
	}
	if got := probs[0].Pos.File; got != file {
		t.Errorf("problem file: got %q, want %q", got, file)
	}
	if !strings.Contains(probs[0].Message, "did not finish") {
		t.Errorf("problem message: got %q, want it to say evaluation did not finish", probs[0].Message)
	}
	// While it runs on, a fixed policy loads, but a second runaway evaluation is the last to
	// start: serve-xds, reloading every 30 s, had left one more goroutine spinning at each
	// reload.
	t.Cleanup(func() { overdue.Store(0) }) // the bombs run on; let later tests load
	good := t.TempDir()
	if err := os.WriteFile(filepath.Join(good, "p.cue"), []byte("package p\ndomains: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(good); err != nil && strings.Contains(err.Error(), "still running") {
		t.Errorf("a policy fixed since, with one evaluation running on: %v", err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "did not finish") {
		t.Errorf("a second runaway: got %v, want it timed out", err)
	}
	_, err = Load(good)
	if probs, ok := err.(Problems); !ok || len(probs) != 1 || !strings.Contains(probs[0].Message, "are still running") {
		t.Errorf("with two running on: got %v, want a problem saying they are still running", err)
	}
}
