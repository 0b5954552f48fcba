package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// cellTestLimits are the rules' limits of the cell tests: a token bucket with a burst, a sliding
// window, and a bucket under a fixed window.
var cellTestLimits = [][]Limit{
	{{Requests: 40, Window: 1000, Burst: 60}},
	{{Algorithm: SlidingWindow, Requests: 30, Window: 2000}},
	{{Requests: 10, Window: 1000}, {Algorithm: FixedWindow, Requests: 200, Window: 60_000}},
}

// TestCellSharedByManagers runs the same random requests through three keyed lease managers on
// one store (a fleet of gateways) and through three managers of handles only on a store of
// handles only, each key's leases reaching its state through one cell (TakeCell), as the
// simulator's gateways do. Keys come and go, so Sweep forgets leases, spare leases are made
// other keys', and Expire drops state: every decision and counter must be the same, and a
// cell is live exactly while the keyed store holds the key.
func TestCellSharedByManagers(t *testing.T) {
	ctx := context.Background()
	limits := cellTestLimits
	var now int64 = 1_000_000
	clock := ClockFunc(func() int64 { return now })
	keyedStore, cellStore := NewSingleGoroutineMemory(clock), NewHandlesOnlyMemory(clock)
	const gateways, keys = 3, 40
	var keyed, celled [gateways]*LeaseManager
	for g := range gateways {
		var err error
		cfg := LeaseConfig{Store: keyedStore, Clock: clock, MinLease: 2, MaxLease: 30, TTL: 400, SingleGoroutine: true}
		if keyed[g], err = NewLeaseManager(cfg); err != nil {
			t.Fatal(err)
		}
		cfg.Store, cfg.HandlesOnly = cellStore, true
		if celled[g], err = NewLeaseManager(cfg); err != nil {
			t.Fatal(err)
		}
	}
	type keyState struct {
		key   string
		refs  [gateways]LeaseRef
		store MemoryCell
	}
	state := make([]keyState, keys)
	for k := range state {
		state[k].key = fmt.Sprintf("key-%d", k)
	}
	rng := rand.New(rand.NewPCG(3, 5))
	for step := 0; step < 60_000; step++ {
		switch r := rng.IntN(1000); {
		case r < 4:
			now += rng.Int64N(150_000) // long idle: leases are forgotten and reused, state expires
		case r < 400:
			now += rng.Int64N(20)
		}
		if step%53 == 0 {
			for g := range gateways {
				if err1, err2 := keyed[g].Sweep(ctx), celled[g].Sweep(ctx); err1 != nil || err2 != nil {
					t.Fatalf("step %d: sweep: %v, %v", step, err1, err2)
				}
			}
		}
		if step%307 == 0 {
			if a, b := keyedStore.Expire(now), cellStore.Expire(now); a != b {
				t.Fatalf("step %d: Expire dropped %d keys from the keyed store, %d from the cells", step, a, b)
			}
		}
		// Some keys are busy and most are not: the busy ones keep their leases, the others
		// have theirs forgotten and made other keys'.
		k := rng.IntN(keys)
		if rng.IntN(3) == 0 {
			k %= 4
		}
		g, cost := rng.IntN(gateways), 1+rng.Int64N(2)
		ks := &state[k]
		lim := limits[k%len(limits)]
		want, err1 := keyed[g].Take(ctx, ks.key, lim, cost)
		got, err2 := celled[g].TakeCell(ctx, &ks.refs[g], &ks.store, ks.key, lim, cost)
		if err1 != nil || err2 != nil {
			t.Fatalf("step %d: take: keyed %v, cells %v", step, err1, err2)
		}
		if got != want {
			t.Fatalf("step %d key %d gateway %d cost %d: cells %+v, keyed %+v", step, k, g, cost, got, want)
		}
		if step%101 == 0 {
			for k := range state {
				if got, want := cellStore.LiveCell(&state[k].store), keyedStore.Fields(state[k].key) != nil; got != want {
					t.Fatalf("step %d key %d: cell live %v, keyed state %v", step, k, got, want)
				}
			}
		}
	}
	for g := range gateways {
		if got, want := celled[g].Stats(), keyed[g].Stats(); got != want {
			t.Errorf("gateway %d: stats with cells %+v, keyed %+v", g, got, want)
		}
		if got, want := celled[g].Stranded(), keyed[g].Stranded(); got != want {
			t.Errorf("gateway %d: stranded with cells %d, keyed %d", g, got, want)
		}
		if celled[g].Stats().StoreErrors != 0 {
			t.Errorf("gateway %d: %d store errors", g, celled[g].Stats().StoreErrors)
		}
	}
	if got, want := cellStore.Len(), keyedStore.Len(); got != want {
		t.Errorf("store keys: %d with cells, %d keyed", got, want)
	}
}

