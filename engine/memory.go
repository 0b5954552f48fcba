package engine

import (
	"context"
	"errors"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Memory is the in-process Store and the reference model of the Redis
// script: for the same requests at the same times both give the same results
// and hold the same state. It serves single-instance deployments and the
// simulator. Keys expire TTL(limits) after their last use, in the store's
// time. A Memory from NewMemory is safe for concurrent use; one from
// NewSingleGoroutineMemory is not. The zero value is not usable.
type Memory struct {
	clock  Clock
	single bool // one goroutine only: one map, no locks
	local  bool // NewLocalMemory: keys expire without MinTTL
	seed   maphash.Seed
	shards []memShard // memShards of them, or one when single
}

const memShards = 32

type memShard struct {
	mu sync.Mutex
	m  map[string]*memEntry
	// unindexed is set in the one shard of NewHandlesOnlyMemory: m stays nil
	// and live counts the entries instead.
	unindexed  bool
	live       int
	exact      exactCache
	expiries   expiryList // when Expire must look at which entry
	nextExpiry int64      // no later than the earliest time in expiries, 0 when unknown
	// maxKeys, when above 0, bounds the shard's keys (NewLocalMemory): a new key in a full
	// shard evicts one, the first of the map's random order, and counts it in evicted.
	maxKeys int
	evicted atomic.Int64
}

type memEntry struct {
	slots   []slot
	last    int64   // latest request time seen, ms
	expire  int64   // ms; the state is gone from this instant on
	dropped bool    // removed from the map by Expire; a MemoryHandle looks the key up again
	inline  [1]slot // the slots of a key of one limit, most keys: more take an array of their own
	key     string  // the entry's key in the map
	// dueAt is the entry's live time in its shard's expiries (notDue when
	// it has none), never later than expire; other times naming it there
	// are stale.
	dueAt int64
	// owner is the Memory of handles only whose key this entry is, in a
	// MemoryCell once used; nil for an entry the Memory allocated.
	owner *Memory
}

// ErrNoClock is returned by a store asked to use its own clock (Now ≤ 0) when
// it has none.
var ErrNoClock = errors.New("store has no clock and the request has no time")

// NewMemory returns an empty Memory store, safe for concurrent use. clock is
// used for requests whose Now is 0 or less; it may be nil when every request
// carries its time.
func NewMemory(clock Clock) *Memory {
	return &Memory{clock: clock, seed: maphash.MakeSeed(), shards: make([]memShard, memShards)}
}

// NewLocalMemory returns a Memory, safe for concurrent use, whose keys expire
// twice their limits' refill time after their last use, without MinTTL: once
// that has passed, fresh state decides as the stored state would. MinTTL keeps
// state that a simulated clock may still need; a Memory that only ever runs on
// clock, such as the enforcer's local fallback buckets, frees a flood of keys
// sooner without it. Its decisions are NewMemory's. maxKeys above 0 bounds the
// keys it holds (about: each of its shards holds its share): a new key beyond it
// evicts another (Evicted), whose next request starts afresh, so that a flood of
// keys while the store is away cannot grow it without end.
func NewLocalMemory(clock Clock, maxKeys int) *Memory {
	m := NewMemory(clock)
	m.local = true
	if maxKeys > 0 {
		for i := range m.shards {
			m.shards[i].maxKeys = max(1, (maxKeys+len(m.shards)-1)/len(m.shards))
		}
	}
	return m
}

// Evicted is the number of keys a bounded Memory (NewLocalMemory) evicted for
// new ones.
func (m *Memory) Evicted() int64 {
	var n int64
	for i := range m.shards {
		n += m.shards[i].evicted.Load()
	}
	return n
}

// ttlOf is how long m keeps the state of a key with limits after its last use.
func (m *Memory) ttlOf(limits []exact) int64 {
	if !m.local {
		return ttl(limits)
	}
	var t int64 = 1
	for i := range limits {
		t = max(t, 2*limits[i].refillMs())
	}
	return t
}

// NewSingleGoroutineMemory returns an empty Memory store for a caller that
// never calls it from two goroutines at once, such as a simulator's event
// loop: it keeps one map and takes no locks. Its decisions and state are
// those of NewMemory, bit for bit.
func NewSingleGoroutineMemory(clock Clock) *Memory {
	// One allocation for the Memory and its one shard: a simulation makes one per shard of
	// its keys, and a concurrent Memory's 32 shards cost 17 KB.
	s := &struct {
		m  Memory
		sh [1]memShard
	}{m: Memory{clock: clock, single: true}}
	s.m.shards = s.sh[:]
	return &s.m
}

// NewHandlesOnlyMemory returns a NewSingleGoroutineMemory for a caller that
// reaches every key through one handle of its own (Memory.Handle) or one cell
// (MemoryCell, with TakeCell), kept while the key's state lives
// (MemoryHandle.Live, LiveCell), and never by key: it
// keeps no index of its keys, so a key seen a few times costs no map
// insert, lookup and delete. Its keyed calls (Take, TakeBytes, Return) fail
// with ErrHandlesOnly and Fields finds nothing; its handles decide as a
// NewSingleGoroutineMemory's do.
func NewHandlesOnlyMemory(clock Clock) *Memory {
	m := NewSingleGoroutineMemory(clock)
	m.shards[0].unindexed = true
	return m
}

// handlesOnly reports whether m is a NewHandlesOnlyMemory.
func (m *Memory) handlesOnly() bool { return m.single && m.shards[0].unindexed }

// Take implements Store.
func (m *Memory) Take(_ context.Context, r TakeRequest) (Result, error) {
	return m.take(r.Key, false, &r)
}

// TakeBytes is Take for a key held in a reused buffer (built with
// AppendKey, say) instead of r.Key, which it ignores: it copies the key only
// the first time it sees it, so a take on a known key does not allocate.
// key may be reused once TakeBytes returns.
func (m *Memory) TakeBytes(_ context.Context, key []byte, r TakeRequest) (Result, error) {
	// The unsafe view is only looked up, never stored: entry clones it.
	r.Key = unsafe.String(unsafe.SliceData(key), len(key))
	return m.take(r.Key, true, &r)
}

func (m *Memory) take(key string, clone bool, r *TakeRequest) (Result, error) {
	if m.handlesOnly() && (clone || !r.hint.isCell()) {
		return Result{}, ErrHandlesOnly
	}
	sh := m.lock(key)
	defer m.unlock(sh)
	limits, err := sh.exact.of(key, r.Limits)
	if err != nil {
		return Result{}, err
	}
	want, need, err := r.amounts()
	if err != nil {
		return Result{}, err
	}
	now, err := m.now(r.Now)
	if err != nil {
		return Result{}, err
	}
	var e *memEntry
	if clone {
		e = sh.entry(key, true, limits, now)
	} else if e, err = m.hinted(sh, key, r.hint, limits, now); err != nil {
		return Result{}, err
	}
	res, keep := take(limits, e.slots, now, want, need)
	sh.touch(e, limits, now, m.ttlOf(limits), keep)
	return res, nil
}

// Return implements Store.
func (m *Memory) Return(_ context.Context, r ReturnRequest) error {
	if m.handlesOnly() && !r.hint.isCell() {
		return ErrHandlesOnly
	}
	sh := m.lock(r.Key)
	defer m.unlock(sh)
	limits, err := sh.exact.of(r.Key, r.Limits)
	if err != nil {
		return err
	}
	n, err := r.amount()
	if err != nil {
		return err
	}
	now, err := m.now(r.Now)
	if err != nil {
		return err
	}
	e, err := m.hinted(sh, r.Key, r.hint, limits, now)
	if err != nil {
		return err
	}
	keep := giveBack(limits, e.slots, now, n, r.TakenAt)
	sh.touch(e, limits, now, m.ttlOf(limits), keep)
	return nil
}

// Expire drops the state of every key whose TTL has passed at now and returns
// how many it dropped. Expired state is never used either way; Expire only
// frees memory, so callers run it now and then. It reads only the keys that
// may have expired (a list of expiry times), not every key.
func (m *Memory) Expire(now int64) int {
	dropped := 0
	for i := range m.shards {
		sh := &m.shards[i]
		m.lockShard(sh)
		n := sh.expire(now)
		if !sh.unindexed && n > 1024 && n > 2*len(sh.m) {
			// A Go map keeps its size after deletes: after a flood of keys, copy the
			// live ones into a map of their own size, so the memory comes back.
			live := make(map[string]*memEntry, len(sh.m))
			for k, e := range sh.m {
				live[k] = e
			}
			sh.m = live
		}
		dropped += n
		m.unlock(sh)
	}
	return dropped
}

// Len is the number of keys m holds state for, expired or not.
func (m *Memory) Len() int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		m.lockShard(sh)
		if sh.unindexed {
			n += sh.live
		} else {
			n += len(sh.m)
		}
		m.unlock(sh)
	}
	return n
}

