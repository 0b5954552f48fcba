package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/rlctl/rlctl/policy"
)

// downStore fails every call, like a store that is unreachable.
type downStore struct{ err error }

func (d downStore) Take(context.Context, TakeRequest) (Result, error) { return Result{}, d.err }
func (d downStore) Return(context.Context, ReturnRequest) error       { return d.err }

func TestDecide(t *testing.T) {
	const now = int64(1_000_000)
	clock := ClockFunc(func() int64 { return now })
	plan := func(fm policy.FailureMode, fb *policy.Rate, limits ...policy.Limit) *RulePlan {
		p, err := PlanRule("edge", &policy.Rule{Name: "r", Limits: limits, FailureMode: fm, Fallback: fb, Lease: policy.Lease{Min: 1, Max: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	// 2 per second: a token is 500 ms, an empty bucket is full after 1000 ms.
	rule := func(fm policy.FailureMode, fb *policy.Rate) *RulePlan {
		return plan(fm, fb, policy.Limit{Requests: 2, WindowMs: 1000})
	}
	planGateways := func(p *RulePlan, n int64) *RulePlan {
		r := *p.Rule
		r.Gateways = n
		q, err := PlanRule("edge", &r)
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	down := downStore{errors.New("connection refused")}
	tests := []struct {
		name  string
		plan  *RulePlan
		store Store
		cost  int64
		want  []Verdict // successive requests on one key
	}{
		// Every take leases one token, so every grant is a store call. The reset is the time
		// until the bucket is full: one missing token, then two. The second take empties the
		// store, so the key is held locally until a batch (one token) refilled.
		{"store then short-circuit", rule(policy.FailOpen, nil), NewMemory(clock), 1, []Verdict{
			{Remaining: 1, ResetMs: 500, Via: ViaStore},
			{Remaining: 0, ResetMs: 1000, Via: ViaStore},
			{Over: true, ResetMs: 1000, RetryMs: 500, Via: ViaShortCircuit},
			{Over: true, ResetMs: 1000, RetryMs: 500, Via: ViaShortCircuit},
		}},
		// 10 per second and 3 per minute: after one take the minute limit holds 2 tokens and
		// the second 9, so the minute limit (index 1) is reported, full again in 20 s (one
		// token of 3/min). After three, it is empty for 60 s and a fourth waits 20 s.
		{"the tightest of two limits", plan(policy.FailOpen, nil, policy.Limit{Requests: 10, WindowMs: 1000},
			policy.Limit{Requests: 3, WindowMs: 60_000}), NewMemory(clock), 1, []Verdict{
			{Remaining: 2, ResetMs: 20_000, Limiting: 1, Via: ViaStore},
			{Remaining: 1, ResetMs: 40_000, Limiting: 1, Via: ViaStore},
			{Remaining: 0, ResetMs: 60_000, Limiting: 1, Via: ViaStore},
			{Over: true, ResetMs: 60_000, RetryMs: 20_000, Limiting: 1, Via: ViaShortCircuit},
		}},
		{"cost over capacity", rule(policy.FailOpen, nil), NewMemory(clock), 3, []Verdict{
			{Over: true, ResetMs: 1000, RetryMs: 1000, Via: ViaShortCircuit},
		}},
		{"bad cost", rule(policy.FailOpen, nil), NewMemory(clock), 0, []Verdict{
			{Over: true, RetryMs: 1000, Via: ViaFailClosed},
		}},
		{"fail closed", rule(policy.FailClosed, nil), down, 1, []Verdict{
			{Over: true, ResetMs: 3000, RetryMs: 3000, Via: ViaFailClosed},
		}},
		// A fail-open rule without a fallback and a key without history: the rule's own limit
		// (2 per second) caps it locally, and with 2 gateways this instance's half of it.
		{"fail open", rule(policy.FailOpen, nil), down, 1, []Verdict{
			{Remaining: 1, ResetMs: 500, Via: ViaFailOpen},
			{Remaining: 0, ResetMs: 1000, Via: ViaFailOpen},
			{Over: true, ResetMs: 1000, RetryMs: 500, Via: ViaFailOpen},
		}},
		{"fail open, 2 gateways", planGateways(plan(policy.FailOpen, nil, policy.Limit{Requests: 2, WindowMs: 1000}), 2), down, 1, []Verdict{
			{Remaining: 0, ResetMs: 1000, Via: ViaFailOpen},
			{Over: true, ResetMs: 1000, RetryMs: 1000, Via: ViaFailOpen},
		}},
		{"fallback", rule(policy.FailOpen, &policy.Rate{Requests: 1, WindowMs: 1000}), down, 1, []Verdict{
			{ResetMs: 1000, Via: ViaFallback},
			{Over: true, ResetMs: 1000, RetryMs: 1000, Via: ViaFallback},
		}},
	}
	for _, tt := range tests {
		lm, err := NewLeaseManager(LeaseConfig{Store: tt.store, Clock: clock, MinLease: 1, MaxLease: 1})
		if err != nil {
			t.Fatal(err)
		}
		u := Unavailable{Fallback: NewMemory(nil), Now: now, RetryMs: 3000}
		for i, want := range tt.want {
			got, err := tt.plan.Decide(context.Background(), lm, "rl:edge:r", tt.plan.Limits, tt.cost, u)
			if got != want {
				t.Errorf("%s: step %d: got %+v (%v), want %+v", tt.name, i, got, err, want)
			}
			if fromStore := got.Via == ViaLease || got.Via == ViaStore || got.Via == ViaShortCircuit; fromStore != (err == nil) {
				t.Errorf("%s: step %d: via %v with error %v", tt.name, i, got.Via, err)
			}
		}
	}
}

// TestShardedFallback: a sub-sharded fail-open rule's fallback bounds the key, not each of its
// shards' keys. With 40 an hour over 4 sub-shards and the store down, a user whose requests
// come from many addresses was admitted 160 (each shard's key had the whole 40).
func TestShardedFallback(t *testing.T) {
	r := &policy.Rule{Name: "r", Limits: []policy.Limit{{Requests: 400, WindowMs: 3_600_000}},
		FailureMode: policy.FailOpen, Fallback: &policy.Rate{Requests: 40, WindowMs: 3_600_000},
		SubShards: &policy.SubShards{Count: 4, Attribute: "ip"}, Lease: policy.Lease{Min: 1, Max: 1}}
	p, err := PlanRule("edge", r)
	if err != nil {
		t.Fatal(err)
	}
	const now = int64(1_000_000)
	lm, err := NewLeaseManager(LeaseConfig{Store: downStore{errors.New("connection refused")}, Clock: ClockFunc(func() int64 { return now }), MinLease: 1, MaxLease: 1})
	if err != nil {
		t.Fatal(err)
	}
	u := Unavailable{Fallback: NewMemory(nil), Now: now, RetryMs: 3000}
	admitted := 0
	for i := range 400 {
		key := AppendRuleKey(nil, "edge", r, []policy.Entry{{Key: "user", Value: "u"}})
		key = append(key, fmt.Sprintf(":shard=%d", ShardOf(fmt.Sprintf("10.0.%d.%d", i/256, i%256), 4))...)
		if v, _ := p.Decide(context.Background(), lm, string(key), p.Limits, 1, u); !v.Over {
			admitted++
		}
	}
	if admitted > 40 || admitted < 36 {
		t.Errorf("admitted %d over 4 sub-shards with a fallback of 40, want 36 to 40", admitted)
	}
}

func TestViaString(t *testing.T) {
	want := []string{"lease", "store", "short_circuit", "fallback", "fail_open", "fail_closed"}
	for i, w := range want {
		if got := Via(i).String(); got != w {
			t.Errorf("Via(%d): got %q, want %q", i, got, w)
		}
	}
}

// lateStore answers every take with a Late, which the test ends; then it denies.
type lateStore struct {
	mu    sync.Mutex
	lates []*Late
	end   *Result // when set, a take's Late has ended with it before Take returns
}

func (s *lateStore) Take(_ context.Context, r TakeRequest) (Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.lates) > 0 {
		return Result{RetryAfter: 1000}, nil // one late take per test: the rest are denied
	}
	late := &Late{Err: errors.New("store timeout")}
	if s.end != nil {
		late.End(*s.end, nil)
	}
	s.lates = append(s.lates, late)
	return Result{}, late
}
func (s *lateStore) Return(context.Context, ReturnRequest) error { return nil }

// TestLateTakeOfAdmittedRequest: a fail-open request whose take timed out is admitted by its
// local bound, and its take still lands in the store, which counts it: the request's cost comes
// out of the late grant, whether the grant lands after the request was decided or before. The
// whole grant joined the lease, so another request spent the same token again: on a Redis slow
// enough for late replies, a rule of 300 an hour admitted 312.
func TestLateTakeOfAdmittedRequest(t *testing.T) {
	const now = int64(1_000_000)
	p, err := PlanRule("edge", &policy.Rule{Name: "r", Limits: []policy.Limit{{Requests: 100, WindowMs: 3_600_000}},
		FailureMode: policy.FailOpen, Fallback: &policy.Rate{Requests: 100, WindowMs: 3_600_000}, Lease: policy.Lease{Min: 1, Max: 10}})
	if err != nil {
		t.Fatal(err)
	}
	for _, before := range []bool{false, true} {
		store := &lateStore{}
		grant := Result{Granted: 5, Remaining: 50, Now: now}
		if before {
			store.end = &grant
		}
		lm, err := NewLeaseManager(LeaseConfig{Store: store, Clock: ClockFunc(func() int64 { return now }), MinLease: 1, MaxLease: 10})
		if err != nil {
			t.Fatal(err)
		}
		u := Unavailable{Fallback: NewMemory(nil), Now: now, RetryMs: 3000}
		if v, err := p.Decide(context.Background(), lm, "rl:edge:r:k", p.Limits, 1, u); v.Over || v.Via != ViaFallback || err == nil {
			t.Fatalf("landed before: %v: the late take's request got %+v (%v), want admitted by the fallback", before, v, err)
		}
		if !before {
			store.lates[0].End(grant, nil)
		}
		fromLease := 0
		for range 10 {
			if v, _ := p.Decide(context.Background(), lm, "rl:edge:r:k", p.Limits, 1, u); !v.Over && v.Via == ViaLease {
				fromLease++
			}
		}
		if fromLease != 4 {
			t.Errorf("landed before: %v: %d requests spent the late grant of 5, want 4 (its own request spent one)", before, fromLease)
		}
	}
}

// TestLateTakeRaces: the cost a late take's request owes is withheld from its grant when it
// lands, not charged to the lease's balance after the fact: with the grant landed first and the
// balance spent before the request's local bound admitted it, the charge found nothing and the
// key was admitted 6 on a grant of 5. A request that is not admitted (a fail-closed rule, or a
// local bound that denies) gives the cost up: the whole grant is the lease's, or the store's.
func TestLateTakeRaces(t *testing.T) {
	const now = int64(1_000_000)
	ctx := context.Background()
	plan := func(fm policy.FailureMode, fb *policy.Rate) *RulePlan {
		p, err := PlanRule("edge", &policy.Rule{Name: "r", Limits: []policy.Limit{{Requests: 100, WindowMs: 3_600_000}},
			FailureMode: fm, Fallback: fb, Lease: policy.Lease{Min: 1, Max: 10}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	grant := Result{Granted: 5, Remaining: 50, Now: now}
	run := func(p *RulePlan, fallback Store) (admitted int, store *lateStore) {
		store = &lateStore{end: &grant}
		lm, err := NewLeaseManager(LeaseConfig{Store: store, Clock: ClockFunc(func() int64 { return now }), MinLease: 1, MaxLease: 10})
		if err != nil {
			t.Fatal(err)
		}
		u := Unavailable{Fallback: fallback, Now: now, RetryMs: 3000}
		_, err = lm.Take(ctx, "k", p.Limits, 1) // the grant lands before Take returns
		if lateTakeOf(err) == nil {
			t.Fatalf("Take: %v, want a late take", err)
		}
		for range 10 { // other requests spend the balance
			if v, _ := p.Decide(ctx, lm, "k", p.Limits, 1, u); !v.Over {
				admitted++
			}
		}
		if v, _ := p.unavailable(ctx, lm, "k", p.Limits, 1, u, err); !v.Over {
			admitted++
		}
		return admitted, store
	}
	if got, _ := run(plan(policy.FailOpen, &policy.Rate{Requests: 100, WindowMs: 3_600_000}), NewMemory(nil)); got != 5 {
		t.Errorf("fail-open, admitted by its bound: %d admitted on a grant of 5, want 5", got)
	}
	// Denied: the request's cost goes back to the store (the lease got 4 of the 5).
	full := NewMemory(nil)
	full.Take(ctx, TakeRequest{Key: "k", Limits: []Limit{{Requests: 1, Window: 3_600_000}}, Want: 1, Now: now})
	if got, _ := run(plan(policy.FailOpen, &policy.Rate{Requests: 1, WindowMs: 3_600_000}), full); got != 4 {
		t.Errorf("fail-open, denied by its bound: %d admitted, want 4 (the lease's)", got)
	}
	if got, _ := run(plan(policy.FailClosed, nil), NewMemory(nil)); got != 4 {
		t.Errorf("fail-closed: %d admitted, want 4 (the lease's)", got)
	}
}
