package engine

import (
	"context"
	"errors"
	"math"
)

// This file holds the ways tokens reach a LeaseManager's local balance other
// than a request's own synchronous take: prefetches below the low watermark,
// and crediting what the store granted.

// prefetch starts an asynchronous take topping the balance up to B, unless one
// is in flight or the key is blocked.
func (m *LeaseManager) prefetch(l *lease) {
	if l.inflight.Load() || !l.inflight.CompareAndSwap(false, true) {
		return
	}
	now := m.now()
	m.lock(l)
	if now < l.blocked || l.dead || m.closed.Load() {
		m.calledOff(l)
		return
	}
	l.observe(m, now)
	want := l.size - l.balance.Load()
	if want < 1 {
		m.calledOff(l)
		return
	}
	l.fetchWant, l.fetchLimits = want, l.limits()
	if l.fetch == nil {
		l.fetch = l.runFetch
	}
	m.unlock(l)
	m.fetches.add(m.single, 1)
	m.cfg.Dispatcher.Go(l.fetch)
}

// calledOff ends a prefetch that prefetch decided not to send, and unlocks l.
func (m *LeaseManager) calledOff(l *lease) {
	l.inflight.Store(false)
	if !l.dead {
		m.settled(l)
	}
	m.unlock(l)
}

// runFetch is the prefetch that prefetch hands the Dispatcher.
func (l *lease) runFetch(ctx context.Context) {
	m := l.m
	res, err := m.cfg.Store.Take(ctx, TakeRequest{Key: l.key, Limits: l.fetchLimits, Want: l.fetchWant, Min: 1, Now: m.storeNow(m.now()), hint: &l.hint})
	if late := lateOf(err); late != nil {
		// Still on its way: the prefetch stays in flight until it lands.
		m.storeErrors.add(m.single, 1)
		late.Then(func(res Result, err error) { l.landFetch(res, err, false) })
		return
	}
	l.landFetch(res, err, true)
}

// lateOf returns the Late that err is or wraps, or nil. It is a function of
// its own so that the variable errors.As needs escapes, and is allocated,
// only when a store call failed, not at every call.
func lateOf(err error) *Late {
	if err == nil {
		return nil
	}
	var late *Late
	if errors.As(err, &late) {
		return late
	}
	return nil
}

// landFetch takes a prefetch's reply; counted says its error is counted already.
func (l *lease) landFetch(res Result, err error, count bool) {
	m := l.m
	now := m.now()
	m.lock(l)
	switch {
	case err != nil:
		// The next request below the watermark tries again; one that
		// finds the balance short goes to the store itself.
		if count {
			m.storeErrors.add(m.single, 1)
		}
	case !l.sameLimits(l.fetchLimits):
		// A reload changed the key's limits while the prefetch was on its way (relimit).
		m.giveBackAs(l, l.fetchLimits, res.Granted, res.Now)
	default:
		m.landed(l, now, l.fetchLimits, res, 1)
		if res.Granted > 0 {
			m.credit(l, res.Granted, res.Now, now)
		}
	}
	l.inflight.Store(false)
	m.settled(l)
	m.unlock(l)
}

// credit adds n granted tokens to l's balance, up to MaxLease, and gives
// back the rest. The caller holds l.mu.
func (m *LeaseManager) credit(l *lease, n, takenAt, now int64) {
	l.expires = now + m.cfg.TTL
	m.scheduleBy(l, l.expires) // a no-op unless a long block had put Sweep off
	if m.closed.Load() {
		m.giveBack(l, n, takenAt)
		return
	}
	for {
		b := l.balance.Load()
		add := clamp(m.cfg.MaxLease-b, 0, n)
		if l.balance.CompareAndSwap(b, b+add) {
			// What the balance held is older than this grant: the last
			// grant's tokens, and older ones when it held more than those.
			// (Spends since the Load only shrink that part.)
			if b > 0 && b <= int64(l.lastAdd) {
				l.olderAt = l.takenAt
			} else if b == 0 {
				l.olderAt = takenAt
			}
			l.takenAt, l.lastAdd = takenAt, int32(min(add, math.MaxInt32))
			l.credited += add
			if m.single {
				m.held += add
			}
			if n > add {
				// The store holds tokens again: a key held as dry need not wait.
				l.dry, l.blocked, l.returnedAt = false, 0, max(now, 1)
				m.giveBack(l, n-add, takenAt)
			}
			return
		}
	}
}
