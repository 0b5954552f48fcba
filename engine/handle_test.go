package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestLeaseHandleMatchesKeyed runs the same random requests through keyed Takes and through
// handles, on concurrent and single-goroutine managers and on a manager and an ideal Memory of
// handles only (which keep no index of their keys), and with cells on a store and an ideal Memory
// of handles only, with Sweep forgetting idle leases and
// Expire dropping store state between them: every decision, every store state and every counter
// must be the same, and a handle is live exactly while its key has a lease or state.
func TestLeaseHandleMatchesKeyed(t *testing.T) {
	for _, mode := range []string{"concurrent", "single", "handles-only", "cells"} {
		t.Run(mode, func(t *testing.T) {
			// cells: a manager of handles only on a store of handles only, which finds the keys'
			// state in their cells (TakeCell), and the ideal engine's in cells too.
			single, cells := mode != "concurrent", mode == "cells"
			only := mode == "handles-only" || cells
			ctx := context.Background()
			limits := [][]Limit{
				{{Requests: 50, Window: 1000, Burst: 80}},
				{{Requests: 20, Window: 1000}, {Algorithm: SlidingWindow, Requests: 300, Window: 60_000}},
				{{Algorithm: FixedWindow, Requests: 30, Window: 2000}},
			}
			var now int64 = 1_000_000
			clock := ClockFunc(func() int64 { return now })
			newMem := NewMemory
			if single {
				newMem = NewSingleGoroutineMemory
			}
			keyedStore, handleStore := newMem(clock), newMem(clock)
			if cells {
				handleStore = NewHandlesOnlyMemory(clock)
			}
			cfg := LeaseConfig{Clock: clock, MinLease: 2, MaxLease: 40, TTL: 500, SingleGoroutine: single}
			cfg.Store = keyedStore
			keyed, err := NewLeaseManager(cfg)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Store, cfg.HandlesOnly = handleStore, only
			handled, err := NewLeaseManager(cfg)
			if err != nil {
				t.Fatal(err)
			}
			const keys = 12
			handles := make([]LeaseHandle, keys)
			ideal := make([]MemoryHandle, keys)
			idealKeyed, idealHandled := newMem(clock), newMem(clock)
			if only {
				idealHandled = NewHandlesOnlyMemory(clock)
			}
			key := func(k int) string { return fmt.Sprintf("k%d", k) }
			refs, storeCells, idealCells := make([]LeaseRef, keys), make([]MemoryCell, keys), make([]MemoryCell, keys)
			for k := range handles {
				handles[k] = handled.Handle(key(k), limits[k%len(limits)])
				ideal[k] = idealHandled.Handle(key(k), limits[k%len(limits)])
			}
			rng := rand.New(rand.NewPCG(7, 9))
			for step := 0; step < 40_000; step++ {
				switch r := rng.IntN(1000); {
				case r < 5:
					now += rng.Int64N(200_000) // long idle: leases are forgotten, state expires
				case r < 300:
					now += rng.Int64N(30)
				}
				if step%97 == 0 {
					if err1, err2 := keyed.Sweep(ctx), handled.Sweep(ctx); err1 != nil || err2 != nil {
						t.Fatalf("sweep: %v, %v", err1, err2)
					}
				}
				if step%501 == 0 {
					for _, m := range []*Memory{keyedStore, handleStore, idealKeyed, idealHandled} {
						m.Expire(now)
					}
				}
				k := rng.IntN(keys)
				cost := 1 + rng.Int64N(3)
				lim := limits[k%len(limits)]
				want, err1 := keyed.Take(ctx, key(k), lim, cost)
				var got Decision
				var err2 error
				if cells {
					got, err2 = handled.TakeCell(ctx, &refs[k], &storeCells[k], key(k), lim, cost)
				} else {
					got, err2 = handles[k].Take(ctx, cost)
				}
				if got != want || (err1 == nil) != (err2 == nil) {
					t.Fatalf("step %d key %d cost %d: handle %+v %v, keyed %+v %v", step, k, cost, got, err2, want, err1)
				}
				wantR, err1 := idealKeyed.Take(ctx, TakeRequest{Key: key(k), Limits: lim, Want: cost, Min: cost, Now: now})
				var gotR Result
				if cells {
					gotR, err2 = idealHandled.TakeCell(&idealCells[k], key(k), lim, cost, cost, now)
				} else {
					gotR, err2 = ideal[k].Take(cost, cost, now)
				}
				if gotR != wantR || (err1 == nil) != (err2 == nil) {
					t.Fatalf("step %d key %d: memory handle %+v %v, keyed %+v %v", step, k, gotR, err2, wantR, err1)
				}
				if step%89 == 0 {
					for k := range keys {
						leaseLive, idealLive := handles[k].Live(), ideal[k].Live()
						if cells {
							leaseLive, idealLive = handled.LiveRef(&refs[k]), idealHandled.LiveCell(&idealCells[k])
							if got, want := handleStore.LiveCell(&storeCells[k]), keyedStore.Fields(key(k)) != nil; got != want {
								t.Fatalf("step %d key %d: store cell live %v, keyed state %v", step, k, got, want)
							}
						}
						if got, want := leaseLive, keyed.find(key(k)) != nil; got != want {
							t.Fatalf("step %d key %d: lease handle live %v, keyed lease %v", step, k, got, want)
						}
						if got, want := idealLive, idealKeyed.Fields(key(k)) != nil; got != want {
							t.Fatalf("step %d key %d: memory handle live %v, keyed state %v", step, k, got, want)
						}
					}
				}
			}
			for k := 0; k < keys; k++ {
				if got, want := handleStore.Fields(key(k)), keyedStore.Fields(key(k)); !cells && !reflect.DeepEqual(got, want) {
					t.Errorf("key %d: store state %v with handles, %v keyed", k, got, want)
				}
				if only {
					continue // a Memory of handles only has no Fields
				}
				if got, want := idealHandled.Fields(key(k)), idealKeyed.Fields(key(k)); !reflect.DeepEqual(got, want) {
					t.Errorf("key %d: memory state %v with handles, %v keyed", k, got, want)
				}
			}
			if got, want := handled.Stats(), keyed.Stats(); got != want {
				t.Errorf("stats: got %+v with handles, want %+v", got, want)
			}
			if got, want := handled.Stranded(), keyed.Stranded(); got != want || got != balances(keyed) {
				t.Errorf("stranded: got %d with handles, want %d (leases hold %d)", got, want, balances(keyed))
			}
			if got, want := handled.Keys(), keyed.Keys(); got != want {
				t.Errorf("keys: got %d with handles, want %d", got, want)
			}
			if got, want := idealHandled.Len(), idealKeyed.Len(); got != want {
				t.Errorf("memory keys: got %d with handles, want %d", got, want)
			}
			if got, want := handleStore.Len(), keyedStore.Len(); got != want {
				t.Errorf("store keys: got %d with handles, want %d", got, want)
			}
			// Close returns every lease's balance: the manager of handles only finds its
			// leases without an index.
			if err1, err2 := keyed.Close(ctx), handled.Close(ctx); err1 != nil || err2 != nil {
				t.Fatalf("close: %v, %v", err1, err2)
			}
			for k := 0; k < keys; k++ {
				if got, want := handleStore.Fields(key(k)), keyedStore.Fields(key(k)); !cells && !reflect.DeepEqual(got, want) {
					t.Errorf("key %d: store state after Close %v with handles, %v keyed", k, got, want)
				}
			}
		})
	}
}

