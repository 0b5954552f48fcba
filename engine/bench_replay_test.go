package engine

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash"
	"hash/fnv"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rlctl/rlctl/internal/golden"
)

// This file drives the engine as rlctl simulate does, to measure it and to pin its decisions:
// per shard a single-goroutine store and ideal Memory, and per rule and virtual gateway a
// SingleGoroutine LeaseManager whose Dispatcher queues store calls as events 1 ms ahead on a
// virtual clock; every request goes through a LeaseHandle and an ideal MemoryHandle; every
// virtual second every manager is swept, and every minute both stores expire their keys.
// Requests come from a stream with about 220,000 new identities per 1,000,000 lines, most
// seen a few times within seconds, and a few hot identities far over their limits.

// replayRules are the rules every line is decided by: a token bucket, a sliding window with
// short leases, and two limits debited together, keyed by a coarser attribute (an identity's
// group of 8).
var replayRules = []struct {
	name   string
	limits []Limit
	lease  LeaseConfig
	group  int
}{
	{"per_user", []Limit{{Requests: 100, Window: 1000}}, LeaseConfig{}, 1},
	{"per_user_minute", []Limit{{Algorithm: SlidingWindow, Requests: 300, Window: 60_000}}, LeaseConfig{MinLease: 5, MaxLease: 20, TTL: 2000}, 1},
	{"per_group", []Limit{{Requests: 60, Window: 60_000}, {Algorithm: FixedWindow, Requests: 10_000, Window: 86_400_000}}, LeaseConfig{}, 8},
}

const (
	replayGateways = 4
	replayLineUs   = 565   // virtual µs between lines: about 1,770 lines a second
	replayLatency  = 1000  // µs a store call takes
	replayRecent   = 8192  // identities a line may repeat
	replayState    = 32768 // identities whose handles are kept
	replayHot      = 4     // identities far over their limits
)

type replayEvent struct {
	at, seq int64
	fn      func(context.Context)
}

// replayKey is the per-key state simulate keeps: a lease handle per gateway and the ideal
// engine's handle.
type replayKey struct {
	id     int
	leases [replayGateways]LeaseHandle
	ideal  MemoryHandle
}

type replayShard struct {
	store, ideal *Memory
	mgrs         [][]*LeaseManager // [rule][gateway]
}

type replay struct {
	ctx      context.Context
	nowUs    int64
	nextTick int64
	ticks    int64
	seq      int64
	events   []replayEvent
	shards   []replayShard
	rng      *rand.Rand
	newest   int            // the latest identity
	keys     [][]string     // [rule][identity]: store keys, built ahead
	state    [][]*replayKey // [rule][slot]: the recent keys' handles
	digest   hash.Hash64    // of every decision, when not nil
	buf      [8]byte
	admitted int64
}

// newReplay makes a replay over shards shards that has keys built for lines lines. keyCap,
// when above 0, bounds the leases of each shard's managers together (KeyCap).
func newReplay(tb testing.TB, shards, lines int, keyCap int64, digest bool) *replay {
	r := &replay{ctx: context.Background(), nowUs: 1_700_000_000_000_000, rng: rand.New(rand.NewPCG(1, 2))}
	r.nextTick = r.nowUs/1000 - r.nowUs/1000%1000 + 1000
	if digest {
		r.digest = fnv.New64a()
	}
	clock := ClockFunc(func() int64 { return r.nowUs / 1000 })
	dispatch := DispatchFunc(func(fn func(context.Context)) {
		r.seq++
		r.push(replayEvent{at: r.nowUs + replayLatency, seq: r.seq, fn: fn})
	})
	r.shards = make([]replayShard, shards)
	for s := range r.shards {
		sh := &r.shards[s]
		sh.store, sh.ideal = NewSingleGoroutineMemory(clock), NewSingleGoroutineMemory(clock)
		var keys *KeyCap
		if keyCap > 0 {
			keys = NewKeyCap(keyCap)
		}
		for _, rule := range replayRules {
			var ms []*LeaseManager
			for range replayGateways {
				cfg := rule.lease
				cfg.Store, cfg.Clock, cfg.Dispatcher, cfg.SingleGoroutine, cfg.Keys = sh.store, clock, dispatch, true, keys
				m, err := NewLeaseManager(cfg)
				if err != nil {
					tb.Fatal(err)
				}
				ms = append(ms, m)
			}
			sh.mgrs = append(sh.mgrs, ms)
		}
	}
	ids := replayHot + lines/6 + replayRecent
	r.keys = make([][]string, len(replayRules))
	r.state = make([][]*replayKey, len(replayRules))
	for i, rule := range replayRules {
		r.keys[i] = make([]string, replayHot+ids/rule.group+1)
		for id := range r.keys[i] {
			r.keys[i][id] = Key("edge_gateway_limits", rule.name, "client", "api_key:ak_live_"+strconv.Itoa(1_000_000+id), "path", "/v1/orders/{id}")
		}
		r.state[i] = make([]*replayKey, replayState)
	}
	r.newest = replayHot
	return r
}

