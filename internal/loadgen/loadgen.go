// Package loadgen owns rlctl's load generator for any Envoy Rate Limit Service (RLS v3),
// rlctl-enforcer or another: workers sending ShouldRateLimit calls over shared gRPC connections
// for a while, and the figures of that run (rate, latency percentiles, OK, OVER_LIMIT and error
// counts, and optionally the Redis commands and the target's CPU time per request).
//
// rlctl bench is its command line; tests that need load drive it with Run.
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// CallTimeout bounds a call that is still in flight when the run ends, and the probe call
// before the run.
const CallTimeout = 5 * time.Second

// A worker whose call found the target unavailable pauses before its next call, from backoffMin
// doubling up to backoffMax: a target that went away is not met with a client spinning on
// instant failures.
const (
	backoffMin = 10 * time.Millisecond
	backoffMax = 200 * time.Millisecond
)

// Config is one run. Each field is the rlctl bench flag of the same name, and errors about a
// field name that flag (--redis-url), without a prefix: the caller adds its own.
type Config struct {
	Target      string        // RLS gRPC address, host:port
	Concurrency int           // workers, each with one call in flight
	Connections int           // gRPC connections the workers share
	Duration    time.Duration // how long the run lasts
	Domain      string        // the requests' rate-limit domain
	// Descriptors are the descriptors of every request.
	Descriptors []Descriptor
	// Tenants spreads the value of one entry over that many identities (value-0 ...
	// value-(N-1)): the entry keyed TenantKey, or the first entry of the first descriptor
	// when TenantKey is "". 1 sends every request alike.
	Tenants   int
	TenantKey string
	Hits      uint32 // the requests' hits_addend; 0 leaves it unset
	// RedisURL, when set, adds the Redis commands per request: an INFO commandstats delta.
	RedisURL string
	// PID, when above 0, adds the CPU time per request of that process (the target), from /proc.
	PID int
	// MaxUnavailable is how long the target may answer no call before the run stops with an
	// error.
	MaxUnavailable time.Duration
}

// Validate reports the first setting that cannot be used, without trying the target.
func (c Config) Validate() error {
	switch {
	case c.Domain == "":
		return errors.New("--domain is required")
	case len(c.Descriptors) == 0:
		return errors.New("at least one --descriptor is required")
	case c.Concurrency < 1 || c.Connections < 1 || c.Tenants < 1 || c.Duration <= 0 || c.MaxUnavailable <= 0:
		return errors.New("--concurrency, --connections, --tenants, --duration and --max-unavailable must be positive")
	case c.PID < 0:
		return fmt.Errorf("--pid %d: want the process ID of the target, above 0", c.PID)
	}
	return nil
}

// Run checks cfg, makes one probe call to the target, then runs the workers for cfg.Duration
// and returns the run's figures. Every setting, RedisURL and PID included, is checked before
// the target is tried; an unreachable target (a refused connection fails at once), or one that
// answers no call for cfg.MaxUnavailable during the run, is an error. Calls that fail during the
// run are counted in the result, not returned.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	reqs, err := requests(cfg)
	if err != nil {
		return nil, err
	}
	if _, err := procCPU(cfg.PID); err != nil {
		return nil, fmt.Errorf("--pid %d: %w", cfg.PID, err)
	}
	// A bad RedisURL is not reported after a run, nor behind an unreachable target.
	var rdb *redis.Client
	if cfg.RedisURL != "" {
		ropts, err := redis.ParseURL(cfg.RedisURL)
		if err != nil {
			return nil, fmt.Errorf("--redis-url: %w", err)
		}
		// INFO is read twice; an unreachable Redis is reported at once rather than retried.
		ropts.MaxRetries, ropts.DialerRetries = -1, 1
		rdb = redis.NewClient(ropts)
		defer rdb.Close()
		pctx, cancel := context.WithTimeout(ctx, CallTimeout)
		err = rdb.Ping(pctx).Err()
		cancel()
		if err != nil {
			return nil, fmt.Errorf("--redis-url: %w", err)
		}
	}
	conns := make([]rlsv3.RateLimitServiceClient, cfg.Connections)
	for i := range conns {
		cc, err := grpc.NewClient(cfg.Target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, fmt.Errorf("--target %s: %w", cfg.Target, err)
		}
		defer cc.Close()
		conns[i] = rlsv3.NewRateLimitServiceClient(cc)
	}
	// One call first: an unreachable target is an error, not a run full of errors. It does not
	// wait for the connection to become ready, so a refused connection fails at once.
	pctx, cancel := context.WithTimeout(ctx, CallTimeout)
	_, err = conns[0].ShouldRateLimit(pctx, reqs[0])
	cancel()
	if err != nil {
		return nil, fmt.Errorf("--target %s: %w", cfg.Target, err)
	}
	var before map[string]int64
	if rdb != nil {
		if before, err = commandStats(ctx, rdb); err != nil {
			return nil, fmt.Errorf("--redis-url: %w", err)
		}
	}
	cpuBefore, err := procCPU(cfg.PID)
	if err != nil {
		return nil, fmt.Errorf("--pid %d: %w", cfg.PID, err)
	}

	res, err := run(ctx, cfg, conns, reqs)
	if err != nil {
		return nil, err
	}
	if rdb != nil {
		after, err := commandStats(ctx, rdb)
		if err != nil {
			return nil, fmt.Errorf("--redis-url: %w", err)
		}
		res.RedisByCmd = map[string]int64{}
		var total int64
		for k, v := range after {
			if d := v - before[k]; d > 0 && k != "info" {
				res.RedisByCmd[k] = d
				total += d
			}
		}
		per := float64(total) / float64(max(res.Requests, 1))
		res.RedisCmds, res.RedisPerReq = &total, &per
	}
	if cfg.PID > 0 {
		cpuAfter, err := procCPU(cfg.PID)
		if err != nil {
			return nil, fmt.Errorf("--pid %d: %w", cfg.PID, err)
		}
		per := float64((cpuAfter - cpuBefore).Microseconds()) / float64(max(res.Requests, 1))
		res.CPUUsPerReq = &per
	}
	return res, nil
}

