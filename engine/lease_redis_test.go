package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlctl/rlctl/internal/redistest"
)

// goDispatcher is the enforcer's Dispatcher: a goroutine per call, with a
// timeout, tracked so the test can wait for stragglers.
type goDispatcher struct{ wg sync.WaitGroup }

func (d *goDispatcher) Go(fn func(context.Context)) {
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		fn(ctx)
	}()
}

// TestLeaseConcurrentRedis runs several lease managers on goroutines against
// a real Redis using its TIME, as the enforcer does. The bucket barely refills
// during the test, so together they must admit at most its capacity, and after
// Close every unspent token must be back in Redis.
func TestLeaseConcurrentRedis(t *testing.T) {
	ctx := context.Background()
	store := NewRedis(redistest.Start(t).Client())
	limits := []Limit{{Requests: 1, Window: 3_600_000, Burst: 1000}}
	key := Key("concurrent", "k")
	var d goDispatcher
	var ms []*LeaseManager
	for range 4 {
		m, err := NewLeaseManager(LeaseConfig{
			Store: store, Clock: wallClock, Dispatcher: &d, StoreClock: true,
			MinLease: 5, MaxLease: 40,
		})
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	var admitted, denied atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := ms[g%len(ms)]
			for range 400 {
				d, err := m.Take(ctx, key, limits, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.OK {
					admitted.Add(1)
				} else {
					denied.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	d.wg.Wait()
	for _, m := range ms {
		if err := m.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	d.wg.Wait()
	if got := admitted.Load(); got > 1000+1 {
		t.Errorf("admitted %d, bucket holds 1000", got)
	}
	// Denials come while the other managers hold leased tokens: at most
	// N × MaxLease of them, which is how far below 1000 admissions can fall.
	if admitted.Load() < 1000-4*40 {
		t.Errorf("admitted %d of 3200 requests on a bucket of 1000", admitted.Load())
	}
	r, err := store.Take(ctx, TakeRequest{Key: key, Limits: limits, Want: 2000, Min: 1})
	if err != nil {
		t.Fatal(err)
	}
	if left := 1000 - admitted.Load(); r.Granted < left || r.Granted > left+1 {
		t.Errorf("bucket holds %d after Close, want %d (1000 − admitted)", r.Granted, left)
	}
	t.Logf("admitted %d, denied %d, bucket left %d", admitted.Load(), denied.Load(), r.Granted)
}