// TestHandlesOnlyRefusesKeys checks that a manager and a Memory of handles only refuse keyed
// calls, which they could not answer right, and that a manager of handles only must be a
// single-goroutine one.
func TestHandlesOnlyRefusesKeys(t *testing.T) {
	ctx := context.Background()
	limits := []Limit{{Requests: 10, Window: 1000}}
	clock := ClockFunc(func() int64 { return 1000 })
	mem := NewHandlesOnlyMemory(clock)
	if _, err := mem.Take(ctx, TakeRequest{Key: "k", Limits: limits, Want: 1, Min: 1}); !errors.Is(err, ErrHandlesOnly) {
		t.Errorf("Memory.Take: got %v, want ErrHandlesOnly", err)
	}
	if _, err := mem.TakeBytes(ctx, []byte("k"), TakeRequest{Limits: limits, Want: 1, Min: 1}); !errors.Is(err, ErrHandlesOnly) {
		t.Errorf("Memory.TakeBytes: got %v, want ErrHandlesOnly", err)
	}
	if err := mem.Return(ctx, ReturnRequest{Key: "k", Limits: limits, N: 1}); !errors.Is(err, ErrHandlesOnly) {
		t.Errorf("Memory.Return: got %v, want ErrHandlesOnly", err)
	}
	cfg := LeaseConfig{Store: NewSingleGoroutineMemory(clock), Clock: clock, HandlesOnly: true}
	if _, err := NewLeaseManager(cfg); err == nil {
		t.Error("NewLeaseManager: HandlesOnly without SingleGoroutine was accepted")
	}
	cfg.SingleGoroutine = true
	m, err := NewLeaseManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Take(ctx, "k", limits, 1); !errors.Is(err, ErrHandlesOnly) {
		t.Errorf("LeaseManager.Take: got %v, want ErrHandlesOnly", err)
	}
	if _, err := m.TakeBytes(ctx, []byte("k"), limits, 1); !errors.Is(err, ErrHandlesOnly) {
		t.Errorf("LeaseManager.TakeBytes: got %v, want ErrHandlesOnly", err)
	}
	h := m.Handle("k", limits)
	if d, err := h.Take(ctx, 1); err != nil || !d.OK {
		t.Errorf("handle: got %+v, %v", d, err)
	}
	if !h.Live() || m.Keys() != 1 {
		t.Errorf("after a take: live %v, keys %d; want true, 1", h.Live(), m.Keys())
	}
}

