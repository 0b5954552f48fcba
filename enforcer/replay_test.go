package enforcer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/rlctl/rlctl/internal/policyfixture"
	"github.com/rlctl/rlctl/internal/redistest"
	"github.com/rlctl/rlctl/journal"
	"github.com/rlctl/rlctl/policy"
)

// replayModel has rules of every algorithm and stage, nested and sub-sharded matches, leases
// that prefetch and expire within the test, and each failure mode. Several go over their limits
// under the test's load.
func replayModel() *policy.Model {
	lease := func(lo, hi int64) policy.Lease {
		return policyfixture.Lease(policyfixture.Bounds(lo, hi), policyfixture.TTL(700), policyfixture.WatermarkPercent(25))
	}
	rule := func(name string, stage policy.Stage, fm policy.FailureMode, l policy.Lease, match []policy.Match, limits ...policy.Limit) *policy.Rule {
		return &policy.Rule{Name: name, Match: match, Limits: limits, Stage: stage, FailureMode: fm, StoreTimeoutMs: 50, Lease: l}
	}
	enforce := policy.Stage{Name: policy.StageEnforce}
	anyTenant := policy.Match{Key: "tenant", Kind: policy.MatchAny}
	perTenant := rule("tenant", enforce, policy.FailOpen, lease(5, 40), []policy.Match{anyTenant},
		policy.Limit{Requests: 200, WindowMs: 1000, Burst: 100, Algorithm: policy.TokenBucket, Cost: 1},
		policy.Limit{Requests: 2000, WindowMs: 60_000, Algorithm: policy.TokenBucket, Cost: 1})
	perTenant.Fallback = &policy.Rate{Requests: 20, WindowMs: 1000}
	hot := rule("hot", policy.Stage{Name: policy.StageSoft}, policy.FailOpen, lease(2, 20),
		[]policy.Match{{Key: "tenant", Value: "hot", Kind: policy.MatchExact}},
		policy.Limit{Requests: 400, WindowMs: 1000, Algorithm: policy.TokenBucket, Cost: 1})
	hot.SubShards = &policy.SubShards{Count: 4, Attribute: "ip"}
	return &policy.Model{Domains: []*policy.Domain{{
		Name:    "edge",
		Sources: []*policy.Source{{Key: "tenant", Kind: policy.SourceHeader, Header: "x-tenant"}},
		Rules: []*policy.Rule{
			hot,
			perTenant,
			rule("path", policy.Stage{Name: policy.StageCanary, CanaryPercent: 35}, policy.FailClosed, lease(1, 5),
				[]policy.Match{anyTenant, {Key: "path", Value: "/api/*", Kind: policy.MatchWildcard}},
				policy.Limit{Requests: 20, WindowMs: 1000, Algorithm: policy.SlidingWindow, Cost: 1}),
			rule("user", policy.Stage{Name: policy.StageShadow}, policy.FailOpen, lease(1, 1),
				[]policy.Match{{Key: "user", Kind: policy.MatchAny}},
				policy.Limit{Requests: 3, WindowMs: 60_000, Algorithm: policy.TokenBucket, Cost: 1}),
			rule("login", enforce, policy.FailClosed, lease(1, 3),
				[]policy.Match{{Key: "action", Value: "login", Kind: policy.MatchExact}},
				policy.Limit{Requests: 10, WindowMs: 500, Algorithm: policy.FixedWindow, Cost: 2}),
		},
	}}}
}