func (r *replay) push(e replayEvent) {
	q := append(r.events, e)
	for j := len(q) - 1; j > 0; {
		i := (j - 1) / 2
		if q[i].at < q[j].at || q[i].at == q[j].at && q[i].seq < q[j].seq {
			break
		}
		q[i], q[j] = q[j], q[i]
		j = i
	}
	r.events = q
}

func (r *replay) pop() replayEvent {
	q := r.events
	e := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q[n] = replayEvent{}
	q = q[:n]
	for i := 0; ; {
		j := 2*i + 1
		if j >= n {
			break
		}
		if k := j + 1; k < n && (q[k].at < q[j].at || q[k].at == q[j].at && q[k].seq < q[j].seq) {
			j = k
		}
		if q[i].at < q[j].at || q[i].at == q[j].at && q[i].seq < q[j].seq {
			break
		}
		q[i], q[j] = q[j], q[i]
		i = j
	}
	r.events = q
	return e
}

func (r *replay) sum(vs ...int64) {
	if r.digest == nil {
		return
	}
	for _, v := range vs {
		binary.LittleEndian.PutUint64(r.buf[:], uint64(v))
		r.digest.Write(r.buf[:])
	}
}

// advance runs the events due by the next line's time, and the housekeeping of every
// virtual second it passes.
func (r *replay) advance(tb testing.TB) {
	target := r.nowUs + replayLineUs
	for len(r.events) > 0 && r.events[0].at <= target {
		e := r.pop()
		r.nowUs = max(r.nowUs, e.at)
		e.fn(r.ctx)
	}
	r.nowUs = target
	for r.nowUs/1000 >= r.nextTick {
		now := r.nowUs / 1000
		r.nextTick = now - now%1000 + 1000
		r.ticks++
		for s := range r.shards {
			sh := &r.shards[s]
			for _, ms := range sh.mgrs {
				for _, m := range ms {
					if err := m.Sweep(r.ctx); err != nil {
						tb.Fatal(err)
					}
					r.sum(m.Stranded())
				}
			}
			if r.ticks%60 == 0 {
				r.sum(int64(sh.store.Expire(now)), int64(sh.ideal.Expire(now)), int64(sh.store.Len()), int64(sh.ideal.Len()))
			}
		}
	}
}

// identity picks the next line's identity: a hot one, a new one, or a recent one.
func (r *replay) identity() int {
	switch p := r.rng.IntN(100); {
	case p < 5:
		return r.rng.IntN(replayHot)
	case p < 15:
		r.newest++
		return r.newest
	case p < 70:
		return max(replayHot, r.newest-r.rng.IntN(replayRecent/32))
	default:
		return max(replayHot, r.newest-r.rng.IntN(replayRecent))
	}
}

// line replays one line on gateway g.
func (r *replay) line(tb testing.TB, g int) {
	r.advance(tb)
	id := r.identity()
	now := r.nowUs / 1000
	for i, rule := range replayRules {
		kid := id
		if id >= replayHot {
			kid = replayHot + (id-replayHot)/rule.group
		}
		sh := &r.shards[int(uint32(kid)*2654435761>>16)%len(r.shards)]
		slot := &r.state[i][kid%len(r.state[i])]
		k := *slot
		if k == nil || k.id != kid {
			// A key not seen for a while: simulate has pruned its state.
			k = &replayKey{id: kid}
			key := r.keys[i][kid]
			k.ideal = sh.ideal.Handle(key, rule.limits)
			*slot = k
		}
		lh := &k.leases[g]
		if lh.Key() == "" {
			*lh = sh.mgrs[i][g].Handle(r.keys[i][kid], rule.limits)
		}
		d, err := lh.Take(r.ctx, 1)
		if err != nil {
			tb.Fatal(err)
		}
		ideal, err := k.ideal.Take(1, 1, now)
		if err != nil {
			tb.Fatal(err)
		}
		if d.OK {
			r.admitted++
		}
		if r.digest != nil {
			var ok, local int64
			if d.OK {
				ok = 1
			}
			if d.Local {
				local = 1
			}
			r.sum(ok, local, d.Remaining, d.RetryAfter, d.ResetAfter, int64(d.Limiting),
				ideal.Granted, ideal.Remaining, ideal.RetryAfter, ideal.ResetAfter, int64(ideal.Limiting), ideal.Now)
		}
	}
}

