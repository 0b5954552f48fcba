package engine

import "sync/atomic"

// This file bounds the keys LeaseManagers track: a flood of distinct keys (random tenant IDs,
// the other classic attack on a rate limiter) must not grow an instance's memory without end.

// KeyCap bounds the keys that the LeaseManagers sharing it (LeaseConfig.Keys) hold local
// state for, together. When a new key takes them over the bound, the manager that made it
// evicts the lease that Sweep would visit soonest (the one least recently fetched, or idle the
// longest), after giving its unspent tokens back to the store: an eviction never loses a token,
// it only costs the evicted key a store call when it comes back. Leases with a store call in
// flight are not evicted, so the bound can be passed briefly by the keys whose first take is
// on its way. It is safe for concurrent use.
type KeyCap struct {
	max              int64
	tracked, evicted atomic.Int64
}

// NewKeyCap returns a bound of n keys; n below 1 means 1.
func NewKeyCap(n int64) *KeyCap { return &KeyCap{max: max(1, n)} }

// Max is the bound.
func (c *KeyCap) Max() int64 { return c.max }

// Tracked is the number of keys the managers hold state for now.
func (c *KeyCap) Tracked() int64 { return c.tracked.Load() }

// Evicted is the number of leases evicted so far to stay within the bound.
func (c *KeyCap) Evicted() int64 { return c.evicted.Load() }

// tracking counts a new lease of m and evicts others while m's cap is exceeded. The caller
// holds no lease lock.
func (m *LeaseManager) tracking(keep *lease) {
	c := m.cfg.Keys
	if c == nil {
		return
	}
	if c.tracked.Add(1) <= c.max {
		return
	}
	// A few tries: a lease with a call in flight is put back and the next one tried.
	for range 8 {
		l, at := m.popSoonest()
		if l == nil {
			return
		}
		m.lock(l)
		if l.dead { // a stale schedule: Sweep forgot it already
			m.unlock(l)
			continue
		}
		if l == keep || l.pending > 0 || l.inflight.Load() {
			m.scheduleBy(l, at)
			m.unlock(l)
			continue
		}
		m.forget(l)
		last, older := m.leftover(l, m.now())
		m.returnLater(older)
		m.returnLater(last)
		m.unlock(l)
		c.evicted.Add(1)
		return
	}
}

// forget removes l, whose lock the caller holds, from the manager: later Takes of its key make
// a new lease.
func (m *LeaseManager) forget(l *lease) {
	if l.dead {
		return
	}
	l.dead = true
	if m.single {
		if m.unindexed {
			m.live--
		} else {
			delete(m.local, l.key)
		}
		m.keepSpare(l)
	} else {
		m.leases.CompareAndDelete(l.key, l)
	}
	if c := m.cfg.Keys; c != nil {
		c.tracked.Add(-1)
	}
}

// popSoonest removes and returns the lease with the earliest live entry in the due heap, and
// that entry's time, whether or not it is due; nil when the heap has none.
func (m *LeaseManager) popSoonest() (*lease, int64) {
	if !m.single {
		m.dueMu.Lock()
		defer m.dueMu.Unlock()
	}
	for len(m.due) > 0 {
		e := m.due.pop()
		if e.live() {
			e.l.dueAt = notDue
			return e.l, e.at
		}
	}
	return nil, 0
}
