package policytest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/schema"
)

func load(dir string) (*policy.Model, error) { return schema.Load(dir) }

// loadExamples loads the example repository's own policy tests.
func loadExamples(t *testing.T) []*File {
	t.Helper()
	paths, err := Discover([]string{"../policies/tests"})
	if err != nil {
		t.Fatal(err)
	}
	files, bad, err := LoadFiles(paths)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range bad {
		t.Error(f)
	}
	return files
}

// TestExamplePolicies runs the example repository's own policy tests, so `go test ./...`
// covers them in CI.
func TestExamplePolicies(t *testing.T) {
	res, err := Run(loadExamples(t), load)
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

// TestExamplePoliciesCoverEveryRule checks that every rule of the example policies is named
// by a request's expect.rule in policies/tests, which checks that the request matched it.
func TestExamplePoliciesCoverEveryRule(t *testing.T) {
	named := map[string]bool{}
	for _, f := range loadExamples(t) {
		for _, tt := range f.Tests {
			for _, r := range tt.Requests {
				named[r.Expect.Rule] = true
			}
		}
	}
	m, err := load("../policies")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range m.Domains {
		for _, r := range d.Rules {
			if !named[r.Name] {
				t.Errorf("rule %s/%s: no request in policies/tests expects it (expect: rule: %q)", d.Name, r.Name, r.Name)
			}
		}
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name, src string
		want      []string // each problem, as "line:col: message"
	}{
		{"syntax", `policies: "."` + "\ntests: {", []string{"2:9: expected '}', found 'EOF'"}},
		{"no policies", `tests: x: requests: [{at: "0s", expect: decision: "ok"}]`,
			[]string{"1:1: policies: the policy directory is required"}},
		{"no tests", `policies: "."`, []string{"1:1: tests: the file has no tests"}},
		{"no requests", `policies: "."` + "\ntests: x: requests: []", []string{"2:11: tests.x.requests: the test has no requests"}},
		{"unknown fields", `policies: "."
tests: "x y": {
	domian: "edge"
	requests: [{at: "0s", headrs: {a: "b"}, descriptor: [{key: "k", valeu: "v"}], expect: {decision: "ok", remainng: 1}}]
}
tset: 1`, []string{
			`3:2: tests."x y".domian: field not allowed (want domain, requests)`,
			`4:24: tests."x y".requests.0.headrs: field not allowed (want at, claims, descriptor, expect, headers, hits, path, remote_addr, repeat)`,
			`4:66: tests."x y".requests.0.descriptor.0.valeu: field not allowed (want key, value)`,
			`4:105: tests."x y".requests.0.expect.remainng: field not allowed (want code, decision, remaining, retry_after, rule)`,
			`6:1: tset: field not allowed (want policies, tests)`,
		}},
		{"wrong type", `policies: "."
tests: x: requests: [{at: "0s", hits: "three", expect: decision: "ok"}]`,
			[]string{`2:39: tests.x.requests.0.hits: cannot use value "three" (type string) as int`}},
		{"bad values", `policies: "."
tests: x: requests: [
	{at: "2s", hits: -1, expect: {decision: "maybe", code: "no", retry_after: "soon"}},
	{at: "1s", expect: decision: "ok"},
]`, []string{
			`3:13: tests.x.requests.0.hits: -1: must not be negative`,
			`3:32: tests.x.requests.0.expect.decision: "maybe": want ok, over_limit or unmatched`,
			`3:51: tests.x.requests.0.expect.code: "no": want ok or over_limit`,
			`3:63: tests.x.requests.0.expect.retry_after: duration "soon": want such as 1.5s, 200ms or 1d`,
			`4:3: tests.x.requests.1.at: 1000ms is before the previous request's 2000ms`,
		}},
		// An unknown field does not hide the bad values of the same file.
		{"unknown field and bad value", `policies: "."
tests: x: requests: [
	{at: "0s", headrs: {a: "b"}, expect: {decision: "ok", retry_after: "5xs"}},
]`, []string{
			`3:13: tests.x.requests.0.headrs: field not allowed (want at, claims, descriptor, expect, headers, hits, path, remote_addr, repeat)`,
			`3:56: tests.x.requests.0.expect.retry_after: duration "5xs": want such as 1.5s, 200ms or 1d`,
		}},
		{"negative at", `policies: "."
tests: x: requests: [
	{at: "-1s", expect: decision: "ok"},
	{at: "2s", expect: decision: "ok"},
	{at: "-500ms", expect: decision: "ok"},
]`, []string{
			`3:3: tests.x.requests.0.at: -1000ms: must not be negative`,
			`5:3: tests.x.requests.2.at: -500ms: must not be negative`,
		}},
		// Each was run as something else: a half millisecond as 0 (past the order check), a
		// time past int64's end as one in the past, -100 repeats as one, and the path beside a
		// descriptor or as a :path header not at all.
		{"requests that are not what they say", `policies: "."
tests: x: requests: [
	{at: "0.5ms", expect: decision: "ok"},
	{at: 9223372036854775807, expect: decision: "ok"},
	{at: "1s", repeat: -100, expect: decision: "ok"},
	{at: "1s", path: "/a", descriptor: [{key: "k", value: "v"}], expect: decision: "ok"},
	{at: "1s", headers: {":path": "/a"}, expect: decision: "ok"},
]`, []string{
			`3:3: tests.x.requests.0.at: duration "0.5ms": want whole milliseconds`,
			`4:3: tests.x.requests.1.at: duration 9223372036854775807: at most 3153600000000 ms (100 years)`,
			`5:13: tests.x.requests.2.repeat: -100: must not be negative`,
			`6:25: tests.x.requests.3.descriptor: a request gives a descriptor or its fields (headers, path, remote_addr, claims), not both`,
			`7:13: tests.x.requests.4.headers: ":path": give the path as path, which a :path source reads`,
		}},
	}
	dir := t.TempDir()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "_")+".cue")
			if err := os.WriteFile(p, []byte(tt.src), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Load(p)
			var probs policy.Problems
			if !errors.As(err, &probs) {
				t.Fatalf("got error %v, want problems", err)
			}
			var got []string
			for _, pr := range probs {
				if pr.Pos.File != p {
					t.Errorf("problem %q: got file %q, want %q", pr.Message, pr.Pos.File, p)
				}
				msg := pr.Message
				if pr.Path != "" {
					msg = pr.Path + ": " + msg
				}
				got = append(got, fmt.Sprintf("%d:%d: %s", pr.Pos.Line, pr.Pos.Col, msg))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got problems\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(tt.want, "\n\t"))
			}
		})
	}
}

