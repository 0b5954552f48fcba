package policytest

import (
	"fmt"
	"os"
	"path/filepath"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/cuecontext"
	"cuelang.org/go/cue/errors"
	"github.com/rlctl/rlctl/policy"
)

// raw mirrors the test file for decoding.
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
	Descriptor []policy.Entry    `json:"descriptor"`
	Hits       int64             `json:"hits"`
	Repeat     int               `json:"repeat"`
	Expect     struct {
		Decision   string `json:"decision"`
		Code       string `json:"code"`
		Rule       string `json:"rule"`
		Remaining  *int64 `json:"remaining"`
		RetryAfter any    `json:"retry_after"`
	} `json:"expect"`
}

// Load parses one test file. Errors carry the file's positions.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	ctx := cuecontext.New()
	v := ctx.CompileBytes(data, cue.Filename(path))
	if err := v.Err(); err != nil {
		return nil, fmt.Errorf("%s", errors.Details(err, nil))
	}
	if err := v.Validate(cue.Concrete(true)); err != nil {
		return nil, fmt.Errorf("%s", errors.Details(err, nil))
	}
	var raw rawFile
	if err := v.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%s: %s", path, errors.Details(err, nil))
	}
	if raw.Policies == "" {
		return nil, fmt.Errorf("%s: policies: the policy directory is required", path)
	}
	f := &File{Path: path, Policies: raw.Policies}
	if !filepath.IsAbs(f.Policies) {
		f.Policies = filepath.Join(filepath.Dir(path), f.Policies)
	}
	iter, err := v.LookupPath(cue.ParsePath("tests")).Fields()
	if err != nil {
		return nil, fmt.Errorf("%s: tests: %v", path, err)
	}
	for iter.Next() {
		name := iter.Selector().Unquoted()
		rt := raw.Tests[name]
		t := Test{Name: name, Domain: rt.Domain, Pos: pos(iter.Value())}
		reqs, err := iter.Value().LookupPath(cue.ParsePath("requests")).List()
		if err != nil {
			return nil, fmt.Errorf("%s: test %q: requests: %v", t.Pos, name, err)
		}
		var last int64
		for i := 0; reqs.Next(); i++ {
			rr := rt.Requests[i]
			r := Request{Pos: pos(reqs.Value()), Headers: rr.Headers, Path: rr.Path, RemoteAddr: rr.RemoteAddr,
				Claims: rr.Claims, Descriptor: rr.Descriptor, Hits: rr.Hits, Repeat: max(rr.Repeat, 1)}
			if r.AtMs, err = durationMs(rr.At); err != nil {
				return nil, fmt.Errorf("%s: at: %v", r.Pos, err)
			}
			if r.AtMs < last {
				return nil, fmt.Errorf("%s: at %dms is before the previous request's %dms", r.Pos, r.AtMs, last)
			}
			last = r.AtMs
			e := rr.Expect
			switch e.Decision {
			case "ok", "over_limit", "unmatched":
			default:
				return nil, fmt.Errorf("%s: expect.decision %q: want ok, over_limit or unmatched", r.Pos, e.Decision)
			}
			switch e.Code {
			case "", "ok", "over_limit":
			default:
				return nil, fmt.Errorf("%s: expect.code %q: want ok or over_limit", r.Pos, e.Code)
			}
			r.Expect = Expect{Decision: e.Decision, Code: e.Code, Rule: e.Rule, Remaining: e.Remaining}
			if e.RetryAfter != nil {
				ms, err := durationMs(e.RetryAfter)
				if err != nil {
					return nil, fmt.Errorf("%s: expect.retry_after: %v", r.Pos, err)
				}
				r.Expect.RetryAfterMs = &ms
			}
			if r.Hits < 0 {
				return nil, fmt.Errorf("%s: hits %d: must not be negative", r.Pos, r.Hits)
			}
			t.Requests = append(t.Requests, r)
		}
		f.Tests = append(f.Tests, t)
	}
	return f, nil
}

func pos(v cue.Value) policy.Pos {
	p := v.Pos()
	if !p.IsValid() {
		return policy.Pos{}
	}
	return policy.Pos{File: p.Filename(), Line: p.Line(), Col: p.Column()}
}
