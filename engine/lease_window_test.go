package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestLeaseWindowProperties drives N lease managers on one window-limited key with random
// traffic, store outages and sweeps, and checks per window what leasing owes a window limit:
// the tokens the store debits in a window never exceed its limit, what a window admits is at
// most its limit plus what the managers carried into it (at most N × MaxLease), and tokens a
// manager holds when a window ends stay spendable in the next, decided locally.
func TestLeaseWindowProperties(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow} {
		for _, n := range []int{1, 3, 8} {
			for seed := range uint64(3) {
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
	admittedIn := map[int64]int64{} // window start → tokens admitted in it
	carried := false
	for step := range 30_000 {
		gap := rng.Int64N(3)
		if step%3000 < 300 {
			gap = rng.Int64N(40) // a lull
		}
		before := v.now
		v.advance(v.now + gap)
		if w := v.now - v.now%lim.Window; w != before-before%lim.Window {
			// A window ended: what a manager holds is spent in the new one, locally.
			for i, m := range ms {
				if b := m.Stranded(); b > 0 {
					// (A prefetch may start below the low watermark; the take itself is local.)
					d, err := m.Take(ctx, "k", limits, 1)
					if err != nil || !d.OK || !d.Local {
						t.Fatalf("step %d: manager %d held %d tokens across the window's end, then got %+v %v", step, i, b, d, err)
					}
					admittedIn[w]++
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
		d, err := ms[rng.IntN(n)].Take(ctx, "k", limits, cost)
		switch {
		case err != nil && !store.down:
			t.Fatal(err)
		case err != nil && !errors.Is(err, errDown):
			t.Fatalf("step %d: %v", step, err)
		case err == nil && d.OK:
			admittedIn[v.now-v.now%lim.Window] += cost
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
		if bound := lim.Requests + int64(n)*maxLease; a > bound {
			t.Fatalf("window %d: admitted %d, over the limit %d plus what %d managers can carry (%d)", w, a, lim.Requests, n, bound)
		}
		total += a
	}
	if total > debited {
		t.Fatalf("admitted %d tokens in all, more than the store debited (%d)", total, debited)
	}
	t.Logf("admitted %d of %d debited; tokens carried across a window's end: %v", total, debited, carried)
}