// run replays lines lines.
func (r *replay) run(tb testing.TB, lines int) {
	for n := range lines {
		r.line(tb, n%replayGateways)
	}
}

// BenchmarkReplayLike is simulate's use of the engine, per line (three rule decisions, four
// gateways, sweeps and expiry), after a warm-up of 200,000 lines, with every key in one shard
// and spread over 16 shards, as simulate does (each with its own stores and managers). Run it
// with a fixed -benchtime such as 300000x: a line's cost depends on how many keys are live. It
// reports the CPU time a line took too (cpu-ns/op, user and system time of the process, the
// garbage collector's included), which a busy machine disturbs less than sec/op.
func BenchmarkReplayLike(b *testing.B) {
	for _, shards := range []int{1, 16} {
		b.Run(fmt.Sprint("shards=", shards), func(b *testing.B) {
			const warm = 200_000
			r := newReplay(b, shards, warm+b.N, 0, false)
			r.run(b, warm)
			b.ReportAllocs()
			b.ResetTimer()
			cpu := cpuTime()
			r.run(b, b.N)
			cpu = cpuTime() - cpu
			b.StopTimer()
			if cpu > 0 {
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			}
			keys := 0
			for s := range r.shards {
				keys += r.shards[s].store.Len()
			}
			b.ReportMetric(float64(keys), "store-keys")
		})
	}
}

// TestReplayDigest replays 300,000 lines over one shard, over 64, and over one whose
// managers may hold 2,000 leases together (so that they evict), and requires a digest of
// every decision, of the ideal engine's results, of the stranded tokens after every Sweep
// and of every Expire to be the one in testdata/replay.digest: a change that is only meant
// to make the engine cheaper must leave it alone. -update rewrites it.
func TestReplayDigest(t *testing.T) {
	if testing.Short() {
		t.Skip("replays 900,000 lines")
	}
	const lines = 300_000
	var got strings.Builder
	for _, c := range []struct {
		shards int
		keyCap int64
	}{{1, 0}, {64, 0}, {1, 2000}} {
		r := newReplay(t, c.shards, lines, c.keyCap, true)
		r.run(t, lines)
		var stats LeaseStats
		for s := range r.shards {
			for _, ms := range r.shards[s].mgrs {
				for _, m := range ms {
					st := m.Stats()
					stats.Fetches += st.Fetches
					stats.ShortCircuits += st.ShortCircuits
					stats.Returned += st.Returned
					stats.StoreErrors += st.StoreErrors
				}
			}
		}
		var evicted int64
		if c.keyCap > 0 {
			evicted = r.shards[0].mgrs[0][0].cfg.Keys.Evicted()
		}
		fmt.Fprintf(&got, "shards=%d keycap=%d lines=%d admitted=%d fetches=%d short=%d returned=%d errors=%d evicted=%d digest=%016x\n",
			c.shards, c.keyCap, lines, r.admitted, stats.Fetches, stats.ShortCircuits, stats.Returned, stats.StoreErrors, evicted, r.digest.Sum64())
	}
	golden.Check(t, filepath.Join("testdata", "replay.digest"), []byte(got.String()))
}

