package enforcer

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/journal"
	"github.com/rlctl/rlctl/policy"
)

// readSnapshot decodes a policy snapshot.
func readSnapshot(r io.Reader) (*policy.Model, error) { return policy.ReadSnapshot(r) }

// leasing owns the engine lease managers: for each distinct lease setting of the rules (the
// engine's LeaseConfig is per manager), one manager per stripe of the order. Managers outlive
// config reloads, so the leases of keys whose rules did not change survive a reload.
type leasing struct {
	store      engine.Store
	order      *order
	journal    *journal.Writer
	timeout    time.Duration
	storeClock bool
	keys       *engine.KeyCap // shared by every manager
	fallback   *engine.Memory // the fail-open bounds' buckets, expired at each sweep

	mu     sync.Mutex
	byRule map[policy.Lease][]*engine.LeaseManager
	// keep is the lease settings of the configs requests may still use (retain); the managers
	// of others are dropped once they hold no lease (dropIdle). nil keeps every manager.
	keep   map[policy.Lease]bool
	closed bool
	wg     sync.WaitGroup // dispatched store calls
}

func newLeasing(store engine.Store, o *order, j *journal.Writer, timeout time.Duration, storeClock bool, keys *engine.KeyCap, fallback *engine.Memory) *leasing {
	return &leasing{store: store, order: o, journal: j, timeout: timeout, storeClock: storeClock, keys: keys, fallback: fallback,
		byRule: map[policy.Lease][]*engine.LeaseManager{}}
}

// managers returns the lease managers, one per stripe, of rules with lease settings p, whose
// engine form is cfg.
func (ls *leasing) managers(p policy.Lease, cfg engine.LeaseConfig) ([]*engine.LeaseManager, error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ms := ls.byRule[p]; ms != nil {
		return ms, nil
	}
	if ls.closed {
		return nil, engine.ErrClosed
	}
	ms := make([]*engine.LeaseManager, ls.order.count())
	for i := range ms {
		c := cfg
		c.Store, c.Clock, c.Dispatcher, c.StoreClock, c.Keys = ls.store, ls.order.clock(i), engine.DispatchFunc(ls.dispatch), ls.storeClock, ls.keys
		m, err := engine.NewLeaseManager(c)
		if err != nil {
			return nil, err
		}
		ms[i] = m
	}
	ls.byRule[p] = ms
	if ls.keep != nil {
		// Made for a config being compiled, which retain has not named yet: a sweep in
		// between must not drop them from under it.
		ls.keep[p] = true
	}
	return ms, nil
}

// retain records the lease settings of the rules of the configs that requests may still use:
// the one serving and the one before it (a request that began before the last swap). A reload
// that changes a rule's lease settings, or a rejected snapshot's compile, left managers behind
// for good, each swept every second: 64 managers became 1,344 over 20 reloads with a journal.
func (ls *leasing) retain(configs ...*policy.Model) {
	keep := map[policy.Lease]bool{}
	for _, m := range configs {
		if m == nil {
			continue
		}
		for _, d := range m.Domains {
			for _, r := range d.Rules {
				keep[r.Lease] = true
			}
		}
	}
	ls.mu.Lock()
	ls.keep = keep
	ls.mu.Unlock()
}

// dropIdle forgets the managers of lease settings that retain did not keep, once none of their
// stripes holds a lease: their leases are returned or expire as any other, and then nothing is
// left in them to sweep. (A request of a config older than the last two could still be using
// one; it then leases through a manager no sweep visits, and its lease ends at its TTL in the
// store.)
func (ls *leasing) dropIdle() {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.keep == nil || ls.closed {
		return
	}
	for p, ms := range ls.byRule {
		if ls.keep[p] {
			continue
		}
		idle := true
		for i, m := range ms {
			ls.order.lock(i)
			n := m.Keys()
			ls.order.unlock(i)
			if n > 0 {
				idle = false
				break
			}
		}
		if idle {
			delete(ls.byRule, p)
		}
	}
}

// managerCount is the number of lease managers held, over every stripe.
func (ls *leasing) managerCount() int {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	n := 0
	for _, ms := range ls.byRule {
		n += len(ms)
	}
	return n
}

