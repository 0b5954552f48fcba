package engine

import "fmt"

// This file is the reference arithmetic of every algorithm. redis_take.lua and
// redis_return.lua are line-for-line ports of it; a change here is a change
// there, and TestRedisMatchesModel holds the two together.

// slot is the stored state of one limit of a key: the fields of the key's hash
// that belong to the limit of identity id (tok, ts, win, cur, prev, len, each
// followed by ":" and idSuffix(id); see identity.go). has records which fields
// exist, so a policy that changes a limit's algorithm finds the same fields in
// memory as in Redis.
//
// Calls with other limits than the ones a key's state was counted under are
// normal: the instances of a fleet that has not all reloaded yet, and the
// returns of leases taken under a rule's old limits. So a window's count is
// never lowered to the caller's limit (a count over it denies, as it is), and a
// window records its length. While a window of another length lasts, a take
// counts in it and is decided against it as it stands (foreign: the whole
// previous count of a sliding window weighs, and the wait is until the window
// ends), a return leaves it alone, and neither shortens the key's TTL; once it is
// over, its count goes into the caller's window that held its last millisecond. Lowering or
// restarting the count on such calls let an instance with a lower or shorter
// limit erase what one with the new limit had counted: 1,645-1,759 admitted of
// a day's 1,000 in a rollout.
type slot struct {
	tok  int64 // token bucket: balance in units (a token is Window/g units)
	ts   int64 // token bucket: last refill, ms
	win  int64 // windows: start of the current window, ms
	cur  int64 // windows: count in the current window
	prev int64 // sliding window: count in the previous window
	wlen int64 // windows: the length of the window win starts, ms
	// tag holds the identity the fields are stored under (limitID) above its low 6 bits,
	// and in those which fields exist (has): one word, so that a slot stays 56 bytes.
	tag uint64
}

// has returns which of s's fields exist.
func (s *slot) has() uint8 { return uint8(s.tag & 63) }

// set records that fields exist.
func (s *slot) set(fields uint8) { s.tag |= uint64(fields) }

// id is the identity s's fields are stored under.
func (s *slot) id() int64 { return int64(s.tag >> 6) }

// freshSlot is the empty state of identity id.
func freshSlot(id int64) slot { return slot{tag: uint64(id) << 6} }

const (
	hasTok uint8 = 1 << iota
	hasTs
	hasWin
	hasCur
	hasPrev
	hasLen // absent from state stored before windows recorded their length

	hasBucket  = hasTok | hasTs
	hasSliding = hasWin | hasCur | hasPrev
	hasFixed   = hasWin | hasCur
)

func clamp(v, lo, hi int64) int64 {
	return min(max(v, lo), hi)
}

// exact is a Limit with its exact scheme worked out once per operation, as
// the Lua scripts receive each limit (cap, tu, rate): the token bucket holds
// capacity tokens, a token is tu units and the bucket gains rate units per
// millisecond. The divisions behind tu and rate are the costliest part of a
// decision, so they are done once per limit per Take, not once per use.
type exact struct {
	Limit
	capacity, tu, rate int64
	// fill is refillMs: the token bucket's time to fill from empty, ⌈capacity·tu/rate⌉, or
	// one window. advance and ttl use it on every take, so it too is worked out once.
	fill int64
}

// windowOf is the start of the window of l (a fixed or sliding window) that
// holds time t: windows are aligned on multiples of l.Window, as
// envoyproxy/ratelimit aligns them.
func (l Limit) windowOf(t int64) int64 { return t - t%l.Window }

// exact works out l's exact scheme. It assumes Requests, Window ≥ 1.
func (l Limit) exact() exact {
	x := exact{Limit: l, capacity: l.Capacity(), fill: l.Window}
	if l.Algorithm == TokenBucket {
		x.tu, x.rate = l.units()
		x.fill = ceilDiv(x.capacity*x.tu, x.rate)
	}
	return x
}

// exactLimits validates limits and appends their exact schemes to dst.
func exactLimits(dst []exact, key string, limits []Limit) ([]exact, error) {
	if len(limits) == 0 {
		return dst, fmt.Errorf("%w: key %q: no limits", ErrBadRequest, key)
	}
	if len(limits) > MaxLimits {
		return dst, fmt.Errorf("%w: key %q: %d limits, more than %d", ErrBadRequest, key, len(limits), MaxLimits)
	}
	start := len(dst)
	for i, l := range limits {
		x, err := l.validExact()
		if err != nil {
			return dst, fmt.Errorf("%w: key %q: limit %d: %w", ErrBadRequest, key, i, err)
		}
		dup := 0
		for _, y := range dst[start:] {
			if sameKind(y.Limit, l) {
				dup++
			}
		}
		if dup >= MaxAlike {
			return dst, fmt.Errorf("%w: key %q: limit %d: more than %d limits of one family and window", ErrBadRequest, key, i, MaxAlike)
		}
		dst = append(dst, x)
	}
	return dst, nil
}

