package engine

import (
	"context"
	"errors"
)

// This file holds the ways tokens leave a LeaseManager other than being spent:
// expiry (Sweep) and shutdown (Close), and its counters.

// Sweep gives back to the store the balance of every lease whose TTL has
// passed at the Clock's now, and forgets keys idle for a further TTL. The
// enforcer calls it every second or so, a simulator at virtual instants.
// It visits only the leases that are due (a heap holds, per lease, a time
// no later than the first at which Sweep could act on it), so its cost
// follows the leases that expire, not all the leases. Returns run synchronously under
// ctx; Sweep reports their errors joined.
func (m *LeaseManager) Sweep(ctx context.Context) error {
	now := m.now()
	if m.idle(now) {
		return nil
	}
	var errs []error
	var again []*lease // drained now; Sweep may forget them at its next run
	// The due leases are taken in one batch, and a single-goroutine manager
	// (whose Sweeps run one at a time) keeps the batch's array.
	var due []dueEntry
	if m.single {
		due = m.takeDue(now, m.sweeping[:0])
		m.touch(due)
		defer func() {
			clear(due) // let forgotten leases go
			if cap(due) <= shrinkAbove {
				m.sweeping = due[:0]
			}
		}()
	} else {
		due = m.takeDue(now, nil)
	}
	for i := range due {
		l := m.claim(&due[i])
		if l == nil {
			continue
		}
		m.lock(l)
		var n int64
		var last, older ReturnRequest
		forgot := false
		switch {
		case now >= l.expires && l.balance.Load() > 0:
			last, older = m.leftover(l, now)
			n = last.N + older.N
			// The store holds these tokens again: a key held as dry need not wait for them,
			// as credit lets it go when a grant overflows the balance. A reply computed
			// before the return lands may still say the store is empty; it holds the key
			// no longer than returnGrace (graceHold).
			l.dry, l.blocked, l.returnedAt = false, 0, max(now, 1)
		case now >= l.expires+m.cfg.TTL && now >= l.blocked && l.pending == 0 && !l.inflight.Load() && l.balance.Load() == 0:
			// A lease Sweep finds due is live: a forgotten one has no entry.
			m.forget(l)
			forgot = true
		}
		if !forgot {
			switch idle := max(l.expires+m.cfg.TTL, l.blocked); {
			case now < l.expires:
				m.scheduleBy(l, l.expires)
			case idle > now:
				m.scheduleBy(l, idle)
			case n > 0:
				again = append(again, l)
			default:
				// Kept by a store call in flight: settled reschedules
				// the lease when it lands.
				m.scheduleBy(l, now+m.cfg.TTL)
			}
		}
		m.unlock(l)
		errs = m.returnBoth(ctx, errs, &last, &older)
	}
	for _, l := range again {
		m.lock(l)
		if !l.dead {
			m.scheduleBy(l, now)
		}
		m.unlock(l)
	}
	if m.single {
		m.trimSpares()
	}
	return errors.Join(errs...)
}

// Close gives every lease's balance back to the store and makes later Takes
// fail with ErrClosed; prefetches still in flight give their tokens back
// when they land. It reports store errors joined.
func (m *LeaseManager) Close(ctx context.Context) error {
	m.closed.Store(true)
	now := m.now()
	var errs []error
	m.each(func(l *lease) {
		m.lock(l)
		last, older := m.leftover(l, now)
		m.unlock(l)
		errs = m.returnBoth(ctx, errs, &last, &older)
	})
	return errors.Join(errs...)
}

// Stranded is the sum of all local balances: tokens debited from the store
// and not yet spent or given back.
func (m *LeaseManager) Stranded() int64 {
	if m.single {
		return m.held
	}
	var sum int64
	m.each(func(l *lease) { sum += l.balance.Load() })
	return sum
}

// each calls fn for every live lease.
func (m *LeaseManager) each(fn func(*lease)) {
	if m.unindexed {
		// Every live lease has one live entry, in the fresh list or the due heap.
		for _, l := range m.fresh {
			if l != nil {
				fn(l)
			}
		}
		for i := range m.due {
			if e := &m.due[i]; e.live() {
				fn(e.l)
			}
		}
		return
	}
	if m.single {
		for _, l := range m.local {
			fn(l)
		}
		return
	}
	m.leases.Range(func(_, v any) bool {
		fn(v.(*lease))
		return true
	})
}

// Stats returns the manager's counters so far.
func (m *LeaseManager) Stats() LeaseStats {
	return LeaseStats{
		Fetches: m.fetches.Load(), ShortCircuits: m.shortCircuits.Load(),
		Returned: m.returned.Load(), StoreErrors: m.storeErrors.Load(),
	}
}

// leftover empties l's balance and gives the returns that give it back to
// the store at local time now: the last grant's tokens at its time, and the
// older ones at the earliest time they may have been taken, so that the
// store lowers a window's count only by tokens taken in that window. The
// caller holds l.mu.
func (m *LeaseManager) leftover(l *lease, now int64) (last, older ReturnRequest) {
	n := l.balance.Swap(0)
	l.drained += n
	if m.single {
		m.held -= n
	}
	newer := min(n, int64(l.lastAdd))
	if sameWindows(l.limits(), l.olderAt, l.takenAt) {
		newer = n // one return does
	}
	l.lastAdd = 0
	at := m.storeNow(now)
	last = ReturnRequest{Key: l.key, Limits: l.limits(), N: newer, TakenAt: l.takenAt, Now: at, hint: &l.hint}
	older = ReturnRequest{Key: l.key, Limits: l.limits(), N: n - newer, TakenAt: l.olderAt, Now: at, hint: &l.hint}
	return last, older
}

// sameWindows reports whether store times a and b fall in the same window of
// every window limit of limits: tokens taken at either are refunded alike.
func sameWindows(limits []Limit, a, b int64) bool {
	for _, l := range limits {
		if l.Algorithm != TokenBucket && l.windowOf(a) != l.windowOf(b) {
			return false
		}
	}
	return true
}

// returnBoth returns leftover's unspent tokens to the store synchronously,
// the older first, counts them, and appends the store's errors to errs. Sweep
// calls it for every lease it visits, and most visits return nothing: the
// requests are passed by reference and copied only for a return that is made.
func (m *LeaseManager) returnBoth(ctx context.Context, errs []error, last, older *ReturnRequest) []error {
	for _, req := range [2]*ReturnRequest{older, last} {
		if req.N <= 0 {
			continue
		}
		m.returned.add(m.single, req.N)
		if err := m.cfg.Store.Return(ctx, *req); err != nil {
			m.storeErrors.add(m.single, 1)
			errs = append(errs, err)
		}
	}
	return errs
}
