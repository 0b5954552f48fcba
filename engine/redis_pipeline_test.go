package engine

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rlctl/rlctl/internal/redistest"
)

// TestPipelinedMatchesModel sends random takes and returns at explicit times
// through a Pipelined store, from concurrent goroutines that each own some
// keys, and requires every reply to equal the Memory model's.
func TestPipelinedMatchesModel(t *testing.T) {
	ctx := context.Background()
	p := NewPipelined(NewRedis(redistest.Start(t).Client()), 2, 16)
	defer p.Close()
	model := NewMemory(nil)
	const workers, keysPer, ops = 16, 4, 300
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			keys := make([]*diffKeyState, keysPer)
			for i := range keys {
				keys[i] = &diffKeyState{key: Key("pipe", strconv.Itoa(w), strconv.Itoa(i)), limits: randomLimits(rng), now: 1 + rng.Int64N(2e12)}
			}
			for range ops {
				k := keys[rng.IntN(len(keys))]
				k.now += rng.Int64N(2000)
				if rng.IntN(4) == 0 {
					req := ReturnRequest{Key: k.key, Limits: k.limits, N: 1 + rng.Int64N(5), TakenAt: k.now - rng.Int64N(1000), Now: k.now}
					if err, want := p.Return(ctx, req), model.Return(ctx, req); (err == nil) != (want == nil) {
						errs <- errors.Join(err, want)
						return
					}
					continue
				}
				n := 1 + rng.Int64N(20)
				req := TakeRequest{Key: k.key, Limits: k.limits, Want: n, Min: rng.Int64N(n + 1), Now: k.now}
				got, err := p.Take(ctx, req)
				want, werr := model.Take(ctx, req)
				if err != nil || werr != nil || got != want {
					errs <- errors.Join(err, werr, errors.New(k.key+": pipelined "+strconv.FormatInt(got.Granted, 10)+
						", model "+strconv.FormatInt(want.Granted, 10)))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestPipelinedSharesTokens takes one token at a time from 64 goroutines on
// one key that holds 500: exactly 500 are granted.
func TestPipelinedSharesTokens(t *testing.T) {
	ctx := context.Background()
	c := redistest.Start(t).Client()
	sizes := &batchSizes{}
	c.AddHook(sizes)
	p := NewPipelined(NewRedis(c), 4, 64)
	defer p.Close()
	limits := []Limit{{Requests: 500, Window: 3_600_000}}
	var calls sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for range 64 {
		calls.Add(1)
		go func() {
			defer calls.Done()
			for range 20 {
				r, err := p.Take(ctx, TakeRequest{Key: "pipe:shared", Limits: limits, Want: 1, Now: 1_000})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				total += int(r.Granted)
				mu.Unlock()
			}
		}()
	}
	calls.Wait()
	if total != 500 {
		t.Errorf("granted %d tokens of 500 to 1,280 takes", total)
	}
	if got := sizes.largest.Load(); got < 2 {
		t.Errorf("largest pipeline: %d calls; 64 concurrent callers should have shared some", got)
	}
}

// batchSizes is a go-redis hook that records the largest pipeline sent.
type batchSizes struct{ largest atomic.Int64 }

func (*batchSizes) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*batchSizes) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *batchSizes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for n := int64(len(cmds)); ; {
			old := h.largest.Load()
			if n <= old || h.largest.CompareAndSwap(old, n) {
				break
			}
		}
		return next(ctx, cmds)
	}
}

// TestPipelinedNoScript: a server without the scripts (restarted, or
// flushed) gets them by EVAL.
func TestPipelinedNoScript(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	p := NewPipelined(NewRedis(srv.Client()), 1, 8)
	defer p.Close()
	if err := srv.Client().ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	limits := []Limit{{Requests: 10, Window: 1000}}
	r, err := p.Take(ctx, TakeRequest{Key: "pipe:noscript", Limits: limits, Want: 3, Now: 5})
	if err != nil || r.Granted != 3 || r.Remaining != 7 {
		t.Fatalf("take after SCRIPT FLUSH: %+v, %v; want 3 granted, 7 remaining", r, err)
	}
	if err := p.Return(ctx, ReturnRequest{Key: "pipe:noscript", Limits: limits, N: 3, Now: 5}); err != nil {
		t.Fatal(err)
	}
}

