package engine

import (
	"context"
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
