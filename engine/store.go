package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// A Store holds the shared state of rate-limit keys and decides takes
// atomically: every limit of a key is debited the same amount, or none is.
// Memory is the reference implementation and Redis matches it bit for bit.
// Implementations are safe for concurrent use.
type Store interface {
	// Take debits between r.Min and r.Want tokens from every limit of r.Key,
	// as many as the tightest limit holds, or nothing when that is less
	// than r.Min. A denial is a Result with Granted 0, not an error; errors
	// are invalid requests and failures of the store itself.
	Take(ctx context.Context, r TakeRequest) (Result, error)
	// Return gives back unspent tokens of an earlier take.
	Return(ctx context.Context, r ReturnRequest) error
}

// A TakeRequest asks a Store for tokens.
type TakeRequest struct {
	Key string
	// Limits are all the limits of Key. A limit's state is stored under its
	// identity (its family and window: see identity.go), not its place in
	// the list.
	Limits []Limit
	// Want is how many tokens to take, at least 1: a request's cost, or a
	// lease's batch size.
	Want int64
	// Min is the least the caller accepts (a request's own cost): a partial
	// grant is anything in [Min, Want]. 0 means Want (all or nothing).
	Min int64
	// Now is the decision time in ms since the Unix epoch; 0 or less means
	// the store's own clock (Redis TIME), which production uses so that
	// gateways never disagree on time.
	Now int64

	hint *storeHint // set by a LeaseManager for its lease's key
}

// A ReturnRequest gives unspent tokens back to a key.
type ReturnRequest struct {
	Key    string
	Limits []Limit
	// N is the number of unspent tokens.
	N int64
	// TakenAt is the Result.Now of the take they came from; windows only
	// lower the count of the window they were taken in. 0 means Now.
	TakenAt int64
	// Now is as in TakeRequest.
	Now int64

	hint *storeHint // as in TakeRequest
}

// Result is a Store's answer to a take.
type Result struct {
	// Granted is the number of tokens debited from every limit, in
	// [Min, Want], or 0 when the take was denied.
	Granted int64
	// Remaining is what the tightest limit could still grant afterwards.
	Remaining int64
	// RetryAfter is 0 when granted; otherwise the time in ms until Min tokens
	// could be granted if nobody else took any, or Never.
	RetryAfter int64
	// ResetAfter is the time in ms until the tightest limit is full again
	// (token bucket) or its window ends.
	ResetAfter int64
	// Limiting is the index of the tightest limit: least Remaining, the
	// first one on ties.
	Limiting int
	// Now is the time the store decided at, in ms (its clock when the
	// request's Now was 0 or less).
	Now int64
}

// ErrBadRequest wraps every error about a malformed TakeRequest or
// ReturnRequest.
var ErrBadRequest = errors.New("bad store request")

// normalize validates r and returns the exact schemes of its limits, and want
// and min clamped into the exact range.
func (r *TakeRequest) normalize() ([]exact, int64, int64, error) {
	limits, err := exactLimits(nil, r.Key, r.Limits)
	if err != nil {
		return nil, 0, 0, err
	}
	want, need, err := r.amounts()
	return limits, want, need, err
}

// amounts validates r's amounts and time, and returns want and min clamped
// into the exact range. Clamping never changes a decision: no limit holds
// MaxExact tokens.
func (r *TakeRequest) amounts() (want, need int64, err error) {
	return takeAmounts(r.Key, r.Want, r.Min, r.Now)
}

// takeAmounts is TakeRequest.amounts of a request with Key key, Want want, Min least and Now
// now, for the handles and cells that have no request to build: a request is 72 bytes to
// fill for every take.
func takeAmounts(key string, want, least, now int64) (int64, int64, error) {
	need := least
	if need == 0 {
		need = want
	}
	switch {
	case want < 1:
		return 0, 0, fmt.Errorf("%w: key %q: want %d: must be at least 1", ErrBadRequest, key, want)
	case need < 1 || need > want:
		return 0, 0, fmt.Errorf("%w: key %q: min %d: must be in [1, want %d]", ErrBadRequest, key, need, want)
	}
	if err := checkNow(key, now); err != nil {
		return 0, 0, err
	}
	return min(want, MaxExact), min(need, MaxExact), nil
}

// checkNow refuses a take at a time beyond the exact range: the time the request gives, before
// a store falls back to its clock for 0 or less. takeAmounts checks it so, and so does
// Memory.TakePlanned, whose amounts were checked once, on every take.
func checkNow(key string, now int64) error {
	if now > MaxExact {
		return fmt.Errorf("%w: key %q: now %d: beyond %d", ErrBadRequest, key, now, MaxExact)
	}
	return nil
}

// normalize validates r and returns the exact schemes of its limits and n
// clamped into the exact range.
func (r *ReturnRequest) normalize() ([]exact, int64, error) {
	limits, err := exactLimits(nil, r.Key, r.Limits)
	if err != nil {
		return nil, 0, err
	}
	n, err := r.amount()
	return limits, n, err
}

// amount validates r's amount and times, and returns n clamped into the
// exact range.
func (r *ReturnRequest) amount() (int64, error) {
	switch {
	case r.N < 0:
		return 0, fmt.Errorf("%w: key %q: returning %d tokens", ErrBadRequest, r.Key, r.N)
	case r.Now > MaxExact || r.TakenAt > MaxExact:
		return 0, fmt.Errorf("%w: key %q: time beyond %d", ErrBadRequest, r.Key, MaxExact)
	}
	return min(r.N, MaxExact), nil
}

// A Clock tells the time in milliseconds since the Unix epoch. The engine never
// reads the wall clock: the enforcer passes a real clock, the simulator a
// virtual one.
type Clock interface {
	Now() int64
}

// ClockFunc adapts a function to a Clock.
type ClockFunc func() int64

// Now calls f.
func (f ClockFunc) Now() int64 { return f() }

// Late is the error of a take that a Store stopped waiting for while the call itself goes on
// (the enforcer's store timeout, which bounds a request's wait, not the call). A LeaseManager
// that gets one keeps the call counted as in flight and, when it ends, takes its reply as a
// prefetch's: granted tokens join the key's balance instead of being lost, and a denial holds
// the key. The Store calls End once when the call ends; Then registers what to do with the
// outcome. Err is what the request saw (a timeout).
//
// Memory never returns one, so a simulation never sees one.
type Late struct {
	Err error

	mu    sync.Mutex
	ended bool
	res   Result
	err   error
	then  func(Result, error)
}

// Error returns the error the request saw.
func (l *Late) Error() string { return l.Err.Error() }

// Unwrap returns the error the request saw.
func (l *Late) Unwrap() error { return l.Err }

// Then makes fn receive the call's outcome: now if the call has ended, else when it ends, on
// the Store's goroutine. Only the first Then counts.
func (l *Late) Then(fn func(Result, error)) {
	l.mu.Lock()
	if l.then != nil {
		l.mu.Unlock()
		return
	}
	l.then = fn
	ended, res, err := l.ended, l.res, l.err
	l.mu.Unlock()
	if ended {
		fn(res, err)
	}
}

// End records the call's outcome and hands it to the function Then registered, now or when
// Then is called. A caller that gets a Late calls Then; the tokens of a grant nobody takes are
// lost to the store until it refills (an under-admission, never an over-admission).
func (l *Late) End(res Result, err error) {
	l.mu.Lock()
	l.ended, l.res, l.err = true, res, err
	fn := l.then
	l.mu.Unlock()
	if fn != nil {
		fn(res, err)
	}
}
