package engine

import (
	"context"
	"strconv"
	"testing"
)

// Benchmarks of the single-goroutine options, on keys as long as a
// simulator's (a domain, a rule and two descriptor entries).

func longKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = Key("edge", "per_user_per_path", "user_id", "u-"+strconv.Itoa(100000+i), "path", "/v1/orders/{id}")
	}
	return keys
}

func benchManagerSingle(b *testing.B) *LeaseManager {
	m, err := NewLeaseManager(LeaseConfig{Store: NewSingleGoroutineMemory(nil), Clock: wallClock,
		MinLease: 1 << 30, MaxLease: 1 << 30, SingleGoroutine: true})
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// BenchmarkLeaseHitSingle is BenchmarkLeaseHit with SingleGoroutine.
func BenchmarkLeaseHitSingle(b *testing.B) { benchLeaseHit(b, benchManagerSingle(b)) }

// BenchmarkLeaseHitManyKeys is the local path over 4096 long keys, as a
// simulator spreads requests, concurrent and single-goroutine.
func BenchmarkLeaseHitManyKeys(b *testing.B) {
	ctx := context.Background()
	for _, mode := range []string{"concurrent", "single"} {
		b.Run(mode, func(b *testing.B) {
			m := benchManager(b)
			if mode == "single" {
				m = benchManagerSingle(b)
			}
			keys := longKeys(4096)
			for _, k := range keys {
				_, _ = m.Take(ctx, k, roomy, 1)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i = (i + 1) & 4095
				if d, _ := m.Take(ctx, keys[i], roomy, 1); !d.OK {
					b.Fatal("denied")
				}
			}
		})
	}
}

// BenchmarkMemoryTakeSingle is BenchmarkMemoryTake on a single-goroutine
// Memory.
func BenchmarkMemoryTakeSingle(b *testing.B) { benchMemoryTake(b, NewSingleGoroutineMemory(nil)) }

// BenchmarkMemoryTakeLongKey is a store take over 4096 long keys,
// concurrent and single-goroutine, and TakeBytes from a reused buffer.
func BenchmarkMemoryTakeLongKey(b *testing.B) {
	ctx := context.Background()
	limits := []Limit{{Requests: 100, Window: 1000}, {Algorithm: SlidingWindow, Requests: 1000, Window: 60_000}}
	for _, mode := range []string{"concurrent", "single", "single-bytes"} {
		b.Run(mode, func(b *testing.B) {
			m := NewMemory(nil)
			if mode != "concurrent" {
				m = NewSingleGoroutineMemory(nil)
			}
			keys := longKeys(4096)
			var buf []byte
			now := int64(1e12)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i = (i + 1) & 4095
				now += 3
				r := TakeRequest{Key: keys[i], Limits: limits, Want: 1, Now: now}
				var err error
				if mode == "single-bytes" {
					buf = append(buf[:0], keys[i]...)
					_, err = m.TakeBytes(ctx, buf, r)
				} else {
					_, err = m.Take(ctx, r)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLeaseSweep is one Sweep over 100,000 leases of which 1% are due,
// as a simulator's once-a-second sweep finds them; only Sweep is timed.
func BenchmarkLeaseSweep(b *testing.B) {
	for _, mode := range []string{"concurrent", "single"} {
		b.Run(mode, func(b *testing.B) { benchSweep(b, mode == "single") })
	}
}

func benchSweep(b *testing.B, single bool) {
	ctx := context.Background()
	now := int64(1_000_000)
	clock := ClockFunc(func() int64 { return now })
	m, err := NewLeaseManager(LeaseConfig{Store: NewSingleGoroutineMemory(nil), Clock: clock,
		MinLease: 5, MaxLease: 5, TTL: 100_000, SingleGoroutine: single})
	if err != nil {
		b.Fatal(err)
	}
	keys := longKeys(100_000)
	limits := []Limit{{Requests: 1e9, Window: 1000}}
	for _, k := range keys {
		now++ // a lease a ms: 1000 expire per second from 100 s on
		if _, err := m.Take(ctx, k, limits, 1); err != nil {
			b.Fatal(err)
		}
	}
	_ = m.Sweep(ctx)
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		now += 1000
		_ = m.Sweep(ctx)
		b.StopTimer()
		for range 1000 { // renew the expired leases: the population stays
			_, _ = m.Take(ctx, keys[i], limits, 1)
			i = (i + 1) % len(keys)
		}
		b.StartTimer()
	}
}