// TestPipelinedConnectionError: an error of the connection itself (a password Redis refuses),
// which go-redis gives Exec and not each command, reaches the caller; it read "unexpected reply
// <nil>", where a call sent on its own said WRONGPASS.
func TestPipelinedConnectionError(t *testing.T) {
	srv := redistest.Start(t)
	if err := srv.Client().ConfigSet(context.Background(), "requirepass", "right").Err(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: "wrong", MaxRetries: -1})
	defer c.Close()
	p := NewPipelined(NewRedis(c), 1, 8)
	defer p.Close()
	_, err := p.Take(context.Background(), TakeRequest{Key: "pipe:auth", Limits: []Limit{{Requests: 10, Window: 1000}}, Want: 1, Now: 5})
	if err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("take with a refused password: %v, want Redis's WRONGPASS", err)
	}
}

// TestPipelinedDeadline: a call on a hung server returns when its context
// ends, and the store works again when the server does.
func TestPipelinedDeadline(t *testing.T) {
	srv := redistest.Start(t)
	p := NewPipelined(NewRedis(srv.Client()), 2, 8)
	defer p.Close()
	limits := []Limit{{Requests: 10, Window: 1000}}
	take := func(d time.Duration) (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		start := time.Now()
		_, err := p.Take(ctx, TakeRequest{Key: "pipe:hung", Limits: limits, Want: 1})
		return time.Since(start), err
	}
	if _, err := take(time.Second); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	took, err := take(50 * time.Millisecond)
	srv.Resume()
	if !errors.Is(err, context.DeadlineExceeded) {
		var ne interface{ Timeout() bool }
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("take on a stopped server: %v, want a timeout", err)
		}
	}
	if took > 500*time.Millisecond {
		t.Errorf("take on a stopped server returned after %v, want about 50ms", took)
	}
	if _, err := take(time.Second); err != nil {
		t.Fatalf("take after the server resumed: %v", err)
	}
}

func TestPipelinedClose(t *testing.T) {
	p := NewPipelined(NewRedis(redistest.Start(t).Client()), 2, 8)
	p.Close()
	p.Close() // twice is fine
	_, err := p.Take(context.Background(), TakeRequest{Key: "pipe:closed", Limits: []Limit{{Requests: 1, Window: 1000}}, Want: 1})
	if !errors.Is(err, ErrStoreClosed) {
		t.Fatalf("take after Close: %v, want ErrStoreClosed", err)
	}
}

// BenchmarkRedisTakeParallel is 64 goroutines taking from 1,024 keys on a
// redis-server on loopback, each take its own round trip (direct) or sharing
// pipelines (pipelined). Besides ns/op it reports the CPU per take of this
// process and of the server.
func BenchmarkRedisTakeParallel(b *testing.B) {
	srv := redistest.Start(b)
	keys := benchKeys(1024)
	limits := []Limit{{Requests: 1e6, Window: 1000}, {Algorithm: SlidingWindow, Requests: 1e7, Window: 60_000}}
	for _, tc := range []struct {
		name  string
		store func() (Store, func())
	}{
		{"direct", func() (Store, func()) { return NewRedis(srv.Client()), func() {} }},
		{"pipelined", func() (Store, func()) { p := NewPipelined(NewRedis(srv.Client()), 4, 64); return p, p.Close }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			store, closeStore := tc.store()
			defer closeStore()
			if _, err := store.Take(ctx, TakeRequest{Key: keys[0], Limits: limits, Want: 1}); err != nil {
				b.Fatal(err)
			}
			serverCPU := func() float64 {
				info, err := srv.Client().Info(ctx, "cpu").Result()
				if err != nil {
					b.Fatal(err)
				}
				var sum float64
				for _, line := range strings.Split(info, "\r\n") {
					if name, v, ok := strings.Cut(line, ":"); ok && (name == "used_cpu_sys" || name == "used_cpu_user") {
						f, _ := strconv.ParseFloat(v, 64)
						sum += f
					}
				}
				return sum
			}
			ownCPU := func() float64 {
				var ru syscall.Rusage
				_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
				return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
			}
			srv0, own0 := serverCPU(), ownCPU()
			b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0))) // 64 goroutines
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
				for pb.Next() {
					if _, err := store.Take(ctx, TakeRequest{Key: keys[rng.IntN(len(keys))], Limits: limits, Want: 1}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			n := float64(b.N)
			b.ReportMetric((ownCPU()-own0)*1e6/n, "client-cpu-µs/take")
			b.ReportMetric((serverCPU()-srv0)*1e6/n, "redis-cpu-µs/take")
		})
	}
}
