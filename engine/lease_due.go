package engine

import (
	"math"
	"sync/atomic"
)

// This file holds what lets a LeaseManager run without locks for a single
// goroutine, and the schedule that lets Sweep visit only the leases that are
// due instead of every lease.

// plainable is an int64 that is read and written atomically, except by a
// single-goroutine manager's hit path, which uses v directly.
type plainable struct {
	_ [0]atomic.Int64 // 64-bit alignment on 32-bit platforms
	v int64
}

func (p *plainable) Load() int64        { return atomic.LoadInt64(&p.v) }
func (p *plainable) Swap(n int64) int64 { return atomic.SwapInt64(&p.v, n) }
func (p *plainable) CompareAndSwap(old, n int64) bool {
	return atomic.CompareAndSwapInt64(&p.v, old, n)
}

// add adds n, atomically unless single: a single-goroutine manager's counters
// spare the locked instruction.
func (p *plainable) add(single bool, n int64) {
	if single {
		p.v += n
		return
	}
	atomic.AddInt64(&p.v, n)
}

// lock takes l.mu unless the manager is single-goroutine.
func (m *LeaseManager) lock(l *lease) {
	if !m.single {
		l.mu.Lock()
	}
}

func (m *LeaseManager) unlock(l *lease) {
	if !m.single {
		l.mu.Unlock()
	}
}

// now reads the Clock and remembers the latest reading for local hits.
func (m *LeaseManager) now() int64 {
	now := m.cfg.Clock.Now()
	if m.single {
		m.seen.v = max(m.seen.v, now)
		return now
	}
	for {
		seen := m.seen.Load()
		if now <= seen || m.seen.CompareAndSwap(seen, now) {
			return now
		}
	}
}

// notDue is the dueAt of a lease without a live entry in the heap.
const notDue = math.MaxInt64

// scheduleBy makes Sweep look at l at local time at (at its first run from
// then on), unless it will sooner. The heap is lazy: an earlier time pushes a
// new entry and makes the old one stale; a later one changes nothing, and
// Sweep, finding nothing to do when the early entry comes due, pushes the
// later time then. So a credit, which only ever puts the work later, costs
// a comparison, and a lease renewed all the time is visited once per TTL.
// Every live lease has one live entry (but while Sweep works on it), in
// the heap or in the fresh list (enlist).
//
// Callers schedule a lease for the first time at which Sweep could act on
// it, given what they just changed, so that the time replaces a new
// lease's place in the fresh list: Sweep would only have rescheduled it.
func (m *LeaseManager) scheduleBy(l *lease, at int64) {
	if !m.single {
		m.dueMu.Lock()
		defer m.dueMu.Unlock()
	}
	if l.freshAt > 0 {
		m.fresh[l.freshAt-1], l.freshAt = nil, 0
	}
	if at < l.dueAt {
		l.dueAt = at
		m.due.push(dueEntry{at: at, l: l, gen: l.gen})
	}
}

// enlist makes Sweep look at l, a new lease, at its next run, unless l is
// scheduled before. New leases wait in a list rather than in the heap:
// most are scheduled at their expiry by their first store reply, and are
// then taken off the list without a visit from Sweep.
func (m *LeaseManager) enlist(l *lease) {
	if !m.single {
		m.dueMu.Lock()
		defer m.dueMu.Unlock()
	}
	// Another goroutine that found the new lease may have scheduled it
	// already; that entry is stale now, as it was behind an entry at 0.
	l.dueAt = notDue
	m.fresh = append(m.fresh, l)
	l.freshAt = int32(len(m.fresh))
}

// idle reports whether Sweep has nothing to look at at now: no new lease and
// nothing due. An idle Sweep is the common case in a simulation that sweeps
// many managers every virtual second.
func (m *LeaseManager) idle(now int64) bool {
	if !m.single {
		m.dueMu.Lock()
		idle := len(m.fresh) == 0 && (len(m.due) == 0 || m.due[0].at > now)
		m.dueMu.Unlock()
		return idle
	}
	return len(m.fresh) == 0 && (len(m.due) == 0 || m.due[0].at > now)
}

