package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rlctl/rlctl/internal/redistest"
)

// TestRedisNoScript checks the EVALSHA → EVAL fallback after SCRIPT FLUSH and
// that a request without time uses Redis TIME.
func TestRedisNoScript(t *testing.T) {
	ctx := context.Background()
	c := redistest.Start(t).Client()
	store := NewRedis(c)
	limits := []Limit{{Requests: 10, Window: 1000}}
	before := time.Now().UnixMilli()
	for i := range 3 {
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		r, err := store.Take(ctx, TakeRequest{Key: "k", Limits: limits, Want: 1})
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if r.Granted != 1 || r.Now < before || r.Now > time.Now().UnixMilli() {
			t.Errorf("step %d: got %+v, want 1 granted at Redis time near %d", i, r, before)
		}
		if err := store.Return(ctx, ReturnRequest{Key: "k", Limits: limits, N: 1, TakenAt: r.Now}); err != nil {
			t.Fatalf("step %d: return: %v", i, err)
		}
	}
	ttl, err := c.PTTL(ctx, "k").Result()
	if err != nil || ttl <= 0 || ttl > time.Duration(MinTTL)*time.Millisecond {
		t.Errorf("PTTL = %v, %v; want (0, %dms]", ttl, err, MinTTL)
	}
}

// TestRedisSentinelFailover takes through a Sentinel failover client, kills
// the master and requires takes to succeed again on the promoted replica.
func TestRedisSentinelFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a Sentinel failover")
	}
	ctx := context.Background()
	s := redistest.StartSentinel(t)
	store := NewRedis(s.Client())
	limits := []Limit{{Requests: 100, Window: 1000}}
	if _, err := store.Take(ctx, TakeRequest{Key: "k", Limits: limits, Want: 1}); err != nil {
		t.Fatal(err)
	}
	s.Master().Kill()
	deadline := time.Now().Add(20 * time.Second)
	for {
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		r, err := store.Take(short, TakeRequest{Key: "k", Limits: limits, Want: 1})
		cancel()
		if err == nil && r.Granted == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no take after failover: %+v %v", r, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestLeasePausedRedis: with Redis hung, a request the local balance does not
// cover fails with the context's deadline instead of waiting for Redis.
func TestLeasePausedRedis(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	m, err := NewLeaseManager(LeaseConfig{Store: NewRedis(srv.Client()), Clock: wallClock, StoreClock: true})
	if err != nil {
		t.Fatal(err)
	}
	limits := []Limit{{Requests: 1000, Window: 1000}}
	srv.Pause()
	defer srv.Resume()
	short, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := m.Take(short, "k", limits, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want the deadline exceeded", err)
	}
	if waited := time.Since(start); waited > time.Second {
		t.Errorf("waited %v for a paused Redis", waited)
	}
}
