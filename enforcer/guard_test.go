package enforcer

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/internal/redistest"
)

// stubStore answers every Take after delay with res and err, and counts the tokens given back.
type stubStore struct {
	delay    time.Duration
	res      engine.Result
	err      error
	returned *atomic.Int64
}

func (s stubStore) Take(ctx context.Context, _ engine.TakeRequest) (engine.Result, error) {
	select {
	case <-time.After(s.delay):
		return s.res, s.err
	case <-ctx.Done():
		return engine.Result{}, ctx.Err()
	}
}

func (s stubStore) Return(_ context.Context, r engine.ReturnRequest) error {
	if s.returned != nil {
		s.returned.Add(r.N)
	}
	return nil
}

// TestGuardedStoreTake checks what a request gets from a detached store call, how long it
// waits, and what the breaker and the metrics make of the call. The calls' own deadline is ten
// store timeouts, so that a request that waited for it instead of its own timer would miss the
// bound on its wait by far.
func TestGuardedStoreTake(t *testing.T) {
	const timeout = 20 * time.Millisecond
	netTimeout := &os.PathError{Op: "read", Path: "tcp", Err: os.ErrDeadlineExceeded} // a net.Error with Timeout()
	tests := []struct {
		name    string
		store   stubStore
		granted int64
		err     error
		// failed says the breaker counts the call as a failure; late that its reply came
		// after the request stopped waiting, and returned the tokens given back for it.
		failed   bool
		late     float64
		returned int64
		// exact runs the store as under a journal; landed is what the lease manager is
		// handed when a late call lands (engine.Late), -1 for nothing.
		exact  bool
		landed int64
	}{
		{name: "reply", store: stubStore{res: engine.Result{Granted: 5}}, granted: 5},
		{name: "denial", store: stubStore{res: engine.Result{RetryAfter: 7}}},
		{name: "store error", store: stubStore{err: errors.New("connection refused")}, err: errors.New("connection refused"), failed: true},
		{name: "hung store", store: stubStore{delay: time.Hour}, err: ErrStoreTimeout, failed: true},
		{name: "network timeout", store: stubStore{err: netTimeout}, err: ErrStoreTimeout, failed: true},
		{name: "deadline", store: stubStore{err: context.DeadlineExceeded}, err: ErrStoreTimeout, failed: true},
		// A reply after the request's wait but before the call's deadline: the request is
		// decided without it, the breaker counts a success, and the lease manager is handed
		// the reply; under a journal its tokens go back to the store instead.
		{name: "late grant", store: stubStore{delay: 3 * timeout, res: engine.Result{Granted: 5}}, err: ErrStoreTimeout, late: 1, landed: 5},
		{name: "late grant, journal", store: stubStore{delay: 3 * timeout, res: engine.Result{Granted: 5}}, err: ErrStoreTimeout, late: 1, exact: true, returned: 5, landed: -1},
		{name: "late denial", store: stubStore{delay: 3 * timeout}, err: ErrStoreTimeout, late: 1},
	}
	clock := engine.ClockFunc(func() int64 { return time.Now().UnixMilli() })
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var returned atomic.Int64
			tt.store.returned = &returned
			br := newBreaker(1, 60_000, clock, func(from, to BreakerState) {})
			mx := newMetrics(nil, nil)
			g := newGuardedStore(tt.store, timeout, true, br, clock, newOrder(clock, tt.exact), nil, mx)
			g.callTimeout = 10 * timeout
			start := time.Now()
			res, err := g.Take(context.Background(), engine.TakeRequest{Key: "k", Want: 5, Min: 1})
			took := time.Since(start)
			landed := make(chan int64, 1)
			var late *engine.Late
			if errors.As(err, &late) {
				late.Then(func(res engine.Result, err error) { landed <- res.Granted })
			} else {
				landed <- -1
			}
			switch {
			case tt.err == nil && err != nil:
				t.Fatalf("err: got %v, want nil", err)
			case tt.err != nil && (err == nil || err.Error() != tt.err.Error()):
				t.Fatalf("err: got %v, want %v", err, tt.err)
			}
			if res.Granted != tt.granted {
				t.Errorf("granted: got %d, want %d", res.Granted, tt.granted)
			}
			// The request waits the store timeout, never the call's own deadline (200 ms).
			if limit := timeout + 100*time.Millisecond; took > limit {
				t.Errorf("took %v, want at most %v", took, limit)
			}
			// The call has landed or met its deadline by then; the breaker (threshold 1)
			// opened if and only if the call failed.
			deadline := time.Now().Add(g.callTimeout + time.Second)
			for (br.State() == BreakerOpen) != tt.failed && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			for (storeCallCount(t, mx, "take", "late") != tt.late || returned.Load() != tt.returned) && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond) // a late reply lands at 60 ms
			}
			if got := br.State() == BreakerOpen; got != tt.failed {
				t.Errorf("breaker open: got %v, want %v", got, tt.failed)
			}
			if got := storeCallCount(t, mx, "take", "late"); got != tt.late {
				t.Errorf("late replies: got %v, want %v", got, tt.late)
			}
			if got := returned.Load(); got != tt.returned {
				t.Errorf("tokens given back: got %d, want %d", got, tt.returned)
			}
			if tt.err == nil || tt.failed {
				return // no late call: nothing handed over (or a failure handed over)
			}
			select {
			case got := <-landed:
				if got != tt.landed {
					t.Errorf("handed to the lease manager: got %d tokens, want %d", got, tt.landed)
				}
			case <-time.After(time.Second):
				t.Errorf("the late call never landed")
			}
		})
	}
}

