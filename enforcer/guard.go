package enforcer

import (
	"context"
	"errors"
	"net"
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
	detach  bool
	breaker *breaker
	clock   engine.Clock
	order   *order
	journal *journal.Writer

	granted, denied, failed, timedOut, open prometheus.Counter
	returned, returnFailed                  prometheus.Counter
	takeLatency, returnLatency              prometheus.Observer
	leaseSize                               prometheus.Observer
}

func newGuardedStore(inner engine.Store, timeout time.Duration, detach bool, br *breaker, clock engine.Clock, o *order, j *journal.Writer, mx *metrics) *guardedStore {
	return &guardedStore{
		inner: inner, timeout: timeout, detach: detach, breaker: br, clock: clock, order: o, journal: j,
		granted:       mx.storeCalls.WithLabelValues("take", "granted"),
		denied:        mx.storeCalls.WithLabelValues("take", "denied"),
		failed:        mx.storeCalls.WithLabelValues("take", "error"),
		timedOut:      mx.storeCalls.WithLabelValues("take", "timeout"),
		open:          mx.storeCalls.WithLabelValues("take", "circuit_open"),
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
	if !g.breaker.Allow() {
		g.open.Inc()
		g.journalTake(ctx, r, engine.Result{}, ErrCircuitOpen, 0)
		return engine.Result{}, ErrCircuitOpen
	}
	start := time.Now()
	var res engine.Result
	var err error
	if g.detach {
		res, err = g.detached(ctx, r)
	} else {
		res, err = g.inner.Take(ctx, r)
	}
	took := time.Since(start)
	g.takeLatency.Observe(took.Seconds())
	g.breaker.Record(err == nil || errors.Is(err, engine.ErrBadRequest))
	switch {
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

func (g *guardedStore) detached(ctx context.Context, r engine.TakeRequest) (engine.Result, error) {
	// The request waits at most g.timeout. The call itself gets twice that: on a busy machine a
	// reply can reach the socket in time while the goroutine that reads it waits to be scheduled,
	// and a deadline already past would make the client discard it unread.
	wait := time.NewTimer(g.timeout)
	defer wait.Stop()
	callCtx, cancel := context.WithTimeout(ctx, 2*g.timeout)
	ch := make(chan takeReply, 1)
	go func() {
		defer cancel()
		res, err := g.inner.Take(callCtx, r)
		ch <- takeReply{res, err}
	}()
	select {
	case rep := <-ch:
		return g.reply(rep)
	case <-wait.C:
	case <-ctx.Done():
		return engine.Result{}, ctx.Err()
	}
	// A reply that landed while this goroutine waited to run is still on time.
	select {
	case rep := <-ch:
		return g.reply(rep)
	default:
		// The call may still debit tokens that nobody spends: an under-admission, never an
		// over-admission.
		return engine.Result{}, ErrStoreTimeout
	}
}

// reply maps a detached call's error: the call's own deadline, seen as a context error or as
// a network timeout, is a store timeout.
func (g *guardedStore) reply(rep takeReply) (engine.Result, error) {
	var ne net.Error
	if errors.Is(rep.err, context.DeadlineExceeded) || (errors.As(rep.err, &ne) && ne.Timeout()) {
		return rep.res, ErrStoreTimeout
	}
	return rep.res, rep.err
}

// Return implements engine.Store. Returns are not on the request path; they use the same
// timeout and breaker, and a failed return only strands tokens until the key's TTL.
func (g *guardedStore) Return(ctx context.Context, r engine.ReturnRequest) error {
	g.order.reached(ctx)
	if !g.breaker.Allow() {
		g.returnFailed.Inc()
		g.journalReturn(r, ErrCircuitOpen, 0)
		return ErrCircuitOpen
	}
	ctx, cancel := context.WithTimeout(ctx, max(g.timeout, 50*time.Millisecond))
	defer cancel()
	start := time.Now()
	err := g.inner.Return(ctx, r)
	took := time.Since(start)
	g.returnLatency.Observe(took.Seconds())
	g.breaker.Record(err == nil || errors.Is(err, engine.ErrBadRequest))
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