func TestDiscover(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const test = `policies: ".."` + "\ntests: {}\n"
	const pol = "package p\ndomains: {}\n"
	write("pol/a.cue", pol)
	write("pol/tests/a_test.cue", test)
	write("pol/tests/b_test.cue", "policies: \"..\"\ntests: {\n") // a syntax error is reported by Load
	write("bare/a.cue", pol)
	write("mixed/a_test.cue", test)
	write("mixed/helper.cue", "x: 1\n")
	write("empty/README.md", "")
	// A policy file that does not parse is neither a test file nor a stray beside one.
	write("brokenpol/a.cue", pol)
	write("brokenpol/b.cue", "package p\ndomains: {\n")
	write("brokenpol/tests/a_test.cue", test)
	write("brokenbare/a.cue", pol)
	write("brokenbare/b.cue", "package p\ndomains: {\n")
	write("onlybroken/a_test.cue", "policies: \"..\"\ntests: {\n")
	in := func(names ...string) []string {
		for i, n := range names {
			names[i] = filepath.Join(dir, n)
		}
		return names
	}
	tests := []struct {
		paths []string
		want  []string
		err   string
	}{
		{in("pol/tests"), in("pol/tests/a_test.cue", "pol/tests/b_test.cue"), ""},
		{in("pol"), in("pol/tests/a_test.cue", "pol/tests/b_test.cue"), ""},
		{in("pol/tests/a_test.cue"), in("pol/tests/a_test.cue"), ""},
		{in("pol/a.cue"), nil, "pol/a.cue is not a test file (it has no top-level policies: or tests: field): a policy's tests go in a directory such as " + dir + "/pol/tests"},
		{in("bare"), nil, "bare holds no test files (" + dir + "/bare/a.cue has no top-level policies: or tests: field)"},
		{in("mixed"), nil, "mixed/helper.cue is not a test file (it has no top-level policies: or tests: field), unlike the other .cue files in " + dir + "/mixed"},
		{in("empty"), nil, "no test files (*.cue) in " + dir + "/empty"},
		{in("brokenpol"), in("brokenpol/tests/a_test.cue"), ""},
		{in("brokenbare"), nil, "brokenbare holds no test files (" + dir + "/brokenbare/a.cue has no top-level policies: or tests: field)"},
		{in("onlybroken"), in("onlybroken/a_test.cue"), ""},
		{in("brokenbare/b.cue"), in("brokenbare/b.cue"), ""},
		{in("missing"), nil, "no such file or directory"},
		// A file named twice, or with its directory, runs once.
		{in("pol/tests/a_test.cue", "pol/tests/a_test.cue", "pol"), in("pol/tests/a_test.cue", "pol/tests/b_test.cue"), ""},
	}
	for _, tt := range tests {
		got, err := Discover(tt.paths)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("Discover(%v): got error %v, want one containing %q", tt.paths, err, tt.err)
		case tt.err == "" && err != nil:
			t.Errorf("Discover(%v): got error %v", tt.paths, err)
		case !slices.Equal(got, tt.want):
			t.Errorf("Discover(%v): got %v, want %v", tt.paths, got, tt.want)
		}
	}
}

