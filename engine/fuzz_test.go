package engine

import (
	"testing"
)

// FuzzBucket drives one limit through a take, a return and a second take at
// fuzzed times and checks the arithmetic: no value leaves [0, MaxExact] (so
// nothing overflows and Lua's doubles stay exact), balances and counts stay
// within [0, capacity], grants stay within [min, want], and RetryAfter is
// exact: the smallest wait after which the request would be granted.
func FuzzBucket(f *testing.F) {
	f.Add(uint8(0), int64(10), int64(1000), int64(0), int64(1000), int64(50), int64(5), int64(1), int64(3))
	f.Add(uint8(0), int64(1), int64(1), int64(1<<52-1), int64(1), MaxExact, int64(1<<52-1), int64(1), int64(7))
	f.Add(uint8(0), int64(7), year, int64(1<<17), int64(1), int64(-5), int64(3), int64(3), int64(1))
	f.Add(uint8(1), int64(10), int64(1000), int64(0), int64(999), int64(1001), int64(10), int64(2), int64(4))
	f.Add(uint8(1), int64(285_000), year, int64(0), int64(5), 2*year, int64(285_000), int64(1), int64(1))
	f.Add(uint8(2), int64(10), int64(1000), int64(0), int64(1500), int64(-600), int64(11), int64(11), int64(0))
	f.Add(uint8(2), MaxExact/2-1, int64(2), int64(0), MaxExact-5, int64(3), MaxExact, int64(1), int64(9))
	f.Fuzz(func(t *testing.T, algo uint8, requests, window, burst, t0, dt, want, need, ret int64) {
		l := Limit{Algorithm: Algorithm(algo % 3), Requests: requests, Window: window, Burst: burst}
		if l.Validate() != nil || want < 1 || need < 1 || need > want || ret < 0 {
			return
		}
		t0 = clamp(t0, 1, MaxExact)
		t1 := clamp(t0+clamp(dt, -MaxExact, MaxExact), 1, MaxExact)
		limits := []exact{l.exact()}
		slots := make([]slot, 1)

		check := func(what string, now int64, r *Result) {
			t.Helper()
			s := slots[0]
			for _, v := range []int64{s.tok, s.ts, s.win, s.cur, s.prev} {
				if v < 0 || v > MaxExact {
					t.Fatalf("%s: state %+v leaves [0, 2^53)", what, s)
				}
			}
			if l.Algorithm == TokenBucket {
				tu, _ := l.units()
				if s.tok > l.Capacity()*tu {
					t.Fatalf("%s: balance %d units over capacity", what, s.tok)
				}
			} else if s.cur > l.Requests || s.prev > l.Requests {
				t.Fatalf("%s: counts %+v over %d", what, s, l.Requests)
			}
			if r == nil {
				return
			}
			w, n := min(want, MaxExact), min(need, MaxExact)
			switch {
			case r.Granted != 0 && (r.Granted < n || r.Granted > w):
				t.Fatalf("%s: granted %d outside [%d, %d]", what, r.Granted, n, w)
			case r.Remaining < 0 || r.Remaining > l.Capacity():
				t.Fatalf("%s: remaining %d", what, r.Remaining)
			case r.ResetAfter < 0 || r.ResetAfter > max(l.RefillMs(), l.Window):
				t.Fatalf("%s: reset after %d", what, r.ResetAfter)
			case r.Granted != 0 && r.RetryAfter != 0,
				r.Granted == 0 && (r.RetryAfter == 0 || r.RetryAfter < Never),
				r.RetryAfter == Never && n <= l.Capacity():
				t.Fatalf("%s: granted %d but retry after %d", what, r.Granted, r.RetryAfter)
			}
			if r.Granted == 0 && r.RetryAfter > 0 {
				checkRetry(t, l, slots[0], now, n, r.RetryAfter)
			}
		}

		r, _ := take(limits, slots, t0, min(want, MaxExact), min(need, MaxExact))
		check("take", t0, &r)
		giveBack(limits, slots, t1, min(ret, MaxExact), t0)
		check("return", t1, nil)
		r, _ = take(limits, slots, t1, min(want, MaxExact), min(need, MaxExact))
		check("second take", t1, &r)
	})
}

// checkRetry verifies that a request for need tokens denied at now would be
// granted after exactly retry ms, and not a millisecond earlier.
func checkRetry(t *testing.T, lim Limit, s slot, now, need, retry int64) {
	t.Helper()
	l := lim.exact()
	// at is what is available ms after now; ok is false beyond MaxExact.
	at := func(ms int64) (int64, bool) {
		c := s
		eff := l.effective(&c, now) + ms
		if eff > MaxExact {
			return 0, false
		}
		l.advance(&c, eff)
		return l.available(&c, l.effective(&c, eff)), true
	}
	if got, ok := at(retry); ok && got < need {
		t.Fatalf("%+v %+v: after retry %d ms, %d available, want %d", l, s, retry, got, need)
	}
	if got, ok := at(retry - 1); ok && got >= need {
		t.Fatalf("%+v %+v: already %d available after %d ms, before retry %d", l, s, got, retry-1, retry)
	}
}
