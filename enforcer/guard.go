package enforcer

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/journal"
)

// ErrCircuitOpen is the error of a store call refused because the circuit breaker is open.
var ErrCircuitOpen = errors.New("store: circuit breaker open")

// ErrStoreTimeout is the error of a store call that did not answer within the store timeout.
var ErrStoreTimeout = errors.New("store: timeout")

// guardedStore wraps the real store with everything a store call owes the request path: the
// circuit breaker (no call while it is open), a hard timeout, metrics and the journal's store
// records. It implements engine.Store, so the lease manager sees an ordinary store.
type guardedStore struct {
	inner   engine.Store
	timeout time.Duration
	// detach runs each call on a goroutine of its own and stops waiting at the timeout, so
	// that no client-library behaviour (dial retries, a pool wait) can hold a request longer.
	// The in-process memory store never blocks and is called directly.
	detach bool
	// callTimeout is a detached call's own deadline, longer than the request's wait: see
	// detached for what counts as a timeout.
	callTimeout time.Duration
	calls       sync.WaitGroup // detached calls still running
	breaker     *breaker
	clock       engine.Clock
	order       *order
	journal     *journal.Writer

	lastErr atomic.Pointer[string] // lastFailure

	granted, denied, failed, timedOut, late, open, canceled prometheus.Counter
	returned, returnFailed                                  prometheus.Counter
	takeLatency, returnLatency                              prometheus.Observer
	leaseSize                                               prometheus.Observer
}

func newGuardedStore(inner engine.Store, timeout time.Duration, detach bool, br *breaker, clock engine.Clock, o *order, j *journal.Writer, mx *metrics) *guardedStore {
	return &guardedStore{
		inner: inner, timeout: timeout, detach: detach, callTimeout: callTimeoutOf(timeout), breaker: br, clock: clock, order: o, journal: j,
		granted:       mx.storeCalls.WithLabelValues("take", "granted"),
		denied:        mx.storeCalls.WithLabelValues("take", "denied"),
		failed:        mx.storeCalls.WithLabelValues("take", "error"),
		timedOut:      mx.storeCalls.WithLabelValues("take", "timeout"),
		late:          mx.storeCalls.WithLabelValues("take", "late"),
		open:          mx.storeCalls.WithLabelValues("take", "circuit_open"),
		canceled:      mx.storeCalls.WithLabelValues("take", "canceled"),
		returned:      mx.storeCalls.WithLabelValues("return", "ok"),
		returnFailed:  mx.storeCalls.WithLabelValues("return", "error"),
		takeLatency:   mx.storeLatency.WithLabelValues("take"),
		returnLatency: mx.storeLatency.WithLabelValues("return"),
		leaseSize:     mx.leaseSize,
	}
}

type takeReply struct {
	res engine.Result
	err error
}

// Take implements engine.Store.
func (g *guardedStore) Take(ctx context.Context, r engine.TakeRequest) (engine.Result, error) {
	g.order.reached(ctx)
	tk, ok := g.breaker.Allow()
	if !ok {
		g.open.Inc()
		g.journalTake(ctx, r, engine.Result{}, ErrCircuitOpen, 0)
		return engine.Result{}, ErrCircuitOpen
	}
	start := time.Now()
	var res engine.Result
	var err error
	if g.detach {
		res, err = g.detached(ctx, tk, r) // the call records its own outcome and latency
	} else {
		res, err = g.inner.Take(ctx, r)
		g.takeLatency.Observe(time.Since(start).Seconds())
		if hungUp(ctx, err) {
			// The caller hung up: that says nothing of the store. Counted as a failure,
			// clients resetting their requests could open the breaker.
			g.breaker.Release(tk)
		} else {
			g.record(tk, err)
		}
	}
	took := time.Since(start) // the request's wait, which the journal keeps
	switch {
	case hungUp(ctx, err):
		g.canceled.Inc()
	case errors.Is(err, ErrStoreTimeout) || errors.Is(err, context.DeadlineExceeded):
		g.timedOut.Inc()
	case err != nil:
		g.failed.Inc()
	case res.Granted > 0:
		g.granted.Inc()
		g.leaseSize.Observe(float64(res.Granted))
	default:
		g.denied.Inc()
	}
	g.journalTake(ctx, r, res, err, took)
	return res, err
}

// callTimeoutOf is the own deadline of a detached call under store timeout t: four store
// timeouts, and at least 50 ms. On two busy cores the goroutine that reads a reply can wait
// tens of milliseconds to run, which says nothing about the store; a store that stopped
// answering still opens the breaker about 50 ms after its first missed calls. The Redis
// client's own read, write and pool timeouts are this deadline too (openStore): a socket
// deadline of the store timeout would fail a read whose reply had arrived in time.
func callTimeoutOf(t time.Duration) time.Duration { return max(4*t, 50*time.Millisecond) }

