package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/rlctl/rlctl/internal/redistest"
)

// TestRedisMatchesModel drives a real redis-server and the Memory model with
// the same random operations at the same explicit times, and requires every
// reply and the stored hash after every operation to be identical.
func TestRedisMatchesModel(t *testing.T) {
	srv := redistest.Start(t)
	ops, bad := differential(t, srv.Client(), 200_000, 1)
	fmt.Printf("differential: ops=%d mismatches=%d\n", ops, bad)
	if bad != 0 {
		t.Fatalf("differential: %d of %d operations differ", bad, ops)
	}
}

// TestRedisClusterMatchesModel is the differential against a 3-master Redis
// Cluster, with keys spread over every master's slots.
func TestRedisClusterMatchesModel(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	cl := redistest.StartCluster(t, 3)
	ops, bad := differential(t, cl.Client(), 60_000, 2)
	fmt.Printf("cluster differential: ops=%d mismatches=%d\n", ops, bad)
	if bad != 0 {
		t.Fatalf("cluster differential: %d of %d operations differ", bad, ops)
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

// diffKey is the i-th key of the differential; some values need escaping.
func diffKey(i int) string {
	return Key("diff", "tenant{"+strconv.Itoa(i%7)+"}", "user:"+strconv.Itoa(i))
}

// diffKeyState is the policy and virtual clock of one differential key.
type diffKeyState struct {
	key    string
	limits []Limit
	now    int64
	taken  int64 // Now of the last grant, for returns
}

// differential runs ops random operations on c and on a Memory model and
// returns how many differed. Every op is pipelined with an HGETALL of its key.
func differential(t *testing.T, c redis.UniversalClient, ops int, seed uint64) (int, int) {
	ctx := context.Background()
	if err := NewRedis(c).Preload(ctx); err != nil {
		t.Fatalf("load scripts: %v", err)
	}
	rng := rand.New(rand.NewPCG(seed, 42))
	keys := make([]*diffKeyState, 400)
	for i := range keys {
		keys[i] = &diffKeyState{key: diffKey(i), limits: randomLimits(rng), now: 1 + rng.Int64N(2e12)}
	}
	model := NewMemory(nil)
	// twin is the single-goroutine Memory, fed through TakeBytes: it must
	// agree with model bit for bit, and so with Redis.
	twin := NewSingleGoroutineMemory(nil)
	var keyBuf []byte
	const batch = 2000
	type pending struct {
		k      *diffKeyState
		take   *TakeRequest
		ret    *ReturnRequest
		res    Result           // the model's reply
		fields map[string]int64 // the model's state right after the op
		cmd    *redis.Cmd
		state  *redis.MapStringStringCmd
	}
	type batchOps struct {
		pipe redis.Pipeliner
		ps   []pending
	}
	// The model runs here while a second goroutine executes the previous
	// batch on Redis and compares: Go and Redis work in parallel.
	batches := make(chan batchOps, 2)
	var done, bad int
	var granted, partial, denied, never, returns int
	checked := make(chan struct{})
	go func() {
		defer close(checked)
		for b := range batches {
			if _, err := b.pipe.Exec(ctx); err != nil {
				t.Errorf("pipeline: %v", err)
				bad += len(b.ps)
				done += len(b.ps)
				continue
			}
			for _, p := range b.ps {
				done++
				switch {
				case p.ret != nil:
					returns++
				case p.res.Granted == 0:
					denied++
					if p.res.RetryAfter == Never {
						never++
					}
				default:
					granted++
					if p.res.Granted < min(p.take.Want, MaxExact) {
						partial++
					}
				}
				if msg := compareOp(p.take, p.ret, p.res, p.cmd, p.fields, p.state.Val()); msg != "" {
					bad++
					if bad <= 10 {
						t.Errorf("op %d key %s limits %+v: %s", done, p.k.key, p.k.limits, msg)
					}
				}
			}
		}
	}()
	for sent := 0; sent < ops; {
		pipe := c.Pipeline()
		var ps []pending
		for range min(batch, ops-sent) {
			sent++
			k := keys[rng.IntN(len(keys))]
			k.now = nextTime(rng, k)
			p := pending{k: k}
			if rng.IntN(5) == 0 {
				r := ReturnRequest{Key: k.key, Limits: k.limits, N: 1 + rng.Int64N(2*k.limits[0].Capacity()), Now: k.now}
				if rng.IntN(2) == 0 {
					r.TakenAt = k.taken
				}
				args, err := returnArgs(r)
				if err == nil {
					err = model.Return(ctx, r)
				}
				if err == nil {
					err = twin.Return(ctx, r)
				}
				if err != nil {
					t.Fatalf("return %+v: %v", r, err)
				}
				p.ret, p.cmd = &r, returnScript.EvalSha(ctx, pipe, []string{k.key}, args...)
			} else {
				r := randomTake(rng, k)
				args, err := takeArgs(r)
				if err == nil {
					p.res, err = model.Take(ctx, r)
				}
				if err != nil {
					t.Fatalf("take %+v: %v", r, err)
				}
				keyBuf = append(keyBuf[:0], r.Key...)
				tr := r
				tr.Key = ""
				if got, err := twin.TakeBytes(ctx, keyBuf, tr); err != nil || got != p.res {
					t.Fatalf("take %+v: single-goroutine TakeBytes %+v %v, model %+v", r, got, err, p.res)
				}
				if p.res.Granted > 0 {
					k.taken = p.res.Now
				}
				p.take, p.cmd = &r, takeScript.EvalSha(ctx, pipe, []string{k.key}, args...)
			}
			p.state = pipe.HGetAll(ctx, k.key)
			p.fields = model.Fields(k.key)
			if msg := compareFields(p.fields, twin.Fields(k.key)); msg != "" {
				t.Fatalf("key %s: single-goroutine Memory differs: %s", k.key, msg)
			}
			ps = append(ps, p)
		}
		batches <- batchOps{pipe, ps}
	}
	close(batches)
	<-checked
	t.Logf("granted %d (partial %d), denied %d (never %d), returns %d", granted, partial, denied, never, returns)
	return done, bad
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
	return compareState(fields, hash)
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
			ls = append(ls, l)
		}
	}
	return ls
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