// Fields returns the state of key as the fields of its Redis hash (for
// example "tok:b60000", "ts:b60000", "win:w3600000", "cur:w3600000", "len:w3600000":
// a field's name and the identity of the limit it belongs to, idSuffix), or nil when
// the key has none. Tests
// compare it with HGETALL; the simulator may report it.
func (m *Memory) Fields(key string) map[string]int64 {
	sh := m.lock(key)
	defer m.unlock(sh)
	e := sh.m[key]
	if e == nil {
		return nil
	}
	f := make(map[string]int64)
	for _, s := range e.slots {
		n := ":" + idSuffix(s.id())
		for _, fv := range [...]struct {
			bit  uint8
			name string
			v    int64
		}{{hasTok, "tok", s.tok}, {hasTs, "ts", s.ts}, {hasWin, "win", s.win}, {hasCur, "cur", s.cur}, {hasPrev, "prev", s.prev}, {hasLen, "len", s.wlen}} {
			if s.has()&fv.bit != 0 {
				f[fv.name+n] = fv.v
			}
		}
	}
	return f
}

func (m *Memory) now(now int64) (int64, error) {
	if now > 0 {
		return now, nil
	}
	if m.clock == nil {
		return 0, ErrNoClock
	}
	return m.clock.Now(), nil
}