// TestGuardedStoreBreakerOpens checks that calls with no reply by their deadline open the
// breaker after the threshold, and that later calls are refused without reaching the store.
func TestGuardedStoreBreakerOpens(t *testing.T) {
	clock := engine.ClockFunc(func() int64 { return time.Now().UnixMilli() })
	br := newBreaker(3, 60_000, clock, func(from, to BreakerState) {})
	g := newGuardedStore(stubStore{delay: time.Hour}, time.Millisecond, true, br, clock, newOrder(clock, false), nil, newMetrics(nil, nil))
	for i := range 3 {
		if _, err := g.Take(context.Background(), engine.TakeRequest{Key: "k", Want: 1, Min: 1}); !errors.Is(err, ErrStoreTimeout) {
			t.Fatalf("call %d: got %v, want %v", i, err, ErrStoreTimeout)
		}
	}
	// The three calls fail at their own deadline, 2 ms after they started.
	deadline := time.Now().Add(time.Second)
	for br.State() != BreakerOpen && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if _, err := g.Take(context.Background(), engine.TakeRequest{Key: "k", Want: 1, Min: 1}); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("call 3: got %v, want %v", err, ErrCircuitOpen)
	}
	if got := br.State(); got != BreakerOpen {
		t.Errorf("breaker: got %v, want open", got)
	}
}

// TestGuardedStoreLastFailure: the store's last failure is kept for the log line of the breaker
// opening, which named no cause: a wrong password showed only "closed→open".
func TestGuardedStoreLastFailure(t *testing.T) {
	clock := engine.ClockFunc(func() int64 { return time.Now().UnixMilli() })
	var opened string
	var g *guardedStore
	br := newBreaker(2, 60_000, clock, func(from, to BreakerState) {
		if to == BreakerOpen {
			opened = g.lastFailure()
		}
	})
	wrongPass := errors.New("WRONGPASS invalid username-password pair or user is disabled.")
	g = newGuardedStore(stubStore{err: wrongPass}, time.Second, false, br, clock, newOrder(clock, false), nil, newMetrics(nil, nil))
	if got := g.lastFailure(); got != "" {
		t.Errorf("before any call: last failure %q, want none", got)
	}
	for range 2 {
		_, _ = g.Take(context.Background(), engine.TakeRequest{Key: "k", Want: 1, Min: 1})
	}
	if br.State() != BreakerOpen || opened != wrongPass.Error() {
		t.Errorf("breaker %v, last failure when it opened %q; want open, %q", br.State(), opened, wrongPass)
	}
}

// TestGuardedStoreLateRepliesKeepBreakerClosed sends calls whose replies all come after the
// request stopped waiting but before the calls' deadline, as on a machine too busy to read
// replies on time: the requests time out, and the breaker stays closed.
func TestGuardedStoreLateRepliesKeepBreakerClosed(t *testing.T) {
	clock := engine.ClockFunc(func() int64 { return time.Now().UnixMilli() })
	br := newBreaker(3, 60_000, clock, func(from, to BreakerState) {})
	mx := newMetrics(nil, nil)
	g := newGuardedStore(stubStore{delay: 200 * time.Millisecond}, 5*time.Millisecond, true, br, clock, newOrder(clock, false), nil, mx)
	g.callTimeout = time.Second
	for i := range 10 {
		if _, err := g.Take(context.Background(), engine.TakeRequest{Key: "k", Want: 1, Min: 1}); !errors.Is(err, ErrStoreTimeout) {
			t.Fatalf("call %d: got %v, want %v", i, err, ErrStoreTimeout)
		}
	}
	deadline := time.Now().Add(time.Second)
	for storeCallCount(t, mx, "take", "late") < 10 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := storeCallCount(t, mx, "take", "late"); got != 10 {
		t.Errorf("late replies: got %v, want 10", got)
	}
	if got := br.State(); got != BreakerClosed {
		t.Errorf("breaker: got %v, want closed", got)
	}
}