// TestJournalReplay runs several enforcers on one real Redis under concurrent load, with a
// config reload and a store outage on the way, then replays their journals through the engine:
// every decision must come out the same.
func TestJournalReplay(t *testing.T) {
	srv := redistest.Start(t)
	m1 := replayModel()
	m2 := replayModel()
	m2.Domains[0].Rules[2].Limits[0].Requests = 30 // the reload changes the path rule
	dir := t.TempDir()

	var ins []*instance
	for i := range 3 {
		ins = append(ins, spawn(t, m1, func(c *Config) {
			c.Store, c.RedisURL = "redis", "redis://"+srv.Addr()
			c.InstanceID = fmt.Sprintf("enforcer-%d", i)
			c.JournalPath, c.JournalBlock = filepath.Join(dir, c.InstanceID+".jsonl"), true
			c.StoreTimeout, c.BreakerFailures, c.BreakerCooldown = 50*time.Millisecond, 3, 300*time.Millisecond
		}))
	}

	// The workers stop at stop(), or when the test ends first (a failed writeSnapshot), so
	// that they never outlive it.
	run, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var errs sync.Map
	for i, in := range ins {
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(i), uint64(w)))
				for run.Err() == nil {
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					_, err := in.client.ShouldRateLimit(ctx, replayRequest(rng))
					cancel()
					if err != nil {
						errs.LoadOrStore(err.Error(), true)
					}
				}
			}()
		}
	}
	time.Sleep(1200 * time.Millisecond)
	writeSnapshot(t, ins[0].path, m2)
	time.Sleep(300 * time.Millisecond)
	srv.Pause() // timeouts open the breakers: fail-open, fail-closed and fallback decisions
	time.Sleep(500 * time.Millisecond)
	srv.Resume()
	time.Sleep(1200 * time.Millisecond)
	stop()
	wg.Wait()
	errs.Range(func(k, _ any) bool { t.Errorf("ShouldRateLimit: %v", k); return true })

	var inputs []journal.Input
	for _, in := range ins {
		if err := in.Close(); err != nil {
			t.Fatalf("close %s: %v", in.conf.InstanceID, err)
		}
		f, err := os.Open(in.conf.JournalPath)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		inputs = append(inputs, journal.Input{Name: in.conf.JournalPath, R: f})
	}
	if v := ins[0].ConfigVersion(); v == ins[1].ConfigVersion() {
		t.Errorf("instance 0 did not reload: version %s", v)
	}
	rep, err := journal.Replay(context.Background(), []*policy.Model{replayModel(), m2}, inputs)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("journal: decisions=%d mismatches=%d\n", rep.Decisions, len(rep.Mismatches))
	for i, m := range rep.Mismatches {
		if i == 20 {
			t.Errorf("... and %d more", len(rep.Mismatches)-i)
			break
		}
		t.Errorf("mismatch: %s", m)
	}
	for _, s := range rep.Journals {
		if !s.Ended || s.Dropped != 0 || s.Decisions < 1000 {
			t.Errorf("journal %s: ended %v, dropped %d, decisions %d; want ended, none dropped, 1000 or more",
				s.Name, s.Ended, s.Dropped, s.Decisions)
		}
	}
	checkCoverage(t, ins)
}

// replayRequest builds a random request of one to four descriptors.
func replayRequest(rng *rand.Rand) *rlsv3.RateLimitRequest {
	tenant := fmt.Sprintf("t%d", rng.IntN(6))
	if rng.IntN(4) == 0 {
		tenant = "hot"
	}
	descs := [][]string{{"tenant=" + tenant}}
	if rng.IntN(2) == 0 {
		descs = append(descs, []string{"tenant=" + tenant, fmt.Sprintf("path=/api/v%d", rng.IntN(2))})
	}
	if tenant == "hot" {
		descs = append(descs, []string{"tenant=hot", fmt.Sprintf("ip=10.0.0.%d", rng.IntN(50))})
	}
	if rng.IntN(3) == 0 {
		descs = append(descs, []string{fmt.Sprintf("user=u%d", rng.IntN(40))})
	}
	if rng.IntN(8) == 0 {
		descs = append(descs, []string{"action=login"})
	}
	if rng.IntN(10) == 0 {
		descs = append(descs, []string{"unknown=x"})
	}
	req := request("edge", descs...)
	if rng.IntN(20) == 0 {
		req.HitsAddend = 3
	}
	if rng.IntN(25) == 0 {
		req.Descriptors[0].Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 50, Unit: typev3.RateLimitUnit_SECOND}
	}
	return req
}

// checkCoverage fails unless the journals hold every kind of decision and store event the
// replay is meant to reproduce.
func checkCoverage(t *testing.T, ins []*instance) {
	t.Helper()
	seen := map[string]int{}
	for _, in := range ins {
		f, err := os.Open(in.conf.JournalPath)
		if err != nil {
			t.Fatal(err)
		}
		r, err := journal.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		for {
			rec, err := r.Next()
			if err != nil {
				break
			}
			switch rec.Kind {
			case journal.KindDecision:
				seen["via="+rec.Via]++
				seen["eng="+rec.Engine+" code="+rec.Code]++
				if rec.OverrideMs > 0 {
					seen["override"]++
				}
				if rec.Gen > 1 {
					seen["reloaded"]++
				}
			case journal.KindStore:
				switch {
				case rec.Err != "":
					seen["store error"]++
				case rec.Op == journal.OpReturn:
					seen["return"]++
				case rec.Async:
					seen["prefetch"]++
				default:
					seen["sync take"]++
				}
			case journal.KindSweep:
				seen["sweep"]++
			case journal.KindEnd:
				seen["end"]++
			}
		}
		f.Close()
	}
	for _, k := range []string{"via=lease", "via=store", "via=short_circuit", "via=fallback", "via=fail_open",
		"via=fail_closed", "via=unmatched", "eng=ok code=ok", "eng=over code=over", "eng=over code=ok", "override",
		"reloaded", "store error", "return", "prefetch", "sync take", "sweep", "end"} {
		if seen[k] == 0 {
			t.Errorf("journals: no %s (saw %v)", k, seen)
		}
	}
}

// BenchmarkShouldRateLimitJournal is BenchmarkShouldRateLimit with the journal on: the cost of
// writing a record per decision and of ordering it in its key's stripe.
func BenchmarkShouldRateLimitJournal(b *testing.B) {
	benchShouldRateLimit(b, func(c *Config) { c.JournalPath = filepath.Join(b.TempDir(), "journal.jsonl") })
}