// lock returns key's shard, locked unless m is single-goroutine. Sharding
// uses the runtime's AES hash, which is many times faster than FNV on long
// keys; which shard a key lands in is never observable.
func (m *Memory) lock(key string) *memShard {
	if m.single {
		return &m.shards[0]
	}
	sh := &m.shards[maphash.String(m.seed, key)%memShards]
	sh.mu.Lock()
	return sh
}

func (m *Memory) lockShard(sh *memShard) {
	if !m.single {
		sh.mu.Lock()
	}
}

func (m *Memory) unlock(sh *memShard) {
	if !m.single {
		sh.mu.Unlock()
	}
}

// entry returns key's state with room for n limits, fresh when it has expired.
// clone says key is a borrowed view to copy before it is stored. The caller
// holds sh's lock.
func (sh *memShard) entry(key string, clone bool, xs []exact, now int64) *memEntry {
	var e *memEntry
	if !sh.unindexed {
		e = sh.m[key]
	}
	if e == nil {
		if clone {
			key = strings.Clone(key)
		}
		e = &memEntry{key: key, dueAt: notDue}
		e.slots = e.inline[:0]
		sh.add(key, e)
	}
	e.renew(xs, now)
	return e
}

// reentry returns key's state in place of old, its entry until Expire
// dropped it: the entry a keyed call made since, or else old itself, fresh
// and back in the map, so that a key that comes back costs no allocation.
// The caller holds sh's lock; key must not change afterwards.
func (sh *memShard) reentry(key string, old *memEntry, xs []exact, now int64) *memEntry {
	var e *memEntry
	if !sh.unindexed {
		e = sh.m[key]
	}
	if e == nil {
		e = old
		e.slots, e.last, e.expire, e.dropped = e.slots[:0], 0, 0, false
		sh.add(key, e)
	}
	e.renew(xs, now)
	return e
}

// evictOne drops one of sh's keys, the first of the map's random order; its
// expiry, still listed, is stale from now on. The caller holds sh's lock.
func (sh *memShard) evictOne() {
	for k, e := range sh.m {
		e.dropped, e.dueAt = true, notDue
		delete(sh.m, k)
		return
	}
}

// add puts e in sh's map under key, making the map with its first key: a
// Memory that never sees one (a simulation has one per shard of its keys)
// costs no map. The caller holds sh's lock.
func (sh *memShard) add(key string, e *memEntry) {
	if sh.unindexed {
		sh.live++
		return
	}
	if sh.m == nil {
		sh.m = make(map[string]*memEntry)
	}
	if sh.maxKeys > 0 && len(sh.m) >= sh.maxKeys {
		sh.evictOne()
		sh.evicted.Add(1)
		if len(sh.expiries) > 2*sh.maxKeys+64 {
			sh.expiries.dropStale() // the evicted keys' times, far in the future
		}
	}
	sh.m[key] = e
}

