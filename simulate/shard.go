package simulate

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/policy"
)

// The replay partitions its keys into shardCount shards by the hash of their store key. A
// shard is a virtual fleet of its own for its keys: its own store, ideal engine, event queue,
// latency draws and lease managers, and the state of its keys. A key's decisions depend only
// on its own records, in time order, and on the housekeeping ticks (every shard runs every
// tick, at the record the sequencer places it before), so a shard decides each of its keys
// exactly as one fleet holding every key would: no store call, lease or tick of one key
// touches another's state. Shards share nothing but read-only configuration, so any number of
// workers may run them side by side, each shard on one worker at a time.
//
// The count is fixed, not the number of workers: with a uniform --store-latency each shard
// draws its replies' latencies from its own stream in its own order, so the figures depend on
// how keys are split into shards, and must not depend on how many workers ran them.
//
// Sixteen is enough for sixteen cores, and few enough that what a decision reads of its
// shard (its time and queue, each rule's counters and series, the lease managers) stays in
// the caches between one of the shard's decisions and the next. With 64 shards a replay took
// about a tenth more user time on two cores (ADR 0002), and 16 cores gained nothing: in the
// benchmark log one key takes 13 % of the decisions whatever the count, and its shard 14 %
// with 64 shards, 17 % with 16.
const (
	shardBits  = 4
	shardCount = 1 << shardBits // at most 64: a worker's shards are the bits of a uint64
)

// shardOf is the shard of a key or address whose hash (storeKeyHashes, addrHash) is h.
func shardOf(h uint64) int { return int(h >> (64 - shardBits)) }

// Bounds on what a replay remembers beyond its live keys, over all shards.
const (
	// maxNATAddrs bounds the addresses and subnets whose users the shared-NAT check counts.
	maxNATAddrs = 1 << 21
	// maxDeniedKeys bounds the denied keys kept for the top-denied lists and NAT collateral.
	// Live keys are kept however many there are: they hold leases.
	maxDeniedKeys = 1 << 18
)

// shard runs the decisions of the keys whose hashes fall in it (shardOf).
type shard struct {
	id  int
	sim *Simulator // read-only here: the configuration, domains, rules and start time
	ctx context.Context

	store  *engine.Memory // the virtual fleet's shared store, for this shard's keys
	ideal  *engine.Memory // the ideal single-bucket engine
	events eventQueue
	seq    uint64
	nowUs  int64
	// Scratch of storeKey: each shape's entries with their keys, by domain and shape (as a
	// requestBuilder's), and the key built of them.
	entries [][][]policy.Entry
	keyBuf  []byte
	lat     Latency
	clock   engine.Clock
	disp    engine.Dispatcher

	// at is the number of the last record the shard moved its time to (prepared.n).
	at int64

	bucketMs int64
	// lastBucket is the bucket of the last record once finish has begun, -1 before: the store
	// replies finish lands after it count in it, so that every series ends with the log.
	lastBucket int
	// inBucket is the bucket the shard's time was last found in, and inBucketEndUs the first
	// microsecond past it (bucket): time only moves forward, so most calls need no division.
	inBucket      int
	inBucketEndUs int64

	rules []shardRule // by ruleSim.index
	// storeErr is the first error of the virtual store, which never fails but for a bug: a
	// lease manager would treat it as an outage and fail open, so the replay ends instead.
	storeErr error
	keys     keyTable
	nat      natTracker
	// deniedLimit bounds keys.denied; droppedDenied counts the denied keys forgotten since.
	deniedLimit   int
	droppedDenied int64
}

// shardRule is one rule within a shard: its statistics, its lease manager on each gateway, and
// its take in the ideal engine, whose limits and amounts are checked once, here.
type shardRule struct {
	stats   ruleStats
	gateway []*engine.LeaseManager // nil until the shard first uses the gateway for the rule
	ideal   *engine.CellPlan
}

