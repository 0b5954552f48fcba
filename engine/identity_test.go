package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/rlctl/rlctl/internal/redistest"
)

// TestReloadKeepsOtherLimitsCounts: a reload that adds a limit before the others, removes one
// from before them or reorders them leaves the counts of the limits it did not change where
// they were. A key's state was stored by the limit's place in the list: adding a per-minute
// limit before a spent hourly one gave the key a new hour's allowance (2,469 admitted in an
// hour of 1,000), and removing a per-minute limit from before an hourly one restarted the
// hour's count (2,000 in an hour of 1,000). On Memory and on real Redis, whose script must
// agree.
func TestReloadKeepsOtherLimitsCounts(t *testing.T) {
	srv := redistest.Start(t)
	at := int64(1_000_000) * 3600 * second // the start of an hour
	for _, store := range []struct {
		name string
		s    func() Store
	}{{"memory", func() Store { return NewMemory(nil) }}, {"redis", func() Store { return NewRedis(srv.Client()) }}} {
		for _, algo := range []Algorithm{TokenBucket, FixedWindow, SlidingWindow} {
			hour := Limit{Algorithm: algo, Requests: 1000, Window: 3600 * second}
			minute := Limit{Algorithm: algo, Requests: 100, Window: 60 * second}
			for _, tc := range []struct {
				name          string
				before, after []Limit
			}{
				{"limit added before", []Limit{hour}, []Limit{minute, hour}},
				{"limit removed from before", []Limit{minute, hour}, []Limit{hour}},
				{"limits reordered", []Limit{hour, minute}, []Limit{minute, hour}},
			} {
				t.Run(store.name+"/"+algo.String()+"/"+tc.name, func(t *testing.T) {
					s := store.s()
					key := Key("reload-keeps", store.name, algo.String(), tc.name)
					take := func(limits []Limit, now, want int64) int64 { return granted(t, s, key, limits, now, want) }
					// The hour's 1,000 spent in its first twenty minutes under the old limits,
					// 100 every other minute (a sliding minute then weighs nothing before).
					var spent int64
					for i := range int64(10) {
						spent += take(tc.before, at+i*120*second, 100)
					}
					if spent != 1000 {
						t.Fatalf("under %v: granted %d in twenty minutes, want 1000", tc.before, spent)
					}
					// Twenty more minutes under the new limits, the same asks: the hour is
					// spent, so a window grants nothing more, and a bucket only what it
					// refilled in the 38 minutes since it began full: 633.
					var more int64
					for i := range int64(10) {
						more += take(tc.after, at+(20+2*i)*60*second, 100)
					}
					want := int64(0)
					if algo == TokenBucket {
						want = 1000*38/60 + 1
					}
					if more > want {
						t.Errorf("under %v after the hour was spent: granted %d more, want at most %d", tc.after, more, want)
					}
				})
			}
		}
	}
}

// TestReloadAdoptsAWindowOfAnotherLength: a limit whose window changed (an hour's 1,000
// becoming a day's 24,000) finds no state under its identity and adopts the hour's: it counts
// in the hour while that lasts, then its day's window holds the hour's count. Not a fresh day.
func TestReloadAdoptsAWindowOfAnotherLength(t *testing.T) {
	srv := redistest.Start(t)
	at := int64(1_000_000) * 24 * 3600 * second // the start of a day
	for _, store := range []struct {
		name string
		s    func() Store
	}{{"memory", func() Store { return NewMemory(nil) }}, {"redis", func() Store { return NewRedis(srv.Client()) }}} {
		t.Run(store.name, func(t *testing.T) {
			s := store.s()
			key := Key("adopt", store.name)
			hour := []Limit{{Algorithm: FixedWindow, Requests: 1000, Window: 3600 * second}}
			day := []Limit{{Algorithm: FixedWindow, Requests: 1500, Window: 24 * 3600 * second}}
			take := func(limits []Limit, now, want int64) int64 { return granted(t, s, key, limits, now, want) }
			if got := take(hour, at, 1000); got != 1000 {
				t.Fatalf("a fresh hour: granted %d, want 1000", got)
			}
			// The day's 1,500 less the hour's 1,000, in the hour and after it.
			if got := take(day, at+60*second, 400); got != 400 {
				t.Errorf("in the hour, under the day's 1,500: granted %d, want 400", got)
			}
			if got := take(day, at+2*3600*second, 1000); got != 100 {
				t.Errorf("after the hour, under the day's 1,500 with 1,400 counted: granted %d, want 100", got)
			}
		})
	}
}

// TestRedisReadsLegacyFields: a hash stored before fields were named by identity (tok0, ts0,
// ...) is read by place, once: its state is written under the limits' identities and its old
// fields deleted, so that an upgrade starts no key afresh.
func TestRedisReadsLegacyFields(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	s := NewRedis(srv.Client())
	key := Key("legacy")
	now := int64(1_000_000) * 3600 * second
	limits := []Limit{{Algorithm: TokenBucket, Requests: 10, Window: 60 * second}, {Algorithm: FixedWindow, Requests: 100, Window: 3600 * second}}
	// An empty bucket, and an hour with 100 counted: the key is at both limits.
	if err := srv.Client().HSet(ctx, key, "tok0", 0, "ts0", now, "win1", now, "cur1", 100, "len1", 3600*second).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := s.Take(ctx, TakeRequest{Key: key, Limits: limits, Want: 1, Now: now + 1})
	if err != nil {
		t.Fatal(err)
	}
	if got.Granted != 0 {
		t.Errorf("on legacy state at its limits: granted %d, want 0", got.Granted)
	}
	h, err := srv.Client().HGetAll(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	for f := range h {
		if !strings.Contains(f, ":") {
			t.Errorf("legacy field %s left in %v", f, h)
		}
	}
	if h["cur:w3600000"] != "100" {
		t.Errorf("the hour's count under its identity: %q, want 100 (hash %v)", h["cur:w3600000"], h)
	}
}

// granted takes up to want tokens, at least 1, of key at now and returns how many s granted.
func granted(t *testing.T, s Store, key string, limits []Limit, now, want int64) int64 {
	t.Helper()
	got, err := s.Take(context.Background(), TakeRequest{Key: key, Limits: limits, Want: want, Min: 1, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return got.Granted
}
