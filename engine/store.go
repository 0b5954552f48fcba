package engine

import (
	"context"
	"errors"
	"fmt"
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
	// Limits are all the limits of Key, in a fixed order: the state of
	// limit i is stored under index i.
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
	want, need = r.Want, r.Min
	if need == 0 {
		need = want
	}
	switch {
	case want < 1:
		return 0, 0, fmt.Errorf("%w: key %q: want %d: must be at least 1", ErrBadRequest, r.Key, want)
	case need < 1 || need > want:
		return 0, 0, fmt.Errorf("%w: key %q: min %d: must be in [1, want %d]", ErrBadRequest, r.Key, need, want)
	case r.Now > MaxExact:
		return 0, 0, fmt.Errorf("%w: key %q: now %d: beyond %d", ErrBadRequest, r.Key, r.Now, MaxExact)
	}
	return min(want, MaxExact), min(need, MaxExact), nil
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
