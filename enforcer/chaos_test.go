package enforcer

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/rlctl/rlctl/internal/policyfixture"
	"github.com/rlctl/rlctl/internal/redistest"
	"github.com/rlctl/rlctl/internal/stalls"
	"github.com/rlctl/rlctl/policy"
)

// chaosModel has a fail-closed, a fail-open and a fail-open-with-fallback rule, all roomy, with
// small leases so that requests keep reaching the store.
func chaosModel() *policy.Model {
	mk := func(name string, fm policy.FailureMode) *policy.Rule {
		r := testRule(name, 1_000_000, policy.Stage{Name: policy.StageEnforce}, fm)
		r.Lease = policyfixture.Lease(policyfixture.Bounds(1, 5), policyfixture.TTL(10_000), policyfixture.UnsetWatermark())
		return r
	}
	fb := mk("openfb", policy.FailOpen)
	fb.Fallback = &policy.Rate{Requests: 5, WindowMs: 60_000}
	return &policy.Model{Domains: []*policy.Domain{{Name: "edge", Rules: []*policy.Rule{
		mk("closed", policy.FailClosed), mk("open", policy.FailOpen), fb,
	}}}}
}

// load runs workers sending requests for rule with fresh users (so every request needs the
// store) until it is finished, and records errors, codes and latencies.
type load struct {
	errs       atomic.Int64
	mu         sync.Mutex
	latencies  []time.Duration
	codes      map[string][2]int64 // rule → [ok, over] since the last reset
	wg         sync.WaitGroup
	stop       chan struct{}
	stopOnce   sync.Once
	firstError atomic.Value
}

// startLoad starts the workers. They stop at finish or, when the test fails before it, at the
// test's clean-up, before spawn's closes the connection: left running, they spin on the closed
// connection for the rest of the package and starve every later test (one took nine minutes).
func startLoad(t testing.TB, in *instance, rules []string, workers int) *load {
	l := &load{stop: make(chan struct{}), codes: map[string][2]int64{}}
	t.Cleanup(l.halt)
	var n atomic.Int64
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				rule := rules[(w+i)%len(rules)]
				user := fmt.Sprintf("u%d", n.Add(1))
				start := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				resp, err := in.client.ShouldRateLimit(ctx, request("edge", []string{"stage=" + rule, "user=" + user}))
				cancel()
				took := time.Since(start)
				l.mu.Lock()
				l.latencies = append(l.latencies, took)
				if err != nil {
					l.errs.Add(1)
					l.firstError.CompareAndSwap(nil, err.Error())
				} else {
					c := l.codes[rule]
					if resp.OverallCode == rlsv3.RateLimitResponse_OK {
						c[0]++
					} else {
						c[1]++
					}
					l.codes[rule] = c
				}
				l.mu.Unlock()
			}
		}()
	}
	return l
}

func (l *load) resetCodes() map[string][2]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.codes
	l.codes = map[string][2]int64{}
	return c
}

// halt stops the workers and waits for them; it may be called more than once.
func (l *load) halt() {
	l.stopOnce.Do(func() { close(l.stop) })
	l.wg.Wait()
}

func (l *load) finish() (p99, p999, maxLat time.Duration, n int) {
	l.halt()
	sort.Slice(l.latencies, func(i, j int) bool { return l.latencies[i] < l.latencies[j] })
	n = len(l.latencies)
	return l.latencies[n*99/100], l.latencies[n*999/1000], l.latencies[n-1], n
}

// handlerTimes records how long ShouldRateLimit calls take inside the server.
type handlerTimes struct {
	mu    sync.Mutex
	times []time.Duration
}

func (h *handlerTimes) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := next(ctx, req)
	took := time.Since(start)
	h.mu.Lock()
	h.times = append(h.times, took)
	h.mu.Unlock()
	return resp, err
}

// summary returns how many calls took longer than bound, the longest, and the number of calls.
func (h *handlerTimes) summary(bound time.Duration) (over int, longest time.Duration, calls int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, d := range h.times {
		if d > bound {
			over++
		}
		longest = max(longest, d)
	}
	return over, longest, len(h.times)
}