// storeOK reports whether a store call's error says nothing against the store: none, or a
// request the store rightly refused.
// hungUp reports whether a store call failed with err because its caller hung up.
func hungUp(ctx context.Context, err error) bool {
	return err != nil && errors.Is(ctx.Err(), context.Canceled)
}

func storeOK(err error) bool { return err == nil || errors.Is(err, engine.ErrBadRequest) }

// record records a call's outcome in the breaker, and a failure's error for lastFailure.
func (g *guardedStore) record(tk ticket, err error) {
	ok := storeOK(err)
	if !ok {
		msg := err.Error()
		g.lastErr.Store(&msg)
	}
	g.breaker.Record(tk, ok)
}

// lastFailure is the error of the last store call that failed, "" when none has: what the log
// line of the breaker opening names as its cause, since the calls' own errors are logged at
// Debug (a wrong password, a READONLY replica after a failover).
func (g *guardedStore) lastFailure() string {
	if p := g.lastErr.Load(); p != nil {
		return *p
	}
	return ""
}

// A detached call is in one of these states: its request still waits for it, took its reply,
// or stopped waiting.
const (
	callWaiting int32 = iota
	callDelivered
	callAbandoned
)

// detachedCall is one store take on a goroutine of its own, and the request waiting for it.
type detachedCall struct {
	state atomic.Int32
	reply chan takeReply
	late  *engine.Late // what the request got when it stopped waiting, set before it did
}

// detached makes a take on a goroutine of its own. The request waits at most g.timeout for
// it; the call itself runs until its own deadline, g.callTimeout (callTimeoutOf).
//
// What "timed out" means: the request stops waiting at the store timeout and is decided by its
// rule's failure mode, counted as store_calls{result="timeout"}. The circuit breaker, though,
// judges the call, not the wait: a call that gets its reply before its own deadline is a
// success, even when the request stopped waiting first (store_calls{result="late"}). On two
// busy cores a reply that reached the socket within the store timeout can wait several
// milliseconds for the goroutine that reads it; the breaker then stays closed. A call with no
// reply by its deadline, or an error, is a failure. So a store that stops answering (SIGSTOP,
// a partition) opens the breaker about 50 ms after it stopped, and a store whose replies are
// merely read late does not open it. The request gets an *engine.Late: the lease manager
// keeps the call in flight and takes its reply when it lands, so that its tokens are spent and
// a key at its limit still has one call in flight at most. With a journal, whose replay could
// not know when a late reply landed, the tokens it granted go back to the store instead.
func (g *guardedStore) detached(ctx context.Context, tk ticket, r engine.TakeRequest) (engine.Result, error) {
	wait := time.NewTimer(g.waitFor(ctx))
	defer wait.Stop()
	c := &detachedCall{reply: make(chan takeReply, 1)}
	g.calls.Add(1)
	go g.call(ctx, c, tk, r)
	select {
	case rep := <-c.reply:
		return rep.res, rep.err
	case <-wait.C:
	case <-ctx.Done():
	}
	err := ctx.Err()
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		err = ErrStoreTimeout
	}
	if !g.order.exact() {
		// The lease manager takes the reply when it lands. A journal could not replay
		// that, so with one the tokens go back instead (call).
		c.late = &engine.Late{Err: err}
	}
	if !c.state.CompareAndSwap(callWaiting, callAbandoned) {
		rep := <-c.reply // it landed as the wait ended: still on time
		return rep.res, rep.err
	}
	if c.late != nil {
		return engine.Result{}, c.late
	}
	return engine.Result{}, err
}

// storeBudgetKey is the context key of a request's store budget (withStoreBudget).
type storeBudgetKey struct{}

// withStoreBudget gives the calls of a request's descriptors one store timeout in all, ending
// at until: decided one after another, each waited up to the store timeout of its own, and a
// request of 64 descriptors whose keys had no lease waited 64 timeouts of a slow store (345 ms
// at 10 ms a reply) where the timeout promises 5 ms. A descriptor whose call the budget no
// longer covers still makes it, and is decided as one that timed out (detached).
func withStoreBudget(ctx context.Context, until time.Time) context.Context {
	return context.WithValue(ctx, storeBudgetKey{}, until)
}

// waitFor is how long a request waits for a detached call: the store timeout, or what is left
// of its request's store budget when that is less.
func (g *guardedStore) waitFor(ctx context.Context) time.Duration {
	if until, ok := ctx.Value(storeBudgetKey{}).(time.Time); ok {
		return max(0, min(g.timeout, time.Until(until)))
	}
	return g.timeout
}

