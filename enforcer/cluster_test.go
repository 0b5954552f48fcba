package enforcer

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/internal/policyfixture"
	"github.com/rlctl/rlctl/internal/redistest"
	"github.com/rlctl/rlctl/policy"
)

// TestRedisCluster runs the enforcer on a real 3-master Redis Cluster: keys of many users land
// on several masters and each is limited exactly, and Close gives unspent leased tokens back.
func TestRedisCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	// slow leases 100 tokens at a time from 1,000 an hour (one token per 3.6 s), so that what
	// the store holds after Close tells whether the 99 unspent tokens came back.
	slow := testRule("slow", 1000, policy.Stage{Name: policy.StageEnforce}, policy.FailClosed)
	slow.Limits[0].WindowMs = 3_600_000
	slow.Lease = policyfixture.Lease(policyfixture.Bounds(100, 100), policyfixture.TTL(60_000), policyfixture.UnsetWatermark())
	m := testModel()
	m.Domains[0].Rules = append(m.Domains[0].Rules, slow)
	in := spawn(t, m, func(c *Config) {
		c.Store, c.ClusterAddrs = "redis", cl.Addrs()
		// The machine is shared; a generous timeout keeps a slow scheduler from opening the
		// breaker, which is not what this test is about.
		c.StoreTimeout = 200 * time.Millisecond
	})

	// "enforce" is 3 a minute with leases of one token: every request is a store take.
	want := []string{"OK", "OK", "OK", "OVER_LIMIT"}
	for u := range 12 {
		user := fmt.Sprintf("user=c%d", u)
		for i, w := range want {
			resp := in.ask(t, "edge", []string{"stage=enforce", user})
			if got := resp.OverallCode.String(); got != w {
				t.Errorf("%s: request %d: got %s, want %s", user, i, got, w)
			}
		}
	}
	ctx := context.Background()
	var masters atomic.Int32 // ForEachMaster calls concurrently
	if err := cl.Client().ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		n, err := c.DBSize(ctx).Result()
		if n > 0 {
			masters.Add(1)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got := masters.Load(); got < 2 {
		t.Errorf("masters holding keys: got %d, want at least 2 of 3", got)
	}

	resp := in.ask(t, "edge", []string{"stage=slow", "user=lease"})
	if got, want := resp.Statuses[0].LimitRemaining, uint32(999); got != want {
		t.Errorf("slow: remaining after one request: got %d, want %d (900 in the store, 99 leased)", got, want)
	}
	if err := in.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	limits, err := engine.RuleLimits(slow)
	if err != nil {
		t.Fatal(err)
	}
	key := string(engine.AppendRuleKey(nil, "edge", slow, []policy.Entry{{Key: "stage", Value: "slow"}, {Key: "user", Value: "lease"}}))
	res, err := engine.NewRedis(cl.Client()).Take(ctx, engine.TakeRequest{Key: key, Limits: limits, Want: 1000, Min: 1})
	if err != nil {
		t.Fatal(err)
	}
	// 999 once the 99 unspent tokens are back (1,000 if a token refilled meanwhile); 900
	// without them.
	if res.Granted < 999 {
		t.Errorf("slow: tokens in the store after Close: got %d, want at least 999", res.Granted)
	}
}
