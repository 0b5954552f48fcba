package enforcer

import (
	"sync"
	"sync/atomic"

	"github.com/rlctl/rlctl/engine"
)

// BreakerState is the state of the circuit breaker on store calls. Its numeric value is the
// rate_limit_breaker_state gauge.
type BreakerState int32

// The breaker states.
const (
	BreakerClosed   BreakerState = 0 // store calls flow
	BreakerHalfOpen BreakerState = 1 // one probe call is allowed
	BreakerOpen     BreakerState = 2 // no store calls until the cool-down ends
)

func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerHalfOpen:
		return "half_open"
	case BreakerOpen:
		return "open"
	}
	return "unknown"
}

// breaker is a consecutive-failure circuit breaker (the Hystrix pattern): threshold
// consecutive failures open it; after cooldownMs one probe call is let through (half-open);
// the probe's success closes it and its failure opens it again. It is safe for concurrent use.
type breaker struct {
	threshold  int
	cooldownMs int64
	clock      engine.Clock
	onChange   func(from, to BreakerState) // called with mu held; must not call back

	state atomic.Int32 // BreakerState, read without mu on the fast path
	// changes counts the state changes. A call's ticket is its value when Allow let the call
	// through, so that Record can tell a call of the present state from one that began in an
	// earlier one.
	changes atomic.Uint64

	mu        sync.Mutex
	failures  int
	openUntil int64
	probing   bool
}

func newBreaker(threshold int, cooldownMs int64, clock engine.Clock, onChange func(from, to BreakerState)) *breaker {
	if threshold < 1 {
		threshold = 1
	}
	return &breaker{threshold: threshold, cooldownMs: cooldownMs, clock: clock, onChange: onChange}
}

// State returns the current state.
func (b *breaker) State() BreakerState { return BreakerState(b.state.Load()) }

// A ticket is what Allow gives a call it lets through, for Record or Release.
type ticket uint64

// Allow reports whether a store call may be made now, with the call's ticket. A true answer in
// the half-open state makes the caller the probe: it must call Record, or Release when the call
// ended without an outcome.
func (b *breaker) Allow() (ticket, bool) {
	t := ticket(b.changes.Load()) // before the state: a change between makes the ticket stale
	if BreakerState(b.state.Load()) == BreakerClosed {
		return t, true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch BreakerState(b.state.Load()) {
	case BreakerClosed:
		return ticket(b.changes.Load()), true
	case BreakerOpen:
		if b.clock.Now() < b.openUntil {
			return 0, false
		}
		b.set(BreakerHalfOpen)
		b.probing = true
		return ticket(b.changes.Load()), true
	default: // half-open: only the one probe
		if b.probing {
			return 0, false
		}
		b.probing = true
		return ticket(b.changes.Load()), true
	}
}

// Record reports the outcome of a call that Allow let through with ticket t. The outcome of a
// call that began in an earlier state changes nothing: a take begun while the breaker was
// closed and ending while it is half-open is no probe, and must neither close it again (its
// success may come from before the store went away) nor open it (its failure from before the
// store came back).
func (b *breaker) Record(t ticket, ok bool) {
	if ok && BreakerState(b.state.Load()) == BreakerClosed {
		b.mu.Lock()
		b.failures = 0
		b.mu.Unlock()
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if uint64(t) != b.changes.Load() {
		return // begun in an earlier state
	}
	switch BreakerState(b.state.Load()) {
	case BreakerClosed:
		if ok {
			b.failures = 0
			return
		}
		b.failures++
		if b.failures >= b.threshold {
			b.open()
		}
	case BreakerHalfOpen:
		b.probing = false
		if ok {
			b.failures = 0
			b.set(BreakerClosed)
		} else {
			b.open()
		}
	case BreakerOpen:
		// Not reached: a state change since the ticket makes it stale.
	}
}

// Release ends a call that Allow let through with ticket t without an outcome to record: one its
// caller cut short, which says nothing of the store. When it was the half-open state's probe,
// the next call may probe.
func (b *breaker) Release(t ticket) {
	if BreakerState(b.state.Load()) == BreakerClosed {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if uint64(t) == b.changes.Load() && BreakerState(b.state.Load()) == BreakerHalfOpen {
		b.probing = false
	}
}

func (b *breaker) open() {
	b.openUntil = b.clock.Now() + b.cooldownMs
	b.failures = 0
	b.set(BreakerOpen)
}

func (b *breaker) set(s BreakerState) {
	from := BreakerState(b.state.Swap(int32(s)))
	if from != s {
		b.changes.Add(1)
		if b.onChange != nil {
			b.onChange(from, s)
		}
	}
}
