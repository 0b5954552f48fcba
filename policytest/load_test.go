package policytest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLoadBoundsWork: a test file can ask for no endless work: a repeat over MaxRepeat is a
// problem at its position (2^53 ran until killed), and an evaluation that does not finish
// within the timeout is one too (comprehensions over comprehensions hung rlctl test).
func TestLoadBoundsWork(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	_, err := Load(write("repeat.cue", `policies: "."
tests: t: {domain: "edge", requests: [{at: "0s", headers: {"x-tenant": "a"}, repeat: 9007199254740991, expect: decision: "unmatched"}]}
`))
	if err == nil || !strings.Contains(err.Error(), "repeat") || !strings.Contains(err.Error(), "1000000") {
		t.Errorf("a repeat of 2^53: got %v, want a problem naming repeat and its bound", err)
	}
	_, err = Load(write("many.cue", `policies: "."
tests: t: {domain: "edge", requests: [for i in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10] {at: "0s", headers: {"x-tenant": "a"}, repeat: 1000000, expect: decision: "unmatched"}]}
`))
	if err == nil || !strings.Contains(err.Error(), "11000000 requests in all") {
		t.Errorf("11 requests of a million repeats: got %v, want a problem naming the total", err)
	}
	defer func(d time.Duration) { evalTimeout = d }(evalTimeout)
	evalTimeout = 200 * time.Millisecond
	bomb := "policies: \".\"\n_a: [for i in [0,1,2,3,4,5,6,7,8,9] {i}]\n"
	for i := 0; i < 9; i++ {
		bomb += fmt.Sprintf("_%c: [for x in _%c for y in _%c {x}]\n", 'b'+i, 'a'+i, 'a'+i)
	}
	start := time.Now()
	_, err = Load(write("bomb.cue", bomb))
	if err == nil || !strings.Contains(err.Error(), "did not finish within") {
		t.Errorf("a comprehension bomb: got %v, want the evaluation timed out", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %v", took)
	}
}
