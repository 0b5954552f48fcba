package policytest

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/parser"

	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/finding"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/schema"
	"github.com/rlctl/rlctl/simulate"
)

// The IDs of rlctl test's findings.
const (
	// FileID is a test file that cannot run: a CUE syntax error, a field the format does not
	// have, a value of the wrong type, a bad decision or duration, a domain the policies lack.
	FileID = "TEST000"
	// FailID is a test that got a different decision than it expects.
	FailID = "TEST001"
)

// Rules describe FileID and FailID, for formats that list a tool's rules.
var Rules = []finding.Rule{
	{
		ID: FileID, Name: "test-file", Severity: finding.Error,
		Summary: "A policy test file that cannot run: a syntax error, an unknown field or a bad value.",
		Help: "The test file does not parse, has a field the test format does not have (often a misspelt one, " +
			"such as headrs for headers, which would otherwise be ignored and let the test pass without checking " +
			"it), a value of the wrong type, or a bad decision, duration or domain. Fix the file at the position given.",
	},
	{
		ID: FailID, Name: "policy-test-failed", Severity: finding.Error,
		Summary: "A policy unit test got a different decision than it expects.",
		Help: "A request in a policy test file got a decision, remaining count or retry-after other than the one " +
			"its expect block states. Either the policy changed the behaviour (update the test if that was the " +
			"intent) or the policy is wrong.",
	},
}

// Result is the outcome of running test files. Tests counts the tests that ran, each of which
// Passed or Failed (with FailID findings). Errors counts the problems with test files that only
// running them finds, such as a domain the policies lack (FileID findings); such a test does not
// run, so it is neither passed nor failed.
type Result struct {
	Tests, Passed, Failed, Errors int
	Findings                      []finding.Finding
}

// Loader loads a policy directory (schema.Load in rlctl).
type Loader func(dir string) (*policy.Model, error)

// Discover lists the test files of paths. A path is a test file or a directory of test files
// (its *.cue files). A directory without test files that has a tests subdirectory is a policy
// directory, such as policies: its tests are the files in DIR/tests. A .cue file that is not a
// test file, such as a policy file, is an error that says so. A file that does not parse is
// listed when it is named or sits among test files, so that Load reports its syntax error, and
// otherwise counts as neither kind: a broken policy file is reported by the policy's load.
func Discover(paths []string) ([]string, error) {
	var files []string
	seen := map[string]bool{}
	for _, p := range paths {
		fs, err := discover(p, true)
		if err != nil {
			return nil, err
		}
		for _, f := range fs {
			// A file named twice, or by its directory too, runs once.
			if key := filepath.Clean(f); !seen[key] {
				seen[key] = true
				files = append(files, f)
			}
		}
	}
	return files, nil
}

// discover lists the test files of path; sub says to look in a tests subdirectory when a
// directory has none of its own.
func discover(path string, sub bool) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		// A named file that does not parse is run, so that Load reports its syntax error.
		kind, err := classify(path)
		if err != nil {
			return nil, err
		}
		if kind == otherFile {
			return nil, notTestFile(path)
		}
		return []string{path}, nil
	}
	all, err := filepath.Glob(filepath.Join(path, "*.cue"))
	if err != nil {
		return nil, err
	}
	sort.Strings(all)
	// A file that does not parse is neither: a broken test file among test files is run, so
	// that Load reports its syntax error, but a broken policy file must not make its parsable
	// neighbours look like strays.
	var tests, others, broken []string
	var withBroken []string // tests and broken, in order
	for _, f := range all {
		kind, err := classify(f)
		if err != nil {
			return nil, err
		}
		switch kind {
		case testFile:
			tests = append(tests, f)
		case otherFile:
			others = append(others, f)
		case brokenFile:
			broken = append(broken, f)
		}
		if kind != otherFile {
			withBroken = append(withBroken, f)
		}
	}
	switch {
	case len(tests) > 0 && len(others) > 0:
		return nil, fmt.Errorf("%s is not a test file (it has no top-level policies: or tests: field), "+
			"unlike the other .cue files in %s", others[0], path)
	case len(tests) > 0:
		return withBroken, nil
	}
	// No test files here: a policy directory stands for its tests, whose run loads the policy
	// and so reports a broken policy file where it is.
	dir := filepath.Join(path, "tests")
	if st, err := os.Stat(dir); sub && err == nil && st.IsDir() {
		return discover(dir, false)
	}
	switch {
	case len(others) > 0:
		return nil, fmt.Errorf("%s holds no test files (%s has no top-level policies: or tests: field): "+
			"a policy's tests go in a directory such as %s", path, others[0], dir)
	case len(broken) > 0:
		return broken, nil
	}
	return nil, fmt.Errorf("no test files (*.cue) in %s", path)
}

