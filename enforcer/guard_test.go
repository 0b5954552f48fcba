package enforcer

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/rlctl/rlctl/engine"
)

// stubStore answers every Take after delay with res and err.
type stubStore struct {
	delay time.Duration
	res   engine.Result
	err   error
}

func (s stubStore) Take(ctx context.Context, _ engine.TakeRequest) (engine.Result, error) {
	select {
	case <-time.After(s.delay):
		return s.res, s.err
	case <-ctx.Done():
		return engine.Result{}, ctx.Err()
	}
}

func (s stubStore) Return(context.Context, engine.ReturnRequest) error { return nil }

func TestGuardedStoreTake(t *testing.T) {
	const timeout = 20 * time.Millisecond
	netTimeout := &os.PathError{Op: "read", Path: "tcp", Err: os.ErrDeadlineExceeded} // a net.Error with Timeout()
	tests := []struct {
		name    string
		store   stubStore
		granted int64
		err     error
	}{
		{name: "reply", store: stubStore{res: engine.Result{Granted: 5}}, granted: 5},
		{name: "denial", store: stubStore{res: engine.Result{RetryAfter: 7}}},
		{name: "store error", store: stubStore{err: errors.New("connection refused")}, err: errors.New("connection refused")},
		{name: "hung store", store: stubStore{delay: time.Hour}, err: ErrStoreTimeout},
		{name: "network timeout", store: stubStore{err: netTimeout}, err: ErrStoreTimeout},
		{name: "deadline", store: stubStore{err: context.DeadlineExceeded}, err: ErrStoreTimeout},
	}
	clock := engine.ClockFunc(func() int64 { return time.Now().UnixMilli() })
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			br := newBreaker(3, 1000, clock, func(from, to BreakerState) {})
			g := newGuardedStore(tt.store, timeout, true, br, clock, newOrder(clock, false), nil, newMetrics(nil, nil))
			start := time.Now()
			res, err := g.Take(context.Background(), engine.TakeRequest{Key: "k", Want: 5, Min: 1})
			took := time.Since(start)
			switch {
			case tt.err == nil && err != nil:
				t.Fatalf("err: got %v, want nil", err)
			case tt.err != nil && (err == nil || err.Error() != tt.err.Error()):
				t.Fatalf("err: got %v, want %v", err, tt.err)
			}
			if res.Granted != tt.granted {
				t.Errorf("granted: got %d, want %d", res.Granted, tt.granted)
			}
			// The request waits the timeout, not the call's own longer deadline.
			if limit := timeout + 200*time.Millisecond; took > limit {
				t.Errorf("took %v, want at most %v", took, limit)
			}
		})
	}
}

func TestGuardedStoreBreakerOpens(t *testing.T) {
	clock := engine.ClockFunc(func() int64 { return time.Now().UnixMilli() })
	br := newBreaker(3, 60_000, clock, func(from, to BreakerState) {})
	g := newGuardedStore(stubStore{delay: time.Hour}, time.Millisecond, true, br, clock, newOrder(clock, false), nil, newMetrics(nil, nil))
	for i, want := range []error{ErrStoreTimeout, ErrStoreTimeout, ErrStoreTimeout, ErrCircuitOpen} {
		if _, err := g.Take(context.Background(), engine.TakeRequest{Key: "k", Want: 1, Min: 1}); !errors.Is(err, want) {
			t.Fatalf("call %d: got %v, want %v", i, err, want)
		}
	}
	if got := br.State(); got != BreakerOpen {
		t.Errorf("breaker: got %v, want open", got)
	}
}
