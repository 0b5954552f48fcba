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

// Allow reports whether a store call may be made now. A true answer in the half-open state
// makes the caller the probe: it must call Record, or Release when the call ended without an
// outcome.
func (b *breaker) Allow() bool {
	if BreakerState(b.state.Load()) == BreakerClosed {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch BreakerState(b.state.Load()) {
	case BreakerClosed:
		return true
	case BreakerOpen:
		if b.clock.Now() < b.openUntil {
			return false
		}
		b.set(BreakerHalfOpen)
		b.probing = true
		return true
	default: // half-open: only the one probe
		if b.probing {
			return false
		}
		b.probing = true
		return true
	}
}

// Record reports the outcome of a call that Allow let through.
func (b *breaker) Record(ok bool) {
	if ok && BreakerState(b.state.Load()) == BreakerClosed {
		b.mu.Lock()
		b.failures = 0
		b.mu.Unlock()
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
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
		// A call that started before the breaker opened; its outcome changes nothing.
	}
}

// Release ends a call that Allow let through without an outcome to record: one its caller cut
// short, which says nothing of the store. In the half-open state the next call may probe.
func (b *breaker) Release() {
	if BreakerState(b.state.Load()) == BreakerClosed {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if BreakerState(b.state.Load()) == BreakerHalfOpen {
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
	if from != s && b.onChange != nil {
		b.onChange(from, s)
	}
}
