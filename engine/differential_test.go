package engine

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rlctl/rlctl/internal/redistest"
)

// diffSeedEnv names the environment variable that sets the differential's
// random seed, so that a failure can be run again; without it the seed is
// taken from the time.
const diffSeedEnv = "RLCTL_DIFF_SEED"

// TestRedisMatchesModel drives a real redis-server and the Memory model with
// the same random operations and policy reloads, at the same explicit times
// or on Redis's own clock, and requires every reply and the stored hash after
// every operation to be identical, and the TTL to be TTL(limits).
func TestRedisMatchesModel(t *testing.T) {
	seed := diffSeed(t, "differential")
	srv := redistest.Start(t)
	ops, bad := differential(t, srv.Client(), 200_000, seed, 42)
	fmt.Printf("differential: ops=%d mismatches=%d\n", ops, bad)
	if bad != 0 {
		t.Fatalf("differential: %d of %d operations differ (%s=%d)", bad, ops, diffSeedEnv, seed)
	}
}

// TestRedisClusterMatchesModel is the differential against a 3-master Redis
// Cluster, with keys spread over every master's slots.
func TestRedisClusterMatchesModel(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	seed := diffSeed(t, "cluster differential")
	cl := redistest.StartCluster(t, 3)
	ops, bad := differential(t, cl.Client(), 60_000, seed, 43)
	fmt.Printf("cluster differential: ops=%d mismatches=%d\n", ops, bad)
	if bad != 0 {
		t.Fatalf("cluster differential: %d of %d operations differ (%s=%d)", bad, ops, diffSeedEnv, seed)
	}
	slots := map[string]bool{}
	for i := range 50 {
		n, err := cl.Client().MasterForKey(context.Background(), diffKey(i))
		if err != nil {
			t.Fatal(err)
		}
		slots[n.Options().Addr] = true
	}
	if len(slots) != 3 {
		t.Errorf("keys on %d masters, want 3", len(slots))
	}
}

// diffSeed returns the seed from RLCTL_DIFF_SEED, or one from the time, and
// prints it beside the test's result line.
func diffSeed(t *testing.T, name string) uint64 {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(diffSeedEnv); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: want an unsigned integer: %v", diffSeedEnv, s, err)
		}
	}
	fmt.Printf("%s: seed=%d\n", name, seed)
	// Ops on Redis's clock run again at other times, Redis's.
	t.Logf("seed %d: %s=%d runs the same operations again", seed, diffSeedEnv, seed)
	return seed
}

// diffKey is the i-th key of the differential; some values need escaping.
func diffKey(i int) string {
	return Key("diff", "tenant{"+strconv.Itoa(i%7)+"}", "user:"+strconv.Itoa(i))
}

// Shares of the differential's operations.
const (
	clockKeyEvery = 8   // one key in 8 runs every op on Redis's clock
	reloadOdds    = 40  // one op in 40 reloads its key's limits first
	corruptOdds   = 500 // one op in 500 overwrites a stored field out of range first
)

// diffKeyState is the policy and clock of one differential key, and what the
// model's expiry of its state must be. The generator owns the state of keys
// on explicit times; the checker owns exp, fields, corrupt and opLimits of
// clock keys, whose ops only it runs on the model.
type diffKeyState struct {
	key    string
	clock  bool // every op uses the store's clock (Now 0)
	limits []Limit
	now    int64 // virtual clock of a key on explicit times
	taken  int64 // Now of the last grant, for returns

	exp      memExpiry       // the model's expiry after the last op
	opLimits []Limit         // the limits of the last op
	fields   map[string]bool // the names of the fields the model held after each op since the state was fresh
	corrupt  bool            // a field was overwritten since the state was fresh
}

// memExpiry is how Memory tracks a key's expiry: the latest time it has seen
// and the instant its state is gone.
type memExpiry struct{ last, expire int64 }

// diffExpiry reads m's expiry of key.
func diffExpiry(m *Memory, key string) memExpiry {
	sh := m.lock(key)
	defer m.unlock(sh)
	e := sh.m[key]
	if e == nil {
		return memExpiry{}
	}
	return memExpiry{e.last, e.expire}
}

