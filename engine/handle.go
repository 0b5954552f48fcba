package engine

import "context"

// This file holds handles: one key of a LeaseManager or a Memory resolved
// once, so that a caller that keeps per-key state of its own (a simulator,
// say) decides a request without hashing and comparing a long key on every
// call. A handle decides exactly as the keyed call does: it follows the key
// when Sweep forgets a lease or Expire drops a store entry.

// LeaseHandle is one key of a LeaseManager, with its limits. Take on it is
// LeaseManager.Take on its key and limits. A handle is for one goroutine at
// a time (the manager itself may still be shared); make one per key and
// keep it, since making it costs the key lookup it saves.
type LeaseHandle struct {
	m      *LeaseManager
	key    string
	limits []Limit
	ref    LeaseRef
}

// LeaseRef is what a LeaseHandle holds of its key's lease, without the
// manager, the key and the limits: a caller that keeps those once for many
// references (a simulator's key on each of its gateways) keeps 16 bytes a
// reference instead of a handle's 64, and passes them to TakeRef. The zero
// LeaseRef is ready to use.
type LeaseRef struct {
	l   *lease // nil until the first Take; a dead one is replaced
	gen uint32 // l's generation: another is a lease reused for another key
}

// Handle returns a handle on key, whose limits are limits (the same for
// every call with that key, as for Take). key must not change afterwards.
// The handle finds the key's lease at its first Take. It is a value, so
// that a caller can keep it in its own per-key state without allocating;
// use it through a pointer and do not copy it once used.
func (m *LeaseManager) Handle(key string, limits []Limit) LeaseHandle {
	return LeaseHandle{m: m, key: key, limits: limits}
}

// Key is the handle's key.
func (h *LeaseHandle) Key() string { return h.key }

// Take decides a request of cost tokens, as LeaseManager.Take(ctx, key,
// limits, cost) does.
func (h *LeaseHandle) Take(ctx context.Context, cost int64) (Decision, error) {
	return h.m.TakeRef(ctx, &h.ref, h.key, h.limits, cost)
}

// Live reports whether the handle's key has a lease that Sweep has not
// forgotten. A caller of a manager of handles only (LeaseConfig.HandlesOnly)
// must keep the handle while it is live.
func (h *LeaseHandle) Live() bool { return h.m != nil && h.m.LiveRef(&h.ref) }

// TakeRef is Take through r, a reference of key (with limits) in m that the
// caller keeps for it as a LeaseHandle does: always with the same manager,
// key and limits, and on one goroutine at a time.
func (m *LeaseManager) TakeRef(ctx context.Context, r *LeaseRef, key string, limits []Limit, cost int64) (d Decision, err error) {
	return m.takeRef(ctx, r, nil, key, limits, cost)
}

// TakeCell is TakeRef for a single-goroutine manager (LeaseConfig.SingleGoroutine)
// whose Store is a Memory of handles only (NewHandlesOnlyMemory), perhaps
// wrapped: its store calls for key reach the key's state through cell, which
// the caller keeps with its own state of the key and gives every manager of
// that store for the key (each of a simulator's gateways, say). The cell
// holds the key's state in the store, so the caller keeps it while
// Memory.LiveCell says so. On a manager of another kind, or with another
// store, it decides as TakeRef does and the cell goes unused.
func (m *LeaseManager) TakeCell(ctx context.Context, r *LeaseRef, cell *MemoryCell, key string, limits []Limit, cost int64) (d Decision, err error) {
	return m.takeRef(ctx, r, cell, key, limits, cost)
}

func (m *LeaseManager) takeRef(ctx context.Context, r *LeaseRef, cell *MemoryCell, key string, limits []Limit, cost int64) (d Decision, err error) {
	l := r.l
	if l == nil || l.gen != r.gen {
		l = m.lookup(key, false, limits)
		r.l, r.gen = l, l.gen
		m.giveCell(l, cell)
	}
	if rest, ok := m.spend(l, cost); ok {
		m.refill(l, rest)
		m.hit(&d, l, rest)
		return d, nil
	}
	// A lease Sweep forgot holds no tokens, so the spend above failed as it
	// would have on the key's new lease, which the keyed Take would find.
	if m.dead(l) {
		l = m.relookup(l, limits)
		r.l, r.gen = l, l.gen
		m.giveCell(l, cell)
		if rest, ok := m.spend(l, cost); ok {
			m.refill(l, rest)
			m.hit(&d, l, rest)
			return d, nil
		}
	}
	return m.slow(ctx, l, limits, cost)
}

