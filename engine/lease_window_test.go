package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestLeaseWindowProperties drives N lease managers on one window-limited key with random
// traffic, store outages and sweeps (in some windows one manager idles after its first take,
// so that Sweep returns what it carried in), and checks per window what leasing owes a window
// limit: the tokens the store debits in a window never exceed its limit, what a window admits is at
// most its limit plus the tokens the managers carried into it and spent there (at most
// N × MaxLease), and tokens a manager holds when a window ends stay spendable in the next,
// decided locally.
func TestLeaseWindowProperties(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow} {
		for _, n := range []int{1, 3, 8} {
			for seed := range uint64(20) {
				t.Run(fmt.Sprintf("%v/N=%d/seed=%d", alg, n, seed), func(t *testing.T) { leaseWindowProperty(t, alg, n, seed) })
			}
		}
	}
}

// countingStore counts the tokens a store grants, minus those given back, per window of its
// decision time, and fails every call while down.
type countingStore struct {
	Store
	window int64
	down   bool
	net    map[int64]int64 // window start → tokens granted less returned into it
}

func (c *countingStore) Take(ctx context.Context, r TakeRequest) (Result, error) {
	if c.down {
		return Result{}, errDown
	}
	res, err := c.Store.Take(ctx, r)
	if err == nil {
		c.net[r.Now-r.Now%c.window] += res.Granted
	}
	return res, err
}

func (c *countingStore) Return(ctx context.Context, r ReturnRequest) error {
	if c.down {
		return errDown
	}
	if err := c.Store.Return(ctx, r); err != nil {
		return err
	}
	// A window only takes back tokens taken in it (refund); others are gone with theirs.
	if tw := r.TakenAt - r.TakenAt%c.window; tw == r.Now-r.Now%c.window {
		c.net[tw] -= r.N
	}
	return nil
}

func leaseWindowProperty(t *testing.T, alg Algorithm, n int, seed uint64) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, uint64(n)+uint64(alg)<<8))
	lim := Limit{Algorithm: alg, Requests: 100 + rng.Int64N(900), Window: second}
	limits := []Limit{lim}
	v := &virtual{now: 1_000_000, latency: rng.Int64N(4)}
	store := &countingStore{Store: NewSingleGoroutineMemory(nil), window: lim.Window, net: map[int64]int64{}}
	maxLease := 1 + rng.Int64N(60)
	ms := make([]*LeaseManager, n)
	for i := range ms {
		ms[i] = newTestManager(t, store, v, LeaseConfig{MinLease: 1 + rng.Int64N(maxLease), MaxLease: maxLease,
			Lookahead: 1 + rng.Int64N(300), TTL: 1 + rng.Int64N(3000), SingleGoroutine: true})
	}
	type by struct {
		w int64 // window start
		i int   // manager
	}
	admittedIn := map[int64]int64{} // window start → tokens admitted in it
	admittedBy := map[by]int64{}    // tokens a manager admitted in a window
	heldAt := map[by]int64{}        // tokens a manager held when a window began
	carried := false
	idle := -1 // a manager that gets no traffic in this window after its first take
	for step := range 30_000 {
		gap := rng.Int64N(3)
		if step%3000 < 300 {
			gap = rng.Int64N(40) // a lull
		}
		before := v.now
		v.advance(v.now + gap)
		if w := v.now - v.now%lim.Window; w != before-before%lim.Window {
			// In some windows one manager takes only the first request: what it holds then,
			// carried tokens and a top-up its prefetch brings, goes back when its TTL passes.
			idle = -1
			if rng.IntN(2) == 0 {
				idle = rng.IntN(n)
			}
			// A window ended: what a manager holds is spent in the new one, locally.
			for i, m := range ms {
				if b := m.Stranded(); b > 0 {
					heldAt[by{w, i}] = b
					// (A prefetch may start below the low watermark; the take itself is local.)
					d, err := m.Take(ctx, "k", limits, 1)
					if err != nil || !d.OK || !d.Local {
						t.Fatalf("step %d: manager %d held %d tokens across the window's end, then got %+v %v", step, i, b, d, err)
					}
					admittedIn[w]++
					admittedBy[by{w, i}]++
					carried = true
				}
			}
		}
		store.down = step%5000 >= 4500 // outages, during which only leased tokens are spent
		if rng.IntN(40) == 0 {
			for _, m := range ms {
				_ = m.Sweep(ctx)
			}
		}
		cost := 1 + rng.Int64N(2)
		i := rng.IntN(n)
		if i == idle && n > 1 {
			i = (i + 1) % n
		}
		d, err := ms[i].Take(ctx, "k", limits, cost)
		switch {
		case err != nil && !store.down:
			t.Fatal(err)
		case err != nil && !errors.Is(err, errDown):
			t.Fatalf("step %d: %v", step, err)
		case err == nil && d.OK:
			admittedIn[v.now-v.now%lim.Window] += cost
			admittedBy[by{v.now - v.now%lim.Window, i}] += cost
		}
	}
	var total, debited int64
	for w, net := range store.net {
		if net > lim.Requests {
			t.Fatalf("window %d: the store granted %d net, over its limit of %d", w, net, lim.Requests)
		}
		debited += max(net, 0)
	}
	for w, a := range admittedIn {
		// A manager spends the tokens it carried into a window before those it is granted
		// in it. Those it carried were debited in an earlier window, so the window admits
		// at most its limit plus the carried tokens spent in it. Carried tokens given back
		// unspent must not give the window room a second time.
		var carriedSpent, held int64
		for i := range ms {
			carriedSpent += min(heldAt[by{w, i}], admittedBy[by{w, i}])
			held += heldAt[by{w, i}]
		}
		if bound := lim.Requests + carriedSpent; a > bound {
			t.Fatalf("window %d: admitted %d, over the limit %d plus the %d carried tokens spent in it", w, a, lim.Requests, carriedSpent)
		}
		if held > int64(n)*maxLease {
			t.Fatalf("window %d: %d managers held %d tokens, over %d × MaxLease %d", w, n, held, n, maxLease)
		}
		total += a
	}
	if total > debited {
		t.Fatalf("admitted %d tokens in all, more than the store debited (%d)", total, debited)
	}
	t.Logf("admitted %d of %d debited; tokens carried across a window's end: %v", total, debited, carried)
}