func notTestFile(path string) error {
	return fmt.Errorf("%s is not a test file (it has no top-level policies: or tests: field): "+
		"a policy's tests go in a directory such as %s", path, filepath.Join(filepath.Dir(path), "tests"))
}

// The kinds of .cue file discover tells apart.
const (
	testFile   = iota // has a top-level policies or tests field
	otherFile         // parses but has neither, such as a policy file
	brokenFile        // does not parse, so could be either
)

// classify reads the CUE file at path and says which kind it is.
func classify(path string) (int, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	f, err := parser.ParseFile(path, src)
	if err != nil {
		return brokenFile, nil
	}
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.Field); ok {
			if name, _, _ := ast.LabelName(fd.Label); name == "policies" || name == "tests" {
				return testFile, nil
			}
		}
	}
	return otherFile, nil
}

// Run runs every test of files. Errors are problems with the files or the policies they name;
// failed expectations are findings in the result.
func Run(files []*File, load Loader) (*Result, error) {
	models := map[string]*policy.Model{}
	res := &Result{}
	for _, f := range files {
		m, ok := models[f.Policies]
		if !ok {
			var err error
			if m, err = load(f.Policies); err != nil {
				return nil, fmt.Errorf("%s: policies %s: %w", f.Path, f.Policies, err)
			}
			models[f.Policies] = m
		}
		for _, t := range f.Tests {
			d, err := pickDomain(m, t.Domain)
			if err != nil {
				res.Errors++
				res.Findings = append(res.Findings, finding.Finding{ID: FileID, Severity: finding.Error, Pos: t.Pos,
					Message: fmt.Sprintf("test %q: %v", t.Name, err)})
				continue
			}
			if bad := unknownRules(d, t); len(bad) > 0 {
				// A misspelt rule read as a failure of the policy ("got none of ...").
				res.Errors += len(bad)
				res.Findings = append(res.Findings, bad...)
				continue
			}
			fs, err := runTest(d, t)
			if err != nil {
				return nil, err
			}
			res.Tests++
			if len(fs) == 0 {
				res.Passed++
			} else {
				res.Failed++
				res.Findings = append(res.Findings, fs...)
			}
		}
	}
	return res, nil
}

// runTest runs t against domain d and returns its failed expectations.
func runTest(d *policy.Domain, t Test) ([]finding.Finding, error) {
	matcher, err := simulate.NewMatcher(d)
	if err != nil {
		return nil, fmt.Errorf("%s: test %q: %w", t.Pos, t.Name, err)
	}
	var now int64
	store := engine.NewMemory(engine.ClockFunc(func() int64 { return now }))
	var out []finding.Finding
	for i, r := range t.Requests {
		now = BaseMs + r.AtMs
		var matches []simulate.Match
		if len(r.Descriptor) > 0 {
			if mt, ok := matcher.MatchDescriptor(r.Descriptor); ok {
				matches = append(matches, mt)
			}
		} else {
			matches = matcher.Match(policy.Request{Headers: lower(r.Headers), Path: r.Path, RemoteAddr: r.RemoteAddr, Claims: r.Claims})
		}
		for rep := 1; rep <= r.Repeat; rep++ {
			got, err := decide(store, matches, r, now)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", r.Pos, err)
			}
			if msg := check(got, r.Expect, rep == r.Repeat); msg != "" {
				where := fmt.Sprintf("request %d", i+1)
				if r.Repeat > 1 {
					where += fmt.Sprintf(" (repetition %d of %d)", rep, r.Repeat)
				}
				out = append(out, finding.Finding{ID: FailID, Severity: finding.Error, Pos: r.Pos, Domain: d.Name,
					Rule: got.rule, Message: fmt.Sprintf("test %q: %s: %s", t.Name, where, msg)})
				break // later repetitions would repeat the same failure
			}
		}
		if len(out) > 0 {
			break // later requests depend on this one's state
		}
	}
	return out, nil
}

// unknownRules reports t's expectations that name a rule domain d does not have, each at its
// request, with the names it may have meant.
func unknownRules(d *policy.Domain, t Test) []finding.Finding {
	var names []string
	for _, r := range d.Rules {
		names = append(names, r.Name)
	}
	var out []finding.Finding
	for i, r := range t.Requests {
		name := r.Expect.Rule
		if name == "" || slices.Contains(names, name) {
			continue
		}
		msg := fmt.Sprintf("test %q: request %d: expect.rule %q: domain %s has no such rule", t.Name, i+1, name, d.Name)
		if near := schema.Nearest(name, names); len(near) > 0 {
			msg += fmt.Sprintf(" (did you mean %q?)", near[0])
		}
		out = append(out, finding.Finding{ID: FileID, Severity: finding.Error, Pos: r.Pos, Domain: d.Name, Message: msg})
	}
	return out
}