// takeDue appends to due the entries of every lease that Sweep must look at
// at now: the fresh list's, then the heap's in time order. A heap entry is not
// checked yet (claim does that), so that taking the batch touches no lease.
func (m *LeaseManager) takeDue(now int64, due []dueEntry) []dueEntry {
	if !m.single {
		m.dueMu.Lock()
		defer m.dueMu.Unlock()
	}
	for i := len(m.fresh) - 1; i >= 0; i-- {
		if l := m.fresh[i]; l != nil {
			l.freshAt = 0
			due = append(due, dueEntry{l: l, fresh: true})
		}
	}
	clear(m.fresh)
	m.fresh = m.fresh[:0]
	if cap(m.fresh) > shrinkAbove {
		m.fresh = nil // emptied: let a flood's list go
	}
	m.due.shrink()
	for len(m.due) > 0 && m.due[0].at <= now {
		due = append(due, m.due.pop())
	}
	return due
}

// claim returns the lease of e, an entry takeDue took, for Sweep to work on,
// or nil when e is stale.
func (m *LeaseManager) claim(e *dueEntry) *lease {
	if e.fresh {
		return e.l // taken off the list by takeDue
	}
	if !m.single {
		m.dueMu.Lock()
		defer m.dueMu.Unlock()
	}
	if !e.live() {
		return nil
	}
	e.l.dueAt = notDue
	return e.l
}

// touch reads the cache lines of the leases in due that Sweep reads, in a loop
// of independent loads, so that their cache misses overlap instead of coming
// one lease at a time (a due lease has usually not been used for a TTL). Only
// a single-goroutine manager does it: the loads are not synchronized.
func (m *LeaseManager) touch(due []dueEntry) {
	var sum int64
	for i := range due {
		l := due[i].l
		sum += l.dueAt + int64(len(l.key)) + l.drained + int64(l.lastAdd)
	}
	// Then the store's entries of the keys whose balance goes back.
	for i := range due {
		if l := due[i].l; l.balance.v > 0 && l.hint.e != nil {
			sum += l.hint.e.expire
		}
	}
	m.touched = sum
}

// dueEntry asks Sweep to look at l, in its life gen, at local time at.
type dueEntry struct {
	at    int64
	l     *lease
	gen   uint32
	fresh bool // a lease of the fresh list, in a Sweep's batch (takeDue)
}

// live reports whether e is its lease's live entry. The caller holds m.dueMu.
func (e *dueEntry) live() bool {
	return e.at == e.l.dueAt && e.gen == e.l.gen
}

// dueHeap is a binary min-heap of entries by time. It is container/heap's
// algorithm without the interface calls, and it compares times held in the
// array, so sifting does not touch the leases.
type dueHeap []dueEntry

// shrinkAbove is the capacity above which the due heap and the fresh list give
// memory back once they hold a quarter of it or less.
const shrinkAbove = 4096

// shrink reallocates h when it uses a quarter of its capacity or less: after a
// flood of keys has been swept, the heap's array would otherwise keep its peak.
func (h *dueHeap) shrink() {
	if c := cap(*h); c > shrinkAbove && len(*h) <= c/4 {
		*h = append(make(dueHeap, 0, 2*len(*h)), *h...)
	}
}

func (h *dueHeap) push(e dueEntry) {
	*h = append(*h, e)
	h.up(len(*h) - 1)
}

func (h *dueHeap) pop() dueEntry {
	old := *h
	n := len(old) - 1
	e := old[0]
	old[0] = old[n]
	old[n] = dueEntry{}
	*h = old[:n]
	h.down(0)
	return e
}

func (h dueHeap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if h[i].at <= h[j].at {
			break
		}
		h[i], h[j] = h[j], h[i]
		j = i
	}
}

func (h dueHeap) down(i int) {
	n := len(h)
	for {
		j := 2*i + 1
		if j >= n {
			return
		}
		if r := j + 1; r < n && h[r].at < h[j].at {
			j = r
		}
		if h[i].at <= h[j].at {
			return
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
}