// storeHint is a lease's memory of its key's entry in a single-goroutine
// Memory: the store calls of a lease manager's leases then find their
// state without hashing and comparing the long key in a large map, which
// cost more than the decision. The hint is checked (same Memory, same
// key, entry not dropped) before it is used, and a concurrent Memory
// ignores it: two goroutines may call the store for one lease at once.
//
// A hint without m is a cell's (LeaseManager.TakeCell): e is the entry in
// the caller's MemoryCell, the only way a Memory of handles only finds the
// key, and the one that every lease of the key shares.
type storeHint struct {
	m *Memory
	e *memEntry
}

// isCell reports whether h is a MemoryCell's hint.
func (h *storeHint) isCell() bool { return h != nil && h.m == nil && h.e != nil }

// renewed is what a lease made anew keeps of h: the hint of a Memory's own
// entry, which the store checks against the key, but not a cell, which is
// one key's and which TakeCell gives again.
func (h storeHint) renewed() storeHint {
	if h.m == nil {
		return storeHint{}
	}
	return h
}

// hinted is sh.entry for a request that may carry a hint. The caller
// holds sh's lock; key must not change afterwards. A Memory of handles only
// takes the entry of the hint's cell, and fails without one.
func (m *Memory) hinted(sh *memShard, key string, h *storeHint, xs []exact, now int64) (*memEntry, error) {
	if sh.unindexed {
		if !h.isCell() {
			return nil, ErrHandlesOnly
		}
		return m.cellEntry(sh, h.e, key, xs, now)
	}
	if !m.single || h == nil {
		return sh.entry(key, false, xs, now), nil
	}
	if e := h.e; h.m == m && e != nil && e.key == key {
		if e.dropped {
			e = sh.reentry(key, e, xs, now)
			h.e = e
		} else {
			e.renew(xs, now)
		}
		return e, nil
	}
	e := sh.entry(key, false, xs, now)
	*h = storeHint{m: m, e: e}
	return e, nil
}

// MemoryCell holds one key's state of a Memory of handles only
// (NewHandlesOnlyMemory) in the caller's own memory: a caller that keeps
// per-key state of its own (a simulator's key) embeds the cell there, so
// that the key's bucket costs no allocation, no map entry and no pointer to
// follow. Memory.TakeCell takes from it directly, and LeaseManager.TakeCell
// hands it to the lease manager's store calls, so that every lease of the
// key (one per gateway, say) reaches the one state. The zero cell is ready
// to use; it belongs to the first Memory and key it is used with, and must
// not be copied once used. The caller keeps it while it is live (LiveCell):
// the Memory has no other way to the key's state.
type MemoryCell struct {
	e memEntry
}

// ErrCell is returned for a MemoryCell used with a Memory that keeps an index
// of its keys, or with another Memory or key than its first, and for a
// CellPlan asked of such a Memory or used with another than its own.
var ErrCell = errors.New("engine: a MemoryCell or CellPlan used with another Memory or key, or with a Memory that keeps an index of its keys")

// cellEntry returns e, the entry of a MemoryCell, as key's state in m with
// room for n limits, fresh when it has expired or Expire dropped it. The
// caller holds sh's lock, sh being m's one shard.
func (m *Memory) cellEntry(sh *memShard, e *memEntry, key string, xs []exact, now int64) (*memEntry, error) {
	switch {
	case e.owner == nil:
		e.owner, e.key, e.dueAt = m, key, notDue
		e.slots = e.inline[:0]
		sh.add(key, e)
	case e.owner != m || e.key != key:
		return nil, ErrCell
	case e.dropped:
		e.slots, e.last, e.expire, e.dropped = e.slots[:0], 0, 0, false
		sh.add(key, e)
	}
	e.renew(xs, now)
	return e, nil
}

// TakeCell is MemoryHandle.Take for key (with limits), whose state is in c,
// on a Memory of handles only (ErrCell on another).
func (m *Memory) TakeCell(c *MemoryCell, key string, limits []Limit, want, need, now int64) (Result, error) {
	if !m.handlesOnly() {
		return Result{}, ErrCell
	}
	sh := &m.shards[0]
	xs, want, need, now, err := m.takeArgs(sh, key, limits, want, need, now)
	if err != nil {
		return Result{}, err
	}
	e, err := m.cellEntry(sh, &c.e, key, xs, now)
	if err != nil {
		return Result{}, err
	}
	res, keep := take(xs, e.slots, now, want, need)
	sh.touch(e, xs, now, m.ttlOf(xs), keep)
	return res, nil
}

