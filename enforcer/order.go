package enforcer

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/rlctl/rlctl/engine"
)

// journalStripes is the number of lease stripes of an enforcer that writes a journal.
const journalStripes = 64

// order makes the decision journal exact: replaying it through the engine (journal.Replay)
// gives every decision again, field for field.
//
// Without help a journal could not be exact. The lease manager spends leased tokens
// lock-free, lands prefetches on goroutines of its own and reads its clock several times per
// decision, while a record reaches the journal after the fact: records would be in the order
// the journal's channel received them, not the order in which a key's lease changed, and
// would carry none of the clock readings. So an enforcer with a journal splits keys over
// stripes (engine.ShardOf of the key) and makes every change of a key's lease state a critical
// section of its stripe that writes its record inside:
//
//   - a descriptor's decision, with its synchronous store take and any prefetch it starts;
//   - the landing of a prefetch: the store reply's record and the credit or block it causes;
//   - a sweep of the stripe's leases, and the return of its leases at shutdown.
//
// Each section freezes the stripe's clock at its start, and the stripe's lease managers read
// that clock only, so the one time a record carries is every time the engine read; a store
// call the section dispatches (a prefetch, a return) reaches the store before the section
// ends, so what the manager reads on the way is read inside it too. Each stripe has lease
// managers of its own, so stripes share no lease state, run in parallel, and a replay needs
// only the order within each stripe, which is the journal's. A synchronous store take holds
// its stripe for the store's round trip (at most the store timeout); lease hits hold it for
// microseconds.
//
// Without a journal there is one stripe, no locking, and the managers read the wall clock.
type order struct {
	wall    engine.Clock
	stripes []stripe // nil without a journal
}

type stripe struct {
	mu  sync.Mutex
	now atomic.Int64 // the frozen time of the current or last section
}

func newOrder(wall engine.Clock, exact bool) *order {
	o := &order{wall: wall}
	if exact {
		o.stripes = make([]stripe, journalStripes)
	}
	return o
}

// exact reports whether the order serves a journal.
func (o *order) exact() bool { return len(o.stripes) > 0 }

// count is the number of stripes, at least 1.
func (o *order) count() int { return max(len(o.stripes), 1) }

// index is key's stripe.
func (o *order) index(key string) int { return engine.ShardOf(key, len(o.stripes)) }

// clock is the clock of stripe i's lease managers.
func (o *order) clock(i int) engine.Clock {
	if !o.exact() {
		return o.wall
	}
	return engine.ClockFunc(o.stripes[i].now.Load)
}

// lock enters stripe i's critical section, freezes its clock at the wall clock's now and
// returns that time. Without a journal it returns 0: whoever needs the time reads the wall
// clock itself, and the request path reads it only when it must.
func (o *order) lock(i int) int64 {
	if !o.exact() {
		return 0
	}
	s := &o.stripes[i]
	s.mu.Lock()
	now := o.wall.Now()
	s.now.Store(now)
	return now
}

// unlock leaves stripe i's critical section.
func (o *order) unlock(i int) {
	if o.exact() {
		o.stripes[i].mu.Unlock()
	}
}

// landing is carried in the context of a dispatched store call (a prefetch or a return). The
// dispatcher waits until the call reaches the store (or ends) before it lets the section that
// dispatched it go on, so that whatever the lease manager reads before the call (its clock) it
// reads inside that section. When a prefetch's reply lands, the guarded store enters the key's
// stripe and records it here; the dispatcher leaves the stripe once the lease manager has
// applied the reply.
type landing struct {
	stripe  int           // -1 until entered
	reached chan struct{} // closed when the call reaches the store, or ends
	once    sync.Once
}

type landingKey struct{}

// reach tells the dispatcher that the call is at the store.
func (l *landing) reach() { l.once.Do(func() { close(l.reached) }) }

// reached is called by the guarded store as a call reaches it.
func (o *order) reached(ctx context.Context) {
	if !o.exact() {
		return
	}
	if l, ok := ctx.Value(landingKey{}).(*landing); ok {
		l.reach()
	}
}

// land is called by the guarded store when a take's reply is back. It returns the engine time
// at which the reply is applied and whether the take was a prefetch. A prefetch's reply enters
// its key's stripe; a synchronous take's already holds it, inside its decision.
func (o *order) land(ctx context.Context, key string) (ms int64, async bool) {
	if !o.exact() {
		return o.wall.Now(), false
	}
	i := o.index(key)
	if l, ok := ctx.Value(landingKey{}).(*landing); ok && l.stripe < 0 {
		l.stripe = i
		return o.lock(i), true
	}
	return o.stripes[i].now.Load(), false
}

// dispatch runs fn, a dispatched store call, on a goroutine of its own with a context from
// newCtx; done is called when it ends. With a journal it returns once fn has reached the store,
// and the goroutine leaves the stripe that fn's reply entered, if any.
func (o *order) dispatch(newCtx func() (context.Context, context.CancelFunc), fn func(context.Context), done func()) {
	if !o.exact() {
		go func() {
			defer done()
			ctx, cancel := newCtx()
			defer cancel()
			fn(ctx)
		}()
		return
	}
	l := &landing{stripe: -1, reached: make(chan struct{})}
	go func() {
		defer done()
		ctx, cancel := newCtx()
		defer cancel()
		fn(context.WithValue(ctx, landingKey{}, l))
		l.reach()
		if l.stripe >= 0 {
			o.unlock(l.stripe)
		}
	}()
	<-l.reached
}