// begin reports whether the model's state of k is gone at now, before an op
// with limits, and whether Redis must drop k's hash before the op. The
// model's state is gone from exp.expire on, in the op's time; Redis's hash
// lives TTL(limits) of wall-clock time, and under a virtual clock outlives
// it. Stored state past its TTL decides as fresh state does (see TTL), so
// the hash is kept, except when it holds what fresh state would not: fields
// of other limits than the op's, state written under other limits, or a
// corrupted field. Redis's own clock would have expired those. Clock keys
// never need it: both stores expire them in Redis's time.
func (k *diffKeyState) begin(now int64, limits []Limit) (fresh, drop bool) {
	if now < k.exp.expire {
		return false, false
	}
	drop = k.opLimits != nil && (k.corrupt || !ownsAll(limits, k.fields) || !slices.Equal(k.opLimits, limits))
	k.exp, k.fields, k.corrupt = memExpiry{}, nil, false
	return true, drop
}

// end records an op at now with limits and returns the expiry the model
// must have after it: TTL(limits) after the latest time the key has seen, or
// with keep (see keepsTTL) the expiry it had when that is later.
func (k *diffKeyState) end(now int64, limits []Limit, keep bool, fields map[string]int64) memExpiry {
	k.exp.last = max(k.exp.last, now)
	if keep {
		k.exp.expire = max(k.exp.expire, k.exp.last+TTL(limits))
	} else {
		k.exp.expire = k.exp.last + TTL(limits)
	}
	if k.fields == nil {
		k.fields = map[string]bool{}
	}
	for f := range fields {
		k.fields[f] = true
	}
	k.opLimits = limits
	return k.exp
}

// keepsTTL reports whether an op at now with limits, on state with fields, meets a window of
// another length that lasts (see slot), or fields the limits do not own (others): then the
// key's TTL is not shortened. It pairs the limits with the stored states as identity.go says,
// written again here from that description.
func keepsTTL(fields map[string]int64, limits []Limit, now int64) bool {
	owns := map[Algorithm][]string{TokenBucket: {"tok", "ts"}, SlidingWindow: {"win", "cur", "len", "prev"}, FixedWindow: {"win", "cur", "len"}}
	states := map[string]map[string]int64{} // by identity suffix
	for f, v := range fields {
		name, id, ok := strings.Cut(f, ":")
		if !ok {
			return true
		}
		if states[id] == nil {
			states[id] = map[string]int64{}
		}
		states[id][name] = v
	}
	ids := limitSuffixes(limits)
	taken := map[string]bool{}
	pair := make([]string, len(limits))
	for i, id := range ids {
		if states[id] != nil {
			pair[i], taken[id] = id, true
		}
	}
	for {
		i := -1
		for k := range limits {
			if pair[k] == "" && (i < 0 || limits[k].Window > limits[i].Window) {
				i = k
			}
		}
		if i < 0 {
			break
		}
		pair[i] = ids[i] // fresh, unless it adopts
		best, bw, bd := "", int64(-1), int64(0)
		for id := range states {
			fam, w, d := parseSuffix(id)
			if !taken[id] && fam == (limits[i].Algorithm == TokenBucket) && (w > bw || w == bw && d < bd) {
				best, bw, bd = id, w, d
			}
		}
		if best != "" {
			pair[i], taken[best] = best, true
		}
	}
	for id := range states {
		if !taken[id] {
			return true
		}
	}
	for i, l := range limits {
		s := states[pair[i]]
		for name := range s {
			if !slices.Contains(owns[l.Algorithm], name) {
				return true
			}
		}
		ln, hasLen := s["len"]
		win, hasWin := s["win"]
		_, hasCur := s["cur"]
		if l.Algorithm != TokenBucket && hasLen && hasWin && hasCur && ln != l.Window &&
			now < clamp(win, 0, MaxExact)+clamp(ln, 0, MaxExact) {
			return true
		}
	}
	return false
}

// limitSuffixes returns the identity suffix of each of limits, as the test writes them:
// "b" or "w", the window, and "#" and the number of alike limits (the same family and
// window) that rank before it by requests, capacity and place, when above 0.
func limitSuffixes(limits []Limit) []string {
	out := make([]string, len(limits))
	for i, l := range limits {
		id := "w"
		if l.Algorithm == TokenBucket {
			id = "b"
		}
		n := 0
		for j, o := range limits {
			alike := o.Window == l.Window && (o.Algorithm == TokenBucket) == (l.Algorithm == TokenBucket)
			before := o.Requests < l.Requests || o.Requests == l.Requests && (o.Capacity() < l.Capacity() || o.Capacity() == l.Capacity() && j < i)
			if j != i && alike && before {
				n++
			}
		}
		id += strconv.FormatInt(l.Window, 10)
		if n > 0 {
			id += "#" + strconv.Itoa(n)
		}
		out[i] = id
	}
	return out
}