// giveCell makes cell, when there is one, the store hint of l, a lease just
// looked up: every store call for l then reaches the key's state in it.
// Only a single-goroutine manager's leases take one: another's store calls
// may run beside a take.
func (m *LeaseManager) giveCell(l *lease, cell *MemoryCell) {
	if cell != nil && m.single {
		l.hint = storeHint{e: &cell.e}
	}
}

// LiveRef is LeaseHandle.Live of a reference r of m.
func (m *LeaseManager) LiveRef(r *LeaseRef) bool {
	l := r.l
	return l != nil && l.gen == r.gen && !m.dead(l)
}

func (m *LeaseManager) dead(l *lease) bool {
	m.lock(l)
	defer m.unlock(l)
	return l.dead
}

// MemoryHandle is one key of a Memory, with its limits validated once. Take
// on it is Memory.Take on its key and limits. A handle is for one goroutine
// at a time, and for a single-goroutine Memory (NewSingleGoroutineMemory)
// it is as unsafe as the Memory; on a concurrent Memory it locks the key's
// shard as Take does.
type MemoryHandle struct {
	m      *Memory
	key    string
	limits []Limit
	sh     *memShard
	e      *memEntry // nil until the first Take; a dropped one is replaced
}

// Handle returns a handle on key with limits (the same slice every time, as
// for Take). key must not change afterwards. It is a value, as Handle of a
// LeaseManager is.
func (m *Memory) Handle(key string, limits []Limit) MemoryHandle {
	h := MemoryHandle{m: m, key: key, limits: limits}
	h.sh = m.lock(key)
	m.unlock(h.sh)
	return h
}

// Key is the handle's key.
func (h *MemoryHandle) Key() string { return h.key }

// Live reports whether the handle's key has state that Expire has not
// dropped. A caller of a Memory of handles only (NewHandlesOnlyMemory) must
// keep the handle while it is live.
func (h *MemoryHandle) Live() bool {
	if h.m == nil {
		return false // the zero handle
	}
	h.m.lockShard(h.sh)
	defer h.m.unlock(h.sh)
	return h.e != nil && !h.e.dropped
}

// Take takes between need and want tokens at now (0 or less: the store's
// clock), as Memory.Take of TakeRequest{Key, Limits, Want: want, Min: need,
// Now: now} does.
func (h *MemoryHandle) Take(want, need, now int64) (Result, error) {
	m, sh := h.m, h.sh
	m.lockShard(sh)
	defer m.unlock(sh)
	xs, want, need, now, err := m.takeArgs(sh, h.key, h.limits, want, need, now)
	if err != nil {
		return Result{}, err
	}
	e := h.e
	switch {
	case e == nil:
		e = sh.entry(h.key, false, xs, now)
		h.e = e
	case e.dropped:
		e = sh.reentry(h.key, e, xs, now)
		h.e = e
	default:
		e.renew(xs, now)
	}
	res, keep := take(xs, e.slots, now, want, need)
	sh.touch(e, xs, now, m.ttlOf(xs), keep)
	return res, nil
}

// takeArgs checks a take of want tokens, at least need, at now (0 or less:
// the store's clock) against limits, as Take does for the handles and cells
// that skip its lookup of the key: it returns the limits' exact schemes and
// the amounts and time to take with. The caller holds sh's lock.
func (m *Memory) takeArgs(sh *memShard, key string, limits []Limit, want, need, now int64) ([]exact, int64, int64, int64, error) {
	xs, err := sh.exact.of(key, limits)
	if err != nil {
		return nil, 0, 0, 0, err
	}
	if want, need, err = takeAmounts(key, want, need, now); err != nil {
		return nil, 0, 0, 0, err
	}
	if now, err = m.now(now); err != nil {
		return nil, 0, 0, 0, err
	}
	return xs, want, need, now, nil
}
