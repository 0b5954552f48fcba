package engine

import (
	"context"
	"testing"

	"github.com/rlctl/rlctl/policy"
)

// TestFallbackBound drives a key of a fail-open rule without a fallback at a steady rate, takes
// the store down, and counts what the key is admitted while it is down: FallbackFactor times
// the rate it was admitted before, never without bound; a key without history gets the rule's
// default, its limit divided among its gateways.
func TestFallbackBound(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name     string
		gateways int64
		rate     int64 // requests per second before the outage, 0 for none
		offered  int64 // requests per second during the outage
		// want is the least and the most admitted during the 2 s outage.
		wantMin, wantMax int64
	}{
		// 50/s before: the bound is 100/s with a burst of 100, so 2 s admit at most
		// 100 + 2×100 (the bucket starts full), and a flood of 1000/s gets all of it.
		{"observed rate", 0, 50, 1000, 290, 300},
		// Within the bound, everything offered is admitted.
		{"within the bound", 0, 50, 80, 160, 160},
		// No history: the rule's 1000/s (burst 1000) itself; with 4 gateways a quarter.
		{"no history", 0, 0, 2000, 2990, 3000},
		{"no history, 4 gateways", 4, 0, 2000, 740, 750},
	}
	for _, tt := range tests {
		v := &virtual{now: 1_000_000}
		store := &flakyStore{Store: NewMemory(nil)}
		m := newTestManager(t, store, v, LeaseConfig{MinLease: 5, MaxLease: 50})
		p, err := PlanRule("edge", &policy.Rule{Name: "r", Gateways: tt.gateways,
			Limits: []policy.Limit{{Requests: 1000, WindowMs: 1000}}})
		if err != nil {
			t.Fatal(err)
		}
		u := Unavailable{Fallback: NewMemory(nil), RetryMs: 1000}
		key := "rl:edge:r"
		run := func(from, ms, perSec int64) (admitted int64) {
			for i := range ms * perSec / 1000 {
				at := from + i*1000/perSec
				v.advance(at)
				u.Now = at
				vd, _ := p.Decide(ctx, m, key, p.Limits, 1, u)
				if !vd.Over {
					admitted++
				}
			}
			return admitted
		}
		start := v.now
		if tt.rate > 0 {
			if got := run(start, 3000, tt.rate); got != 3*tt.rate {
				t.Fatalf("%s: before the outage: admitted %d, want %d", tt.name, got, 3*tt.rate)
			}
		}
		store.down = true
		// The lease's tokens are still spent: count them as admitted too, and allow for them.
		held := m.Stranded()
		got := run(start+3000, 2000, tt.offered)
		if got < tt.wantMin || got > tt.wantMax+held {
			t.Errorf("%s: admitted %d during the outage (%d of them leased), want %d to %d", tt.name, got, held, tt.wantMin, tt.wantMax+held)
		}
	}
}