// CellPlan is what TakeCell works out of its limits and amounts on every call, worked out once
// by Memory.PlanCell for a caller that takes with the same ones again and again, as a
// simulator's ideal engine does for each rule: the limits' exact schemes, the amounts and the
// state's time to live.
type CellPlan struct {
	m          *Memory
	xs         []exact
	want, need int64
	ttl        int64
}

// PlanCell checks a take of want tokens, at least need, against limits, as TakeCell does on
// every call, and returns it for TakePlanned on m. The plan keeps its own copy of what it
// needs of limits: later changes to them do not reach it.
func (m *Memory) PlanCell(limits []Limit, want, need int64) (*CellPlan, error) {
	if !m.handlesOnly() {
		return nil, ErrCell
	}
	xs, err := exactLimits(nil, "", limits)
	if err != nil {
		return nil, err
	}
	if want, need, err = takeAmounts("", want, need, 0); err != nil {
		return nil, err
	}
	return &CellPlan{m: m, xs: xs, want: want, need: need, ttl: m.ttlOf(xs)}, nil
}

// TakePlanned is TakeCell for key with plan's limits and amounts, at now (0 or less: m's
// clock): the same decision and state, without checking the limits and amounts again.
func (m *Memory) TakePlanned(c *MemoryCell, key string, plan *CellPlan, now int64) (Result, error) {
	if plan.m != m {
		return Result{}, ErrCell
	}
	if err := checkNow(key, now); err != nil { // the time given, as TakeCell checks it
		return Result{}, err
	}
	now, err := m.now(now)
	if err != nil {
		return Result{}, err
	}
	sh := &m.shards[0]
	e, err := m.cellEntry(sh, &c.e, key, plan.xs, now)
	if err != nil {
		return Result{}, err
	}
	res, keep := take(plan.xs, e.slots, now, plan.want, plan.need)
	sh.touch(e, plan.xs, now, plan.ttl, keep)
	return res, nil
}

// LiveCell reports whether m holds state in c that Expire has not dropped.
func (m *Memory) LiveCell(c *MemoryCell) bool {
	return c.e.owner == m && !c.e.dropped
}

// renew makes e fresh when it has expired at now, and gives its slots the order of xs
// (align). It is inlined for the common case, a live key of one limit whose slot is in
// place.
func (e *memEntry) renew(xs []exact, now int64) {
	if s := e.slots; now >= e.expire || len(s) != 1 || len(xs) != 1 || s[0].id() != limitID(xs[0].Limit, 0) {
		e.renewAll(xs, now)
	}
}

// renewAll is renew for any key.
func (e *memEntry) renewAll(xs []exact, now int64) {
	if now >= e.expire {
		e.slots, e.last, e.expire = e.slots[:0], 0, 0
	}
	if len(e.slots) == 0 {
		// Fresh state, most often a new key's: in the slots it has room for (one inline).
		for i := range xs {
			e.slots = append(e.slots, freshSlot(idAt(xs, i)))
		}
		return
	}
	if len(e.slots) >= len(xs) {
		aligned := true
		for i := range xs {
			if e.slots[i].id() != idAt(xs, i) {
				aligned = false
				break
			}
		}
		if aligned {
			return
		}
	}
	e.slots = align(xs, e.slots)
}

// touch renews e's TTL from the latest time the key has seen: a clock that
// steps back must not shorten it, or the state could vanish while the
// stored state would still decide differently from fresh state. With keep (a
// foreign window, see slot), or when e holds fields that the call's limits xs
// do not own (see others), the TTL is not shortened either; others is worked
// out only when the TTL would shrink, which a call with the same limits as the
// last never makes it do. The caller holds sh's lock.
func (sh *memShard) touch(e *memEntry, xs []exact, now, ttl int64, keep bool) {
	e.last = max(e.last, now)
	expire := e.last + ttl
	if expire < e.expire && (keep || others(xs, e.slots)) {
		expire = e.expire
	}
	e.expire = expire
	if e.expire < e.dueAt {
		// A new entry, or its TTL shrank with its limits: a later expiry
		// costs nothing now, Expire moves the entry's time on when it
		// finds it early.
		sh.expireBy(e, e.expire)
	}
}
