// Package policytest runs unit tests for rate-limit policies (`rlctl test`), in the spirit of
// `promtool test rules`: a test file names a policy directory and, per test, a sequence of
// requests with the decision each should get. Requests become descriptors and decisions through
// the same code the simulator uses (simulate.Matcher, the engine's in-memory store), so a test
// checks exactly what the enforcer would decide on one instance without leasing.
//
// # Test files
//
// A test file is a CUE file with top-level policies and tests fields (see Discover for how
// directories are read):
//
//	// The policy directory, relative to this file.
//	policies: ".."
//	tests: "dashboard burst then refill": {
//		domain: "edge_gateway_limits" // optional when the policies have one domain
//		requests: [
//			{at: "0s", headers: {"x-tenant-id": "acme"}, path: "/v1/dashboard/home",
//			 repeat: 25, expect: {decision: "ok", rule: "tenant_dashboard"}},
//			{at: "0s", headers: {"x-tenant-id": "acme"}, path: "/v1/dashboard/home",
//			 expect: {decision: "over_limit", remaining: 0, retry_after: "200ms"}},
//		]
//	}
//
// A request gives either HTTP fields (headers, path, remote_addr, claims: the JWT claims) or an
// explicit descriptor ([{key, value}, ...]), not both. at is the offset from the test's start
// (a duration or integer milliseconds, in whole milliseconds; not negative, at most 100 years,
// and non-decreasing); hits is the request's cost (default the rule's); repeat sends it several
// times. expect.decision is the engine's verdict ("ok",
// "over_limit", or "unmatched" when no rule applies); expect.code is the answer after the rule's
// stage ("ok" in shadow and soft; canary counts as enforcing). Both are the request's (over when
// any rule it matches is) unless expect.rule names a rule, whose own verdict, answer, remaining
// and retry_after are then checked. remaining and retry_after are checked on the last
// repetition. Each test starts with an empty store at 2025-01-01T00:00:00Z, aligned to every
// window.
//
// The format is closed: a field it does not name, such as a misspelt "headrs", is a problem
// rather than ignored, since a test that silently drops an expectation passes. Problems with a
// file are reported as findings (FileID) at their position, like lint's; failed expectations
// are findings too (FailID).
package policytest

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/schema"
)

// BaseMs is the time (Unix ms) at which every test starts: 2025-01-01T00:00:00Z.
const BaseMs int64 = 1735689600000

// File is one parsed test file.
type File struct {
	Path     string
	Policies string // resolved policy directory
	Tests    []Test
}

// Test is one named test: a fresh store and a sequence of requests.
type Test struct {
	Name     string
	Domain   string
	Pos      policy.Pos
	Requests []Request
}

// Request is one request of a test and what it should get.
type Request struct {
	Pos        policy.Pos
	AtMs       int64
	Headers    map[string]string
	Path       string
	RemoteAddr string
	Claims     map[string]string
	Descriptor []policy.Entry
	Hits       int64 // 0: the rule's cost
	Repeat     int   // at least 1
	Expect     Expect
}

// Expect is what a request should get. Nil pointers are not checked.
type Expect struct {
	Decision     string // "ok", "over_limit" or "unmatched"
	Code         string // "" or "ok"/"over_limit" after the stage
	Rule         string
	Remaining    *int64
	RetryAfterMs *int64
}

// durationMs reads a duration given as a string ("1.5s", "200ms", "1d": Go's forms and the
// policies') or integer milliseconds.
func durationMs(v any) (int64, error) {
	var ms int64
	switch x := v.(type) {
	case nil:
		return 0, nil
	case string:
		if n, err := strconv.ParseInt(x, 10, 64); err == nil {
			ms = n
			break
		}
		if n, err := schema.ParseDuration(x); err == nil {
			// The policies' own forms, days included ("1d").
			ms = n
			break
		}
		d, err := time.ParseDuration(x)
		if err != nil {
			return 0, fmt.Errorf("duration %q: want such as 1.5s, 200ms or 1d", x)
		}
		if d%time.Millisecond != 0 {
			// The engine's clock counts whole milliseconds: 0.5ms would be 0, and slip past
			// the order of the requests.
			return 0, fmt.Errorf("duration %q: want whole milliseconds", x)
		}
		ms = d.Milliseconds()
	case int64:
		ms = x
	case int:
		ms = int64(x)
	case float64:
		if x != math.Trunc(x) || math.Abs(x) > maxTestMs {
			return 0, fmt.Errorf("duration %v: want whole milliseconds, at most %d", x, int64(maxTestMs))
		}
		ms = int64(x)
	default:
		return 0, fmt.Errorf("duration %v: want a string such as 1.5s or integer milliseconds", v)
	}
	if ms > maxTestMs || ms < -maxTestMs {
		// A test's clock is its start plus the offset: a larger one would wrap around.
		return 0, fmt.Errorf("duration %v: at most %d ms (100 years)", v, int64(maxTestMs))
	}
	return ms, nil
}

// maxTestMs bounds a duration in a test: 100 years, far beyond any window (365d at most).
const maxTestMs = 100 * 365 * 86_400_000
