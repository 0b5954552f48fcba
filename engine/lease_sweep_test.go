package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// checkedSweep runs m.Sweep and then checks that it left nothing a walk over
// every lease would have acted on: no expired lease still holds tokens, and
// every lease that could be forgotten was, except those whose tokens this
// Sweep just returned (a walk forgets them at the next Sweep too). Sweep
// visits only the leases its heap says are due; this is what makes that
// the same as visiting all of them.
func checkedSweep(t *testing.T, m *LeaseManager) {
	t.Helper()
	drained := map[*lease]int64{}
	m.each(func(l *lease) { drained[l] = l.drained })
	if err := m.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	now := m.cfg.Clock.Now()
	m.each(func(l *lease) {
		switch {
		case now >= l.expires && l.balance.Load() > 0:
			t.Fatalf("after Sweep at %d: lease %q expired at %d still holds %d tokens", now, l.key, l.expires, l.balance.Load())
		case now >= l.expires+m.cfg.TTL && now >= l.blocked && l.pending == 0 && !l.inflight.Load() &&
			l.balance.Load() == 0 && l.drained == drained[l]:
			t.Fatalf("after Sweep at %d: idle lease %q (expired %d, blocked until %d, due %d) not forgotten", now, l.key, l.expires, l.blocked, l.dueAt)
		}
	})
	if got, want := m.Stranded(), balances(m); got != want {
		t.Fatalf("after Sweep at %d: Stranded %d, leases hold %d", now, got, want)
	}
	live := 0
	for i, l := range m.fresh {
		if l != nil {
			if int(l.freshAt) != i+1 || l.dueAt != notDue {
				t.Fatalf("after Sweep at %d: lease %q at %d of the fresh list says %d, due %d", now, l.key, i, l.freshAt-1, l.dueAt)
			}
			live++
		}
	}
	for _, e := range m.due {
		if e.live() {
			live++
			if e.at <= now && e.l.drained == drained[e.l] { // drained now: due at the next Sweep
				t.Fatalf("after Sweep at %d: lease %q still due at %d", now, e.l.key, e.at)
			}
		}
	}
	if want := m.count(); live != want {
		t.Fatalf("after Sweep: %d leases scheduled, %d live", live, want)
	}
}

// balances is the sum of the live leases' balances, which Stranded of a
// single-goroutine manager keeps as it changes.
func balances(m *LeaseManager) int64 {
	var sum int64
	m.each(func(l *lease) { sum += l.balance.Load() })
	return sum
}

// count is the number of live leases.
func (m *LeaseManager) count() int {
	n := 0
	m.each(func(*lease) { n++ })
	return n
}

// TestLeaseSingleGoroutineMatches runs one random schedule over many keys
// through a concurrent fleet on NewMemory and a single-goroutine fleet on
// NewSingleGoroutineMemory, in lockstep, and requires identical decisions,
// counters and stranded tokens throughout.
func TestLeaseSingleGoroutineMatches(t *testing.T) {
	for seed := range uint64(6) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { leaseLockstep(t, seed) })
	}
}

