package engine

import (
	"context"
	"math"
	"testing"
)

// TestLeaseDecisionReset steps one key through store replies, local hits and
// local denials and checks what each Decision says about the reset and the
// tightest limit. The key has a fixed window of 100 per minute (limit 0) and
// a token bucket of 10 per second (limit 1, a token per 100 ms), which is
// the tightest.
func TestLeaseDecisionReset(t *testing.T) {
	ctx := context.Background()
	limits := []Limit{{Algorithm: FixedWindow, Requests: 100, Window: 60 * second}, {Requests: 10, Window: second}}
	v := &virtual{now: 1000}
	m := newTestManager(t, NewMemory(nil), v, LeaseConfig{MinLease: 4, MaxLease: 4})
	rows := []struct {
		t, cost int64
		sweep   bool // Sweep first: the manager reads its clock
		want    Decision
	}{
		// Store: a lease of 4 leaves the bucket 6 tokens, 400 ms from full.
		{t: 1000, cost: 1, want: Decision{OK: true, Remaining: 6 + 3, ResetAfter: 400, Limiting: 1}},
		// Hit: the reset instant 1400 counted down to the last clock
		// reading, 1000, not to 1100; remaining, the store's 6 at its
		// reply and the balance.
		{t: 1100, cost: 1, want: Decision{OK: true, Local: true, Remaining: 6 + 2, ResetAfter: 400, Limiting: 1}},
		// Sweep read the clock at 1300.
		{t: 1300, cost: 1, sweep: true, want: Decision{OK: true, Local: true, Remaining: 6 + 1, ResetAfter: 100, Limiting: 1}},
		// Store: the bucket refilled to 9 tokens; 5 more leave 4, 600 ms from full.
		{t: 1300, cost: 5, want: Decision{OK: true, Remaining: 4 + 1, ResetAfter: 600, Limiting: 1}},
		// Over capacity: local, from the last reply, counted down to now.
		{t: 1350, cost: 11, want: Decision{Local: true, RetryAfter: Never, ResetAfter: 550, Limiting: 1}},
		// Store: 4.5 of 5 tokens; the fifth in 50 ms.
		{t: 1350, cost: 5, want: Decision{Remaining: 4, RetryAfter: 50, ResetAfter: 550, Limiting: 1}},
		// Short-circuit until 1400, from the denial, counted down to now.
		{t: 1380, cost: 5, want: Decision{Local: true, RetryAfter: 20, ResetAfter: 520, Limiting: 1}},
	}
	for i, r := range rows {
		v.advance(r.t)
		if r.sweep {
			if err := m.Sweep(ctx); err != nil {
				t.Fatal(err)
			}
		}
		got, err := m.Take(ctx, "k", limits, r.cost)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got != r.want {
			t.Errorf("step %d: t=%d cost=%d: got %+v, want %+v", i, r.t, r.cost, got, r.want)
		}
	}
	// A key with no store reply yet: the smallest capacity, and its refill
	// time as the longest a reset can take.
	got, err := m.Take(ctx, "fresh", limits, 11)
	if want := (Decision{Local: true, RetryAfter: Never, ResetAfter: 1000, Limiting: 1}); err != nil || got != want {
		t.Errorf("fresh key, cost over capacity: got %+v %v, want %+v", got, err, want)
	}
}

// TestLeaseLowWater checks when the first prefetch starts under an absolute
// and a percentage low watermark, with B fixed at 10.
func TestLeaseLowWater(t *testing.T) {
	ctx := context.Background()
	limits := []Limit{{Requests: 1000, Window: second}}
	cases := []struct {
		name    string
		cfg     LeaseConfig
		balance int64 // the balance after the spend that starts the prefetch
	}{
		{"default 25%", LeaseConfig{}, 1},
		{"percent 50", LeaseConfig{LowWaterPercent: 50}, 4},
		{"absolute 4", LeaseConfig{LowWater: 4}, 3},
		{"absolute wins over percent", LeaseConfig{LowWater: 7, LowWaterPercent: 10}, 6},
		{"absolute above B means B", LeaseConfig{LowWater: 50}, 8},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := &virtual{now: 1000, latency: 5}
			c.cfg.MinLease, c.cfg.MaxLease = 10, 10
			m := newTestManager(t, NewMemory(nil), v, c.cfg)
			// The first lease: balance 9, and the store 990, which a hit's Remaining adds
			// until the prefetch's reply lands.
			const left = 1000 - 10
			d, err := m.Take(ctx, "k", limits, 1)
			for err == nil && m.Stats().Fetches == 1 && d.Remaining > left {
				d, err = m.Take(ctx, "k", limits, 1)
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.Stats().Fetches != 2 || d.Remaining-left != c.balance {
				t.Errorf("prefetch %d started at balance %d, want at %d", m.Stats().Fetches-1, d.Remaining-left, c.balance)
			}
		})
	}
	if _, err := NewLeaseManager(LeaseConfig{Store: NewMemory(nil), Clock: &virtual{}, LowWater: -1}); err == nil {
		t.Error("negative LowWater accepted")
	}
}

// TestLeaseLowWaterCap: the low watermark shares a word with the store's remaining, and a lease
// of more than MaxInt32 tokens prefetches below MaxInt32.
func TestLeaseLowWaterCap(t *testing.T) {
	var l lease
	for _, c := range []struct{ set, want int64 }{{0, 0}, {250, 250}, {math.MaxInt32, math.MaxInt32}, {1 << 40, math.MaxInt32}} {
		l.setLowWater(c.set)
		if got := int64(l.lowWater.Load()); got != c.want {
			t.Errorf("setLowWater(%d): got %d, want %d", c.set, got, c.want)
		}
	}
}
