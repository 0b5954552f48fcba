package enforcer

import (
	"testing"

	"github.com/rlctl/rlctl/policy"
)

// TestSoftWarning checks the soft stage's RateLimit-Warning for each kind of stage: the date is
// a function of the rule's stage and its domain's soft dwell only.
func TestSoftWarning(t *testing.T) {
	const week = 7 * 86_400_000
	tests := []struct {
		name  string
		stage policy.Stage
		dwell int64
		want  string
	}{
		{"soft with a date", policy.Stage{Name: policy.StageSoft, Since: "2025-06-20"}, week,
			`"r";q=100;w=60;over=20;enforce="2025-06-27";msg="20% over quota, admitted; enforcement begins 2025-06-27"`},
		{"a dwell of part of a day rounds up", policy.Stage{Name: policy.StageSoft, Since: "2025-12-31"}, 36 * 3_600_000,
			`"r";q=100;w=60;over=20;enforce="2026-01-02";msg="20% over quota, admitted; enforcement begins 2026-01-02"`},
		{"soft without since", policy.Stage{Name: policy.StageSoft}, week,
			`"r";q=100;w=60;over=20;msg="20% over quota, admitted; no enforcement date is set"`},
		{"soft without a dwell", policy.Stage{Name: policy.StageSoft, Since: "2025-06-20"}, 0,
			`"r";q=100;w=60;over=20;msg="20% over quota, admitted; no enforcement date is set"`},
		{"soft on hold", policy.Stage{Name: policy.StageSoft, Since: "2025-06-20", Hold: "Q3 review"}, week,
			`"r";q=100;w=60;over=20;msg="20% over quota, admitted; no enforcement date is set"`},
		{"canary off its share", policy.Stage{Name: policy.StageCanary, CanaryPercent: 5, Since: "2025-06-30"}, week,
			`"r";q=100;w=60;over=20;enforce="2025-06-30";msg="20% over quota, admitted here; enforced on 5% of instances since 2025-06-30"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &policy.Domain{Name: "d", Governance: policy.Governance{SoftDwellMs: tt.dwell}}
			r := &policy.Rule{Name: "r", Stage: tt.stage}
			v := newLimitView("r", 100, 60_000)
			v.setSoftNotice(d, r)
			rp := newReply(1)
			rp.appendWarning(&headerChoice{view: v, warn: true, overPct: 20})
			h := rp.resp.ResponseHeadersToAdd
			if len(h) != 1 || h[0].Key != HeaderWarning {
				t.Fatalf("got headers %v, want one %s", h, HeaderWarning)
			}
			if got := h[0].Value; got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

// TestOverMeter counts a caller's over-limit tokens per window: steps at times t add cost and
// want the caller's count.
func TestOverMeter(t *testing.T) {
	m := &overMeter{windowMs: 60_000}
	for i, s := range []struct {
		key  string
		t    int64
		cost int64
		want int64
	}{
		{"a", 0, 1, 1},
		{"a", 59_999, 2, 3},
		{"b", 59_999, 1, 1}, // another caller counts apart
		{"a", 60_000, 1, 1}, // a new window starts over
		{"a", 120_001, 5, 5},
	} {
		if got := m.add([]byte(s.key), s.cost, s.t); got != s.want {
			t.Errorf("step %d: got %d, want %d", i, got, s.want)
		}
	}
}

func TestOverPercent(t *testing.T) {
	for i, s := range []struct{ tokens, requests, want int64 }{
		{1, 3, 34}, {2, 3, 67}, {20, 100, 20}, {1, 1000, 1}, {0, 100, 0}, {300, 100, 300}, {5, 0, 0},
	} {
		if got := overPercent(s.tokens, s.requests); got != s.want {
			t.Errorf("step %d: overPercent(%d, %d) = %d, want %d", i, s.tokens, s.requests, got, s.want)
		}
	}
}

// BenchmarkSoftWarning measures the soft stage's warning on the request path, in a reply the
// call has already allocated: no allocations of its own.
func BenchmarkSoftWarning(b *testing.B) {
	d := &policy.Domain{Governance: policy.Governance{SoftDwellMs: 7 * 86_400_000}}
	v := newLimitView("tenant", 100, 60_000)
	v.setSoftNotice(d, &policy.Rule{Stage: policy.Stage{Name: policy.StageSoft, Since: "2025-06-20"}})
	key := []byte("rl:edge:tenant:acme")
	rp := newReply(1)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		rp.textUsed, rp.resp.ResponseHeadersToAdd = 0, rp.headers[:0]
		c := headerChoice{view: v, warn: true, overPct: overPercent(v.over.add(key, 1, int64(i)), 100)}
		rp.appendWarning(&c)
	}
}

// TestHeaderChoiceLongestRetry: of a request's rejected descriptors the headers describe the one
// whose retry is furthest: a client told to come back when the emptiest one refills (in 1 s)
// was rejected again by the other (30 s away) until then.
func TestHeaderChoiceLongestRetry(t *testing.T) {
	soon := headerChoice{view: &limitView{}, remaining: 0, retryMs: 1000}
	later := headerChoice{view: &limitView{}, remaining: 5, retryMs: 30_000}
	admitted := headerChoice{view: &limitView{}, remaining: 0}
	for _, tc := range []struct {
		name string
		c, o headerChoice
		want bool
	}{
		{"the longer retry over the emptier", later, soon, true},
		{"the emptier under the longer retry", soon, later, false},
		{"rejected over admitted", later, admitted, true},
		{"admitted under rejected", admitted, soon, false},
		{"fewest remaining among the admitted", admitted, headerChoice{view: &limitView{}, remaining: 3}, true},
	} {
		if got := tc.c.better(&tc.o); got != tc.want {
			t.Errorf("%s: better %v, want %v", tc.name, got, tc.want)
		}
	}
}