// run runs the workers for cfg.Duration and returns the counts and the latencies of the
// answered calls. It stops early, with an error, when the target answers no call for
// cfg.MaxUnavailable.
func run(ctx context.Context, cfg Config, conns []rlsv3.RateLimitServiceClient, reqs []*rlsv3.RateLimitRequest) (*Result, error) {
	res := &Result{Target: cfg.Target, Concurrency: cfg.Concurrency}
	var okN, overN, errN atomic.Int64
	var firstErr, lastErr atomic.Value
	lats := make([][]time.Duration, cfg.Concurrency)
	var next atomic.Int64
	start := time.Now()
	end := start.Add(cfg.Duration)
	// lastAnswer is when the target last answered a call, as time since start.
	var lastAnswer atomic.Int64
	// One deadline for every call, not a timer per call: the generator shares the machine with
	// what it measures, so its own cost per request is kept small. Cancelling rctx stops the
	// run, calls in flight included.
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	wctx, cancel := context.WithDeadline(rctx, end.Add(CallTimeout))
	defer cancel()
	var wg sync.WaitGroup
	for w := range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := conns[w%len(conns)]
			mine := make([]time.Duration, 0, 4096)
			var backoff time.Duration
			for time.Now().Before(end) && rctx.Err() == nil {
				req := reqs[int(next.Add(1)%int64(len(reqs)))]
				t0 := time.Now()
				resp, err := client.ShouldRateLimit(wctx, req)
				d := time.Since(t0)
				if err != nil {
					if rctx.Err() != nil {
						break // the run was stopped: the call did not fail on its own
					}
					errN.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					lastErr.Store(err.Error())
					if c := status.Code(err); c != codes.Unavailable && c != codes.DeadlineExceeded {
						lastAnswer.Store(int64(time.Since(start))) // the target answered, with an error
						continue
					}
					backoff = min(max(2*backoff, backoffMin), backoffMax)
					pause(rctx, backoff)
					continue
				}
				backoff = 0
				lastAnswer.Store(int64(time.Since(start)))
				if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
					overN.Add(1)
				} else {
					okN.Add(1)
				}
				mine = append(mine, d)
			}
			lats[w] = mine
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	var gone time.Duration // how long the target had answered nothing when the run was stopped
	tick := time.NewTicker(max(min(cfg.MaxUnavailable/4, 100*time.Millisecond), time.Millisecond))
	defer tick.Stop()
wait:
	for {
		select {
		case <-done:
			break wait
		case <-tick.C:
			if silent := time.Since(start) - time.Duration(lastAnswer.Load()); silent > cfg.MaxUnavailable {
				gone = silent
				stop()
				<-done
				break wait
			}
		}
	}
	elapsed := time.Since(start)
	if gone > 0 {
		last, _ := lastErr.Load().(string)
		if last == "" {
			last = "calls in flight got no answer"
		}
		return nil, fmt.Errorf("--target %s answered no call for %s (--max-unavailable %s): stopped after %.1fs with %d answered and %d failed calls; the last error: %s",
			cfg.Target, gone.Round(time.Millisecond), cfg.MaxUnavailable, elapsed.Seconds(), okN.Load()+overN.Load(), errN.Load(), last)
	}

	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	slices.Sort(all)
	res.Requests = int64(len(all))
	res.DurationS = elapsed.Seconds()
	res.RPS = float64(res.Requests) / elapsed.Seconds()
	res.OK, res.OverLimit, res.Errors = okN.Load(), overN.Load(), errN.Load()
	if v, ok := firstErr.Load().(string); ok {
		res.FirstError = v
	}
	pct := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		return float64(all[min(int(p*float64(len(all))), len(all)-1)].Nanoseconds()) / 1e3
	}
	res.LatencyUs = Latency{P50: pct(0.50), P90: pct(0.90), P99: pct(0.99), P999: pct(0.999), Max: pct(1)}
	return res, nil
}

// pause waits for d, or until ctx is done.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