// TestMemoryHandleErrors checks that a handle reports bad limits and amounts as Take does.
func TestMemoryHandleErrors(t *testing.T) {
	m := NewSingleGoroutineMemory(nil)
	for _, tc := range []struct {
		limits          []Limit
		want, need, now int64
	}{
		{nil, 1, 1, 5},
		{[]Limit{{Requests: 0, Window: 1}}, 1, 1, 5},
		{[]Limit{{Requests: 1, Window: 1}}, 0, 0, 5},
		{[]Limit{{Requests: 1, Window: 1}}, 1, 2, 5},
		{[]Limit{{Requests: 1, Window: 1}}, 1, 1, 0}, // no clock
	} {
		_, want := m.Take(context.Background(), TakeRequest{Key: "k", Limits: tc.limits, Want: tc.want, Min: tc.need, Now: tc.now})
		h := m.Handle("k", tc.limits)
		_, got := h.Take(tc.want, tc.need, tc.now)
		if want == nil || got == nil || got.Error() != want.Error() {
			t.Errorf("%+v: got %v, want %v", tc, got, want)
		}
	}
}

// A handle whose lease Sweep forgot finds the key's lease again: on a single-goroutine
// manager its old lease itself, made fresh in a new life, or the lease a keyed Take made the
// key meanwhile; the store state behind the lease's hint is found again after Expire dropped
// it.
func TestLeaseHandleRevives(t *testing.T) {
	ctx := context.Background()
	v := &virtual{now: 1000}
	store := NewSingleGoroutineMemory(v)
	m := newTestManager(t, store, v, LeaseConfig{MinLease: 2, MaxLease: 10, TTL: 100, SingleGoroutine: true})
	limits := []Limit{{Requests: 10, Window: 1000}}
	h := m.Handle("k", limits)
	// forget spends from the lease, lets it idle until Sweep forgets it and the store state
	// expires, and returns the lease it had.
	forget := func() *lease {
		t.Helper()
		if _, err := h.Take(ctx, 1); err != nil {
			t.Fatal(err)
		}
		l := h.ref.l
		// Sweep forgets an idle lease two TTLs after its last fetch, or once it is no longer
		// held, when the fetch left the store less than a batch.
		for i := 0; i < 10 && !l.dead; i++ {
			v.advance(v.now + 100)
			if err := m.Sweep(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if !l.dead || m.local["k"] != nil {
			t.Fatalf("lease not forgotten: dead %v, live %v", l.dead, m.local["k"])
		}
		v.advance(v.now + 10*MinTTL)
		if store.Expire(v.now) != 1 {
			t.Fatal("store state not expired")
		}
		return l
	}
	for i, keyed := range []bool{false, true, false} { // a keyed Take comes first
		old := forget()
		oldGen := old.gen
		if keyed {
			if _, err := m.Take(ctx, "k", limits, 1); err != nil {
				t.Fatal(err)
			}
		}
		d, err := h.Take(ctx, 1)
		if err != nil || !d.OK {
			t.Fatalf("step %d: got %+v, %v", i, d, err)
		}
		if h.ref.l != old && !keyed || h.ref.l.gen == oldGen || h.ref.l != m.local["k"] || h.ref.l.dead || h.ref.gen != h.ref.l.gen {
			t.Errorf("step %d: old lease reused %v, in a new life %v (live %v, dead %v, handle's life %v)",
				i, h.ref.l == old, h.ref.l.gen != oldGen, h.ref.l == m.local["k"], h.ref.l.dead, h.ref.gen == h.ref.l.gen)
		}
		if !keyed {
			// The state was fresh again: a full bucket of 10 gave a lease of MinLease 2, and
			// a token is 100 units.
			if got, want := store.Fields("k")["tok:b1000"], int64(8*100); got != want {
				t.Errorf("step %d: store holds %d units, want %d", i, got, want)
			}
		}
	}
	if got, want := m.Stranded(), balances(m); got != want {
		t.Errorf("stranded: got %d, leases hold %d", got, want)
	}
}

// A lease that Sweep forgot is reused for a new key once it has been spare for spareAge,
// not before; a handle that held it for its old key finds its own key's lease instead of
// spending the new key's tokens.
func TestLeaseHandleSpareReused(t *testing.T) {
	ctx := context.Background()
	v := &virtual{now: 1000}
	m := newTestManager(t, NewSingleGoroutineMemory(v), v, LeaseConfig{MinLease: 5, MaxLease: 5, TTL: 100, SingleGoroutine: true})
	limits := []Limit{{Requests: 1000, Window: 1000}}
	ha := m.Handle("a", limits)
	if _, err := ha.Take(ctx, 1); err != nil {
		t.Fatal(err)
	}
	old := ha.ref.l
	sweepUntilSpare(t, m, v, old)
	if _, err := m.Take(ctx, "young", limits, 1); err != nil {
		t.Fatal(err)
	}
	if m.local["young"] == old || !old.spare {
		t.Fatal("a lease forgotten just now was reused")
	}
	v.advance(v.now + spareAge)
	if err := m.Sweep(ctx); err != nil { // the manager reads the clock
		t.Fatal(err)
	}
	if _, err := m.Take(ctx, "b", limits, 1); err != nil {
		t.Fatal(err)
	}
	b := m.local["b"]
	if b != old || b.key != "b" || b.balance.Load() != 4 {
		t.Fatalf("key b's lease: reused %v, key %q, balance %d; want the spare, b, 4", b == old, b.key, b.balance.Load())
	}
	d, err := ha.Take(ctx, 1)
	if err != nil || !d.OK || d.Local {
		t.Fatalf("handle on a: got %+v, %v; want a store call for a's new lease", d, err)
	}
	if ha.ref.l == b || ha.ref.l != m.local["a"] || b.balance.Load() != 4 {
		t.Errorf("handle on a holds b's lease %v, a's %v; b's balance %d, want 4", ha.ref.l == b, ha.ref.l == m.local["a"], b.balance.Load())
	}
}

// sweepUntilSpare advances v by 100 ms and sweeps m, up to 10 times, until Sweep has
// forgotten l, and fails t unless m then keeps l as a spare.
func sweepUntilSpare(t *testing.T, m *LeaseManager, v *virtual, l *lease) {
	t.Helper()
	for i := 0; i < 10 && !l.dead; i++ {
		v.advance(v.now + 100)
		if err := m.Sweep(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if !l.dead || !l.spare {
		t.Fatalf("lease not kept spare: dead %v, spare %v", l.dead, l.spare)
	}
}

// A manager of handles only reuses a lease that Sweep forgot for a new key at once, whatever
// its age (spareAge): its caller keeps each key's state. The key that comes back gets another
// lease, and neither key spends the other's tokens.
func TestLeaseHandlesOnlyReusesYoungSpares(t *testing.T) {
	ctx := context.Background()
	v := &virtual{now: 1000}
	m := newTestManager(t, NewSingleGoroutineMemory(v), v, LeaseConfig{MinLease: 5, MaxLease: 5, TTL: 100, SingleGoroutine: true, HandlesOnly: true})
	limits := []Limit{{Requests: 1000, Window: 1000}}
	var a, b LeaseRef
	if _, err := m.TakeRef(ctx, &a, "a", limits, 1); err != nil {
		t.Fatal(err)
	}
	old := a.l
	sweepUntilSpare(t, m, v, old)
	if d, err := m.TakeRef(ctx, &b, "b", limits, 1); err != nil || !d.OK {
		t.Fatalf("b: %+v %v", d, err)
	}
	if b.l != old || old.key != "b" || old.balance.Load() != 4 {
		t.Fatalf("key b's lease: reused %v, key %q, balance %d; want the spare forgotten just now, b, 4", b.l == old, old.key, old.balance.Load())
	}
	if d, err := m.TakeRef(ctx, &a, "a", limits, 1); err != nil || !d.OK || d.Local {
		t.Fatalf("a again: got %+v, %v; want a store call for a's new lease", d, err)
	}
	if a.l == old || a.l.key != "a" || old.balance.Load() != 4 {
		t.Errorf("a's reference holds b's lease %v, key %q; b's balance %d, want 4", a.l == old, a.l.key, old.balance.Load())
	}
}

// A key that Sweep forgets and a handle revives, again and again, leaves the list of spares
// no longer than a bound: the entries its revivals make stale are dropped.
func TestLeaseSparesStayBounded(t *testing.T) {
	ctx := context.Background()
	v := &virtual{now: 1000}
	m := newTestManager(t, NewSingleGoroutineMemory(v), v, LeaseConfig{MinLease: 5, MaxLease: 5, TTL: 100, SingleGoroutine: true})
	h := m.Handle("k", []Limit{{Requests: 1000, Window: 1000}})
	for i := range 1000 {
		if _, err := h.Take(ctx, 1); err != nil {
			t.Fatal(err)
		}
		for l := h.ref.l; !l.dead; {
			v.advance(v.now + 100)
			if err := m.Sweep(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if n := len(m.spares) - m.spareAt; n > 2*(1+maxSpares)+1 || m.nSpares != 1 {
			t.Fatalf("cycle %d: %d entries for %d spares", i, n, m.nSpares)
		}
	}
}

// After a flood of keys that Sweep forgot, a manager keeps no more spares than its few live
// leases call for.
func TestLeaseSparesTrimmed(t *testing.T) {
	ctx := context.Background()
	v := &virtual{now: 1000}
	m := newTestManager(t, NewSingleGoroutineMemory(v), v, LeaseConfig{MinLease: 5, MaxLease: 5, TTL: 100, SingleGoroutine: true})
	limits := []Limit{{Requests: 1000, Window: 1000}}
	for i := range 10_000 {
		if _, err := m.Take(ctx, fmt.Sprint("flood-", i), limits, 1); err != nil {
			t.Fatal(err)
		}
	}
	for range 5 {
		v.advance(v.now + 100)
		if err := m.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := m.Keys(); n != 0 {
		t.Fatalf("%d leases left", n)
	}
	if m.nSpares > maxSpares || len(m.spares)-m.spareAt > maxSpares {
		t.Errorf("%d spares in %d entries kept, want at most %d", m.nSpares, len(m.spares)-m.spareAt, maxSpares)
	}
}
