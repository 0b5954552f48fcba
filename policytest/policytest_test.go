package policytest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/schema"
)

func load(dir string) (*policy.Model, error) { return schema.Load(dir) }

// TestExamplePolicies runs the example repository's own policy tests, so `go test ./...`
// covers them in CI.
func TestExamplePolicies(t *testing.T) {
	paths, err := Discover([]string{"../policies/tests"})
	if err != nil {
		t.Fatal(err)
	}
	var files []*File
	for _, p := range paths {
		f, err := Load(p)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	res, err := Run(files, load)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range res.Findings {
		t.Error(f)
	}
	if res.Tests == 0 || res.Passed != res.Tests {
		t.Errorf("got %d of %d tests passed", res.Passed, res.Tests)
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct{ name, src, want string }{
		{"syntax", `policies: "."` + "\ntests: {", "expected"},
		{"no policies", `tests: {}`, "policies: the policy directory is required"},
		{"bad decision", `policies: "."
tests: x: requests: [{at: "0s", expect: decision: "maybe"}]`, `expect.decision "maybe"`},
		{"time goes back", `policies: "."
tests: x: requests: [{at: "2s", expect: decision: "ok"}, {at: "1s", expect: decision: "ok"}]`, "before the previous request"},
		{"bad duration", `policies: "."
tests: x: requests: [{at: "soon", expect: decision: "ok"}]`, `duration "soon"`},
	}
	dir := t.TempDir()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "_")+".cue")
			if err := os.WriteFile(p, []byte(tt.src), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Load(p)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	got := outcome{decision: "over_limit", code: "ok", rule: "r", remaining: 0, retry: 200, rules: []string{"r"}}
	tests := []struct {
		want Expect
		last bool
		msg  string
	}{
		{Expect{Decision: "over_limit"}, true, ""},
		{Expect{Decision: "ok"}, true, "decision: got over_limit, want ok"},
		{Expect{Decision: "over_limit", Code: "over_limit"}, true, "code after stage: got ok, want over_limit"},
		{Expect{Decision: "over_limit", Remaining: n(1)}, true, "remaining: got 0, want 1"},
		{Expect{Decision: "over_limit", Remaining: n(1)}, false, ""},
		{Expect{Decision: "over_limit", RetryAfterMs: n(100)}, true, "retry_after: got 200ms, want 100ms"},
		{Expect{Decision: "over_limit", Rule: "other"}, true, `rule: got none of ["r"], want other`},
	}
	for i, tt := range tests {
		msg := check(got, tt.want, tt.last)
		if (tt.msg == "") != (msg == "") || !strings.HasPrefix(msg, tt.msg) {
			t.Errorf("case %d: got %q, want prefix %q", i, msg, tt.msg)
		}
	}
}
