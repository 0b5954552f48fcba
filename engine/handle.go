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
	l      *lease // nil until the first Take; a dead one is replaced
	gen    uint32 // l's generation: another is a lease reused for another key
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
func (h *LeaseHandle) Take(ctx context.Context, cost int64) (d Decision, err error) {
	m, l := h.m, h.l
	if l == nil || l.gen != h.gen {
		l = m.lookup(h.key, false, h.limits)
		h.l, h.gen = l, l.gen
	}
	if rest, ok := m.spend(l, cost); ok {
		m.refill(l, rest)
		m.hit(&d, l, rest)
		return d, nil
	}
	// A lease Sweep forgot holds no tokens, so the spend above failed as it
	// would have on the key's new lease, which the keyed Take would find.
	if h.dead(l) {
		l = m.relookup(l, h.limits)
		h.l, h.gen = l, l.gen
		if rest, ok := m.spend(l, cost); ok {
			m.refill(l, rest)
			m.hit(&d, l, rest)
			return d, nil
		}
	}
	return m.slow(ctx, l, h.limits, cost)
}

// Live reports whether the handle's key has a lease that Sweep has not
// forgotten. A caller of a manager of handles only (LeaseConfig.HandlesOnly)
// must keep the handle while it is live.
func (h *LeaseHandle) Live() bool {
	l := h.l
	return l != nil && l.gen == h.gen && !h.dead(l)
}

func (h *LeaseHandle) dead(l *lease) bool {
	h.m.lock(l)
	defer h.m.unlock(l)
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
	xs, err := sh.exact.of(h.key, h.limits)
	if err != nil {
		return Result{}, err
	}
	r := TakeRequest{Key: h.key, Limits: h.limits, Want: want, Min: need, Now: now}
	want, need, err = r.amounts()
	if err != nil {
		return Result{}, err
	}
	now, err = m.now(now)
	if err != nil {
		return Result{}, err
	}
	e := h.e
	switch {
	case e == nil:
		e = sh.entry(h.key, false, len(xs), now)
		h.e = e
	case e.dropped:
		e = sh.reentry(h.key, e, len(xs), now)
		h.e = e
	default:
		e.renew(len(xs), now)
	}
	res := take(xs, e.slots, now, want, need)
	sh.touch(e, now, h.m.ttlOf(xs))
	return res, nil
}