// TestRunDomainErrors checks that a domain the policies lack is a problem with the test file,
// counted in Errors, not a failed test.
func TestRunDomainErrors(t *testing.T) {
	req := Request{Path: "/healthz", Repeat: 1, Expect: Expect{Decision: "unmatched"}}
	f := &File{Path: "x_test.cue", Policies: "../policies", Tests: []Test{
		{Name: "good", Domain: "edge_gateway_limits", Requests: []Request{req}},
		{Name: "bad", Domain: "nope", Pos: policy.Pos{File: "x_test.cue", Line: 7, Col: 2}, Requests: []Request{req}},
	}}
	res, err := Run([]*File{f}, load)
	if err != nil {
		t.Fatal(err)
	}
	if res.Tests != 1 || res.Passed != 1 || res.Failed != 0 || res.Errors != 1 {
		t.Errorf("got %d tests, %d passed, %d failed, %d errors; want 1, 1, 0, 1", res.Tests, res.Passed, res.Failed, res.Errors)
	}
	want := `x_test.cue:7:2: test "bad": no domain "nope" in the policies`
	if len(res.Findings) != 1 || res.Findings[0].ID != FileID ||
		fmt.Sprintf("%s: %s", res.Findings[0].Pos, res.Findings[0].Message) != want {
		t.Errorf("got findings %v, want one %s: %s", res.Findings, FileID, want)
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
	// Rule r has room while rule big, which the request matches too, is over: an expectation
	// that names r is judged by r's own verdict (it passed on big's).
	both := outcome{decision: "over_limit", code: "over_limit", rule: "r", ruleDecision: "ok", ruleCode: "ok", remaining: 7, rules: []string{"big", "r"}}
	for i, tt := range []struct {
		want Expect
		msg  string
	}{
		{Expect{Decision: "over_limit", Rule: "r"}, "decision of rule r: got ok, want over_limit"},
		{Expect{Decision: "ok", Rule: "r", Code: "ok"}, ""},
		{Expect{Decision: "over_limit"}, ""},
	} {
		msg := check(both, tt.want, true)
		if (tt.msg == "") != (msg == "") || !strings.HasPrefix(msg, tt.msg) {
			t.Errorf("two rules, case %d: got %q, want prefix %q", i, msg, tt.msg)
		}
	}
	for i, tt := range tests {
		msg := check(got, tt.want, tt.last)
		if (tt.msg == "") != (msg == "") || !strings.HasPrefix(msg, tt.msg) {
			t.Errorf("case %d: got %q, want prefix %q", i, msg, tt.msg)
		}
	}
	// A cost above a limit's capacity never gets in: it said "got -1ms".
	never := outcome{decision: "over_limit", code: "over_limit", rule: "r", retry: engine.Never, rules: []string{"r"}}
	if msg, want := check(never, Expect{Decision: "over_limit", RetryAfterMs: n(100)}, true),
		"retry_after: got never (the cost is above a limit's capacity), want 100ms"; !strings.HasPrefix(msg, want) {
		t.Errorf("got %q, want prefix %q", msg, want)
	}
}

// TestRetryNeverRanksLast: of two rules over their limits, the one a request can never pass
// (its cost above the limit's capacity) is the one reported, not the one with a wait.
func TestRetryNeverRanksLast(t *testing.T) {
	if retryRank(engine.Never) <= retryRank(3_600_000) {
		t.Errorf("Never ranks %d, an hour %d: want Never after", retryRank(engine.Never), retryRank(3_600_000))
	}
}

// TestDurationForms: a test's durations read Go's forms and the policies' own, days included:
// "1d", which a window may be, was refused.
func TestDurationForms(t *testing.T) {
	for in, want := range map[any]int64{"1d": 86_400_000, "1.5s": 1500, "1m30s": 90_000, "250ms": 250, "7": 7, int64(9): 9} {
		if got, err := durationMs(in); err != nil || got != want {
			t.Errorf("durationMs(%v) = %d, %v; want %d", in, got, err, want)
		}
	}
}

// TestCheckHintsAtStage: a test that wants ok from a rule in shadow, over its limit, is told
// that decision is the engine's verdict and code the answer after the stage.
func TestCheckHintsAtStage(t *testing.T) {
	msg := check(outcome{decision: "over_limit", code: "ok", rules: []string{"login"}}, Expect{Decision: "ok"}, true)
	if !strings.Contains(msg, `expect code: "ok"`) {
		t.Errorf("message %q: want the hint at code", msg)
	}
	if msg := check(outcome{decision: "over_limit", code: "over_limit", rules: []string{"login"}}, Expect{Decision: "ok"}, true); strings.Contains(msg, "expect code") {
		t.Errorf("message %q: an enforcing rule's denial hints at code", msg)
	}
}
