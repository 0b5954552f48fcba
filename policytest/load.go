package policytest

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/cuecontext"
	cueerrors "cuelang.org/go/cue/errors"
	"cuelang.org/go/cue/token"

	"github.com/rlctl/rlctl/finding"
	"github.com/rlctl/rlctl/policy"
)

// The raw types mirror a test file for decoding. Their json names are also the file's closed
// schema (see checkFields): a field they do not name is a problem, so a misspelt field such as
// "headrs" fails the file instead of being ignored by a test that then passes.
type rawFile struct {
	Policies string             `json:"policies"`
	Tests    map[string]rawTest `json:"tests"`
}

type rawTest struct {
	Domain   string       `json:"domain"`
	Requests []rawRequest `json:"requests"`
}

type rawRequest struct {
	At         any               `json:"at"`
	Headers    map[string]string `json:"headers"`
	Path       string            `json:"path"`
	RemoteAddr string            `json:"remote_addr"`
	Claims     map[string]string `json:"claims"`
	Descriptor []rawEntry        `json:"descriptor"`
	Hits       int64             `json:"hits"`
	Repeat     int               `json:"repeat"`
	Expect     rawExpect         `json:"expect"`
}

type rawEntry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

type rawExpect struct {
	Decision   string `json:"decision"`
	Code       string `json:"code"`
	Rule       string `json:"rule"`
	Remaining  *int64 `json:"remaining"`
	RetryAfter any    `json:"retry_after"`
}

// LoadFiles loads the test files at paths. A file that is wrong gives its problems as findings
// (FileID) and no File, so that the other files still run; the error is a tool error only,
// such as an unreadable file.
func LoadFiles(paths []string) ([]*File, []finding.Finding, error) {
	var files []*File
	var bad []finding.Finding
	for _, p := range paths {
		f, err := Load(p)
		var probs policy.Problems
		switch {
		case errors.As(err, &probs):
			for _, pr := range probs {
				msg := pr.Message
				if pr.Path != "" {
					msg = pr.Path + ": " + msg
				}
				bad = append(bad, finding.Finding{ID: FileID, Severity: finding.Error, Pos: pr.Pos, Message: msg})
			}
		case err != nil:
			return nil, nil, err
		default:
			files = append(files, f)
		}
	}
	return files, bad, nil
}

// Load parses one test file. A file that is wrong gives a policy.Problems error, each problem
// positioned in the file: a CUE syntax error, a field the format does not have, a value of the
// wrong type, a bad decision or duration. Any other error is a tool error.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	v, err := compile(path, data)
	if err != nil {
		return nil, err
	}
	var probs policy.Problems
	checkFields(v, reflect.TypeFor[rawFile](), &probs)
	var raw rawFile
	if err := v.Decode(&raw); err != nil {
		probs = append(probs, cueProblems(err)...)
		probs.Sort()
		return nil, probs
	}
	start := policy.Pos{File: path, Line: 1, Col: 1}
	if raw.Policies == "" {
		probs = append(probs, policy.Problem{Pos: start, Path: "policies", Message: "the policy directory is required"})
	}
	tests := v.LookupPath(cue.ParsePath("tests"))
	if len(raw.Tests) == 0 {
		probs = append(probs, policy.Problem{Pos: start, Path: "tests", Message: "the file has no tests"})
	}
	// Unknown fields do not stop the load, so that the file's bad values are reported with
	// them; without policies or tests there is no more to check.
	if raw.Policies == "" || len(raw.Tests) == 0 {
		probs.Sort()
		return nil, probs
	}
	f := &File{Path: path, Policies: raw.Policies}
	if !filepath.IsAbs(f.Policies) {
		f.Policies = filepath.Join(filepath.Dir(path), f.Policies)
	}
	// The tests in the order they are written, which the map has lost.
	iter, _ := tests.Fields()
	for iter.Next() {
		name := iter.Selector().Unquoted()
		t := Test{Name: name, Domain: raw.Tests[name].Domain, Pos: pos(iter.Value())}
		t.Requests = loadRequests(iter.Value(), raw.Tests[name].Requests, &probs)
		if len(raw.Tests[name].Requests) == 0 {
			probs = append(probs, problem(iter.Value(), "requests", "the test has no requests"))
		}
		f.Tests = append(f.Tests, t)
	}
	var sends int64
	for _, t := range f.Tests {
		for _, r := range t.Requests {
			sends += int64(r.Repeat)
		}
	}
	if sends > MaxSends {
		probs = append(probs, policy.Problem{Pos: start, Path: "tests",
			Message: fmt.Sprintf("the file sends %d requests in all, repeats counted: at most %d", sends, MaxSends)})
	}
	if len(probs) > 0 {
		probs.Sort()
		return nil, probs
	}
	return f, nil
}