// TestRedisOutage kills (SIGKILL) or hangs (SIGSTOP) Redis in the middle of a load test, with
// store calls sharing pipelines (the default) and each on its own round trip.
func TestRedisOutage(t *testing.T) {
	for _, tc := range []struct {
		name, mode string
		pipelines  int
	}{{"kill", "kill", 0}, {"pause", "pause", 0}, {"kill-unpipelined", "kill", -1}, {"pause-unpipelined", "pause", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			judgeTiming(t, func(tb testing.TB) timedRun { return outageOnce(tb, tc.mode, tc.pipelines) })
		})
	}
}

// outageOnce runs one outage (mode "kill" or "pause") under load. It reports the failures of
// what was admitted and denied, and of errors, itself, and returns those of timing: latency
// bounds, and the enforcer's health before and after the outage.
func outageOnce(t testing.TB, mode string, pipelines int) timedRun {
	var o timedRun
	srv := redistest.Start(t)
	// The enforcer's own time per call, measured inside the server: what the store
	// timeout bounds, without the load generator's scheduling delays.
	var handler handlerTimes
	in := spawn(t, chaosModel(), func(c *Config) {
		c.Store, c.RedisURL = "redis", "redis://"+srv.Addr()
		c.BreakerCooldown = 200 * time.Millisecond
		c.RedisPipelines = pipelines
		c.ServerOptions = []grpc.ServerOption{grpc.UnaryInterceptor(handler.intercept)}
	})
	w := stalls.Watch(t)
	l := startLoad(t, in, []string{"closed", "open", "openfb"}, 4)
	healthy := func() bool { // a healthy 200ms: every closed-rule request admitted
		l.resetCodes()
		time.Sleep(200 * time.Millisecond)
		c := l.resetCodes()
		return c["closed"][0] > 0 && c["closed"][1] == 0
	}
	// The machine is shared: a store call may time out now and then and open the breaker
	// briefly.
	if !within(5*time.Second, healthy) {
		l.halt()
		o.stalls = w.Stop()
		o.timing = append(o.timing, "closed-rule requests not all admitted in any 200ms of 5s before the outage")
		return o
	}
	if mode == "kill" {
		srv.Kill()
	} else {
		srv.Pause()
	}
	eventually(t, 2*time.Second, "the breaker to open", func() bool { return in.BreakerState() != BreakerClosed })
	time.Sleep(100 * time.Millisecond)
	l.resetCodes()
	time.Sleep(500 * time.Millisecond)
	c := l.resetCodes()
	// While the breaker is open (apart from half-open probes), fail-closed denies,
	// fail-open admits, and the fallback bucket admits its 5 per key.
	if got := c["closed"]; got[1] == 0 || got[0] > got[1]/10 {
		t.Errorf("closed during outage: got ok %d, over %d; want (nearly) all denied", got[0], got[1])
	}
	if got := c["open"]; got[0] == 0 || got[1] != 0 {
		t.Errorf("open during outage: got ok %d, over %d; want all admitted", got[0], got[1])
	}
	if got := c["openfb"]; got[0] == 0 || got[1] != 0 {
		t.Errorf("openfb during outage (fresh user each time, 5 per key): got ok %d, over %d; want all admitted", got[0], got[1])
	}
	if got := in.metric(t, `rate_limit_bypassed_total{domain="edge",reason="redis_circuit_open",rule="open"}`); got <= 0 {
		t.Errorf("bypass metric for open: got %v, want > 0", got)
	}
	if mode == "kill" {
		srv.Start()
	} else {
		srv.Resume()
	}
	if !within(3*time.Second, func() bool { return in.BreakerState() == BreakerClosed }) {
		o.timing = append(o.timing, "the breaker did not close within 3s of Redis's return")
	} else if !within(5*time.Second, healthy) {
		o.timing = append(o.timing, "closed-rule requests not all admitted in any 200ms of 5s after the recovery")
	}
	p99, p999, maxLat, n := l.finish()
	o.stalls = w.Stop()
	t.Logf("%s: %d requests, p99 %v, p99.9 %v, max %v", mode, n, p99, p999, maxLat)
	if got := l.errs.Load(); got != 0 {
		t.Errorf("gRPC errors: got %d (first: %v), want 0", got, l.firstError.Load())
	}
	// The bound is the store timeout plus 5ms. The load generator shares two cores with
	// Redis, the enforcer and whatever else the machine runs, so the test holds p99 to the
	// bound, and the maximum to a bound that no wait on Redis (a TCP timeout, a pool wait,
	// the client's 1s deadline) could meet.
	if limit, maxLimit := latencySlack(10*time.Millisecond), latencySlack(100*time.Millisecond); p99 > limit || maxLat > maxLimit {
		o.timing = append(o.timing, fmt.Sprintf("latency: p99 %v, max %v; want ≤ %v, ≤ %v", p99, maxLat, limit, maxLimit))
	}
	// Inside the server every call must finish within the store timeout plus 5ms: no request
	// waits on a dead or hung Redis. A few calls are descheduled for longer on a loaded
	// 2-core machine (one stall of 80ms was seen; a single stall of 20ms at these 3,000
	// requests a second puts 60 calls over 10ms), so allow five in a thousand over and none
	// over 100ms, beyond any wait on Redis itself (dial timeout, pool wait, a detached call's
	// 50ms deadline) that p99 does not already catch.
	bound, maxBound := latencySlack(10*time.Millisecond), latencySlack(100*time.Millisecond)
	over, hmax, calls := handler.summary(bound)
	t.Logf("%s: handler max %v, %d of %d calls over %v", mode, hmax, over, calls, bound)
	if over*200 > calls || hmax > maxBound {
		o.timing = append(o.timing, fmt.Sprintf("handler time: %d of %d calls over %v, max %v; want at most 0.5%% over, max ≤ %v", over, calls, bound, hmax, maxBound))
	}
	return o
}