// newShard returns shard id of s, with each rule's take in the ideal engine planned; it fails
// when a rule's plan does.
func newShard(s *Simulator, id int) (*shard, error) {
	sh := &shard{id: id, sim: s, ctx: context.Background(), bucketMs: 1000, lastBucket: -1,
		lat: s.cfg.Latency.forShard(id), rules: make([]shardRule, len(s.rules)), keys: newKeyTable(),
		nat:         newNATTracker(max(s.cfg.NATUsers, 100), maxNATAddrs/shardCount),
		deniedLimit: maxDeniedKeys / shardCount, entries: s.shapeEntries()}
	sh.clock = engine.ClockFunc(func() int64 { return sh.nowUs / 1000 })
	// Everything runs on the shard's worker: requests, the events the dispatcher queues, Sweep.
	// The store is shared by the gateways' lease managers, the ideal engine by nobody; both
	// hold a key's state in the key's keyState (engine.MemoryCell), and keep no index of keys.
	sh.store, sh.ideal = engine.NewHandlesOnlyMemory(sh.clock), engine.NewHandlesOnlyMemory(sh.clock)
	sh.disp = engine.DispatchFunc(func(fn func(context.Context)) {
		sh.seq++
		sh.events.push(event{atUs: sh.nowUs + sh.lat.draw(), seq: sh.seq, fn: fn})
	})
	for i, rs := range s.rules {
		plan, err := sh.ideal.PlanCell(rs.plan.Limits, rs.plan.Cost, rs.plan.Cost)
		if err != nil {
			return nil, fmt.Errorf("rule %s: ideal: %w", rs.name, err)
		}
		sh.rules[i].ideal = plan
	}
	return sh, nil
}

// storeFailed records err, an error of the virtual store, if it is the first.
func (sh *shard) storeFailed(err error) {
	if err != nil && sh.storeErr == nil {
		sh.storeErr = err
	}
}

// failed is the error that ends the replay when the virtual store has failed.
func (sh *shard) failed() error {
	if sh.storeErr == nil {
		return nil
	}
	return fmt.Errorf("shard %d: virtual store: %w", sh.id, sh.storeErr)
}

// manager returns rule r's lease manager on gateway g, made on first use.
func (sh *shard) manager(r, g int) *engine.LeaseManager {
	sr := &sh.rules[r]
	for len(sr.gateway) <= g {
		sr.gateway = append(sr.gateway, nil)
	}
	if sr.gateway[g] == nil {
		rs := sh.sim.rules[r]
		lc := rs.plan.Lease
		ms := &meteredStore{sh: sh, inner: sh.store, st: &sr.stats, rule: rs.name}
		lc.Store, lc.Clock, lc.Dispatcher = ms, sh.clock, sh.disp
		lc.SingleGoroutine, lc.HandlesOnly = true, true // each key's handles are in its keyState
		mgr, err := engine.NewLeaseManager(lc)
		if err != nil {
			// New made a manager of this configuration (Simulator.checkLeases).
			panic(fmt.Sprintf("rule %s: %v", ms.rule, err))
		}
		sr.gateway[g] = mgr
	}
	return sr.gateway[g]
}

// bucket is the series index of the shard's virtual time. Every decision and store reply
// asks for it, mostly within the bucket of the last call, so that bucket is kept with its end
// (widen forgets it) and the divisions run only when the time has passed it.
func (sh *shard) bucket() int {
	b := sh.inBucket
	if sh.nowUs >= sh.inBucketEndUs {
		ms := sh.nowUs/1000 - sh.sim.startMs
		b = int(ms / sh.bucketMs)
		if ms >= 0 { // the division truncates a negative ms toward 0: not kept
			sh.inBucket, sh.inBucketEndUs = b, (sh.sim.startMs+int64(b+1)*sh.bucketMs)*1000
		}
	}
	if sh.lastBucket >= 0 {
		return min(b, sh.lastBucket)
	}
	return b
}

// advance moves the shard's virtual time to ms, landing store replies on the way.
func (sh *shard) advance(ms int64) {
	target := ms * 1000
	for len(sh.events) > 0 && sh.events[0].atUs <= target {
		e := sh.events.pop()
		sh.nowUs = max(sh.nowUs, e.atUs)
		e.fn(sh.ctx)
	}
	sh.nowUs = max(sh.nowUs, target)
	for sh.bucket() >= maxPoints {
		sh.widen()
	}
}

// widen doubles the width of the shard's time buckets.
func (sh *shard) widen() {
	sh.bucketMs *= 2
	sh.inBucketEndUs = 0 // the bucket is found again
	for i := range sh.rules {
		sh.rules[i].stats.halve()
	}
}

