package enforcer

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/rlctl/rlctl/internal/policyfixture"
	"github.com/rlctl/rlctl/internal/redistest"
	"github.com/rlctl/rlctl/policy"
)

// TestOutageBounds kills Redis under two fail-open keys, one of a rule with a fallback of 50
// per second and one of a rule without one that was admitted about 200 per second before, and
// floods both: neither is admitted without bound while the store is away. The first gets its
// fallback (burst and refill), the second twice its recent rate; both their leased tokens
// besides. All at the default 5 ms store timeout; the breaker must open.
func TestOutageBounds(t *testing.T) {
	const leaseMax = 20
	rule := func(name string, fb *policy.Rate) *policy.Rule {
		return &policy.Rule{
			Name:   name,
			Match:  []policy.Match{{Key: "rule", Value: name, Kind: policy.MatchExact}, {Key: "user", Kind: policy.MatchAny}},
			Limits: []policy.Limit{{Requests: 1000, WindowMs: 1000, Burst: 1000, Algorithm: policy.TokenBucket, Cost: 1}},
			Stage:  policy.Stage{Name: policy.StageEnforce}, FailureMode: policy.FailOpen, Fallback: fb,
			Lease: policyfixture.Lease(policyfixture.Bounds(5, leaseMax), policyfixture.TTL(10_000), policyfixture.UnsetWatermark()),
		}
	}
	m := &policy.Model{Domains: []*policy.Domain{{Name: "edge", Rules: []*policy.Rule{
		rule("withfb", &policy.Rate{Requests: 50, WindowMs: 1000}), rule("nofb", nil),
	}}}}
	srv := redistest.Start(t)
	in := spawn(t, m, func(c *Config) { c.Store, c.RedisURL = "redis", "redis://"+srv.Addr() })
	ask := func(name string) bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp, err := in.client.ShouldRateLimit(ctx, request("edge", []string{"rule=" + name, "user=hot"}))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			return false
		}
		return resp.OverallCode == rlsv3.RateLimitResponse_OK
	}
	// Before: 200 a second for 1.5 s, well within the limit, so that the key has a rate.
	const rate = 200
	start := time.Now()
	sent := 0
	for time.Since(start) < 1500*time.Millisecond {
		if !ask("nofb") || !ask("withfb") {
			t.Fatalf("request %d before the outage: denied, want admitted (within the limit)", sent)
		}
		sent++
		time.Sleep(time.Until(start.Add(time.Duration(sent) * time.Second / rate)))
	}

	srv.Kill()
	var admitted [2]atomic.Int64 // withfb, nofb
	var wg sync.WaitGroup
	outage := time.Now()
	const flood = time.Second
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Since(outage) < flood; i++ {
				k := (w + i) % 2
				if ask([]string{"withfb", "nofb"}[k]) {
					admitted[k].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	secs := time.Since(outage).Seconds()
	if got := in.metric(t, `rate_limit_breaker_transitions_total{to="open"}`); got < 1 {
		t.Errorf("breaker opens: got %v, want at least 1 with Redis killed", got)
	}
	// withfb: its fallback's burst of 50 and 50 a second, and its lease.
	if got, limit := admitted[0].Load(), int64(leaseMax+50+50*secs); got > limit || got == 0 {
		t.Errorf("withfb during the outage: admitted %d in %.2fs, want 1 to %d (fallback 50/s, burst 50, and a lease of %d)", got, secs, limit, leaseMax)
	}
	// nofb: twice its rate of about 200/s, as a bucket of that per second with a second's burst.
	// 25% over the rate allows for the warm-up's pacing: the average is sampled at store
	// replies, every lease of 5 to 20 requests, and the pacing loop catches up in bursts after
	// a pause. Without the bound the flood is admitted several thousand.
	bound := 2 * rate * 1.25
	if got, limit := admitted[1].Load(), int64(leaseMax+bound+bound*secs); got > limit || got == 0 {
		t.Errorf("nofb during the outage: admitted %d in %.2fs, want 1 to %d (twice its recent %d/s, and a lease of %d)", got, secs, limit, rate, leaseMax)
	}
	t.Logf("outage of %.2fs: withfb admitted %d, nofb %d", secs, admitted[0].Load(), admitted[1].Load())
}

// TestOutageFallbackBounded: a flood of distinct keys while Redis is away gets fallback buckets
// up to --max-keys, evicting others beyond it; every key was given one, kept twice its refill
// time (two days for a daily rule), and 200,000 keys held 45 MB.
func TestOutageFallbackBounded(t *testing.T) {
	m := &policy.Model{Domains: []*policy.Domain{{Name: "edge", Rules: []*policy.Rule{{
		Name:   "daily",
		Match:  []policy.Match{{Key: "user", Kind: policy.MatchAny}},
		Limits: []policy.Limit{{Requests: 1000, WindowMs: 86_400_000, Burst: 1000, Algorithm: policy.TokenBucket, Cost: 1}},
		Stage:  policy.Stage{Name: policy.StageEnforce}, FailureMode: policy.FailOpen,
		Fallback: &policy.Rate{Requests: 1000, WindowMs: 86_400_000},
	}}}}}
	srv := redistest.Start(t)
	in := spawn(t, m, func(c *Config) { c.Store, c.RedisURL, c.MaxKeys = "redis", "redis://"+srv.Addr(), 500 })
	srv.Kill()
	for i := range 3000 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := in.client.ShouldRateLimit(ctx, request("edge", []string{fmt.Sprintf("user=u%d", i)}))
		cancel()
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("request %d while Redis is away: %v %v, want OK from the fail-open rule", i, resp, err)
		}
	}
	evicted := in.metric(t, "rate_limit_fallback_evictions_total")
	if held := 3000 - evicted; evicted < 2000 || held > 500+32 {
		t.Errorf("fallback buckets: %v evicted of 3000, %v held; want at most about 500 held", evicted, held)
	}
}
