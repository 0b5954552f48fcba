package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rlctl/rlctl/internal/redistest"
)

const (
	second = int64(1000)
	day    = 86400 * second
	year   = 365 * day
)

// step is one take: at time t, want tokens with at least min; the rest is the
// expected result.
type step struct {
	t, want, min           int64
	granted, remain, retry int64
}

type stepCase struct {
	name   string
	limits []Limit
	steps  []step
}

var stepCases = []stepCase{
	{
		name:   "token bucket 10 per 1s",
		limits: []Limit{{Algorithm: TokenBucket, Requests: 10, Window: second}},
		steps: []step{
			{t: 1000, want: 10, granted: 10, remain: 0},
			{t: 1000, want: 1, retry: 100},             // zero elapsed
			{t: 1050, want: 1, retry: 50},              // half a token
			{t: 1100, want: 1, granted: 1},             // exactly one token
			{t: 900, want: 1, retry: 100},              // clock backwards: no refill
			{t: 1200, want: 3, min: 1, granted: 1},     // partial grant
			{t: 1200, want: 11, retry: Never},          // cost > capacity
			{t: 1200 + 50*year, want: 10, granted: 10}, // years of elapsed time
			{t: 1200 + 50*year + 250, want: 4, min: 2, granted: 2, remain: 0},
		},
	},
	{
		name:   "token bucket 3 per 7s burst 5",
		limits: []Limit{{Algorithm: TokenBucket, Requests: 3, Window: 7 * second, Burst: 5}},
		steps: []step{
			// A token is 7000 units, the bucket gains 3 units per ms.
			{t: 1, want: 5, granted: 5},
			{t: 2334, want: 1, retry: 1},    // 2333 ms · 3 = 6999 units
			{t: 2335, want: 1, granted: 1},  // 7002 units
			{t: 2335, want: 2, retry: 4666}, // need 14000 − 2 units
			{t: 1e6, want: 6, min: 5, granted: 5},
		},
	},
	{
		name:   "token bucket at the edge of the exact range",
		limits: []Limit{{Algorithm: TokenBucket, Requests: 1, Window: 1, Burst: 1<<52 - 1}},
		steps: []step{
			{t: 1, want: 1<<52 - 1, granted: 1<<52 - 1},
			{t: 2, want: 2, retry: 1},
			{t: MaxExact, want: MaxExact, min: 1, granted: 1<<52 - 1},
			{t: MaxExact, want: 1 << 52, retry: Never},
		},
	},
	{
		name:   "sliding window 10 per 1s",
		limits: []Limit{{Algorithm: SlidingWindow, Requests: 10, Window: second}},
		steps: []step{
			{t: 0 + 1, want: 10, granted: 10},
			// Next window: the 10 weigh ⌈10·(1000−x)/1000⌉ ≤ 9 from x = 100.
			{t: 500, want: 1, retry: 600},
			{t: 1100, want: 1, granted: 1},
			// ⌈10·(1000−x)/1000⌉ ≤ 8 from x = 200.
			{t: 1100, want: 1, retry: 100},
			{t: 1100, want: 11, retry: Never},
			{t: 1999, want: 9, min: 1, granted: 8},
			{t: 1500, want: 1, retry: 500},   // clock backwards: prev weighs more, never less
			{t: 3000, want: 10, granted: 10}, // two windows later: all reset
			{t: 3000 + 50*year, want: 10, granted: 10},
		},
	},
	{
		name:   "sliding window 1000 per 365d",
		limits: []Limit{{Algorithm: SlidingWindow, Requests: 1000, Window: year}},
		steps: []step{
			{t: year / 2, want: 1000, granted: 1000},
			// Next year the 1000 weigh ⌈1000·(W−x)/W⌉ ≤ 999 from x = W/1000.
			{t: year + 1, want: 1, retry: year/1000 - 1},
			{t: year + year/1000, want: 2, min: 1, granted: 1},
		},
	},
	{
		name:   "fixed window 10 per 1s",
		limits: []Limit{{Algorithm: FixedWindow, Requests: 10, Window: second}},
		steps: []step{
			{t: 1500, want: 10, granted: 10},
			{t: 1999, want: 1, retry: 1},
			{t: 1200, want: 1, retry: 800}, // clock backwards: same window
			{t: 2000, want: 4, granted: 4, remain: 6},
			{t: 2000, want: 7, retry: 1000}, // 4 + 7 > 10 is over
			{t: 2000, want: 6, granted: 6},
			{t: 2000, want: 11, retry: Never},
		},
	},
	{
		name:   "fixed window 2 per 365d",
		limits: []Limit{{Algorithm: FixedWindow, Requests: 2, Window: year}},
		steps: []step{
			{t: 10, want: 2, granted: 2},
			{t: year - 1, want: 1, retry: 1},
			{t: year, want: 1, granted: 1, remain: 1},
		},
	},
	{
		name: "burst and sustained on one key",
		limits: []Limit{
			{Algorithm: TokenBucket, Requests: 5, Window: second},
			{Algorithm: FixedWindow, Requests: 8, Window: 10 * second},
		},
		steps: []step{
			{t: 10000, want: 5, granted: 5, remain: 0},
			{t: 11000, want: 5, min: 1, granted: 3, remain: 0}, // window has 3 left
			{t: 12000, want: 1, retry: 8000},                   // bucket full, window over
			{t: 20000, want: 5, granted: 5},                    // neither limit debited above
			{t: 20000, want: 4, min: 1, retry: 200},
		},
	},
}