// loadRequests checks and converts the requests of test v, adding what is wrong to probs.
func loadRequests(v cue.Value, raws []rawRequest, probs *policy.Problems) []Request {
	var out []Request
	reqs, _ := v.LookupPath(cue.ParsePath("requests")).List()
	var last int64
	for i := 0; reqs.Next(); i++ {
		rv, rr := reqs.Value(), raws[i]
		r := Request{Pos: pos(rv), Headers: rr.Headers, Path: rr.Path, RemoteAddr: rr.RemoteAddr,
			Claims: rr.Claims, Hits: rr.Hits, Repeat: max(rr.Repeat, 1)}
		for _, e := range rr.Descriptor {
			r.Descriptor = append(r.Descriptor, policy.Entry{Key: e.Key, Value: e.Value})
		}
		var err error
		if r.AtMs, err = durationMs(rr.At); err != nil {
			*probs = append(*probs, problem(rv, "at", "%v", err))
		} else if r.AtMs < 0 {
			*probs = append(*probs, problem(rv, "at", "%dms: must not be negative", r.AtMs))
		} else if r.AtMs < last {
			*probs = append(*probs, problem(rv, "at", "%dms is before the previous request's %dms", r.AtMs, last))
		}
		last = max(last, r.AtMs)
		if r.Hits < 0 {
			*probs = append(*probs, problem(rv, "hits", "%d: must not be negative", r.Hits))
		}
		if rr.Repeat < 0 {
			*probs = append(*probs, problem(rv, "repeat", "%d: must not be negative", rr.Repeat))
		}
		if rr.Repeat > MaxRepeat {
			*probs = append(*probs, problem(rv, "repeat", "%d: at most %d", rr.Repeat, MaxRepeat))
		}
		if len(rr.Descriptor) > 0 && (len(rr.Headers) > 0 || rr.Path != "" || rr.RemoteAddr != "" || len(rr.Claims) > 0) {
			// A descriptor is sent as it is: the request's fields would be ignored.
			*probs = append(*probs, problem(rv, "descriptor", "a request gives a descriptor or its fields (headers, path, remote_addr, claims), not both"))
		}
		for h := range rr.Headers {
			if strings.EqualFold(h, ":path") {
				*probs = append(*probs, problem(rv, "headers", "%q: give the path as path, which a :path source reads", h))
			}
		}
		e := rr.Expect
		switch e.Decision {
		case "ok", "over_limit", "unmatched":
		default:
			*probs = append(*probs, problem(rv, "expect.decision", "%q: want ok, over_limit or unmatched", e.Decision))
		}
		switch e.Code {
		case "", "ok", "over_limit":
		default:
			*probs = append(*probs, problem(rv, "expect.code", "%q: want ok or over_limit", e.Code))
		}
		r.Expect = Expect{Decision: e.Decision, Code: e.Code, Rule: e.Rule, Remaining: e.Remaining}
		if e.RetryAfter != nil {
			ms, err := durationMs(e.RetryAfter)
			if err != nil {
				*probs = append(*probs, problem(rv, "expect.retry_after", "%v", err))
			}
			r.Expect.RetryAfterMs = &ms
		}
		out = append(out, r)
	}
	return out
}