// TestGuardedStoreLatencyIsTheCalls: rate_limit_store_call_seconds records the store's own time
// for a take, not the request's wait: a store that answers in 30 ms after the request stopped
// waiting at 2 ms read as a 2 ms store.
func TestGuardedStoreLatencyIsTheCalls(t *testing.T) {
	clock := engine.ClockFunc(func() int64 { return time.Now().UnixMilli() })
	br := newBreaker(100, 60_000, clock, func(from, to BreakerState) {})
	mx := newMetrics(nil, nil)
	g := newGuardedStore(stubStore{delay: 30 * time.Millisecond}, 2*time.Millisecond, true, br, clock, newOrder(clock, false), nil, mx)
	if _, err := g.Take(context.Background(), engine.TakeRequest{Key: "k", Want: 1, Min: 1}); !errors.Is(err, ErrStoreTimeout) {
		t.Fatalf("got %v, want %v", err, ErrStoreTimeout)
	}
	g.calls.Wait()
	var m dto.Metric
	if err := mx.storeLatency.WithLabelValues("take").(prometheus.Histogram).Write(&m); err != nil {
		t.Fatal(err)
	}
	if h := m.GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() < 0.030 {
		t.Errorf("take latency: %d samples summing %.4f s, want 1 of at least 0.030 s", h.GetSampleCount(), h.GetSampleSum())
	}
}