// parseSuffix reads an identity suffix: whether it is a bucket's, its window and its dup.
func parseSuffix(id string) (bucket bool, window, dup int64) {
	base, d, _ := strings.Cut(id, "#")
	window, _ = strconv.ParseInt(base[1:], 10, 64)
	dup, _ = strconv.ParseInt(d, 10, 64)
	return base[0] == 'b', window, dup
}

// ownsAll reports whether every field name in names is one the limits' algorithms own under
// their own identities: then the hash holds only what fresh state under limits would.
func ownsAll(limits []Limit, names map[string]bool) bool {
	owns := map[Algorithm][]string{TokenBucket: {"tok", "ts"}, SlidingWindow: {"win", "cur", "len", "prev"}, FixedWindow: {"win", "cur", "len"}}
	own := map[string]bool{}
	for i, id := range limitSuffixes(limits) {
		for _, n := range owns[limits[i].Algorithm] {
			own[n+":"+id] = true
		}
	}
	for f := range names {
		if !own[f] {
			return false
		}
	}
	return true
}

// diffModel is the model side of the differential for one goroutine: the
// shared concurrent Memory, and this goroutine's single-goroutine twin, fed
// through TakeBytes, which must agree with it bit for bit.
type diffModel struct {
	m, twin *Memory
	keyBuf  []byte
}

func (d *diffModel) take(ctx context.Context, r TakeRequest) (Result, error) {
	res, err := d.m.Take(ctx, r)
	if err != nil {
		return res, fmt.Errorf("take %+v: %w", r, err)
	}
	d.keyBuf = append(d.keyBuf[:0], r.Key...)
	tr := r
	tr.Key = ""
	if got, err := d.twin.TakeBytes(ctx, d.keyBuf, tr); err != nil || got != res {
		return res, fmt.Errorf("take %+v: single-goroutine TakeBytes %+v %v, model %+v", r, got, err, res)
	}
	return res, nil
}

func (d *diffModel) ret(ctx context.Context, r ReturnRequest) error {
	if err := d.m.Return(ctx, r); err != nil {
		return fmt.Errorf("return %+v: %w", r, err)
	}
	if err := d.twin.Return(ctx, r); err != nil {
		return fmt.Errorf("return %+v: single-goroutine: %w", r, err)
	}
	return nil
}

// after returns the model's state and expiry of key, which the twin must share.
func (d *diffModel) after(key string) (map[string]int64, memExpiry, error) {
	f, e := d.m.Fields(key), diffExpiry(d.m, key)
	if msg := compareFields(f, d.twin.Fields(key)); msg != "" {
		return f, e, fmt.Errorf("key %s: single-goroutine Memory differs: %s", key, msg)
	}
	if te := diffExpiry(d.twin, key); te != e {
		return f, e, fmt.Errorf("key %s: single-goroutine Memory expiry %+v, model %+v", key, te, e)
	}
	return f, e, nil
}

// corrupt overwrites field f (for example "ts:b60000") of key's state in d's
// Memory and twin, as a stray write or an older script could leave it in
// the Redis hash: the clamps of advance must bring it back into range.
func (d *diffModel) corrupt(key, f string, v int64) {
	name, id, _ := strings.Cut(f, ":")
	for _, m := range []*Memory{d.m, d.twin} {
		sh := m.lock(key)
		var s *slot
		for i := range sh.m[key].slots {
			if idSuffix(sh.m[key].slots[i].id()) == id {
				s = &sh.m[key].slots[i]
			}
		}
		switch name {
		case "tok":
			s.tok = v
		case "ts":
			s.ts = v
		case "win":
			s.win = v
		case "cur":
			s.cur = v
		case "prev":
			s.prev = v
		case "len":
			s.wlen = v
		}
		m.unlock(sh)
	}
}

