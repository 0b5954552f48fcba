package enforcer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/internal/redistest"
)

// TestRedisSentinel runs the enforcer on a Redis behind Sentinel, kills the master and requires
// the enforcer to keep answering and to use the promoted replica once Sentinel fails over.
func TestRedisSentinel(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a Sentinel failover")
	}
	s := redistest.StartSentinel(t)
	in := spawn(t, testModel(), func(c *Config) {
		c.Store = "redis"
		c.SentinelMaster = redistest.MasterName
		c.SentinelAddrs = []string{s.Addr()}
		c.StoreTimeout = 100 * time.Millisecond
		c.BreakerCooldown = 100 * time.Millisecond
	})
	for i, want := range []any{ok, ok, ok, over} {
		if got := in.ask(t, "edge", []string{"stage=enforce", "user=u1"}).OverallCode; got != want {
			t.Fatalf("request %d: got %v, want %v", i, got, want)
		}
	}
	ctx := context.Background()
	if n, err := s.Master().Client().DBSize(ctx).Result(); err != nil || n == 0 {
		t.Fatalf("master keys: got %d (%v), want the enforcer's", n, err)
	}

	s.Master().Kill()
	replica := s.Replica().Client()
	start := time.Now()
	for i := 0; ; i++ {
		// A fresh key each time needs the store; a fail-open rule admits while it is away.
		user := fmt.Sprintf("f%d", i)
		resp, err := in.client.ShouldRateLimit(ctx, request("edge", []string{"stage=big", "user=" + user}))
		if err != nil {
			t.Fatalf("request %d during failover: %v", i, err)
		}
		if resp.OverallCode != ok {
			t.Fatalf("request %d during failover: got %v, want OK from a fail-open rule", i, resp.OverallCode)
		}
		key := engine.Key("edge", "big", "stage", "big", "user", user)
		if n, _ := replica.Exists(ctx, key).Result(); n == 1 {
			t.Logf("the promoted replica holds %s after %v", key, time.Since(start).Round(time.Millisecond))
			break
		}
		if time.Since(start) > 30*time.Second {
			n, _ := replica.DBSize(ctx).Result()
			t.Fatalf("no take reached the promoted replica in 30s (it holds %d keys, none %s)", n, key)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRedisSentinelPassword: Sentinels that require a password are reached with
// --redis-sentinel-password; before it, the Sentinel client sent none, every call failed, and
// the breaker held a fail-closed rule at deny.
func TestRedisSentinelPassword(t *testing.T) {
	s := redistest.StartSentinel(t)
	if err := s.Sentinel().Client().Do(context.Background(), "ACL", "SETUSER", "default", "resetpass", ">s3cret").Err(); err != nil {
		t.Skipf("this redis-server's Sentinel takes no ACL: %v", err)
	}
	in := spawn(t, testModel(), func(c *Config) {
		c.Store = "redis"
		c.SentinelMaster = redistest.MasterName
		c.SentinelAddrs = []string{s.Addr()}
		c.SentinelPassword = "s3cret"
		c.StoreTimeout = 100 * time.Millisecond
	})
	for i, want := range []any{ok, ok, ok, over} {
		if got := in.ask(t, "edge", []string{"stage=enforce", "user=u1"}).OverallCode; got != want {
			t.Fatalf("request %d: got %v, want %v", i, got, want)
		}
	}
}