// ticks runs the housekeeping before record p: of tick p.tick at the record's time, and first
// of each second of a gap in the log since the tick before (p.since), at the second's start, as
// an enforcer sweeps every second whether requests come or not. Ticks were counted one per
// record that starts a second: after a gap, one tick stood for all its seconds, a sweep due at
// every other one was skipped half the time, and leases minutes past their TTL were spent (a
// key idle for 200 s read 22 would-deny decisions where the ideal engine had 30).
//
// Only the gap's first seconds, up to gapHorizon, run on their own: by then every lease has
// been given back and forgotten, and the sweeps after find nothing to do, so the record's own
// tick stands for the rest of the gap (store state it expires as the gap's seconds would have).
// A gap of years, a far-future timestamp say, costs no more than one of minutes.
func (sh *shard) ticks(p *prepared, stranded []int64) error {
	first := sh.sim.startMs - sh.sim.startMs%1000 // the start of tick 1's second
	last := min(p.tick-1, p.since+sh.sim.gapHorizon)
	for j := p.since + 1; j <= last; j++ {
		if !sh.due(j) {
			continue // a quick test: most seconds of a gap have nothing due
		}
		sh.advance(first + (j-1)*1000)
		sh.at = p.n
		if err := sh.tick(j-1, j, nil); err != nil {
			return err
		}
	}
	sh.advance(p.t)
	sh.at = p.n
	return sh.tick(max(p.since, last), p.tick, stranded)
}

// due reports whether any of the shard's housekeeping runs at tick j, which follows tick j-1.
func (sh *shard) due(j int64) bool {
	if due(j-1, j, 60) {
		return true
	}
	for _, rs := range sh.sim.rules {
		if due(j-1, j, rs.sweepEvery()) {
			return true
		}
	}
	return false
}

// tick runs the housekeeping of tick k (Simulator.sequence), which follows tick since, at the
// shard's current time. Each rule's lease managers are swept every lease TTL (at most every
// second), stranded tokens are sampled every 5 ticks (sampling) into stranded (a rule's tokens
// at stranded[rule index]) when stranded is not nil, and store state past its TTL is expired
// every 60: each of these walks the live keys, so they run no more often than the behaviour
// they model needs. Each runs when one of its seconds lies in (since, k].
func (sh *shard) tick(since, k int64, stranded []int64) error {
	now := sh.nowUs / 1000
	for i, rs := range sh.sim.rules {
		sr := &sh.rules[i]
		if due(since, k, rs.sweepEvery()) {
			for _, m := range sr.gateway {
				if m == nil {
					continue
				}
				if err := m.Sweep(sh.ctx); err != nil {
					return fmt.Errorf("rule %s: sweep: %w", rs.name, err)
				}
			}
		}
		if stranded != nil {
			var n int64
			for _, m := range sr.gateway {
				if m != nil {
					n += m.Stranded()
				}
			}
			if n != 0 {
				atomic.AddInt64(&stranded[i], n)
			}
		}
	}
	if due(since, k, 60) {
		sh.store.Expire(now)
		sh.ideal.Expire(now)
		sh.prune(now)
	}
	return sh.failed()
}

// due reports whether a housekeeping task of every n seconds runs at tick k, which follows tick
// since: whether one of its seconds, a multiple of n, lies in (since, k].
func due(since, k, n int64) bool { return k/n > since/n }

// sampling reports whether tick k, which follows tick since, samples stranded tokens: every
// fifth second.
func sampling(since, k int64) bool { return k > 0 && due(since, k, 5) }

// prune forgets the keys that were never denied and have been idle for twice the TTL of their
// store state (engine.TTL of their rule's limits, at least a minute), and, past deniedLimit,
// the denied keys with the fewest denials among those idle as long. A key whose
// lease or ideal state the engines still hold is kept however long it has been idle: its
// handles are the engines' only way to it.
func (sh *shard) prune(now int64) {
	cutoff := make([]int64, len(sh.sim.rules))
	for i, rs := range sh.sim.rules {
		cutoff[i] = now - 2*engine.TTL(rs.plan.Limits)
	}
	idle := func(ks *keyState) bool { return ks.lastMs < cutoff[ks.rule] && !sh.live(ks) }
	sh.keys.prune(func(ks *keyState) bool { return !ks.denied() && idle(ks) })
	if sh.keys.denied <= sh.deniedLimit {
		return
	}
	var idleDenied []*keyState
	sh.keys.each(func(ks *keyState) {
		if ks.denied() && idle(ks) {
			idleDenied = append(idleDenied, ks)
		}
	})
	sort.Slice(idleDenied, func(i, j int) bool {
		a, b := idleDenied[i], idleDenied[j]
		if a.denials != b.denials {
			return a.denials < b.denials
		}
		return a.key < b.key
	})
	drop := map[*keyState]bool{}
	for _, ks := range idleDenied[:min(len(idleDenied), sh.keys.denied-sh.deniedLimit)] {
		drop[ks] = true
	}
	sh.droppedDenied += int64(len(drop))
	sh.keys.prune(func(ks *keyState) bool { return drop[ks] })
}