// diffOp is one operation of the differential, pipelined with a PTTL and
// an HGETALL of its key, and what the model made of it.
type diffOp struct {
	k      *diffKeyState
	take   *TakeRequest
	ret    *ReturnRequest
	res    Result           // the model's reply
	fields map[string]int64 // the model's state right after the op
	exp    memExpiry        // the model's expiry right after the op
	keep   bool             // the op met a window of another length that lasts (keepsTTL)
	want   memExpiry        // the expiry it must have
	cmd    *redis.Cmd
	pttl   *redis.Cmd
	state  *redis.MapStringStringCmd
}

// diffStats counts what the differential did.
type diffStats struct {
	granted, partial, denied, never, returns         int
	clockOps, reloads, overRange, corrupted, dropped int
	slack                                            int64 // the largest PTTL tolerance, ms
}

// differential runs ops random operations on c and on a Memory model and
// returns how many differed. Every op is pipelined with a PTTL and an
// HGETALL of its key.
func differential(t *testing.T, c redis.UniversalClient, ops int, seed, stream uint64) (int, int) {
	ctx := context.Background()
	if err := NewRedis(c).Preload(ctx); err != nil {
		t.Fatalf("load scripts: %v", err)
	}
	rng := rand.New(rand.NewPCG(seed, stream))
	keys := make([]*diffKeyState, 400)
	for i := range keys {
		keys[i] = &diffKeyState{key: diffKey(i), clock: i%clockKeyEvery == 0, limits: randomLimits(rng), now: 1 + rng.Int64N(2e12)}
	}
	// Ops on Redis's clock run on the model in the checker, once Redis has
	// replied, on a clock that tells the time Redis reported. Only the
	// checker reads redisNow: the generator's ops carry their time.
	var redisNow int64
	clock := ClockFunc(func() int64 { return redisNow })
	model := NewMemory(clock)
	gen := &diffModel{m: model, twin: NewSingleGoroutineMemory(nil)}
	chk := &diffModel{m: model, twin: NewSingleGoroutineMemory(clock)}
	const batch = 2000
	type batchOps struct {
		pipe       redis.Pipeliner
		ps         []diffOp
		start, end time.Time // of the pipeline's execution
		err        error
	}
	// The model runs here while a second goroutine executes the previous
	// batch on Redis and a third compares: Go and Redis work in parallel.
	batches, executed := make(chan batchOps, 2), make(chan batchOps, 2)
	var done, bad int
	var st diffStats
	checked := make(chan struct{})
	// A t.Fatal below ends this goroutine early: the deferred close still ends the other two
	// before the test returns, so that they neither outlive it nor report into it afterwards.
	var closeBatches sync.Once
	defer func() {
		closeBatches.Do(func() { close(batches) })
		<-checked
	}()
	go func() {
		defer close(executed)
		for b := range batches {
			b.start = time.Now()
			_, b.err = b.pipe.Exec(ctx)
			b.end = time.Now()
			executed <- b
		}
	}()
	kept := keptTTLs{}
	go func() {
		defer close(checked)
		for b := range executed {
			if b.err != nil {
				t.Errorf("pipeline: %v", b.err)
				bad += len(b.ps)
				done += len(b.ps)
				continue
			}
			// PEXPIRE in the script and the PTTL after it read Redis's
			// clock at two instants of this pipeline: PTTL is the TTL less
			// the time between them, which is at most the pipeline's
			// duration, plus a millisecond for each clock read's
			// truncation to whole milliseconds.
			slack := b.end.Sub(b.start).Milliseconds() + 2
			st.slack = max(st.slack, slack)
			for _, p := range b.ps {
				done++
				var msg string
				if p.k.clock {
					msg = checkClockOp(ctx, chk, &redisNow, b.start.UnixMilli()-1000, b.end.UnixMilli()+1000, &p)
					st.clockOps++
				}
				switch {
				case p.ret != nil:
					st.returns++
				case p.res.Granted == 0:
					st.denied++
					if p.res.RetryAfter == Never {
						st.never++
					}
				default:
					st.granted++
					if p.res.Granted < min(p.take.Want, MaxExact) {
						st.partial++
					}
				}
				if msg == "" {
					msg = compareOp(p.take, p.ret, p.res, p.cmd, p.fields, p.state.Val())
				}
				if msg == "" {
					msg = compareTTL(p.take, p.ret, p.exp, p.want, p.keep, p.pttl, slack)
				}
				if msg == "" {
					msg = kept.check(p, b.start.UnixMilli(), b.end.UnixMilli())
				}
				if msg != "" {
					bad++
					if bad <= 10 {
						t.Errorf("op %d key %s: %s", done, p.k.key, msg)
					}
				}
			}
		}
	}()
	for sent := 0; sent < ops; {
		pipe := c.Pipeline()
		var ps []diffOp
		for range min(batch, ops-sent) {
			sent++
			k := keys[rng.IntN(len(keys))]
			reloaded := rng.IntN(reloadOdds) == 0
			if reloaded {
				k.limits = reload(rng, k.limits)
				st.reloads++
			}
			p := diffOp{k: k}
			if k.clock {
				p.take, p.ret = randomClockOp(rng, k)
				p.cmd = evalOp(t, ctx, pipe, p.take, p.ret)
			} else {
				k.now = nextTime(rng, k)
				fresh, drop := k.begin(k.now, k.limits)
				if drop {
					pipe.Del(ctx, k.key)
					st.dropped++
				}
				if !fresh && reloaded && overRange(gen.m.Fields(k.key), k.limits) {
					st.overRange++
				}
				if !fresh && rng.IntN(corruptOdds) == 0 {
					f, v := corruptField(rng, gen.m.Fields(k.key))
					gen.corrupt(k.key, f, v)
					pipe.HSet(ctx, k.key, f, v)
					k.corrupt = true
					st.corrupted++
				}
				p.take, p.ret = randomOp(rng, k)
				p.keep = !fresh && keepsTTL(gen.m.Fields(k.key), k.limits, k.now)
				var err error
				if p.ret != nil {
					err = gen.ret(ctx, *p.ret)
				} else if p.res, err = gen.take(ctx, *p.take); p.res.Granted > 0 {
					k.taken = p.res.Now
				}
				if err != nil {
					t.Fatal(err)
				}
				p.cmd = evalOp(t, ctx, pipe, p.take, p.ret)
				if p.fields, p.exp, err = gen.after(k.key); err != nil {
					t.Fatal(err)
				}
				p.want = k.end(k.now, k.limits, p.keep, p.fields)
			}
			p.pttl = pipe.Do(ctx, "PTTL", k.key)
			p.state = pipe.HGetAll(ctx, k.key)
			ps = append(ps, p)
		}
		batches <- batchOps{pipe: pipe, ps: ps}
	}
	closeBatches.Do(func() { close(batches) })
	<-checked
	t.Logf("granted %d (partial %d), denied %d (never %d), returns %d; %d on Redis's clock", st.granted, st.partial, st.denied, st.never, st.returns, st.clockOps)
	t.Logf("reloads %d; ops on state out of their limits' range %d, on corrupted state %d; hashes dropped for expiry %d; PTTL within %d ms", st.reloads, st.overRange, st.corrupted, st.dropped, st.slack)
	return done, bad
}

