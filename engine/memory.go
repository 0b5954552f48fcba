package engine

import (
	"context"
	"errors"
	"strconv"
	"sync"
)

// Memory is the in-process Store and the reference model of the Redis
// script: for the same requests at the same times both give the same results
// and hold the same state. It serves single-instance deployments and the
// simulator. Keys expire TTL(limits) after their last use, in the store's
// time. Memory is safe for concurrent use; its zero value is not usable.
type Memory struct {
	clock  Clock
	shards [memShards]memShard
}

const memShards = 32

type memShard struct {
	mu sync.Mutex
	m  map[string]*memEntry
}

type memEntry struct {
	slots  []slot
	last   int64 // latest request time seen, ms
	expire int64 // ms; the state is gone from this instant on
}

// ErrNoClock is returned by a store asked to use its own clock (Now ≤ 0) when
// it has none.
var ErrNoClock = errors.New("store has no clock and the request has no time")

// NewMemory returns an empty Memory store. clock is used for requests whose
// Now is 0 or less; it may be nil when every request carries its time.
func NewMemory(clock Clock) *Memory {
	m := &Memory{clock: clock}
	for i := range m.shards {
		m.shards[i].m = make(map[string]*memEntry)
	}
	return m
}

// Take implements Store.
func (m *Memory) Take(_ context.Context, r TakeRequest) (Result, error) {
	want, need, err := r.normalize()
	if err != nil {
		return Result{}, err
	}
	now, err := m.now(r.Now)
	if err != nil {
		return Result{}, err
	}
	sh := m.shard(r.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.entry(r.Key, len(r.Limits), now)
	res := take(r.Limits, e.slots, now, want, need)
	e.touch(now, r.Limits)
	return res, nil
}

// Return implements Store.
func (m *Memory) Return(_ context.Context, r ReturnRequest) error {
	n, err := r.normalize()
	if err != nil {
		return err
	}
	now, err := m.now(r.Now)
	if err != nil {
		return err
	}
	sh := m.shard(r.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.entry(r.Key, len(r.Limits), now)
	giveBack(r.Limits, e.slots, now, n, r.TakenAt)
	e.touch(now, r.Limits)
	return nil
}

// Expire drops the state of every key whose TTL has passed at now and returns
// how many it dropped. Expired state is never used either way; Expire only
// frees memory, so callers run it now and then.
func (m *Memory) Expire(now int64) int {
	dropped := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if now >= e.expire {
				delete(sh.m, k)
				dropped++
			}
		}
		sh.mu.Unlock()
	}
	return dropped
}

// Fields returns the state of key as the fields of its Redis hash (for
// example "tok0", "ts0", "win1", "cur1"), or nil when the key has none. Tests
// compare it with HGETALL; the simulator may report it.
func (m *Memory) Fields(key string) map[string]int64 {
	sh := m.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[key]
	if e == nil {
		return nil
	}
	f := make(map[string]int64)
	for i, s := range e.slots {
		n := strconv.Itoa(i)
		for _, fv := range [...]struct {
			bit  uint8
			name string
			v    int64
		}{{hasTok, "tok", s.tok}, {hasTs, "ts", s.ts}, {hasWin, "win", s.win}, {hasCur, "cur", s.cur}, {hasPrev, "prev", s.prev}} {
			if s.has&fv.bit != 0 {
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

func (m *Memory) shard(key string) *memShard {
	return &m.shards[fnv32(key)%memShards]
}

// entry returns key's state with room for n limits, fresh when it has expired.
// The caller holds sh.mu.
func (sh *memShard) entry(key string, n int, now int64) *memEntry {
	e := sh.m[key]
	if e == nil {
		e = &memEntry{}
		sh.m[key] = e
	} else if now >= e.expire {
		*e = memEntry{slots: e.slots[:0]}
	}
	for len(e.slots) < n {
		e.slots = append(e.slots, slot{})
	}
	return e
}

// touch renews the TTL from the latest time the key has seen: a clock that
// steps back must not shorten it, or the state could vanish while the
// stored state would still decide differently from fresh state.
func (e *memEntry) touch(now int64, limits []Limit) {
	e.last = max(e.last, now)
	e.expire = e.last + TTL(limits)
}
