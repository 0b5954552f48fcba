package engine

import (
	"errors"
	"fmt"
)

// MaxExact is the largest integer every intermediate value of a decision may
// reach: 2^53 − 1, the largest n such that every integer in [0, n] is exact in
// a float64, which is what a number is in Redis's Lua. Limit.Validate rejects
// limits whose arithmetic could exceed it.
const MaxExact int64 = 1<<53 - 1

// Never is the RetryAfter of a request whose minimum exceeds what a limit can
// ever grant (its cost is larger than the capacity): waiting does not help.
const Never int64 = -1

// Algorithm selects how a Limit counts.
type Algorithm uint8

const (
	// TokenBucket holds up to Burst tokens and gains Requests tokens per
	// Window, continuously, in exact integer units. It is the default.
	TokenBucket Algorithm = iota
	// SlidingWindow is the sliding window counter: the current epoch-aligned
	// window's count plus the previous window's count weighted by the share
	// of it still inside the sliding window.
	SlidingWindow
	// FixedWindow counts per epoch-aligned window, like envoyproxy/ratelimit:
	// a request is over when the count after adding its cost exceeds
	// Requests. Unlike envoyproxy/ratelimit, a denied request is not counted,
	// so that several limits on one key debit all or nothing.
	FixedWindow
)

var algorithmNames = [...]string{"token_bucket", "sliding_window", "fixed_window"}

// String returns the algorithm's policy name, for example "token_bucket".
func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return fmt.Sprintf("algorithm(%d)", uint8(a))
}

// ParseAlgorithm returns the Algorithm named name ("token_bucket",
// "sliding_window" or "fixed_window"; "" means TokenBucket).
func ParseAlgorithm(name string) (Algorithm, error) {
	if name == "" {
		return TokenBucket, nil
	}
	for i, n := range algorithmNames {
		if n == name {
			return Algorithm(i), nil
		}
	}
	return 0, fmt.Errorf("unknown algorithm %q: want token_bucket, sliding_window or fixed_window", name)
}

// A Limit is one rate limit on a key: Requests per Window milliseconds.
// The zero value is invalid; call Validate before use.
type Limit struct {
	Algorithm Algorithm
	// Requests is the refill per Window (token bucket) or the most a window
	// admits (sliding and fixed window).
	Requests int64
	// Window is the period in milliseconds.
	Window int64
	// Burst is the token bucket's capacity; 0 means Requests. Windows
	// ignore it.
	Burst int64
}

// ErrInexact reports a limit whose integer arithmetic could leave the exact
// range of a float64 (MaxExact).
var ErrInexact = errors.New("limit outside the exact integer range")

// Validate reports whether l is well formed and every value its arithmetic can
// produce stays within MaxExact, so the Go model and the Redis Lua script agree
// bit for bit. The bounds, with g = gcd(Requests, Window):
//
//   - token bucket: a token is Window/g units, the bucket gains Requests/g units
//     per millisecond and holds Burst·Window/g units. Elapsed time is clamped to
//     the time to fill before it is multiplied, so the largest intermediate is
//     2·capacity_units + rate and the bound is 2·Burst·Window/g + Requests/g ≤
//     MaxExact, whatever the elapsed time.
//   - sliding and fixed window: (Requests+1)·Window ≤ MaxExact.
//
// Timestamps must lie in [0, MaxExact] milliseconds (until the year 287396).
func (l Limit) Validate() error {
	_, err := l.validExact()
	return err
}

// validExact validates l and returns its exact scheme, working it out once.
func (l Limit) validExact() (exact, error) {
	if l.Requests < 1 {
		return exact{}, fmt.Errorf("limit: requests %d: must be at least 1", l.Requests)
	}
	if l.Window < 1 {
		return exact{}, fmt.Errorf("limit: window %dms: must be at least 1ms", l.Window)
	}
	if l.Burst < 0 {
		return exact{}, fmt.Errorf("limit: burst %d: must not be negative", l.Burst)
	}
	x := l.exact()
	if !x.inRange() {
		return exact{}, fmt.Errorf("limit: %d per %dms burst %d %s: %w", l.Requests, l.Window, l.Burst, l.Algorithm, ErrInexact)
	}
	return x, nil
}

// ExactRangeOK reports whether l's arithmetic stays within MaxExact (see
// Validate). It assumes Requests, Window ≥ 1 and Burst ≥ 0.
func (l Limit) ExactRangeOK() bool {
	x := l.exact()
	return x.inRange()
}

func (x *exact) inRange() bool {
	switch x.Algorithm {
	case TokenBucket:
		if x.capacity > MaxExact/x.tu {
			return false
		}
		return x.capacity*x.tu <= (MaxExact-x.rate)/2
	case SlidingWindow, FixedWindow:
		return x.Requests <= MaxExact/x.Window-1
	default:
		return false
	}
}

// Capacity is the most tokens the limit can ever grant at once: Burst (or
// Requests when Burst is 0) for a token bucket, Requests for a window.
func (l Limit) Capacity() int64 {
	if l.Algorithm == TokenBucket && l.Burst > 0 {
		return l.Burst
	}
	return l.Requests
}

// RefillMs is the time in milliseconds for the limit to return from empty to
// full: the token bucket's time to fill, or one window.
func (l Limit) RefillMs() int64 {
	x := l.exact()
	return x.refillMs()
}

func (x *exact) refillMs() int64 { return x.fill }

// MinTTL is the shortest time a store keeps a key's state after its last use.
// It keeps state of very short limits alive long enough that a key never
// expires in Redis's wall clock while a simulated clock still needs it.
const MinTTL int64 = 60_000

// TTL is how long a store keeps the state of a key with these limits after its
// last use: twice the longest refill time, and at least MinTTL. Once it has
// passed, fresh state and the stored state give identical decisions.
func TTL(limits []Limit) int64 {
	ttl := MinTTL
	for _, l := range limits {
		ttl = max(ttl, 2*l.RefillMs())
	}
	return ttl
}

// ttl is TTL for limits whose exact schemes are worked out.
func ttl(limits []exact) int64 {
	ttl := MinTTL
	for i := range limits {
		ttl = max(ttl, 2*limits[i].refillMs())
	}
	return ttl
}

// units returns the token bucket's exact scheme: a token is tu units and the
// bucket gains rate units per millisecond.
func (l Limit) units() (tu, rate int64) {
	g := gcd(l.Requests, l.Window)
	return l.Window / g, l.Requests / g
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// ceilDiv is ⌈a/b⌉ for a ≥ 0, b > 0.
func ceilDiv(a, b int64) int64 {
	return (a + b - 1) / b
}
