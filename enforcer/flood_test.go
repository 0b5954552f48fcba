package enforcer

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/rlctl/rlctl/internal/policyfixture"
	"github.com/rlctl/rlctl/internal/redistest"
	"github.com/rlctl/rlctl/policy"
)

// The flood (issue 11): distinct keys as fast as the client can send them, the other classic
// attack on a rate limiter. floodKeys is the number of keys; RLCTL_FLOOD_KEYS overrides it.
const (
	floodKeys    = 1_000_000
	floodMaxKeys = 50_000 // the enforcer's --max-keys in the test
	floodWorkers = 16
	// floodPeakPerKey bounds the heap a tracked key may cost at the peak, in bytes: the lease,
	// its map entry, its key and its places in the due heap.
	floodPeakPerKey = 2048
	// floodFallbackPerKey bounds what a fallback bucket costs: its state, map entry and key.
	floodFallbackPerKey = 512
	// floodSettled bounds the heap left, over the baseline, once the flood has stopped and
	// the leases' TTLs and a sweep have passed.
	floodSettled = 16 << 20
)

// floodModel is one fail-open rule on tenant=<any>, 100 per second, with a short lease TTL so
// that idle keys are forgotten within seconds.
func floodModel() *policy.Model {
	return &policy.Model{Domains: []*policy.Domain{{Name: "edge", Rules: []*policy.Rule{{
		Name:   "tenant",
		Match:  []policy.Match{{Key: "tenant", Kind: policy.MatchAny}},
		Limits: []policy.Limit{{Requests: 100, WindowMs: 1000, Burst: 100, Algorithm: policy.TokenBucket, Cost: 1}},
		Stage:  policy.Stage{Name: policy.StageEnforce}, FailureMode: policy.FailOpen,
		Lease: policyfixture.Lease(policyfixture.Bounds(5, 50), policyfixture.TTL(1000), policyfixture.UnsetWatermark()),
	}}}}}
}

// TestFloodOfKeys sends a flood of distinct keys (64 descriptors a request, each a new tenant)
// through one enforcer on a real Redis, and checks that per-key state stays bounded by
// --max-keys (evictions counted, the heap's peak within floodPeakPerKey a tracked key), that
// every request is answered, and that the memory comes back once the flood stops and the
// leases' TTLs pass. It prints one line: flood: keys=N peak_heap_mb=X settled_heap_mb=Y ...
func TestFloodOfKeys(t *testing.T) {
	keys := int64(floodKeys)
	if s := os.Getenv("RLCTL_FLOOD_KEYS"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1 {
			t.Fatalf("RLCTL_FLOOD_KEYS=%q: want a positive number", s)
		}
		keys = n
	}
	srv := redistest.Start(t)
	in := spawn(t, floodModel(), func(c *Config) {
		c.Store = "redis"
		c.RedisURL = "redis://" + srv.Addr()
		c.MaxKeys = floodMaxKeys
		c.Logger = slog.New(slog.DiscardHandler) // a debug line per store failure would be the test's heap
	})
	base := heapInUse()

	var (
		next, errs atomic.Int64
		firstErr   atomic.Value
		peak       atomic.Uint64
		fbPeak     atomic.Int64 // fallback buckets when the heap peaked
		wg         sync.WaitGroup
	)
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() { // the live heap's peak, sampled after a collection
		defer close(sampled)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if h := heapInUse(); h > peak.Load() {
					peak.Store(h)
					fbPeak.Store(int64(in.fallback.Len()))
				}
			}
		}
	}()
	start := time.Now()
	for range floodWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := &rlsv3.RateLimitRequest{Domain: "edge"}
			for range MaxDescriptors {
				req.Descriptors = append(req.Descriptors, &commonv3.RateLimitDescriptor{
					Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "tenant"}}})
			}
			for {
				first := next.Add(MaxDescriptors) - MaxDescriptors
				if first >= keys {
					return
				}
				for i, d := range req.Descriptors {
					d.Entries[0].Value = "t" + strconv.FormatInt(first+int64(i), 36)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				resp, err := in.client.ShouldRateLimit(ctx, req)
				cancel()
				if err != nil || len(resp.Statuses) != MaxDescriptors {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprint(err))
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	close(stop)
	<-sampled
	tracked := in.metric(t, "rate_limit_tracked_keys")
	evicted := in.metric(t, "rate_limit_key_evictions_total")
	opens := in.metric(t, `rate_limit_breaker_transitions_total{to="open"}`)

	// The leases' TTL (1s) for their tokens to go back, another for Sweep to forget them, and
	// the sweeps that run each second.
	var settled uint64
	for deadline := time.Now().Add(15 * time.Second); ; {
		time.Sleep(time.Second)
		settled = heapInUse()
		if settled < base+floodSettled && in.metric(t, "rate_limit_tracked_keys") == 0 || time.Now().After(deadline) {
			break
		}
	}
	if p := os.Getenv("RLCTL_FLOOD_HEAP_PROFILE"); p != "" {
		f, err := os.Create(p)
		if err == nil {
			pprof.WriteHeapProfile(f)
			f.Close()
		}
	}
	mb := func(b uint64) float64 { return float64(b) / (1 << 20) }
	fmt.Printf("flood: keys=%d in %v (%.0f/s) base_heap_mb=%.1f peak_heap_mb=%.1f settled_heap_mb=%.1f tracked_at_end=%.0f evicted=%.0f fallback_buckets_at_peak=%d breaker_opens=%.0f grpc_errors=%d\n",
		keys, took.Round(time.Millisecond), float64(keys)/took.Seconds(), mb(base), mb(peak.Load()), mb(settled),
		tracked, evicted, fbPeak.Load(), opens, errs.Load())

	if n := errs.Load(); n != 0 {
		t.Errorf("gRPC errors or short answers: got %d (first: %v), want 0", n, firstErr.Load())
	}
	if tracked > floodMaxKeys+floodWorkers*MaxDescriptors {
		t.Errorf("tracked keys at the end of the flood: got %.0f, want at most --max-keys %d (and the first takes in flight)", tracked, floodMaxKeys)
	}
	if evicted == 0 && keys > 2*floodMaxKeys {
		t.Errorf("evictions: got 0, want some: %d keys in %v against a cap of %d", keys, took, floodMaxKeys)
	}
	// The fallback buckets are bounded in time, not number: each lives twice its refill time
	// (a second's bucket, 2 s) after its key's last request while the breaker was open.
	if limit := base + floodMaxKeys*floodPeakPerKey + uint64(fbPeak.Load())*floodFallbackPerKey + 32<<20; peak.Load() > limit {
		t.Errorf("peak heap: got %.1f MB, want at most %.1f MB (%d keys × %d B and %d fallback buckets × %d B over a %.1f MB baseline, and 32 MB for the client)",
			mb(peak.Load()), mb(limit), floodMaxKeys, floodPeakPerKey, fbPeak.Load(), floodFallbackPerKey, mb(base))
	}
	if settled > base+floodSettled {
		t.Errorf("heap after the flood: got %.1f MB, want at most %.1f MB over the %.1f MB baseline", mb(settled), mb(floodSettled), mb(base))
	}
	if left := in.metric(t, "rate_limit_tracked_keys"); left != 0 {
		t.Errorf("tracked keys once idle: got %.0f, want 0", left)
	}
}

// heapInUse returns the heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}