// dispatch runs a prefetch or a return on a goroutine of its own, bounded by the store timeout
// (the guarded store enforces it too).
func (ls *leasing) dispatch(fn func(ctx context.Context)) {
	ls.wg.Add(1)
	ls.order.dispatch(func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), max(ls.timeout, 50*time.Millisecond))
	}, fn, ls.wg.Done)
}

// byStripe returns the managers of every stripe.
func (ls *leasing) byStripe() [][]*engine.LeaseManager {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	out := make([][]*engine.LeaseManager, ls.order.count())
	for _, ms := range ls.byRule {
		for i, m := range ms {
			out[i] = append(out[i], m)
		}
	}
	return out
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
			for i, ms := range ls.byStripe() {
				ls.sweepStripe(ctx, i, ms)
			}
			ls.dropIdle()
			if ls.fallback != nil {
				ls.fallback.Expire(wallClock.Now())
			}
		}
	}
}

// sweepStripe sweeps the managers of stripe i. With a journal it records the sweep, unless the
// stripe holds no lease: then a sweep changes nothing, and an idle enforcer writes nothing.
func (ls *leasing) sweepStripe(ctx context.Context, i int, ms []*engine.LeaseManager) {
	now := ls.order.lock(i)
	defer ls.order.unlock(i)
	if ls.order.exact() {
		n := 0
		for _, m := range ms {
			n += m.Keys()
		}
		if n == 0 {
			return
		}
		ls.journal.Write(journal.Record{Kind: journal.KindSweep, TimeMs: now, Stripe: i})
	}
	for _, m := range ms {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		_ = m.Sweep(sctx)
		cancel()
	}
}

// Close waits for dispatched store calls and gives every lease's balance back to the store.
func (ls *leasing) Close(ctx context.Context) error {
	ls.mu.Lock()
	ls.closed = true
	ls.mu.Unlock()
	ls.wait(ctx)
	var errs []error
	for i, ms := range ls.byStripe() {
		ls.order.lock(i)
		for _, m := range ms {
			errs = append(errs, m.Close(ctx))
		}
		ls.order.unlock(i)
	}
	ls.wait(ctx) // returns that Close dispatched
	return summarize("lease returns failed", errs)
}

// summarize joins errs, which may hold one error per lease (tens of thousands when the store is
// down at shutdown), into one error of a line: how many failed, and each distinct message with
// its count, the commonest first, at most three. Nil errors are skipped; nil when none is left.
func summarize(what string, errs []error) error {
	var flat []error
	var flatten func(err error)
	flatten = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				flatten(e)
			}
		} else if err != nil {
			flat = append(flat, err)
		}
	}
	for _, err := range errs {
		flatten(err)
	}
	if len(flat) == 0 {
		return nil
	}
	count := map[string]int{}
	var msgs []string
	for _, err := range flat {
		m := strings.ReplaceAll(err.Error(), "\n", "; ")
		if count[m] == 0 {
			msgs = append(msgs, m)
		}
		count[m]++
	}
	slices.SortStableFunc(msgs, func(a, b string) int { return count[b] - count[a] })
	parts := make([]string, 0, 4)
	for _, m := range msgs[:min(len(msgs), 3)] {
		parts = append(parts, fmt.Sprintf("%s (%d)", m, count[m]))
	}
	if rest := len(msgs) - 3; rest > 0 {
		parts = append(parts, fmt.Sprintf("%d other messages", rest))
	}
	return &summaryError{msg: fmt.Sprintf("%d %s: %s", len(flat), what, strings.Join(parts, "; ")), errs: flat}
}

// summaryError is summarize's error: one line, wrapping every error it counts, so that
// errors.Is still finds them.
type summaryError struct {
	msg  string
	errs []error
}

func (e *summaryError) Error() string   { return e.msg }
func (e *summaryError) Unwrap() []error { return e.errs }

// wait waits for dispatched store calls, or for ctx.
func (ls *leasing) wait(ctx context.Context) {
	done := make(chan struct{})
	go func() { ls.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}