// TestShutdownReturnsLeases checks that Close gives unspent leased tokens back to Redis.
func TestShutdownReturnsLeases(t *testing.T) {
	srv := redistest.Start(t)
	m := chaosModel()
	r := m.Domains[0].Rules[1] // open
	r.Limits[0].Requests, r.Limits[0].Burst = 1000, 1000
	r.Lease = policyfixture.Lease(policyfixture.Bounds(100, 100), policyfixture.TTL(60_000), policyfixture.UnsetWatermark())
	in := spawn(t, m, func(c *Config) { c.Store, c.RedisURL = "redis", "redis://"+srv.Addr() })
	for range 3 {
		in.ask(t, "edge", []string{"stage=open", "user=lease"})
	}
	time.Sleep(50 * time.Millisecond) // let a prefetch land
	keys, err := srv.Client().Keys(context.Background(), "rl:edge:*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys: got %v, %v; want one", keys, err)
	}
	tokens := func() int64 {
		v, err := srv.Client().HGet(context.Background(), keys[0], "tok:b60000").Int64()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// A token of 1000 per minute is 60000/gcd(1000,60000)=60 units.
	before := tokens() / 60
	if before > 1000-100 {
		t.Fatalf("before Close: bucket holds %d tokens; want a lease of 100 taken", before)
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	after := tokens() / 60
	// 3 spent; refill in the meantime may add a few.
	if after < 1000-3 || after > 1000 {
		t.Errorf("after Close: bucket holds %d tokens, want 997..1000 (leases returned)", after)
	}
	if !strings.Contains(in.logs.String(), "enforcer stopped") {
		t.Errorf("logs: no shutdown line")
	}
}

// latencySlack widens a latency bound under the race detector, which slows every call five to
// ten times: the bounds still sit below any wait on Redis itself (the client's 1s deadline).
func latencySlack(d time.Duration) time.Duration {
	if raceEnabled {
		return 5 * d
	}
	return d
}

// TestShutdownJournalHangs: with --journal-block on a disk that hangs (a FIFO nobody reads),
// calls wait for the journal, and Close still returns within the shutdown timeout; it waited
// forever for them, and a sweep holding its stripe kept the leases from going back.
func TestShutdownJournalHangs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.fifo")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	r, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0) // a reader that never reads
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	in := spawn(t, testModel(), func(c *Config) {
		c.JournalPath, c.JournalBlock = path, true
		c.ShutdownTimeout = 2 * time.Second
	})
	l := startLoad(t, in, []string{"big", "open"}, 4)
	eventually(t, 10*time.Second, "the journal to fill the FIFO and hold the calls", func() bool {
		return in.metric(t, "rate_limit_inflight_requests") >= 4
	})
	start := time.Now()
	_ = in.Close() // unclean: the journal lost records
	took := time.Since(start)
	t.Logf("Close took %v", took.Round(time.Millisecond))
	if took > 4*time.Second {
		t.Errorf("Close took %v with a shutdown timeout of 2s", took)
	}
	l.finish()
}