// checkClockOp runs p, an op on Redis's clock, on the model at the time
// Redis reported, which must lie in [lo, hi], the wall-clock time of its
// pipeline; it fills in the model's reply, state and expiry.
func checkClockOp(ctx context.Context, d *diffModel, redisNow *int64, lo, hi int64, p *diffOp) string {
	var now int64
	if p.take != nil {
		got, err := parseTake(p.cmd.Val())
		if err != nil {
			return err.Error()
		}
		now = got.Now
	} else {
		v, err := p.cmd.Int64()
		if err != nil {
			return fmt.Sprintf("return %+v: %v", *p.ret, err)
		}
		now = v
	}
	if now < lo || now > hi {
		return fmt.Sprintf("redis clock %d, outside the pipeline's wall-clock time [%d, %d]", now, lo, hi)
	}
	*redisNow = now
	limits := opLimits(p.take, p.ret)
	fresh, _ := p.k.begin(now, limits)
	p.keep = !fresh && keepsTTL(d.m.Fields(p.k.key), limits, now)
	var err error
	if p.take != nil {
		p.res, err = d.take(ctx, *p.take)
	} else {
		err = d.ret(ctx, *p.ret)
	}
	if err == nil {
		p.fields, p.exp, err = d.after(p.k.key)
	}
	if err != nil {
		return fmt.Sprintf("model at redis time %d: %v", now, err)
	}
	p.want = p.k.end(now, limits, p.keep, p.fields)
	return ""
}