// storeCallCount reads rate_limit_store_calls_total{op, result} from mx's registry.
func storeCallCount(t *testing.T, mx *metrics, op, result string) float64 {
	t.Helper()
	c, err := mx.storeCalls.GetMetricWithLabelValues(op, result)
	if err != nil {
		t.Fatal(err)
	}
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// slowReturns gives tokens back after delay, or fails when ctx ends first, and counts the
// returns it was asked for.
type slowReturns struct {
	stubStore
	delay time.Duration
	calls *atomic.Int64
}

func (s slowReturns) Return(ctx context.Context, _ engine.ReturnRequest) error {
	s.calls.Add(1)
	select {
	case <-time.After(s.delay):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestGuardedStoreReturnsPastCallersDeadline gives back tokens as a Sweep does, one return after
// another under one deadline, to a healthy store that answers each in a millisecond: the returns
// the deadline cuts short, or that come after it, fail without reaching the store, and the
// breaker stays closed. Returns that time out on their own open it.
func TestGuardedStoreReturnsPastCallersDeadline(t *testing.T) {
	clock := engine.ClockFunc(func() int64 { return time.Now().UnixMilli() })
	br := newBreaker(3, 60_000, clock, func(from, to BreakerState) {})
	var calls atomic.Int64
	g := newGuardedStore(slowReturns{delay: time.Millisecond, calls: &calls}, 50*time.Millisecond, true, br, clock, newOrder(clock, false), nil, newMetrics(nil, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	failed := 0
	for range 200 {
		if err := g.Return(ctx, engine.ReturnRequest{Key: "k", N: 1}); err != nil {
			failed++
		}
	}
	if failed == 0 || calls.Load() >= 200 {
		t.Fatalf("200 returns of 1 ms under a 20 ms deadline: %d failed, %d reached the store; want some failed, fewer reached it", failed, calls.Load())
	}
	if got := br.State(); got != BreakerClosed {
		t.Errorf("breaker after the caller's deadline: got %v, want closed", got)
	}

	hung := newGuardedStore(slowReturns{delay: time.Hour, calls: &calls}, time.Millisecond, true, br, clock, newOrder(clock, false), nil, newMetrics(nil, nil))
	for range 3 {
		if err := hung.Return(context.Background(), engine.ReturnRequest{Key: "k", N: 1}); err == nil {
			t.Fatal("a hung store's return: no error")
		}
	}
	if got := br.State(); got != BreakerOpen {
		t.Errorf("breaker after 3 returns that timed out on their own: got %v, want open", got)
	}
}

// TestClientCancelIsNoStoreFailure: calls whose client hangs up (Envoy cancels its call when its
// own client resets the stream) while the store is slow, on fresh keys of a fail-open and a
// fail-closed rule. They were counted as store errors, as a bypass and as a fail-closed denial,
// an outage to the alerts; they are calls the client cancelled, and nothing else.
func TestClientCancelIsNoStoreFailure(t *testing.T) {
	srv := redistest.Start(t)
	in := spawn(t, testModel(), func(c *Config) {
		c.Store, c.RedisURL = "redis", "redis://"+srv.Addr()
		c.StoreTimeout = 500 * time.Millisecond
	})
	in.ask(t, "edge", []string{"stage=open", "user=warm"}) // the connection is up
	srv.Pause()
	for i, rule := range []string{"open", "enforce", "open", "enforce"} {
		ctx, cancel := context.WithCancel(context.Background())
		hangUp := time.AfterFunc(30*time.Millisecond, cancel)
		_, err := in.client.ShouldRateLimit(ctx, request("edge", []string{"stage=" + rule, "user=c" + strconv.Itoa(i)}))
		hangUp.Stop()
		cancel()
		if status.Code(err) != codes.Canceled {
			t.Fatalf("call %d: %v, want the client's cancellation", i, err)
		}
	}
	// Nor do cancelled calls spend a fail-open rule's fallback bucket (2 a minute): two of
	// them spent it, and the next two real requests of the key were denied.
	for range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		hangUp := time.AfterFunc(30*time.Millisecond, cancel)
		_, _ = in.client.ShouldRateLimit(ctx, request("edge", []string{"stage=open-fallback", "user=f"}))
		hangUp.Stop()
		cancel()
	}
	for i := range 2 {
		if got := in.ask(t, "edge", []string{"stage=open-fallback", "user=f"}).OverallCode; got != rlsv3.RateLimitResponse_OK {
			t.Errorf("real request %d after two cancelled ones, the store away: %v, want OK from the fallback's 2", i, got)
		}
	}
	time.Sleep(100 * time.Millisecond) // the server sees each cancellation
	srv.Resume()
	for name, want := range map[string]float64{
		`rate_limit_store_calls_total{op="take",result="error"}`:                           0,
		`rate_limit_bypassed_total{domain="edge",reason="store_error",rule="open"}`:        0,
		`rate_limit_requests_total{decision="failed_closed",domain="edge",rule="enforce"}`: 0,
		`rate_limit_breaker_transitions_total{to="open"}`:                                  0,
	} {
		if got := in.metric(t, name); got != want {
			t.Errorf("%s: got %v, want %v", name, got, want)
		}
	}
	if got := in.metric(t, `rate_limit_store_calls_total{op="take",result="canceled"}`); got < 1 {
		t.Errorf("canceled takes: got %v, want at least 1", got)
	}
}

// TestRequestWaitsOneStoreTimeout: a request's descriptors share one store timeout. Decided one
// after another, each had waited a timeout of its own, and a request of many descriptors whose
// keys had no lease waited one timeout per descriptor on a slow store: 32 of them, 160 ms where
// the store timeout (5 ms) promises that no request waits longer. Each descriptor still makes
// its call, and one the budget no longer covers is decided as a timeout, by its failure mode.
func TestRequestWaitsOneStoreTimeout(t *testing.T) {
	in := spawn(t, testModel(), nil)
	in.store.inner = stubStore{delay: 40 * time.Millisecond, res: engine.Result{Granted: 1}}
	in.store.detach = true
	const n = 32
	descs := make([][]string, n)
	for i := range descs {
		descs[i] = []string{"stage=open", "user=u" + strconv.Itoa(i)} // fail-open: each is admitted
	}
	fastest := time.Hour // of three rounds: a stalled machine can slow one
	for round := range 3 {
		for i := range descs {
			descs[i][1] = "user=r" + strconv.Itoa(round) + "-" + strconv.Itoa(i) // keys with no lease
		}
		start := time.Now()
		resp := in.ask(t, "edge", descs...)
		took := time.Since(start)
		if resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("round %d: %v, want OK (fail-open)", round, resp.OverallCode)
		}
		fastest = min(fastest, took)
	}
	// One timeout is 5 ms; one per descriptor would be 160 ms.
	if fastest > 80*time.Millisecond {
		t.Errorf("the fastest of 3 requests took %v for %d descriptors; want about one store timeout", fastest, n)
	}
	if got := storeCallCount(t, in.mx, "take", "timeout"); got != 3*n {
		t.Errorf("timed-out takes: got %v, want %d", got, 3*n)
	}
}

// TestAdminDropsSlowClients: the admin server reads a request, body included, within its read
// timeout. With a timeout for the header only, a client that sent a header and then its body a
// byte at a time held its connection for as long as it liked, and a few hundred used up the
// enforcer's file descriptors.
func TestAdminDropsSlowClients(t *testing.T) {
	defer func(d time.Duration) { adminReadTimeout = d }(adminReadTimeout)
	adminReadTimeout = 200 * time.Millisecond
	in := spawn(t, testModel(), nil)
	c, err := net.Dial("tcp", in.AdminAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\n\r\na")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	// The server answers the GET, then drops the connection at the read timeout rather than
	// wait for the rest of the body.
	_, _ = io.Copy(io.Discard, c)
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("the connection stayed open %v with its body unsent; want it closed at the read timeout", took)
	}
}