// live reports whether the engines hold state of key ks: a lease on a gateway that Sweep has
// not forgotten, or store or ideal state that Expire has not dropped. The engines keep no
// index of their keys (engine.LeaseConfig.HandlesOnly, engine.NewHandlesOnlyMemory), so the
// key's state must be kept while it is live.
func (sh *shard) live(ks *keyState) bool {
	managers := sh.rules[ks.rule].gateway
	for g := range min(ks.gateways(), len(managers)) {
		if managers[g] != nil && managers[g].LiveRef(ks.lease(g)) {
			return true
		}
	}
	return sh.store.LiveCell(&ks.store) || sh.ideal.LiveCell(&ks.ideal)
}

// cellKey is the key the replay names to its engines for every key: none. They hold each
// key's state in the key's own cells (engine.NewHandlesOnlyMemory, LeaseConfig.HandlesOnly),
// which find it without a key. They read the key only to name it in an error, which the
// virtual store returns only for a bug (storeErr; meteredStore names the rule instead), and to
// check that a cell is used with the key it was first used with (engine.ErrCell). With one key
// for all, that check can no longer tell the replay's keys apart, while its check of the cell's
// Memory still holds: every lease is handed its own key's cell (LeaseManager.TakeCell), and the
// engine's tests, with real keys, keep its hints from reaching another's. Building every new
// key's store key took about 4 % of a replay's CPU and 15 MB of its heap for a million lines:
// the replay builds it on a key's first denial only (describe), for the reports.
const cellKey = ""

// decide runs hit h of record p, sequenced onto gateway p.g of gateways gw, through the
// gateway's lease manager and through the ideal engine, counts the outcome and writes it into
// h.
func (sh *shard) decide(p *prepared, h *hit, gw *gatewaySet) error {
	rs := h.rs
	ks := sh.keys.get(h.hash, h.id)
	if ks == nil {
		ks = sh.keys.newKeyState(rs.index, len(gw.names))
		ks.id = h.id
		sh.keys.add(h.hash, ks)
	}
	now := sh.nowUs / 1000
	ks.requests++
	ks.lastMs = now

	plan, g := rs.plan, p.g
	dec, err := sh.manager(rs.index, g).TakeCell(sh.ctx, ks.lease(g), &ks.store, cellKey, plan.Limits, plan.Cost)
	if err != nil {
		return fmt.Errorf("rule %s: %w", rs.name, err)
	}
	if err := sh.failed(); err != nil {
		return err // a reply that landed before the take, or the take's own: it names its rule
	}
	sr := &sh.rules[rs.index]
	ideal, err := sh.ideal.TakePlanned(&ks.ideal, cellKey, sr.ideal, now)
	if err != nil {
		return fmt.Errorf("rule %s: ideal: %w", rs.name, err)
	}
	idealOK := ideal.Granted > 0
	st := &sr.stats
	b := sh.bucket()
	out := &st.out
	out.Requests++
	st.add(serRequests, b, 1)
	if !idealOK {
		out.IdealDeny++
		st.add(serIdealDeny, b, 1)
	}
	h.would, h.denied, h.legit, h.ks = false, false, false, ks
	if dec.OK {
		if !idealOK {
			out.OverAdmission++
		}
		return nil
	}
	out.WouldDeny++
	st.add(serWouldDeny, b, 1)
	values, oks := sh.sim.valuesAt(p, int(h.domain))
	if !ks.denied() {
		sh.describe(p, h, ks, values)
		sh.keys.denied++
	}
	ks.denials++
	h.would, h.denied = true, gw.enforced[rs.index][g]
	if h.denied {
		out.Denied++
	}
	if idealOK {
		out.UnderAdmission++
	}
	if h.legit = sh.sim.legit.anyOf(values, oks); h.legit {
		out.LegitDenials++
		ks.legit++
	}
	return nil
}

// storeKey builds the store key of hit h of record p, for a key's first denial: the parsing
// goroutines hash keys without building them (storeKeyHashes), and the engines need none
// (cellKey).
func (sh *shard) storeKey(p *prepared, h *hit) string {
	values, _ := sh.sim.valuesAt(p, int(h.domain))
	entries := sh.entries[h.domain][h.shape]
	fillEntries(entries, sh.sim.domains[h.domain].shapes[h.shape], values)
	sh.keyBuf = h.rs.plan.AppendKey(sh.keyBuf[:0], entries)
	return string(sh.keyBuf)
}