func leaseLockstep(t *testing.T, seed uint64) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 7))
	const gateways, keys = 3, 40
	limits := make([][]Limit, keys)
	for i := range limits {
		limits[i] = []Limit{{Requests: 20 + rng.Int64N(500), Window: second, Burst: 1 + rng.Int64N(200)}}
		if rng.IntN(3) == 0 {
			limits[i] = append(limits[i], Limit{Algorithm: Algorithm(1 + rng.IntN(2)), Requests: 100 + rng.Int64N(5000), Window: 60 * second})
		}
	}
	latency := rng.Int64N(4)
	type fleet struct {
		v  *virtual
		ms []*LeaseManager
	}
	fleets := make([]fleet, 2)
	for f, single := range []bool{false, true} {
		v := &virtual{now: 1_000_000, latency: latency}
		var store Store = NewMemory(nil)
		if single {
			store = NewSingleGoroutineMemory(nil)
		}
		cfg := LeaseConfig{MinLease: 1 + rng.Int64N(5), MaxLease: 5 + rng.Int64N(50), Lookahead: 1 + rng.Int64N(500),
			TTL: 1 + rng.Int64N(3000), LowWater: rng.Int64N(8), SingleGoroutine: single}
		if f == 1 {
			cfg = fleets[0].ms[0].cfg // the same settings
			cfg.SingleGoroutine = true
		}
		fleets[f].v = v
		for range gateways {
			fleets[f].ms = append(fleets[f].ms, newTestManager(t, store, v, cfg))
		}
	}
	for step := range 30_000 {
		gap := rng.Int64N(20)
		sweep := rng.IntN(40) == 0
		g, k, cost := rng.IntN(gateways), rng.IntN(keys), 1+rng.Int64N(3)
		var ds [2]Decision
		var stranded [2]int64
		for f := range fleets {
			fl := &fleets[f]
			fl.v.advance(fl.v.now + gap)
			if sweep {
				for _, m := range fl.ms {
					checkedSweep(t, m)
				}
			}
			d, err := fl.ms[g].Take(ctx, Key("k", fmt.Sprint(k)), limits[k], cost)
			if err != nil {
				t.Fatal(err)
			}
			ds[f] = d
			for _, m := range fl.ms {
				stranded[f] += m.Stranded()
			}
		}
		if ds[0] != ds[1] || stranded[0] != stranded[1] {
			t.Fatalf("step %d: concurrent %+v stranded %d, single-goroutine %+v stranded %d", step, ds[0], stranded[0], ds[1], stranded[1])
		}
	}
	for g := range gateways {
		if a, b := fleets[0].ms[g].Stats(), fleets[1].ms[g].Stats(); a != b {
			t.Errorf("gateway %d: concurrent %+v, single-goroutine %+v", g, a, b)
		}
	}
}

// TestLeaseSweepVisitsOnlyDue checks that Sweep's work follows the leases
// that expire: with many idle keys leased long ago and a few fresh ones, a
// Sweep before anything expires visits nothing.
func TestLeaseSweepVisitsOnlyDue(t *testing.T) {
	ctx := context.Background()
	limits := []Limit{{Requests: 1000, Window: second}}
	v := &virtual{now: 1000}
	m := newTestManager(t, NewMemory(nil), v, LeaseConfig{MinLease: 5, MaxLease: 5, TTL: 10_000, SingleGoroutine: true})
	for i := range 1000 {
		if _, err := m.Take(ctx, Key("k", fmt.Sprint(i)), limits, 1); err != nil {
			t.Fatal(err)
		}
	}
	checkedSweep(t, m) // new leases were scheduled at their expiry by their first store reply
	v.advance(5000)
	if err := m.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got := m.due[0].at; got != 11_000 {
		t.Errorf("earliest due at %d, want the expiry 11000", got)
	}
	v.advance(11_000)
	checkedSweep(t, m)
	if got, want := m.Stats().Returned, int64(1000*4); got != want {
		t.Errorf("returned %d tokens at expiry, want %d", got, want)
	}
	v.advance(21_000)
	checkedSweep(t, m)
	if got := m.count(); got != 0 {
		t.Errorf("%d leases left after two TTLs idle, want 0", got)
	}
}

// TestManagerLayout holds a LeaseManager to keeping the 56 bytes after seen, which every
// hit reads, for fields that a concurrent manager never writes.
func TestManagerLayout(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the layout is for 64-bit platforms")
	}
	var m LeaseManager
	if got, want := unsafe.Offsetof(m.dueMu)-unsafe.Offsetof(m.seen), uintptr(64); got != want {
		t.Errorf("dueMu %d bytes after seen, want %d", got, want)
	}
}

// TestLeaseLayout holds a lease to the layout its fields are ordered for: in the 320-byte size
// class (above the 288-byte one), whose objects are cache-line aligned, with what a hit and a
// visit from Sweep read in the first line and what a return reads in the second.
func TestLeaseLayout(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the layout is for 64-bit platforms")
	}
	var l lease
	if size := unsafe.Sizeof(l); size <= 288 || size > 320 {
		t.Errorf("lease size: got %d, want 289 to 320", size)
	}
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"end of line 1", unsafe.Offsetof(l.gen) + unsafe.Sizeof(l.gen), 64},
		{"key", unsafe.Offsetof(l.key), 64},
		{"end of line 2", unsafe.Offsetof(l.hint) + unsafe.Sizeof(l.hint), 128},
	} {
		if c.got != c.want {
			t.Errorf("lease %s: got %d, want %d", c.name, c.got, c.want)
		}
	}
}