func pickDomain(m *policy.Model, name string) (*policy.Domain, error) {
	if name != "" {
		if d := m.Domain(name); d != nil {
			return d, nil
		}
		return nil, fmt.Errorf("no domain %q in the policies", name)
	}
	if len(m.Domains) != 1 {
		return nil, fmt.Errorf("the policies have %d domains: name one in the test's domain field", len(m.Domains))
	}
	return m.Domains[0], nil
}

func lower(h map[string]string) map[string]string {
	out := make(map[string]string, len(h))
	for k, v := range h {
		out[strings.ToLower(k)] = v
	}
	return out
}

// outcome is what a request got.
type outcome struct {
	decision, code, rule string
	// ruleDecision and ruleCode are the expected rule's own verdict and answer, when the
	// expectation names a rule that matched.
	ruleDecision, ruleCode string
	remaining, retry       int64
	rules                  []string
}

// decide takes the request's tokens from each matched rule's key and combines the answers as the
// rate limit service does: over if any descriptor is over.
func decide(store *engine.Memory, matches []simulate.Match, r Request, now int64) (outcome, error) {
	if len(matches) == 0 {
		return outcome{decision: "unmatched", code: "ok"}, nil
	}
	o := outcome{decision: "ok", code: "ok", remaining: -1}
	var picked bool
	for _, mt := range matches {
		cost := r.Hits
		if cost == 0 {
			cost = mt.Cost
		}
		res, err := store.Take(context.Background(), engine.TakeRequest{Key: mt.Key, Limits: mt.Limits, Want: cost, Min: cost, Now: now})
		if err != nil {
			return o, err
		}
		o.rules = append(o.rules, mt.Rule.Name)
		over := res.Granted == 0
		decision, code := "ok", "ok" // this rule's
		if over {
			decision, o.decision = "over_limit", "over_limit"
			if enforcing(mt.Rule) {
				code, o.code = "over_limit", "over_limit"
			}
		}
		switch {
		case r.Expect.Rule != "":
			if mt.Rule.Name == r.Expect.Rule {
				o.rule, o.remaining, o.retry, picked = mt.Rule.Name, res.Remaining, res.RetryAfter, true
				o.ruleDecision, o.ruleCode = decision, code
			}
		case !picked || res.Remaining < o.remaining || (over && retryRank(res.RetryAfter) > retryRank(o.retry)):
			o.rule, o.remaining, o.retry, picked = mt.Rule.Name, res.Remaining, res.RetryAfter, true
		}
	}
	return o, nil
}

// retryRank orders retry-afters: engine.Never, a cost above a limit's capacity, after any wait.
func retryRank(ms int64) int64 {
	if ms == engine.Never {
		return math.MaxInt64
	}
	return ms
}

// retryText formats a retry-after for messages.
func retryText(ms int64) string {
	if ms == engine.Never {
		return "never (the cost is above a limit's capacity)"
	}
	return fmt.Sprintf("%dms", ms)
}

func enforcing(r *policy.Rule) bool {
	return r.Stage.Name != policy.StageShadow && r.Stage.Name != policy.StageSoft
}

// check compares an outcome with its expectation and describes the first difference.
func check(got outcome, want Expect, last bool) string {
	ctx := func() string {
		if len(got.rules) == 0 {
			return "no rule matched"
		}
		return fmt.Sprintf("matched %s; remaining %d, retry after %s", strings.Join(got.rules, ", "), got.remaining, retryText(got.retry))
	}
	if want.Rule != "" && got.rule != want.Rule {
		return fmt.Sprintf("rule: got none of %q, want %s (%s)", got.rules, want.Rule, ctx())
	}
	decision, code, whose := got.decision, got.code, ""
	if want.Rule != "" {
		// The named rule's own verdict: another rule over its limit must not pass a test of
		// this one.
		decision, code, whose = got.ruleDecision, got.ruleCode, " of rule "+want.Rule
	}
	if decision != want.Decision {
		hint := ""
		if decision == "over_limit" && code == "ok" && want.Decision == "ok" {
			// The commonest surprise: a rule in shadow or soft over its limit.
			hint = `; decision is the engine's verdict at any stage, and a rule in shadow or soft answers ok: to test the answer, expect code: "ok"`
		}
		return fmt.Sprintf("decision%s: got %s, want %s (%s%s)", whose, decision, want.Decision, ctx(), hint)
	}
	if want.Code != "" && code != want.Code {
		return fmt.Sprintf("code after stage%s: got %s, want %s (%s)", whose, code, want.Code, ctx())
	}
	if !last {
		return ""
	}
	if want.Remaining != nil && got.remaining != *want.Remaining {
		return fmt.Sprintf("remaining: got %d, want %d (%s)", got.remaining, *want.Remaining, ctx())
	}
	if want.RetryAfterMs != nil && got.retry != *want.RetryAfterMs {
		return fmt.Sprintf("retry_after: got %s, want %dms (%s)", retryText(got.retry), *want.RetryAfterMs, ctx())
	}
	return ""
}