// checkFields reports every field of v that t, the raw type v decodes into, does not name.
// Values of the wrong kind are left to Decode, which says what it wanted.
func checkFields(v cue.Value, t reflect.Type, probs *policy.Problems) {
	switch t.Kind() {
	case reflect.Pointer:
		checkFields(v, t.Elem(), probs)
	case reflect.Slice:
		if it, err := v.List(); err == nil {
			for it.Next() {
				checkFields(it.Value(), t.Elem(), probs)
			}
		}
	case reflect.Map:
		if it, err := v.Fields(); err == nil {
			for it.Next() {
				checkFields(it.Value(), t.Elem(), probs)
			}
		}
	case reflect.Struct:
		it, err := v.Fields()
		if err != nil {
			return
		}
		fields := map[string]reflect.Type{}
		for i := range t.NumField() {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
			fields[name] = t.Field(i).Type
		}
		for it.Next() {
			ft, ok := fields[it.Selector().Unquoted()]
			if !ok {
				*probs = append(*probs, policy.Problem{Pos: pos(it.Value()), Path: cuePath(it.Value()),
					Message: "field not allowed (want " + strings.Join(slices.Sorted(maps.Keys(fields)), ", ") + ")"})
				continue
			}
			checkFields(it.Value(), ft, probs)
		}
	}
}

// cueProblems turns a CUE error into problems, each at its first position.
func cueProblems(err error) policy.Problems {
	var probs policy.Problems
	for _, e := range cueerrors.Errors(err) {
		format, args := e.Msg()
		p := policy.Problem{Path: strings.Join(e.Path(), "."), Message: fmt.Sprintf(format, args...)}
		for i, q := range cueerrors.Positions(e) {
			if i == 0 {
				p.Pos = toPos(q)
			} else {
				p.Related = append(p.Related, toPos(q))
			}
		}
		probs = append(probs, p)
	}
	probs.Sort()
	return probs
}

// problem returns a problem with the value at path under v, at that value's position (or v's
// when it is not written).
func problem(v cue.Value, path, format string, args ...any) policy.Problem {
	p := pos(v)
	if sub := v.LookupPath(cue.ParsePath(path)); sub.Exists() && pos(sub).File != "" {
		p = pos(sub)
	}
	return policy.Problem{Pos: p, Path: cuePath(v) + "." + path, Message: fmt.Sprintf(format, args...)}
}

// cuePath is v's path as CUE's errors write it: tests."too strict".requests.0.path.
func cuePath(v cue.Value) string {
	var parts []string
	for _, sel := range v.Path().Selectors() {
		parts = append(parts, sel.String())
	}
	return strings.Join(parts, ".")
}

// pos is where v is written: for a field's value, the field's label.
func pos(v cue.Value) policy.Pos { return toPos(v.Pos()) }

func toPos(p token.Pos) policy.Pos {
	if !p.IsValid() {
		return policy.Pos{}
	}
	return policy.Pos{File: p.Filename(), Line: p.Line(), Col: p.Column()}
}

// MaxRepeat is the most times a test may send one request, and MaxSends the most requests a
// test file may send in all: a repeat of 2^53 ran until it was killed, and so did 10,000
// requests of a million repeats each, which a list comprehension writes in one line.
const (
	MaxRepeat = 1_000_000
	MaxSends  = 10_000_000
)

// evalTimeout bounds the evaluation of a test file, as schema.Load bounds a policy's: CUE cannot
// be interrupted, and a few lines of comprehensions over comprehensions never finish. Tests
// shorten it.
var evalTimeout = 60 * time.Second

// compile evaluates a test file's CUE and checks that it is concrete, giving up after
// evalTimeout; the evaluation goroutine then runs on until CUE returns, which the command's
// exit cuts short.
func compile(path string, data []byte) (cue.Value, error) {
	type result struct {
		v   cue.Value
		err error
	}
	done := make(chan result, 1)
	go func() {
		v := cuecontext.New().CompileBytes(data, cue.Filename(path))
		if err := v.Err(); err != nil {
			done <- result{err: cueProblems(err)}
			return
		}
		if err := v.Validate(cue.Concrete(true)); err != nil {
			done <- result{err: cueProblems(err)}
			return
		}
		done <- result{v: v}
	}()
	timer := time.NewTimer(evalTimeout)
	defer timer.Stop()
	select {
	case r := <-done:
		return r.v, r.err
	case <-timer.C:
		return cue.Value{}, policy.Problems{{Pos: policy.Pos{File: path, Line: 1, Col: 1},
			Message: fmt.Sprintf("evaluation did not finish within %s: the file builds a huge value (for example comprehensions over comprehensions)", evalTimeout)}}
	}
}