// evalOp pipelines op's script on pipe.
func evalOp(t *testing.T, ctx context.Context, pipe redis.Pipeliner, take *TakeRequest, ret *ReturnRequest) *redis.Cmd {
	if ret != nil {
		args, err := returnArgs(*ret)
		if err != nil {
			t.Fatalf("return %+v: %v", *ret, err)
		}
		return returnScript.EvalSha(ctx, pipe, []string{ret.Key}, args...)
	}
	args, err := takeArgs(*take)
	if err != nil {
		t.Fatalf("take %+v: %v", *take, err)
	}
	return takeScript.EvalSha(ctx, pipe, []string{take.Key}, args...)
}

// compareOp describes how Redis's reply to one op and its hash afterwards
// differ from the model's, or returns "" when they are identical.
func compareOp(take *TakeRequest, ret *ReturnRequest, res Result, cmd *redis.Cmd, fields map[string]int64, hash map[string]string) string {
	if take != nil {
		got, err := parseTake(cmd.Val())
		if err != nil {
			return err.Error()
		}
		if got != res {
			return fmt.Sprintf("take %+v: redis %+v, model %+v", *take, got, res)
		}
	} else if err := cmd.Err(); err != nil {
		return fmt.Sprintf("return %+v: %v", *ret, err)
	}
	if msg := compareState(fields, hash); msg != "" {
		return fmt.Sprintf("%s after %s", msg, opString(take, ret))
	}
	return ""
}

// compareTTL describes how the key's TTL after an op differs from
// TTL(limits): exactly in the model, which counts it from the latest time
// the key has seen, and within slack ms in Redis, which counts it from its
// own clock when the script ran. A virtual clock that steps back keeps the
// model's state longer than TTL after the op's time, and Redis's TTL runs
// in wall-clock time: the two expiries are only compared through TTL.
func compareTTL(take *TakeRequest, ret *ReturnRequest, exp, want memExpiry, keep bool, pttl *redis.Cmd, slack int64) string {
	limits := opLimits(take, ret)
	ttl := TTL(limits)
	if exp != want {
		return fmt.Sprintf("model expiry %+v, want %+v (TTL %d) after %s", exp, want, ttl, opString(take, ret))
	}
	got, err := pttl.Int64()
	if err != nil {
		return fmt.Sprintf("PTTL: %v", err)
	}
	if keep && got >= ttl-slack {
		return "" // not shortened: what it kept runs in Redis's own time, not the model's
	}
	if got > ttl || got < ttl-slack {
		return fmt.Sprintf("redis PTTL %d, want TTL %d (less at most %d ms) after %s", got, ttl, slack, opString(take, ret))
	}
	return ""
}

// keptTTLs holds, per key, the earliest wall-clock instant (Unix ms) at which Redis can expire
// its hash, as the last op's PTTL read it. compareTTL only checks that an op that keeps the TTL
// (keepsTTL) leaves at least its own: the model's expiry runs on the ops' virtual clock, Redis's
// on the wall clock. This checks, on the wall clock, that such an op did not shorten the TTL
// Redis had.
type keptTTLs map[string]int64

// check describes how p, run in a pipeline between wall-clock start and end, shortened a TTL
// it had to keep, or returns "". It then records the key's TTL after p.
func (k keptTTLs) check(p diffOp, start, end int64) string {
	got, err := p.pttl.Int64()
	if err != nil || got < 0 {
		delete(k, p.k.key)
		return ""
	}
	before, seen := k[p.k.key]
	k[p.k.key] = start + got // the PTTL was read at or after start
	// Redis counts TTLs in whole milliseconds, and PTTL rounds: 2 ms of slack.
	if p.keep && seen && got < before-end-2 {
		return fmt.Sprintf("redis PTTL %d after %s, want at least the %d ms left before it: the op must keep the TTL",
			got, opString(p.take, p.ret), before-end)
	}
	return ""
}

func opLimits(take *TakeRequest, ret *ReturnRequest) []Limit {
	if take != nil {
		return take.Limits
	}
	return ret.Limits
}

