package engine

import (
	"context"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/rlctl/rlctl/internal/redistest"
)

// wallClock is the enforcer's kind of clock, so that BenchmarkLeaseHit pays
// for time the way rate.Limiter.Allow does (though the hit path reads none).
var wallClock = ClockFunc(func() int64 { return time.Now().UnixMilli() })

// roomy is a limit no benchmark exhausts.
var roomy = []Limit{{Requests: 1 << 40, Window: 1, Burst: 1 << 40}}

func benchManager(b *testing.B) *LeaseManager {
	m, err := NewLeaseManager(LeaseConfig{Store: NewMemory(nil), Clock: wallClock, MinLease: 1 << 30, MaxLease: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	return m
}

func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = Key("bench", "user", strconv.Itoa(i))
	}
	return keys
}

// BenchmarkLeaseHit is the local path: the key's balance covers the request.
func BenchmarkLeaseHit(b *testing.B) { benchLeaseHit(b, benchManager(b)) }

// benchLeaseHit measures local hits on one key of m, whose lease covers every request.
func benchLeaseHit(b *testing.B, m *LeaseManager) {
	ctx := context.Background()
	key := Key("bench", "hot")
	if _, err := m.Take(ctx, key, roomy, 1); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if d, _ := m.Take(ctx, key, roomy, 1); !d.OK {
			b.Fatal("denied")
		}
	}
}

// BenchmarkLeaseHitKey is the enforcer's whole local path: build the key
// from descriptor values into a reused buffer, then TakeBytes.
func BenchmarkLeaseHitKey(b *testing.B) {
	ctx := context.Background()
	m := benchManager(b)
	buf := make([]byte, 0, 128)
	buf = AppendKey(buf, "edge", "tenant_id", "acme", "path", "/v1/payments")
	if _, err := m.TakeBytes(ctx, buf, roomy, 1); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendKey(buf[:0], "edge", "tenant_id", "acme", "path", "/v1/payments")
		if d, _ := m.TakeBytes(ctx, buf, roomy, 1); !d.OK {
			b.Fatal("denied")
		}
	}
}

// BenchmarkXTimeRate is the anchor: golang.org/x/time/rate's Allow on one key.
func BenchmarkXTimeRate(b *testing.B) {
	l := rate.NewLimiter(rate.Limit(1e12), 1<<30)
	b.ReportAllocs()
	for b.Loop() {
		if !l.Allow() {
			b.Fatal("denied")
		}
	}
}

// BenchmarkLeaseHitParallel runs the local path on every core, on many keys
// and on one hot key.
func BenchmarkLeaseHitParallel(b *testing.B) {
	ctx := context.Background()
	b.Run("many-keys", func(b *testing.B) {
		m := benchManager(b)
		keys := benchKeys(1024)
		for _, k := range keys {
			_, _ = m.Take(ctx, k, roomy, 1)
		}
		var seed atomic.Uint64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := int(seed.Add(7919))
			for pb.Next() {
				i++
				if d, _ := m.Take(ctx, keys[i&1023], roomy, 1); !d.OK {
					b.Error("denied")
					return
				}
			}
		})
	})
	b.Run("hot-key", func(b *testing.B) {
		m := benchManager(b)
		key := Key("bench", "hot")
		_, _ = m.Take(ctx, key, roomy, 1)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if d, _ := m.Take(ctx, key, roomy, 1); !d.OK {
					b.Error("denied")
					return
				}
			}
		})
	})
}

// BenchmarkXTimeRateParallel is the anchor for BenchmarkLeaseHitParallel:
// limiters found by key in a sync.Map, and one shared limiter.
func BenchmarkXTimeRateParallel(b *testing.B) {
	b.Run("many-keys", func(b *testing.B) {
		var limiters sync.Map
		keys := benchKeys(1024)
		for _, k := range keys {
			limiters.Store(k, rate.NewLimiter(rate.Limit(1e12), 1<<30))
		}
		var seed atomic.Uint64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := int(seed.Add(7919))
			for pb.Next() {
				i++
				l, _ := limiters.Load(keys[i&1023])
				if !l.(*rate.Limiter).Allow() {
					b.Error("denied")
					return
				}
			}
		})
	})
	b.Run("hot-key", func(b *testing.B) {
		l := rate.NewLimiter(rate.Limit(1e12), 1<<30)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !l.Allow() {
					b.Error("denied")
					return
				}
			}
		})
	})
}

// BenchmarkMemoryTake is one store take on the in-process model, as the
// simulator pays it per request.
func BenchmarkMemoryTake(b *testing.B) { benchMemoryTake(b, NewMemory(nil)) }

// benchMemoryTake measures takes on m over 1024 keys with a burst and a sustained limit.
func benchMemoryTake(b *testing.B, m *Memory) {
	ctx := context.Background()
	keys := benchKeys(1024)
	limits := []Limit{{Requests: 100, Window: 1000}, {Algorithm: SlidingWindow, Requests: 1000, Window: 60_000}}
	now := int64(1e12)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		now += 3
		if _, err := m.Take(ctx, TakeRequest{Key: keys[i&1023], Limits: limits, Want: 1, Now: now}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendKey builds a key into a reused buffer.
func BenchmarkAppendKey(b *testing.B) {
	buf := make([]byte, 0, 128)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendKey(buf[:0], "edge", "tenant_id", "shop{1}", "path", "/v1/payments:charge")
	}
}

var cmdstatEvalsha = regexp.MustCompile(`cmdstat_evalsha:calls=(\d+),usec=(\d+)`)

// BenchmarkRedisTake is one take per round trip to a redis-server on
// loopback, reporting latency percentiles and the script's own cost from
// INFO commandstats.
func BenchmarkRedisTake(b *testing.B) {
	ctx := context.Background()
	srv := redistest.Start(b)
	c := srv.Client()
	store := NewRedis(c)
	keys := benchKeys(1024)
	limits := []Limit{{Requests: 1e6, Window: 1000}, {Algorithm: SlidingWindow, Requests: 1e7, Window: 60_000}}
	if _, err := store.Take(ctx, TakeRequest{Key: keys[0], Limits: limits, Want: 1}); err != nil {
		b.Fatal(err) // loads the script
	}
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	lat := make([]time.Duration, 0, 1<<16)
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		if _, err := store.Take(ctx, TakeRequest{Key: keys[rng.IntN(len(keys))], Limits: limits, Want: 1}); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	if m := cmdstatEvalsha.FindStringSubmatch(info); m != nil {
		calls, _ := strconv.ParseFloat(m[1], 64)
		usec, _ := strconv.ParseFloat(m[2], 64)
		b.ReportMetric(usec/calls, "script-µs/call")
	}
}