func TestStepsMemory(t *testing.T) {
	for _, c := range stepCases {
		t.Run(c.name, func(t *testing.T) { runSteps(t, NewMemory(nil), c) })
	}
}

func TestStepsRedis(t *testing.T) {
	store := NewRedis(redistest.Start(t).Client())
	for _, c := range stepCases {
		t.Run(c.name, func(t *testing.T) { runSteps(t, store, c) })
	}
}

func runSteps(t *testing.T, s Store, c stepCase) {
	ctx := context.Background()
	key := Key("steps", c.name)
	for i, st := range c.steps {
		got, err := s.Take(ctx, TakeRequest{Key: key, Limits: c.limits, Want: st.want, Min: st.min, Now: st.t})
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got.Granted != st.granted || got.RetryAfter != st.retry {
			t.Errorf("step %d: t=%d want=%d min=%d: got granted %d retry %d, want granted %d retry %d",
				i, st.t, st.want, st.min, got.Granted, got.RetryAfter, st.granted, st.retry)
		}
		if st.remain != 0 && got.Remaining != st.remain {
			t.Errorf("step %d: got remaining %d, want %d", i, got.Remaining, st.remain)
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		l       Limit
		inexact bool
		bad     bool
	}{
		{l: Limit{Requests: 100, Window: 60 * second}},
		{l: Limit{Requests: 1, Window: 1, Burst: 1<<52 - 1}},
		{l: Limit{Requests: 1, Window: 1, Burst: 1 << 52}, inexact: true},
		{l: Limit{Requests: 3, Window: 1, Burst: 1<<52 - 2}},
		{l: Limit{Requests: 3, Window: 1, Burst: 1<<52 - 1}, inexact: true},
		{l: Limit{Requests: 1 << 52, Window: 1}, inexact: true},
		{l: Limit{Requests: 1e9, Window: year, Burst: 1e9}},
		{l: Limit{Requests: 7, Window: year, Burst: 1 << 17}},
		{l: Limit{Requests: 7, Window: year, Burst: 1 << 18}, inexact: true},
		{l: Limit{Algorithm: SlidingWindow, Requests: 285_000, Window: year}},
		{l: Limit{Algorithm: SlidingWindow, Requests: 286_000, Window: year}, inexact: true},
		{l: Limit{Algorithm: FixedWindow, Requests: MaxExact/2 - 1, Window: 2}},
		{l: Limit{Algorithm: FixedWindow, Requests: MaxExact / 2, Window: 2}, inexact: true},
		{l: Limit{Requests: 0, Window: 1}, bad: true},
		{l: Limit{Requests: 1, Window: 0}, bad: true},
		{l: Limit{Requests: 1, Window: 1, Burst: -1}, bad: true},
		{l: Limit{Algorithm: 9, Requests: 1, Window: 1}, inexact: true},
	}
	for i, tt := range tests {
		err := tt.l.Validate()
		if got := errors.Is(err, ErrInexact); got != tt.inexact {
			t.Errorf("step %d: %+v: got %v, want inexact %v", i, tt.l, err, tt.inexact)
		}
		if got := err != nil && !errors.Is(err, ErrInexact); got != tt.bad {
			t.Errorf("step %d: %+v: got %v, want bad %v", i, tt.l, err, tt.bad)
		}
	}
}

func TestBadRequests(t *testing.T) {
	ok := []Limit{{Requests: 1, Window: 1}}
	tests := []TakeRequest{
		{Key: "k", Want: 1, Now: 1},
		{Key: "k", Limits: ok, Want: 0, Now: 1},
		{Key: "k", Limits: ok, Want: 1, Min: 2, Now: 1},
		{Key: "k", Limits: ok, Want: 1, Min: -1, Now: 1},
		{Key: "k", Limits: ok, Want: 1, Now: MaxExact + 1},
		{Key: "k", Limits: []Limit{{Requests: 1}}, Want: 1, Now: 1},
	}
	m := NewMemory(nil)
	for i, r := range tests {
		if _, err := m.Take(context.Background(), r); !errors.Is(err, ErrBadRequest) {
			t.Errorf("step %d: got %v, want ErrBadRequest", i, err)
		}
	}
	if _, err := m.Take(context.Background(), TakeRequest{Key: "k", Limits: ok, Want: 1}); !errors.Is(err, ErrNoClock) {
		t.Errorf("no clock: got %v, want ErrNoClock", err)
	}
}

func TestReturn(t *testing.T) {
	ctx := context.Background()
	m := NewMemory(nil)
	tb := []Limit{{Requests: 10, Window: second}}
	sw := []Limit{{Algorithm: SlidingWindow, Requests: 10, Window: second}}
	steps := []struct {
		limits         []Limit
		ret, takenAt   int64 // tokens returned before the take, and when taken
		t, want, grant int64
	}{
		{limits: tb, t: 1000, want: 10, grant: 10},
		{limits: tb, ret: 4, t: 1000, want: 10, grant: 4},
		{limits: tb, ret: 100, t: 1000, want: 11, grant: 10}, // capped at capacity
		{limits: sw, t: 1000, want: 10, grant: 10},
		{limits: sw, ret: 3, takenAt: 1000, t: 1500, want: 10, grant: 3},
		// Taken in the previous window: lowers its weight.
		{limits: sw, ret: 10, takenAt: 1500, t: 2000, want: 10, grant: 10},
		// Taken two windows ago: nothing to lower.
		{limits: sw, ret: 10, takenAt: 1, t: 2000, want: 1, grant: 0},
	}
	for i, st := range steps {
		if st.ret > 0 {
			if err := m.Return(ctx, ReturnRequest{Key: "k" + st.limits[0].Algorithm.String(), Limits: st.limits, N: st.ret, TakenAt: st.takenAt, Now: st.t}); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
		}
		got, err := m.Take(ctx, TakeRequest{Key: "k" + st.limits[0].Algorithm.String(), Limits: st.limits, Want: st.want, Min: 1, Now: st.t})
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got.Granted != st.grant {
			t.Errorf("step %d: got granted %d, want %d", i, got.Granted, st.grant)
		}
	}
}

// TestOtherLimitsKeepTheCount: calls under other limits than a window's count was made under,
// as the instances of a fleet that has not all reloaded make and as returns of leases taken
// under a rule's old limits do, neither lower nor restart the count. An instance still at 100 an
// hour lowered an hour's count of 500 to its 100, and a return under 100 a minute restarted the
// count, so an instance at the new 1,000 an hour admitted 1,445 in the hour (and Memory 2,000).
// While a window of another length lasts, a take counts in it and is decided against it, and
// neither a take nor a return shortens the key's TTL. On Memory and on real Redis, whose script
// must agree.
func TestOtherLimitsKeepTheCount(t *testing.T) {
	srv := redistest.Start(t)
	for _, store := range []struct {
		name string
		s    func() Store
	}{{"memory", func() Store { return NewMemory(nil) }}, {"redis", func() Store { return NewRedis(srv.Client()) }}} {
		for _, algo := range []Algorithm{FixedWindow, SlidingWindow} {
			t.Run(store.name+"/"+algo.String(), func(t *testing.T) {
				ctx := context.Background()
				s := store.s()
				hour := func(n int64) []Limit { return []Limit{{Algorithm: algo, Requests: n, Window: 3600 * second}} }
				minute := []Limit{{Algorithm: algo, Requests: 100, Window: 60 * second}}
				key := Key("other-limits", store.name, algo.String())
				at := int64(1_000_000) * 3600 * second // the start of an hour
				take := func(limits []Limit, now, want int64) Result {
					t.Helper()
					got, err := s.Take(ctx, TakeRequest{Key: key, Limits: limits, Want: want, Min: 1, Now: now})
					if err != nil {
						t.Fatal(err)
					}
					return got
				}
				if got := take(hour(1000), at+1800*second, 500).Granted; got != 500 {
					t.Fatalf("500 of a fresh hour's 1000: granted %d", got)
				}
				// An instance not yet reloaded: its 100 an hour is spent, and the count stays.
				if got := take(hour(100), at+1801*second, 1).Granted; got != 0 {
					t.Errorf("under the old 100 an hour, with 500 counted: granted %d, want 0", got)
				}
				// A lease of the old limits returns a token under 100 a minute: not taken from
				// this window, so nothing is given back to it.
				if err := s.Return(ctx, ReturnRequest{Key: key, Limits: minute, N: 1, TakenAt: at + 1802*second, Now: at + 1802*second}); err != nil {
					t.Fatal(err)
				}
				if got := take(hour(1000), at+1803*second, 300).Granted; got != 300 {
					t.Errorf("300 more of the hour's 1000: granted %d, want 300", got)
				}
				// A take under a minute's window while the hour lasts counts in the hour, and is
				// decided against it: 800 counted is over 100, and the wait is the hour's end.
				got := take(minute, at+1804*second, 1)
				if got.Granted != 0 || got.RetryAfter != 1796*second {
					t.Errorf("under 100 a minute, with 800 of the hour counted: %+v, want none, retry when the hour ends (1,796 s)", got)
				}
				// Minutes later the hour still holds its count, whoever asked in between.
				if got := take(hour(1000), at+1900*second, 1000).Granted; got != 200 {
					t.Errorf("the rest of the hour's 1000 after a minute's take: granted %d, want 200", got)
				}
				if got := take(minute, at+1990*second, 1).Granted; got != 0 {
					t.Errorf("under 100 a minute, later in the full hour: granted %d, want 0", got)
				}
				// Once the hour is over, minutes of 100 start. The hour's count went into the
				// minute that held its last millisecond, which a sliding minute half a minute on
				// still weighs by half.
				want := int64(100)
				if algo == SlidingWindow {
					want = 50
				}
				if got := take(minute, at+3600*second+30*second, 100).Granted; got != want {
					t.Errorf("under 100 a minute, in the next hour: granted %d, want %d", got, want)
				}
			})
		}
	}
}

// TestOtherLengthKeepsSlidingPrev: a take under another length in a sliding window's next
// window leaves the previous window's count, which still weighs: it was zeroed, and the hour
// then granted 997 of 1,000 twelve seconds into the hour after a full one.
func TestOtherLengthKeepsSlidingPrev(t *testing.T) {
	ctx := context.Background()
	hour := []Limit{{Algorithm: SlidingWindow, Requests: 1000, Window: 3600 * second}}
	minute := []Limit{{Algorithm: SlidingWindow, Requests: 100, Window: 60 * second}}
	at := int64(1_000_000) * 3600 * second
	for _, s := range []Store{NewMemory(nil), NewRedis(redistest.Start(t).Client())} {
		key := Key("sliding-prev", fmt.Sprintf("%T", s))
		take := func(limits []Limit, now, want int64) int64 {
			t.Helper()
			got, err := s.Take(ctx, TakeRequest{Key: key, Limits: limits, Want: want, Min: 1, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			return got.Granted
		}
		take(hour, at, 1000)
		next := at + 3600*second
		first := take(hour, next+10*second, 1000) // the full hour before weighs 997
		take(minute, next+11*second, 1)
		if got := take(hour, next+12*second, 1000); got > 1 || first > 3 {
			t.Errorf("%T: granted %d, then %d after a minute's take, in the hour after a full one: want about 3, then 0", s, first, got)
		}
	}
}

// TestEndedWindowFoldsIn: a window of another length that ended gives its count to the
// caller's window that held its last millisecond. A longer window began before the shorter one
// ended, and started empty: one take under 100 a minute at the top of the hour, then 999 and
// 1,000 under 1,000 an hour were admitted (1,999 in the hour), and a sliding hour after a full
// one admitted 999 and 1,000 more within 62 s. A return of tokens taken while the shorter
// window lasted lowered a count they were never in (1,100 in the hour).
func TestEndedWindowFoldsIn(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	at := int64(1_000_000) * 3600 * second
	for _, algo := range []Algorithm{FixedWindow, SlidingWindow} {
		hour := []Limit{{Algorithm: algo, Requests: 1000, Window: 3600 * second}}
		minute := []Limit{{Algorithm: algo, Requests: 100, Window: 60 * second}}
		for _, s := range []Store{NewMemory(nil), NewRedis(srv.Client())} {
			name := fmt.Sprintf("%v/%T", algo, s)
			key := func(k string) string { return Key("fold", name, k) }
			take := func(k string, limits []Limit, now, want int64) int64 {
				t.Helper()
				got, err := s.Take(ctx, TakeRequest{Key: key(k), Limits: limits, Want: want, Min: 1, Now: now})
				if err != nil {
					t.Fatal(err)
				}
				return got.Granted
			}
			take("a", minute, at, 1)
			admitted := take("a", hour, at+second, 999) + take("a", hour, at+61*second, 1000)
			if admitted != 999 {
				t.Errorf("%s: the hour admitted %d after a minute's take at its start, want 999", name, admitted)
			}
			// A lease of the hour taken while the minute lasted comes back after it ended.
			take("b", minute, at, 1)
			take("b", hour, at+10*second, 100)
			take("b", hour, at+61*second, 1000)
			if err := s.Return(ctx, ReturnRequest{Key: key("b"), Limits: hour, N: 100, TakenAt: at + 10*second, Now: at + 62*second}); err != nil {
				t.Fatal(err)
			}
			if got := take("b", hour, at+63*second, 1000); got != 100 {
				t.Errorf("%s: after the return, granted %d, want 100 (1,000 in the hour)", name, got)
			}
			if algo == SlidingWindow {
				take("c", hour, at+3599*second, 1000)
				take("c", minute, at+3600*second, 1)
				if got := take("c", hour, at+3601*second, 1000) + take("c", hour, at+3662*second, 1000); got > 20 {
					t.Errorf("%s: the sliding hour after a full one admitted %d in its first minute, want under 20", name, got)
				}
			}
		}
	}
}

// TestOtherStateKeepsTheTTL: a call whose limits do not own all of a key's state (another
// algorithm, or fewer limits, as a policy before or after a reload has) does not shorten the
// key's TTL to its own: the hour's count of the instances still on it expired early.
func TestOtherStateKeepsTheTTL(t *testing.T) {
	ctx := context.Background()
	hour := Limit{Algorithm: FixedWindow, Requests: 1000, Window: 3600 * second}
	bucket := []Limit{{Algorithm: TokenBucket, Requests: 10, Window: second}}
	minute := Limit{Algorithm: FixedWindow, Requests: 100, Window: 60 * second}
	at := int64(1_000_000) * 3600 * second
	rdb := redistest.Start(t).Client()
	for _, tc := range []struct {
		name        string
		full, other []Limit
	}{
		{"another algorithm", []Limit{hour}, bucket},
		{"fewer limits", []Limit{minute, hour}, []Limit{minute}},
	} {
		for _, s := range []Store{NewMemory(nil), NewRedis(rdb)} {
			key := Key("other-state", tc.name, fmt.Sprintf("%T", s))
			if got, err := s.Take(ctx, TakeRequest{Key: key, Limits: tc.full, Want: 100, Min: 1, Now: at}); err != nil || got.Granted != 100 {
				t.Fatalf("%s: %+v, %v", tc.name, got, err)
			}
			if _, err := s.Take(ctx, TakeRequest{Key: key, Limits: tc.other, Want: 1, Min: 1, Now: at + second}); err != nil {
				t.Fatal(err)
			}
			switch s := s.(type) {
			case *Redis:
				if pttl, err := rdb.PTTL(ctx, key).Result(); err != nil || pttl < time.Duration(TTL(tc.full))*time.Millisecond-time.Minute {
					t.Errorf("%s: redis PTTL %v (%v) after the other call, want about %v", tc.name, pttl, err, time.Duration(TTL(tc.full))*time.Millisecond)
				}
			case *Memory:
				if e := diffExpiry(s, key); e.expire < at+TTL(tc.full) {
					t.Errorf("%s: memory: the state expires %d ms after the first take, want %d (its TTL)", tc.name, e.expire-at, TTL(tc.full))
				}
			}
		}
	}
}

// TestOtherLengthKeepsTheTTL: a return or a take under a shorter window, while an hour's count
// lasts, does not shorten the key's TTL to the minute's: the hour's count expired with it, and
// the hour then granted its whole limit again (Memory: 1,000 after 1,000 spent).
func TestOtherLengthKeepsTheTTL(t *testing.T) {
	ctx := context.Background()
	hour := []Limit{{Algorithm: FixedWindow, Requests: 1000, Window: 3600 * second}}
	minute := []Limit{{Algorithm: FixedWindow, Requests: 100, Window: 60 * second}}
	at := int64(1_000_000) * 3600 * second
	m := NewMemory(nil)
	if got, _ := m.Take(ctx, TakeRequest{Key: "k", Limits: hour, Want: 1000, Min: 1, Now: at}); got.Granted != 1000 {
		t.Fatalf("granted %d of a fresh hour", got.Granted)
	}
	if err := m.Return(ctx, ReturnRequest{Key: "k", Limits: minute, N: 1, Now: at + second}); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.Take(ctx, TakeRequest{Key: "k", Limits: minute, Want: 1, Min: 1, Now: at + 2*second}); got.Granted != 0 {
		t.Fatalf("a minute's take in the full hour: granted %d", got.Granted)
	}
	if got, _ := m.Take(ctx, TakeRequest{Key: "k", Limits: hour, Want: 1000, Min: 1, Now: at + 300*second}); got.Granted != 0 {
		t.Errorf("memory: the hour's take 5 minutes on: granted %d, want 0 (its count kept)", got.Granted)
	}

	rdb := redistest.Start(t).Client()
	r := NewRedis(rdb)
	key := Key("ttl", "hour")
	if _, err := r.Take(ctx, TakeRequest{Key: key, Limits: hour, Want: 1000, Min: 1, Now: at}); err != nil {
		t.Fatal(err)
	}
	if err := r.Return(ctx, ReturnRequest{Key: key, Limits: minute, N: 1, Now: at + second}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Take(ctx, TakeRequest{Key: key, Limits: minute, Want: 1, Min: 1, Now: at + 2*second}); err != nil {
		t.Fatal(err)
	}
	if pttl, err := rdb.PTTL(ctx, key).Result(); err != nil || pttl < time.Duration(TTL(hour))*time.Millisecond-time.Minute {
		t.Errorf("redis: PTTL %v (%v) after a minute's return and take, want about %v (the hour's)", pttl, err, time.Duration(TTL(hour))*time.Millisecond)
	}
}

func TestParseAlgorithm(t *testing.T) {
	for i, a := range []Algorithm{TokenBucket, SlidingWindow, FixedWindow} {
		if got, err := ParseAlgorithm(a.String()); err != nil || got != a {
			t.Errorf("step %d: ParseAlgorithm(%q) = %v, %v; want %v", i, a.String(), got, err, a)
		}
	}
	if got, err := ParseAlgorithm(""); err != nil || got != TokenBucket {
		t.Errorf(`ParseAlgorithm("") = %v, %v; want token_bucket`, got, err)
	}
	if _, err := ParseAlgorithm("leaky_bucket"); err == nil {
		t.Error(`ParseAlgorithm("leaky_bucket"): no error`)
	}
}

// An exact scheme's fill, worked out once, is the token bucket's time to fill from empty
// (⌈capacity·tu/rate⌉) or the window, as advance and ttl used to work it out on every take.
func TestExactFill(t *testing.T) {
	for _, l := range []Limit{
		{Requests: 100, Window: 60_000, Algorithm: TokenBucket},
		{Requests: 7, Window: 1000, Burst: 25, Algorithm: TokenBucket},
		{Requests: 3, Window: 10, Burst: 1, Algorithm: TokenBucket},
		{Requests: 10_000, Window: 86_400_000, Algorithm: FixedWindow},
		{Requests: 600, Window: 60_000, Algorithm: SlidingWindow},
	} {
		x := l.exact()
		want := l.Window
		if l.Algorithm == TokenBucket {
			tu, rate := l.units()
			want = (l.Capacity()*tu + rate - 1) / rate
		}
		if x.fill != want || x.refillMs() != want {
			t.Errorf("%+v: fill %d, refillMs %d; want %d", l, x.fill, x.refillMs(), want)
		}
	}
}
