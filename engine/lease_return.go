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
// Returns run synchronously under ctx; Sweep reports their errors joined.
func (m *LeaseManager) Sweep(ctx context.Context) error {
	now := m.cfg.Clock.Now()
	var errs []error
	m.leases.Range(func(k, v any) bool {
		l := v.(*lease)
		l.mu.Lock()
		var n int64
		var req ReturnRequest
		switch {
		case now >= l.expires && l.balance.Load() > 0:
			n = l.balance.Swap(0)
			l.drained += n
			req = ReturnRequest{Key: l.key, Limits: l.limits, N: n, TakenAt: l.takenAt, Now: m.storeNow(now)}
		case now >= l.expires+m.cfg.TTL && now >= l.blocked && l.pending == 0 && !l.inflight.Load() && l.balance.Load() == 0:
			l.dead = true
			m.leases.Delete(k)
		}
		l.mu.Unlock()
		if n > 0 {
			m.returned.Add(n)
			if err := m.cfg.Store.Return(ctx, req); err != nil {
				m.storeErrors.Add(1)
				errs = append(errs, err)
			}
		}
		return true
	})
	return errors.Join(errs...)
}

// Close gives every lease's balance back to the store and makes later Takes
// fail with ErrClosed; prefetches still in flight give their tokens back
// when they land. It reports store errors joined.
func (m *LeaseManager) Close(ctx context.Context) error {
	m.closed.Store(true)
	now := m.cfg.Clock.Now()
	var errs []error
	m.leases.Range(func(_, v any) bool {
		l := v.(*lease)
		l.mu.Lock()
		n := l.balance.Swap(0)
		l.drained += n
		req := ReturnRequest{Key: l.key, Limits: l.limits, N: n, TakenAt: l.takenAt, Now: m.storeNow(now)}
		l.mu.Unlock()
		if n > 0 {
			m.returned.Add(n)
			if err := m.cfg.Store.Return(ctx, req); err != nil {
				m.storeErrors.Add(1)
				errs = append(errs, err)
			}
		}
		return true
	})
	return errors.Join(errs...)
}

// Stranded is the sum of all local balances: tokens debited from the store
// and not yet spent or given back.
func (m *LeaseManager) Stranded() int64 {
	var sum int64
	m.leases.Range(func(_, v any) bool {
		sum += v.(*lease).balance.Load()
		return true
	})
	return sum
}

// Stats returns the manager's counters so far.
func (m *LeaseManager) Stats() LeaseStats {
	return LeaseStats{
		Fetches: m.fetches.Load(), ShortCircuits: m.shortCircuits.Load(),
		Returned: m.returned.Load(), StoreErrors: m.storeErrors.Load(),
	}
}
