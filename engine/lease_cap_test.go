package engine

import (
	"context"
	"fmt"
	"testing"
)

// TestKeyCap floods two managers sharing a KeyCap with distinct keys and checks that they
// track no more than the cap, that every eviction gave its unspent tokens back (each key's
// store state plus what its lease holds is its capacity less the one token spent), and that an
// evicted key comes back with a store call.
func TestKeyCap(t *testing.T) {
	ctx := context.Background()
	limits := []Limit{{Requests: 100, Window: 3_600_000}} // refills 0.03 tokens in the test's second
	store := NewMemory(nil)
	v := &virtual{now: 1_000_000, latency: 1}
	keys := NewKeyCap(50)
	var ms []*LeaseManager
	for range 2 {
		ms = append(ms, newTestManager(t, store, v, LeaseConfig{MinLease: 5, MaxLease: 5, Keys: keys}))
	}
	const n = 1000
	for i := range n {
		v.advance(v.now + 1)
		d, err := ms[i%2].Take(ctx, fmt.Sprint("k", i), limits, 1)
		if err != nil || !d.OK {
			t.Fatalf("key %d: got %+v, %v", i, d, err)
		}
		if got := keys.Tracked(); got > keys.Max() {
			t.Fatalf("key %d: tracking %d keys, over the cap of %d", i, got, keys.Max())
		}
	}
	v.drain() // the returns of evicted leases
	if got, want := keys.Evicted(), int64(n-50); got != want {
		t.Errorf("evicted: got %d, want %d", got, want)
	}
	if got := int64(ms[0].Keys() + ms[1].Keys()); got != keys.Tracked() {
		t.Errorf("the managers hold %d keys, the cap counts %d", got, keys.Tracked())
	}
	for i := range n {
		key := fmt.Sprint("k", i)
		held := int64(0)
		if l := ms[i%2].find(key); l != nil {
			held = l.balance.Load()
		}
		res, err := store.Take(ctx, TakeRequest{Key: key, Limits: limits, Want: 100, Min: 1, Now: v.now})
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Granted + held; got != 99 {
			t.Errorf("key %s: the store holds %d and the lease %d, want 99 in all (a token lost)", key, res.Granted, held)
		}
	}
	// An evicted key is tracked again, with a store call.
	before := ms[0].Stats().Fetches
	if _, err := ms[0].Take(ctx, "k0", limits, 1); err != nil {
		t.Fatal(err)
	}
	if got := ms[0].Stats().Fetches; got != before+1 {
		t.Errorf("an evicted key's take: got %d store calls, want 1", got-before)
	}
}
