package engine

import (
	"context"
	"fmt"
	"testing"
)

func TestMemoryExpire(t *testing.T) {
	ctx := context.Background()
	m := NewMemory(ClockFunc(func() int64 { return 5000 }))
	limits := []Limit{{Requests: 10, Window: second}} // TTL: MinTTL
	for i, key := range []string{"a", "b"} {
		if _, err := m.Take(ctx, TakeRequest{Key: key, Limits: limits, Want: 1, Now: 1000 + int64(i)*MinTTL}); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := m.Take(ctx, TakeRequest{Key: "c", Limits: limits, Want: 1}); err != nil || r.Now != 5000 {
		t.Fatalf("take on the store's clock: %+v %v", r, err)
	}
	steps := []struct {
		now     int64
		dropped int
	}{
		{now: 1000 + MinTTL - 1, dropped: 0},
		{now: 1000 + MinTTL, dropped: 1},   // a
		{now: 5000 + MinTTL, dropped: 1},   // c
		{now: 1000 + 2*MinTTL, dropped: 1}, // b
		{now: 1000 + 9*MinTTL, dropped: 0},
	}
	for i, st := range steps {
		if got := m.Expire(st.now); got != st.dropped {
			t.Errorf("step %d: Expire(%d) dropped %d, want %d", i, st.now, got, st.dropped)
		}
	}
	if f := m.Fields("a"); f != nil {
		t.Errorf("expired key still has fields %v", f)
	}
}

// TestLocalMemoryBounded: the enforcer's fallback buckets hold at most about their bound of
// keys, evicting others for new ones, so that a flood of keys while the store is away does
// not grow them without end (200,000 keys held 200,000 buckets, 45 MB). A bucket that stays
// is decided as before.
func TestLocalMemoryBounded(t *testing.T) {
	clock := ClockFunc(func() int64 { return 1000 })
	m := NewLocalMemory(clock, 1000)
	limits := []Limit{{Requests: 1000, Window: 86_400_000}} // a day: two days' TTL
	ctx := context.Background()
	for i := range 20_000 {
		if r, err := m.Take(ctx, TakeRequest{Key: fmt.Sprintf("k%d", i), Limits: limits, Want: 1}); err != nil || r.Granted != 1 {
			t.Fatalf("take %d: %+v, %v", i, r, err)
		}
	}
	held := 0
	for i := range m.shards {
		held += len(m.shards[i].m)
	}
	if held > 1000+memShards || held < 900 {
		t.Errorf("held %d keys, want about the bound of 1000", held)
	}
	listed := 0
	for i := range m.shards {
		listed += len(m.shards[i].expiries)
	}
	if listed > 3*held+64*memShards {
		t.Errorf("%d expiry times listed for %d keys: the evicted keys' times grow the list", listed, held)
	}
	if got := m.Evicted(); int(got)+held != 20_000 {
		t.Errorf("evicted %d and held %d, want 20000 in all", got, held)
	}
	if NewLocalMemory(clock, 0).shards[0].maxKeys != 0 {
		t.Error("maxKeys 0 bounds the keys")
	}
}