// advance brings s up to now: it creates fresh state (a full bucket, empty
// windows) when s has none, clamps what was stored into range, refills the
// bucket or rolls the windows. Time never runs before the state's own time, so
// a clock going backwards refills nothing and never reopens a window.
func (l *exact) advance(s *slot, now int64) {
	switch l.Algorithm {
	case TokenBucket:
		capU := l.capacity * l.tu
		if s.has()&hasBucket != hasBucket {
			s.tok, s.ts = capU, now
			s.set(hasBucket)
			return
		}
		s.tok = clamp(s.tok, 0, capU)
		s.ts = clamp(s.ts, 0, MaxExact)
		if now <= s.ts {
			return
		}
		// Clamp elapsed time to the time to fill before multiplying, so years
		// of idleness cannot leave the exact range.
		elapsed := min(now-s.ts, l.fill)
		s.tok = min(capU, s.tok+elapsed*l.rate)
		s.ts = now
	case SlidingWindow, FixedWindow:
		sliding := l.Algorithm == SlidingWindow
		start := l.windowOf(now)
		if s.has()&hasFixed != hasFixed {
			s.win, s.cur, s.wlen = start, 0, l.Window
			s.set(hasFixed | hasLen)
			if sliding {
				s.prev = 0
				s.set(hasPrev)
			}
			return
		}
		if sliding && s.has()&hasPrev == 0 {
			// A fixed window's state: its count stands, with nothing before it.
			s.prev = 0
			s.set(hasPrev)
		}
		s.cur = clamp(s.cur, 0, MaxExact)
		s.win = clamp(s.win, 0, MaxExact)
		if sliding {
			s.prev = clamp(s.prev, 0, MaxExact)
		}
		if s.has()&hasLen != 0 && s.wlen != l.Window {
			s.wlen = clamp(s.wlen, 0, MaxExact)
			if lasting(s, now) {
				return // decided against as it stands (foreign)
			}
			// Over: its count goes into the window of l's length that held its last
			// millisecond, which then rolls as any window does, so what it counted is
			// never dropped before its time (a window of l's length that began before it
			// ended holds it, and a sliding window's count before it stays). It ended by
			// now, so the sum stays in the exact range.
			last := max(s.win+s.wlen-1, 0)
			s.win = l.windowOf(last)
		}
		s.wlen = l.Window
		s.set(hasLen)
		if now < s.win {
			now = s.win
			start = l.windowOf(now)
		}
		switch {
		case start == s.win:
		case start == s.win+l.Window && sliding:
			s.prev, s.cur, s.win = s.cur, 0, start
		default:
			s.cur, s.win = 0, start
			if sliding {
				s.prev = 0
			}
		}
	}
}

// owned is what a limit of algorithm a owns of its slot's fields.
func owned(a Algorithm) uint8 {
	switch a {
	case TokenBucket:
		return hasBucket
	case SlidingWindow:
		return hasSliding | hasLen
	default:
		return hasFixed | hasLen
	}
}

// others reports whether slots (aligned to limits: see align) hold fields that limits do not
// own: the states no limit took, which follow the limits' own (a policy's before or after a
// reload), or another algorithm's fields of a limit's own family (a sliding window's prev
// under a fixed window). A call with limits must not shorten the TTL of state it does not
// know: the instances that do may still count in it. common.lua's load tells the same from
// the hash it reads. Such state stays in the hash for as long as calls keep the key alive,
// and each script call on it then reads the TTL (a PTTL: six Redis commands instead of five).
func others(limits []exact, slots []slot) bool {
	for i := range slots {
		var own uint8
		if i < len(limits) {
			own = owned(limits[i].Algorithm)
		}
		if slots[i].has()&^own != 0 {
			return true
		}
	}
	return false
}

// lasting reports whether now falls in the window s holds, of the length it records.
func lasting(s *slot, now int64) bool {
	return now < clamp(s.win, 0, MaxExact)+clamp(s.wlen, 0, MaxExact)
}

// foreign reports whether advanced state s is a window of another length than l's, which
// lasts: l decides against it as it stands and counts in it.
func (l *exact) foreign(s *slot) bool {
	return l.Algorithm != TokenBucket && s.has()&hasLen != 0 && s.wlen != l.Window
}

// effective is the time a decision on advanced state s is made at: never
// before the state's own time, and for windows within [win, win+Window).
func (l *exact) effective(s *slot, now int64) int64 {
	if l.Algorithm == TokenBucket {
		return s.ts
	}
	return max(now, s.win)
}

// available is how many tokens l could grant now (after advance).
func (l *exact) available(s *slot, now int64) int64 {
	switch l.Algorithm {
	case TokenBucket:
		return s.tok / l.tu
	case SlidingWindow:
		if l.foreign(s) {
			return max(0, l.Requests-s.cur-min(s.prev, l.Requests))
		}
		return max(0, l.Requests-s.cur-l.weighted(s.prev, now-s.win))
	default:
		return max(0, l.Requests-s.cur)
	}
}