// BenchmarkLeaseSweepIdle is a Sweep that finds nothing due, on a manager with no leases and
// on one with 1,000 leases that expire later: simulate sweeps every manager of every shard
// every virtual second, and most of them have nothing to do.
func BenchmarkLeaseSweepIdle(b *testing.B) {
	for _, leases := range []int{0, 1000} {
		b.Run(fmt.Sprint("leases=", leases), func(b *testing.B) {
			ctx := context.Background()
			now := int64(1_000_000)
			clock := ClockFunc(func() int64 { return now })
			m, err := NewLeaseManager(LeaseConfig{Store: NewSingleGoroutineMemory(nil), Clock: clock, TTL: 1 << 40, SingleGoroutine: true})
			if err != nil {
				b.Fatal(err)
			}
			limits := []Limit{{Requests: 1e9, Window: 1000}}
			for _, k := range longKeys(leases) {
				if _, err := m.Take(ctx, k, limits, 1); err != nil {
					b.Fatal(err)
				}
			}
			_ = m.Sweep(ctx)
			b.ReportAllocs()
			for b.Loop() {
				now++
				if err := m.Sweep(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

var (
	sinkManager *LeaseManager
	sinkMemory  *Memory
)

// BenchmarkNewEmpty makes an empty single-goroutine LeaseManager and Memory, as each of
// simulate's shards has several of: B/op is what an idle one costs in memory.
func BenchmarkNewEmpty(b *testing.B) {
	store := NewSingleGoroutineMemory(nil)
	clock := ClockFunc(func() int64 { return 1 })
	b.Run("LeaseManager", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m, err := NewLeaseManager(LeaseConfig{Store: store, Clock: clock, SingleGoroutine: true})
			if err != nil {
				b.Fatal(err)
			}
			sinkManager = m
		}
	})
	b.Run("Memory", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sinkMemory = NewSingleGoroutineMemory(clock)
		}
	})
}

// BenchmarkLeaseSweepLifecycle times the Sweeps of 100,000 leases, 10,000 of which fall due
// every second, from their expiry (a return to the store) to being forgotten a TTL later:
// the work simulate's sweeps do, with the leases scattered in memory as a long replay leaves
// them. Per op, one lease's visits.
func BenchmarkLeaseSweepLifecycle(b *testing.B) {
	const leases, perSecond = 100_000, 10_000
	ctx := context.Background()
	keys := longKeys(leases)
	limits := []Limit{{Requests: 1e9, Window: 1000}}
	rng := rand.New(rand.NewPCG(3, 4))
	b.ReportAllocs()
	var cpu time.Duration
	rounds := 0
	for b.Loop() {
		b.StopTimer()
		now := int64(1_000_000)
		clock := ClockFunc(func() int64 { return now })
		m, err := NewLeaseManager(LeaseConfig{Store: NewSingleGoroutineMemory(nil), Clock: clock,
			MinLease: 5, MaxLease: 5, TTL: 10_000, SingleGoroutine: true})
		if err != nil {
			b.Fatal(err)
		}
		// Every lease is made first, then renewed in a random order over ten seconds: the
		// order Sweep visits them in is not the order they lie in memory.
		for _, k := range keys {
			if _, err := m.Take(ctx, k, limits, 5); err != nil {
				b.Fatal(err)
			}
		}
		for n, i := range rng.Perm(leases) {
			now = 1_000_000 + int64(n)*1000/perSecond
			if _, err := m.Take(ctx, keys[i], limits, 1); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		b.StartTimer()
		start := cpuTime()
		for range 32 { // the last leases are forgotten 31 s on
			now += 1000
			if err := m.Sweep(ctx); err != nil {
				b.Fatal(err)
			}
		}
		cpu += cpuTime() - start
		rounds++
		if n := m.Keys(); n != 0 {
			b.Fatalf("%d leases left", n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(rounds*leases), "ns/lease")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(rounds*leases), "cpu-ns/lease")
}

// BenchmarkMemoryExpire is one Expire, as simulate runs it every virtual minute, on a
// single-goroutine Memory holding 100,000 keys of which 10,000 have expired: between
// Expires, untimed, 10,000 new keys arrive and 10,000 known ones are used again.
func BenchmarkMemoryExpire(b *testing.B) {
	const keys, turnover = 100_000, 10_000
	ctx := context.Background()
	names := longKeys(2 * keys)
	limits := []Limit{{Requests: 100, Window: 1000}} // TTL: MinTTL
	m := NewSingleGoroutineMemory(nil)
	now := int64(1_000_000)
	next := 0
	take := func(key string) {
		if _, err := m.Take(ctx, TakeRequest{Key: key, Limits: limits, Want: 1, Now: now}); err != nil {
			b.Fatal(err)
		}
	}
	// Keys arrive turnover a "minute", each minute's 6 ms apart.
	for range keys {
		now += MinTTL / turnover
		take(names[next%len(names)])
		next++
	}
	m.Expire(now)
	rng := rand.New(rand.NewPCG(5, 6))
	b.ReportAllocs()
	dropped := 0
	for b.Loop() {
		b.StopTimer()
		for range turnover {
			now += MinTTL / turnover
			take(names[next%len(names)])
			take(names[(next-1-rng.IntN(keys))%len(names)])
			next++
		}
		b.StartTimer()
		dropped += m.Expire(now)
	}
	b.ReportMetric(float64(dropped)/float64(b.N), "dropped/op")
}

// BenchmarkMemoryExpireIdle is an Expire that finds nothing due, on a single-goroutine
// Memory holding 10,000 keys: simulate expires every shard's stores every virtual minute.
func BenchmarkMemoryExpireIdle(b *testing.B) {
	ctx := context.Background()
	m := NewSingleGoroutineMemory(nil)
	limits := []Limit{{Requests: 100, Window: 1000}}
	now := int64(1_000_000)
	for _, k := range longKeys(10_000) {
		if _, err := m.Take(ctx, TakeRequest{Key: k, Limits: limits, Want: 1, Now: now}); err != nil {
			b.Fatal(err)
		}
	}
	m.Expire(now)
	b.ReportAllocs()
	for b.Loop() {
		if m.Expire(now+MinTTL-1) != 0 {
			b.Fatal("expired")
		}
	}
}
