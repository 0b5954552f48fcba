package enforcer

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/policy"
)

// readSnapshot decodes a policy snapshot.
func readSnapshot(r io.Reader) (*policy.Model, error) { return policy.ReadSnapshot(r) }

// leasing owns the engine lease managers, one per distinct lease setting of the rules (the
// engine's LeaseConfig is per manager). Managers outlive config reloads, so the leases of keys
// whose rules did not change survive a reload.
type leasing struct {
	store      engine.Store
	clock      engine.Clock
	timeout    time.Duration
	storeClock bool

	mu       sync.Mutex
	managers map[policy.Lease]*engine.LeaseManager
	closed   bool
	wg       sync.WaitGroup // dispatched store calls
}

func newLeasing(store engine.Store, clock engine.Clock, timeout time.Duration, storeClock bool) *leasing {
	return &leasing{store: store, clock: clock, timeout: timeout, storeClock: storeClock,
		managers: map[policy.Lease]*engine.LeaseManager{}}
}

// manager returns the lease manager for rules with lease settings p.
func (ls *leasing) manager(p policy.Lease) (*engine.LeaseManager, error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if m := ls.managers[p]; m != nil {
		return m, nil
	}
	if ls.closed {
		return nil, engine.ErrClosed
	}
	m, err := engine.NewLeaseManager(engine.LeaseConfig{
		Store: ls.store, Clock: ls.clock, Dispatcher: engine.DispatchFunc(ls.dispatch),
		MinLease: p.Min, MaxLease: p.Max, Lookahead: p.LookaheadMs, TTL: p.TTLMs,
		StoreClock: ls.storeClock,
	})
	if err != nil {
		return nil, err
	}
	ls.managers[p] = m
	return m, nil
}

// dispatch runs a prefetch or a return on a goroutine of its own, bounded by the store timeout
// (the guarded store enforces it too).
func (ls *leasing) dispatch(fn func(ctx context.Context)) {
	ls.wg.Add(1)
	go func() {
		defer ls.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), max(ls.timeout, 50*time.Millisecond))
		defer cancel()
		fn(ctx)
	}()
}

// sweep returns expired leases every second until ctx is done.
func (ls *leasing) sweep(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			ls.mu.Lock()
			ms := make([]*engine.LeaseManager, 0, len(ls.managers))
			for _, m := range ls.managers {
				ms = append(ms, m)
			}
			ls.mu.Unlock()
			for _, m := range ms {
				sctx, cancel := context.WithTimeout(ctx, time.Second)
				_ = m.Sweep(sctx)
				cancel()
			}
		}
	}
}

// Close waits for dispatched store calls and gives every lease's balance back to the store.
func (ls *leasing) Close(ctx context.Context) error {
	ls.mu.Lock()
	ls.closed = true
	ms := ls.managers
	ls.mu.Unlock()
	ls.wait(ctx)
	var errs []error
	for _, m := range ms {
		errs = append(errs, m.Close(ctx))
	}
	ls.wait(ctx) // returns that Close dispatched
	return errors.Join(errs...)
}

// wait waits for dispatched store calls, or for ctx.
func (ls *leasing) wait(ctx context.Context) {
	done := make(chan struct{})
	go func() { ls.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}