// describe fills in what reports say of key ks, on its first denial, by hit h of record p
// (whose domain's values are values): most keys are never denied and need no description.
// Equal store keys have equal descriptor values (the key escapes its parts), so the current
// request's values describe the key as its first one would.
func (sh *shard) describe(p *prepared, h *hit, ks *keyState, values []string) {
	ds, rs := sh.sim.domains[h.domain], h.rs
	shape := ds.shapes[h.shape]
	ks.keyDenials = &keyDenials{key: sh.storeKey(p, h)}
	var b strings.Builder
	for n, i := range shape {
		src := ds.d.Sources[i]
		v := values[i]
		if n == rs.depth {
			fmt.Fprintf(&b, ", shard=%d", engine.ShardOf(v, rs.plan.Shards))
			break
		}
		if n > 0 {
			b.WriteString(", ")
		}
		b.WriteString(src.Key)
		b.WriteByte('=')
		b.WriteString(displayValue(v))
		if ks.addr == "" {
			switch {
			case src.Kind == policy.SourceRemoteAddress:
				ks.addr = strings.Clone(v)
			case src.Kind == policy.SourceIdentity && strings.HasPrefix(v, string(policy.TierSubnet)+":"):
				ks.addr = strings.Clone(v[len(policy.TierSubnet)+1:])
			}
		}
	}
	ks.display = b.String()
}

// displayValue is a descriptor value as a denied key's identity shows it: whole up to
// engine.MaxKeyValueLen bytes (as the store key holds it), else its first bytes, its length and
// a digest. The identities of denied keys are kept to the end of a replay, up to a bound on
// their number; values of a megabyte each made that bound a gigabyte.
func displayValue(v string) string {
	if len(v) <= engine.MaxKeyValueLen {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	return fmt.Sprintf("%s… (%d bytes, sha256 %x)", strings.ToValidUTF8(v[:128], ""), len(v), sum[:8])
}

// stranded adds each rule's tokens held by the shard's leases into n (by rule index).
func (sh *shard) stranded(n []int64) {
	for i := range sh.rules {
		for _, m := range sh.rules[i].gateway {
			if m != nil {
				n[i] += m.Stranded()
			}
		}
	}
}

// finish ends the shard's replay after record last, at endMs: the replies due by then land
// (those a shard without a hit in the last record has not landed yet), its buckets take the
// replay's width bucketMs and its last bucket lastBucket, the tokens its leases hold go into
// each rule's StrandedEnd, and the store replies still in flight land.
func (sh *shard) finish(last, endMs, bucketMs int64, lastBucket int) {
	if sh.sim.started && sh.at != last {
		sh.advance(endMs)
	}
	for sh.bucketMs < bucketMs {
		sh.widen()
	}
	sh.lastBucket = lastBucket
	end := make([]int64, len(sh.rules))
	sh.stranded(end)
	for i := range sh.rules {
		sh.rules[i].stats.out.StrandedEnd = end[i]
	}
	for len(sh.events) > 0 {
		e := sh.events.pop()
		sh.nowUs = max(sh.nowUs, e.atUs)
		e.fn(sh.ctx)
	}
}

// worker runs the shards whose index is w modulo n, record by record in log order.
type worker struct {
	sim    *Simulator
	shards []*shard
	mine   uint64 // bit i is set when the worker runs shard i
}

func newWorker(s *Simulator, w, n int) *worker {
	wk := &worker{sim: s}
	for i := w; i < shardCount; i += n {
		wk.shards = append(wk.shards, s.shards[i])
		wk.mine |= 1 << i
	}
	return wk
}

// owns reports whether the worker runs shard i.
func (wk *worker) owns(i int) bool { return wk.mine&(1<<i) != 0 }

// record does the worker's part of record p, sequenced with gateways gw: the tick before it,
// the users it shows behind addresses, and the decisions of its hits in the worker's shards.
// stranded is where a sampling tick adds each rule's stranded tokens (nil for another tick).
func (wk *worker) record(p *prepared, gw *gatewaySet, stranded []int64) error {
	if p.tick > 0 {
		for _, sh := range wk.shards {
			if err := sh.ticks(p, stranded); err != nil {
				return err
			}
		}
	}
	if p.hasUser {
		for i, ok := range p.natOK {
			if ok {
				if sh := shardOf(p.nat[i]); wk.owns(sh) {
					wk.sim.shards[sh].nat.seeHash(p.nat[i], p.userHash)
				}
			}
		}
	}
	for i := range p.hits {
		h := &p.hits[i]
		if !wk.owns(int(h.shard)) {
			continue
		}
		sh := wk.sim.shards[h.shard]
		sh.advance(p.t)
		sh.at = p.n
		if err := sh.decide(p, h, gw); err != nil {
			return err
		}
	}
	return nil
}