// TestCellErrors checks that a cell is refused by a Memory that keeps an index of its keys,
// and once used, with another key or another Memory; and that a store of handles only refuses
// a lease's call without a cell (TakeRef).
func TestCellErrors(t *testing.T) {
	ctx := context.Background()
	limits := []Limit{{Requests: 10, Window: 1000}}
	clock := ClockFunc(func() int64 { return 1000 })
	var c MemoryCell
	if _, err := NewSingleGoroutineMemory(clock).TakeCell(&c, "k", limits, 1, 1, 0); !errors.Is(err, ErrCell) {
		t.Errorf("TakeCell on an indexed Memory: got %v, want ErrCell", err)
	}
	a, b := NewHandlesOnlyMemory(clock), NewHandlesOnlyMemory(clock)
	if res, err := a.TakeCell(&c, "k", limits, 1, 1, 0); err != nil || res.Granted != 1 || !a.LiveCell(&c) {
		t.Fatalf("TakeCell: got %+v, %v, live %v", res, err, a.LiveCell(&c))
	}
	if b.LiveCell(&c) {
		t.Error("a cell is live in a Memory that never used it")
	}
	if _, err := a.TakeCell(&c, "other", limits, 1, 1, 0); !errors.Is(err, ErrCell) {
		t.Errorf("TakeCell with another key: got %v, want ErrCell", err)
	}
	if _, err := b.TakeCell(&c, "k", limits, 1, 1, 0); !errors.Is(err, ErrCell) {
		t.Errorf("TakeCell on another Memory: got %v, want ErrCell", err)
	}
	m, err := NewLeaseManager(LeaseConfig{Store: a, Clock: clock, SingleGoroutine: true, HandlesOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var r LeaseRef
	if _, err := m.TakeRef(ctx, &r, "k2", limits, 1); !errors.Is(err, ErrHandlesOnly) {
		t.Errorf("TakeRef on a store of handles only: got %v, want ErrHandlesOnly", err)
	}
}

// TestTakePlannedMatchesTakeCell takes the same random requests through TakeCell on one Memory
// of handles only and through TakePlanned on another, with plans made once: every result, and
// whether each cell is live after each Expire, must be the same.
func TestTakePlannedMatchesTakeCell(t *testing.T) {
	limits := cellTestLimits
	var now int64 = 1_000_000
	clock := ClockFunc(func() int64 { return now })
	celled, planned := NewHandlesOnlyMemory(clock), NewHandlesOnlyMemory(clock)
	type plan struct {
		limits     []Limit
		want, need int64
		p          *CellPlan
	}
	var plans []plan
	for _, ls := range limits {
		for _, amounts := range [][2]int64{{1, 1}, {5, 1}, {3, 3}} {
			p, err := planned.PlanCell(ls, amounts[0], amounts[1])
			if err != nil {
				t.Fatal(err)
			}
			plans = append(plans, plan{ls, amounts[0], amounts[1], p})
		}
	}
	const keys = 30
	var a, b [keys][9]MemoryCell // by key and plan
	rng := rand.New(rand.NewPCG(7, 11))
	for step := 0; step < 60_000; step++ {
		switch r := rng.IntN(1000); {
		case r < 3:
			now += rng.Int64N(400_000) // long idle: state expires
		case r < 15:
			now += rng.Int64N(150_000) // past some keys' time to live (60 or 120 s), short of others'
		case r < 400:
			now += rng.Int64N(30)
		}
		if step%11 == 0 {
			celled.Expire(now)
			planned.Expire(now)
			for k := range a {
				for i := range a[k] {
					if celled.LiveCell(&a[k][i]) != planned.LiveCell(&b[k][i]) {
						t.Fatalf("step %d, key %d, plan %d: live %v against %v", step, k, i, planned.LiveCell(&b[k][i]), celled.LiveCell(&a[k][i]))
					}
				}
			}
		}
		k, i := rng.IntN(keys), rng.IntN(len(plans))
		pl := plans[i]
		at := now
		if rng.IntN(4) == 0 {
			at = 0 // the Memory's clock
		}
		key := fmt.Sprintf("key-%d-%d", k, i)
		want, err1 := celled.TakeCell(&a[k][i], key, pl.limits, pl.want, pl.need, at)
		got, err2 := planned.TakePlanned(&b[k][i], key, pl.p, at)
		if err1 != nil || err2 != nil || got != want {
			t.Fatalf("step %d, key %d, plan %d: TakePlanned %+v, %v; TakeCell %+v, %v", step, k, i, got, err2, want, err1)
		}
	}
}

func TestCellPlanErrors(t *testing.T) {
	limits := []Limit{{Requests: 10, Window: 1000}}
	clock := ClockFunc(func() int64 { return 1000 })
	if _, err := NewSingleGoroutineMemory(clock).PlanCell(limits, 1, 1); !errors.Is(err, ErrCell) {
		t.Errorf("PlanCell on an indexed Memory: got %v, want ErrCell", err)
	}
	a, b := NewHandlesOnlyMemory(clock), NewHandlesOnlyMemory(clock)
	for _, bad := range []struct {
		limits     []Limit
		want, need int64
	}{{nil, 1, 1}, {[]Limit{{Requests: 0, Window: 1000}}, 1, 1}, {limits, 0, 0}, {limits, 2, 3}} {
		if _, err := a.PlanCell(bad.limits, bad.want, bad.need); !errors.Is(err, ErrBadRequest) {
			t.Errorf("PlanCell(%v, %d, %d): got %v, want ErrBadRequest", bad.limits, bad.want, bad.need, err)
		}
	}
	p, err := a.PlanCell(limits, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	var c MemoryCell
	if _, err := b.TakePlanned(&c, "k", p, 0); !errors.Is(err, ErrCell) {
		t.Errorf("TakePlanned with another Memory's plan: got %v, want ErrCell", err)
	}
	if _, err := a.TakePlanned(&c, "k", p, MaxExact+1); !errors.Is(err, ErrBadRequest) {
		t.Errorf("TakePlanned beyond MaxExact: got %v, want ErrBadRequest", err)
	}
	if res, err := a.TakePlanned(&c, "k", p, 0); err != nil || res.Granted != 1 {
		t.Errorf("TakePlanned: got %+v, %v", res, err)
	}
	// The time checked is the one given, as TakeCell checks it: a clock's time is taken as
	// it is by both.
	late := ClockFunc(func() int64 { return MaxExact + 1 })
	cm, pm := NewHandlesOnlyMemory(late), NewHandlesOnlyMemory(late)
	lp, err := pm.PlanCell(limits, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	var cc, pc MemoryCell
	want, err1 := cm.TakeCell(&cc, "k", limits, 1, 1, 0)
	got, err2 := pm.TakePlanned(&pc, "k", lp, 0)
	if got != want || (err1 == nil) != (err2 == nil) {
		t.Errorf("on a clock beyond MaxExact: TakePlanned %+v, %v; TakeCell %+v, %v", got, err2, want, err1)
	}
}