// weighted is the previous window's count p weighted by the share of it still
// inside the sliding window, e ms into the current one, rounded up. A count over
// the limit (one counted under a higher limit) weighs as the limit, which keeps
// the product exact.
func (l *exact) weighted(p, e int64) int64 {
	return ceilDiv(min(p, l.Requests)*(l.Window-e), l.Window)
}

// debit takes n tokens; n never exceeds available.
func (l *exact) debit(s *slot, n int64) {
	if l.Algorithm == TokenBucket {
		s.tok -= n * l.tu
		return
	}
	s.cur += n
}

// refund gives back n tokens taken at takenAt. The bucket is capped at its
// capacity; a window count is only lowered when the tokens were taken in the
// window that still holds them.
func (l *exact) refund(s *slot, n, takenAt int64) {
	switch l.Algorithm {
	case TokenBucket:
		capU := l.capacity * l.tu
		s.tok = min(capU, s.tok+min(n, l.capacity)*l.tu)
		return
	}
	tw := l.windowOf(takenAt)
	switch {
	case tw == s.win:
		s.cur = max(0, s.cur-n)
	case tw+l.Window == s.win && l.Algorithm == SlidingWindow:
		s.prev = max(0, s.prev-n)
	}
}

// retryAfter is the time in ms until l could grant need tokens if nothing else
// took any: 0 when it can now, Never when need exceeds its capacity.
func (l *exact) retryAfter(s *slot, now, need int64) int64 {
	if need > l.capacity {
		return Never
	}
	if l.available(s, now) >= need {
		return 0
	}
	if l.foreign(s) {
		return min(s.win+s.wlen, MaxExact) - now // then a window of l's length, empty
	}
	switch l.Algorithm {
	case TokenBucket:
		return ceilDiv(need*l.tu-s.tok, l.rate)
	case SlidingWindow:
		e := now - s.win
		// Within this window: the smallest x ≥ e with
		// ⌈prev·(W−x)/W⌉ ≤ m, that is x ≥ W − ⌊m·W/prev⌋.
		if m := l.Requests - s.cur - need; m >= 0 {
			return l.Window - m*l.Window/min(s.prev, l.Requests) - e
		}
		// Next window: cur becomes prev and the count starts at 0.
		wait := l.Window - e
		if s.cur > 0 {
			wait += max(0, l.Window-(l.Requests-need)*l.Window/min(s.cur, l.Requests))
		}
		return wait
	default:
		return l.Window - (now - s.win)
	}
}

// resetAfter is the time in ms until the bucket is full, or the window ends.
func (l *exact) resetAfter(s *slot, now int64) int64 {
	if l.Algorithm == TokenBucket {
		return ceilDiv(l.capacity*l.tu-s.tok, l.rate)
	}
	if l.foreign(s) {
		return min(s.win+s.wlen, MaxExact) - now
	}
	return l.Window - (now - s.win)
}

// take decides a take of want tokens, at least need, for all limits of a key
// at once, and updates their slots: every limit is debited the same grant, or
// none is. slots holds at least len(limits) entries. keep reports a foreign
// window, whose key must not get a shorter TTL.
func take(limits []exact, slots []slot, now, want, need int64) (res Result, keep bool) {
	res = Result{Granted: want, Now: now}
	for i := range limits {
		l := &limits[i]
		l.advance(&slots[i], now)
		keep = keep || l.foreign(&slots[i])
		res.Granted = min(res.Granted, l.available(&slots[i], l.effective(&slots[i], now)))
	}
	if res.Granted < need {
		res.Granted = 0
		for i := range limits {
			l := &limits[i]
			r := l.retryAfter(&slots[i], l.effective(&slots[i], now), need)
			if r == Never || res.RetryAfter == Never {
				res.RetryAfter = Never
			} else {
				res.RetryAfter = max(res.RetryAfter, r)
			}
		}
	}
	res.Remaining = -1
	for i := range limits {
		l := &limits[i]
		if res.Granted > 0 {
			l.debit(&slots[i], res.Granted)
		}
		if a := l.available(&slots[i], l.effective(&slots[i], now)); res.Remaining < 0 || a < res.Remaining {
			res.Remaining, res.Limiting = a, i
		}
	}
	lim, s := &limits[res.Limiting], &slots[res.Limiting]
	res.ResetAfter = lim.resetAfter(s, lim.effective(s, now))
	return res, keep
}

// giveBack returns n tokens taken at takenAt (≤ 0: now) to every limit. A
// window of another length that lasts is left as it is, and keep reports one:
// the tokens were not taken from it, and its key must not get a shorter TTL.
func giveBack(limits []exact, slots []slot, now, n, takenAt int64) (keep bool) {
	for i := range limits {
		l := &limits[i]
		if s := &slots[i]; l.Algorithm != TokenBucket && s.has()&(hasFixed|hasLen) == hasFixed|hasLen && s.wlen != l.Window && lasting(s, now) {
			keep = true
			continue
		}
		l.advance(&slots[i], now)
		at := takenAt
		if at <= 0 {
			at = l.effective(&slots[i], now)
		}
		l.refund(&slots[i], n, at)
	}
	return keep
}