func opString(take *TakeRequest, ret *ReturnRequest) string {
	if take != nil {
		return fmt.Sprintf("take %+v", *take)
	}
	return fmt.Sprintf("return %+v", *ret)
}

// compareState describes how a model's fields differ from a Redis hash, or
// returns "" when they are identical.
func compareState(model map[string]int64, hash map[string]string) string {
	if len(model) != len(hash) {
		return fmt.Sprintf("state: redis %v, model %v", hash, model)
	}
	for f, v := range model {
		if hash[f] != strconv.FormatInt(v, 10) {
			return fmt.Sprintf("state %s: redis %q, model %d (redis %v)", f, hash[f], v, hash)
		}
	}
	return ""
}

// compareFields describes how two models' fields differ, or returns "".
func compareFields(a, b map[string]int64) string {
	if len(a) != len(b) {
		return fmt.Sprintf("%v vs %v", a, b)
	}
	for f, v := range a {
		if w, ok := b[f]; !ok || w != v {
			return fmt.Sprintf("%s: %d vs %d", f, v, w)
		}
	}
	return ""
}

// randomLimits returns one to three valid limits, many at the edges: tiny and
// year-long windows, bursts at the exact-range bound.
func randomLimits(rng *rand.Rand) []Limit {
	n := 1 + rng.IntN(3)
	ls := make([]Limit, 0, n)
	for len(ls) < n {
		ls = append(ls, randomLimit(rng))
	}
	return ls
}

// randomLimit returns a valid limit, often at an edge.
func randomLimit(rng *rand.Rand) Limit {
	for {
		l := Limit{
			Algorithm: Algorithm(rng.IntN(3)),
			Requests:  pick(rng, 1, 2, 3, 7, 10, 100, 1000, 12345, 1e6, 1+rng.Int64N(1e9), 1+rng.Int64N(1<<40)),
			Window:    pick(rng, 1, 7, 1000, 1001, 60_000, 3_600_000, day, year, 1+rng.Int64N(1e7)),
		}
		if l.Algorithm == TokenBucket {
			tu, rate := l.units()
			edge := (MaxExact - rate) / 2 / tu
			l.Burst = pick(rng, 0, 0, 1, 1+rng.Int64N(1000), edge, max(1, edge-rng.Int64N(10)))
		} else if rng.IntN(4) == 0 {
			l.Requests = max(1, MaxExact/l.Window-1-rng.Int64N(3)) // at the edge
		}
		if l.Validate() == nil {
			return l
		}
	}
}

// reload returns limits as a policy reload changes them: a burst shrinks,
// requests drop, a window changes, an algorithm switches, a limit is added
// or removed (before others, whose state stays theirs), the limits are
// reordered, capacity grows, or everything is replaced. The result is a new,
// valid slice.
func reload(rng *rand.Rand, limits []Limit) []Limit {
	for {
		ls := slices.Clone(limits)
		i := rng.IntN(len(ls))
		l := &ls[i]
		switch rng.IntN(10) {
		case 0, 1:
			l.Burst = 1 + rng.Int64N(l.Capacity())
		case 2, 3:
			l.Requests = pick(rng, 1+rng.Int64N(l.Requests), max(1, l.Requests/(2+rng.Int64N(100))), 1)
		case 4:
			l.Window = pick(rng, 1, 7, 1000, 60_000, day, year, max(1, l.Window/2), l.Window*2, 1+rng.Int64N(1e7))
		case 5:
			l.Algorithm = Algorithm((int(l.Algorithm) + 1 + rng.IntN(2)) % 3)
		case 6:
			if len(ls) < 3 {
				ls = slices.Insert(ls, rng.IntN(len(ls)+1), randomLimit(rng))
			} else {
				ls = slices.Delete(ls, i, i+1)
			}
		case 7:
			if len(ls) > 1 {
				ls = slices.Delete(ls, i, i+1)
			} else {
				l.Requests, l.Burst = l.Requests*(1+rng.Int64N(10)), l.Burst*(1+rng.Int64N(10))
			}
		case 8:
			rng.Shuffle(len(ls), func(a, b int) { ls[a], ls[b] = ls[b], ls[a] })
		default:
			ls = randomLimits(rng)
		}
		valid := true
		for _, l := range ls {
			valid = valid && l.Validate() == nil
		}
		if valid {
			return ls
		}
	}
}