// TestReturnKeepsCarriedTokensOut checks that a lease's leftover is refunded only into the
// window its tokens were taken in. Manager A carries tokens from one window into the next, is
// topped up there, and goes idle: Sweep returns its balance. The carried tokens were counted in
// the earlier window and must not lower the new window's count, or the new window admits them a
// second time.
func TestReturnKeepsCarriedTokensOut(t *testing.T) {
	for _, single := range []bool{false, true} {
		t.Run(fmt.Sprintf("single=%v", single), func(t *testing.T) {
			ctx := context.Background()
			for _, alg := range []Algorithm{FixedWindow, SlidingWindow} {
				limits := []Limit{{Algorithm: alg, Requests: 100, Window: second}}
				store := NewMemory(nil)
				v := &virtual{now: 10_900}
				a := newTestManager(t, store, v, LeaseConfig{MinLease: 10, MaxLease: 10, LowWater: 3, TTL: 100, SingleGoroutine: single})
				take := func(n int) {
					t.Helper()
					for range n {
						if d, err := a.Take(ctx, "k", limits, 1); err != nil || !d.OK {
							t.Fatalf("%v: take at %d: %+v %v", alg, v.now, d, err)
						}
						v.advance(v.now)
					}
				}
				take(6) // a batch of 10 in window 10 000; 4 left
				if got := a.Stranded(); got != 4 {
					t.Fatalf("%v: holds %d before the window's end, want 4", alg, got)
				}
				v.advance(11_000)
				// Another gateway takes half of the new window.
				if res, err := store.Take(ctx, TakeRequest{Key: "k", Limits: limits, Want: 50, Now: v.now}); err != nil || res.Granted != 50 {
					t.Fatalf("%v: %+v %v", alg, res, err)
				}
				take(2) // spends 2 carried tokens, and the prefetch tops the balance up to 10
				v.advance(v.now + 1)
				if got := a.Stranded(); got != 10 {
					t.Fatalf("%v: holds %d after the top-up, want 10", alg, got)
				}
				v.advance(v.now + 200)
				if err := a.Sweep(ctx); err != nil {
					t.Fatal(err)
				}
				v.drain()
				// Window 11 000 was debited 50 and 8 (the top-up); the 8 came back. The 2
				// carried tokens that came back belong to window 10 000.
				res, err := store.Take(ctx, TakeRequest{Key: "k", Limits: limits, Want: 100, Min: 1, Now: v.now})
				if err != nil {
					t.Fatal(err)
				}
				want := int64(50)
				if alg == SlidingWindow {
					// Window 10 000 counted 10, less the 2 returned, and weighs as much of it
					// as the sliding window still covers.
					want = 50 - ceilDiv(8*(1000-(v.now-11_000)), 1000)
				}
				if res.Granted != want {
					t.Errorf("%v: the new window has %d tokens left after the return, want %d", alg, res.Granted, want)
				}
			}
		})
	}
}