// call runs c's take until its own deadline, records the outcome in the breaker, and hands the
// reply to the request if it still waits; if it does not, it counts the late reply and gives
// back what it granted. The request's cancellation does not cancel the call: a client that hung
// up says nothing about the store.
func (g *guardedStore) call(ctx context.Context, c *detachedCall, tk ticket, r engine.TakeRequest) {
	defer g.calls.Done()
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.callTimeout)
	defer cancel()
	start := time.Now()
	res, err := g.inner.Take(callCtx, r)
	// The store's own time, not the request's wait, which ends at the store timeout: a Redis that
	// answers in 40 ms must not read as one that answers in 5.
	g.takeLatency.Observe(time.Since(start).Seconds())
	err = g.callError(err)
	g.record(tk, err)
	if c.state.CompareAndSwap(callWaiting, callDelivered) {
		c.reply <- takeReply{res, err}
		return
	}
	if err == nil {
		g.late.Inc()
	}
	if c.late != nil {
		c.late.End(res, err)
		return
	}
	if err == nil && res.Granted > 0 {
		// Not journaled: the replay, like the request, saw a timeout and gives nothing back.
		ret := engine.ReturnRequest{Key: r.Key, Limits: r.Limits, N: res.Granted, TakenAt: res.Now, Now: r.Now}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(g.timeout, 50*time.Millisecond))
		defer cancel()
		if g.inner.Return(rctx, ret) == nil {
			g.returned.Inc()
		} else {
			g.returnFailed.Inc()
		}
	}
}

// waitCalls waits until every detached call has ended (each within its own deadline), so
// that the tokens of late replies have reached their leases, or until ctx is done.
func (g *guardedStore) waitCalls(ctx context.Context) {
	done := make(chan struct{})
	go func() { g.calls.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// callError maps a detached call's error: the call's own deadline, seen as a context error or
// as a network timeout, is a store timeout.
func (g *guardedStore) callError(err error) error {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return ErrStoreTimeout
	}
	return err
}

// Return implements engine.Store. Returns are not on the request path; they use the same
// timeout and breaker, and a failed return only strands tokens until the key's TTL.
//
// The breaker records only what the store did: a return the caller's own deadline cuts short,
// or that comes after it (a Sweep's budget, spent on a thousand returns of a millisecond each to
// a healthy store), says nothing of the store's health. Counted as failures, such returns opened
// the breaker on a healthy store, and fail-closed rules then denied every request.
func (g *guardedStore) Return(ctx context.Context, r engine.ReturnRequest) error {
	g.order.reached(ctx)
	if err := ctx.Err(); err != nil {
		g.returnFailed.Inc()
		g.journalReturn(r, err, 0)
		return err
	}
	tk, ok := g.breaker.Allow()
	if !ok {
		g.returnFailed.Inc()
		g.journalReturn(r, ErrCircuitOpen, 0)
		return ErrCircuitOpen
	}
	callCtx, cancel := context.WithTimeout(ctx, max(g.timeout, 50*time.Millisecond))
	defer cancel()
	start := time.Now()
	err := g.inner.Return(callCtx, r)
	took := time.Since(start)
	g.returnLatency.Observe(took.Seconds())
	if err == nil || ctx.Err() == nil {
		g.record(tk, err)
	} else {
		g.breaker.Release(tk)
	}
	if err != nil {
		g.returnFailed.Inc()
	} else {
		g.returned.Inc()
	}
	g.journalReturn(r, err, took)
	return err
}

// journalTake records a take's reply. A prefetch's reply enters its key's stripe here (see
// order), so that the record and the lease manager's use of the reply are one section.
func (g *guardedStore) journalTake(ctx context.Context, r engine.TakeRequest, res engine.Result, err error, took time.Duration) {
	if g.journal == nil {
		return
	}
	local, async := g.order.land(ctx, r.Key)
	rec := journal.Record{Kind: journal.KindStore, TimeMs: g.clock.Now(), LocalMs: local, Async: async, Op: journal.OpTake,
		Key: r.Key, Want: r.Want, Min: r.Min, Got: res.Granted, Remaining: res.Remaining, RetryMs: res.RetryAfter,
		ResetMs: res.ResetAfter, LatencyUs: took.Microseconds()}
	if res.Now > 0 {
		rec.TimeMs = res.Now
	}
	if err != nil {
		rec.Err = err.Error()
	}
	g.journal.Write(rec)
}

func (g *guardedStore) journalReturn(r engine.ReturnRequest, err error, took time.Duration) {
	if g.journal == nil {
		return
	}
	rec := journal.Record{Kind: journal.KindStore, TimeMs: g.clock.Now(), Op: journal.OpReturn, Key: r.Key,
		Got: r.N, LatencyUs: took.Microseconds()}
	if err != nil {
		rec.Err = err.Error()
	}
	g.journal.Write(rec)
}