// overRange reports whether stored state holds a value the limits' ranges
// exclude: a bucket over its capacity, which advance clamps, or a window's count
// over its limit, which stays as it is and denies.
func overRange(fields map[string]int64, limits []Limit) bool {
	for i, id := range limitSuffixes(limits) {
		l := limits[i]
		n := ":" + id
		x := l.exact()
		if l.Algorithm == TokenBucket {
			if v, ok := fields["tok"+n]; ok && v > x.capacity*x.tu {
				return true
			}
			continue
		}
		if v, ok := fields["cur"+n]; ok && v > l.Requests {
			return true
		}
		if v, ok := fields["prev"+n]; ok && v > l.Requests && l.Algorithm == SlidingWindow {
			return true
		}
	}
	return false
}

// corruptField picks one of the stored fields and a value out of every
// limit's range for it: negative, or beyond MaxExact (which Lua reads
// inexactly, as the nearest double).
func corruptField(rng *rand.Rand, fields map[string]int64) (string, int64) {
	names := slices.Sorted(maps.Keys(fields))
	return names[rng.IntN(len(names))], pick(rng, -1, -1-rng.Int64N(1e12), MaxExact+1+rng.Int64N(1000), 1e18)
}

func pick(rng *rand.Rand, vs ...int64) int64 {
	return vs[rng.IntN(len(vs))]
}

// nextTime moves a key's clock: often not at all, mostly a fraction of a
// window, sometimes backwards, sometimes years ahead.
func nextTime(rng *rand.Rand, k *diffKeyState) int64 {
	w := k.limits[0].Window
	if k.limits[0].Algorithm == TokenBucket {
		w = max(1, k.limits[0].RefillMs())
	}
	var d int64
	switch r := rng.IntN(100); {
	case r < 20:
	case r < 70:
		d = rng.Int64N(max(1, w/4) + 1)
	case r < 85:
		d = rng.Int64N(2*w + 1)
	case r < 95:
		d = -rng.Int64N(max(1, w/2) + 1)
	case r < 99:
		d = rng.Int64N(10)
	default:
		d = rng.Int64N(100 * year)
	}
	return clamp(k.now+d, 1, MaxExact)
}

// randomOp is a take (randomTake) or, one time in five, a return of up to
// twice the capacity, taken at the last grant's time or now.
func randomOp(rng *rand.Rand, k *diffKeyState) (*TakeRequest, *ReturnRequest) {
	if rng.IntN(5) != 0 {
		r := randomTake(rng, k)
		return &r, nil
	}
	r := ReturnRequest{Key: k.key, Limits: k.limits, N: 1 + rng.Int64N(2*k.limits[0].Capacity()), Now: k.now}
	if rng.IntN(2) == 0 {
		r.TakenAt = k.taken
	}
	return nil, &r
}

// randomClockOp is randomOp on the store's clock: Now is 0, and a return's
// tokens were taken now or within two windows before the wall-clock time,
// which Redis's clock is on this machine.
func randomClockOp(rng *rand.Rand, k *diffKeyState) (*TakeRequest, *ReturnRequest) {
	take, ret := randomOp(rng, k)
	if take != nil {
		take.Now = 0
		return take, nil
	}
	ret.Now, ret.TakenAt = 0, 0
	if rng.IntN(2) == 0 {
		ret.TakenAt = time.Now().UnixMilli() - rng.Int64N(2*min(k.limits[0].Window, year)+1)
	}
	return nil, ret
}

// randomTake is a take of one to twice the capacity, all or nothing or
// partial, sometimes absurdly large.
func randomTake(rng *rand.Rand, k *diffKeyState) TakeRequest {
	capacity := k.limits[rng.IntN(len(k.limits))].Capacity()
	r := TakeRequest{Key: k.key, Limits: k.limits, Now: k.now}
	switch x := rng.IntN(20); {
	case x < 10:
		r.Want = 1 + rng.Int64N(min(capacity, 20))
	case x < 16:
		r.Want = 1 + rng.Int64N(capacity)
	case x < 19:
		r.Want = 1 + rng.Int64N(2*capacity)
	default:
		r.Want = MaxExact + rng.Int64N(1000)
	}
	if rng.IntN(2) == 0 {
		r.Min = 1 + rng.Int64N(r.Want)
	}
	return r
}
