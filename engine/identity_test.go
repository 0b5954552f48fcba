package engine

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

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

// TestReloadKeepsAlikeLimits: limits of one family and window rank by requests and capacity,
// not by place, so adding or removing one leaves the others' states. By place, a 1000/h limit
// added before a spent 100/h one took its state, and the 100/h one started afresh (100 more
// in the spent hour).
func TestReloadKeepsAlikeLimits(t *testing.T) {
	at := int64(1_000_000) * 3600 * second
	for _, st := range identityStores(t) {
		for _, algo := range []Algorithm{FixedWindow, SlidingWindow, TokenBucket} {
			s := st.s()
			key := Key("alike", st.name, algo.String())
			strict := Limit{Algorithm: algo, Requests: 100, Window: 3600 * second}
			loose := Limit{Algorithm: algo, Requests: 1000, Window: 3600 * second}
			if got := granted(t, s, key, []Limit{strict}, at, 100); got != 100 {
				t.Fatalf("%s/%s: a fresh 100/h granted %d", st.name, algo, got)
			}
			// A window grants nothing more in the hour; a bucket what two minutes refill, 3.
			want := int64(0)
			if algo == TokenBucket {
				want = 3
			}
			more := granted(t, s, key, []Limit{loose, strict}, at+60*second, 100)
			more += granted(t, s, key, []Limit{strict}, at+120*second, 100)
			if more > want {
				t.Errorf("%s/%s: 1000/h added before the spent 100/h, then removed: %d more, want at most %d", st.name, algo, more, want)
			}
		}
	}
}

// TestAdoptedStateMoves: a state a limit adopts moves under its identity. Left under the name
// of the limit it came from, a limit of that name added later took it, and the adopter started
// afresh: a spent day's bucket of 2,400, with an hourly limit added, admitted 2,898 in 5 hours.
func TestAdoptedStateMoves(t *testing.T) {
	at := int64(1_000_000) * 24 * 3600 * second
	hour := Limit{Algorithm: TokenBucket, Requests: 1000, Window: 3600 * second}
	day := Limit{Algorithm: TokenBucket, Requests: 2400, Window: 24 * 3600 * second}
	for _, st := range identityStores(t) {
		s := st.s()
		key := Key("adopted-moves", st.name)
		now := at
		granted(t, s, key, []Limit{hour}, now, 1) // state made under the hourly limit
		for range 5 {
			granted(t, s, key, []Limit{day}, now, 100000) // adopted by the day's, and spent
			now += second
		}
		var more int64
		for range 5 * 60 {
			now += 60 * second
			more += granted(t, s, key, []Limit{hour, day}, now, 1000)
		}
		// The day's bucket refills 500 in 5 hours.
		if more > 501 {
			t.Errorf("%s: %d admitted in 5 hours on a spent bucket of 2,400 a day", st.name, more)
		}
	}
}

// TestRedisIgnoresStrayFields: a field of no known name in a key's hash is left alone and
// keeps the TTL; it does not reach the script's own bookkeeping. A stray "kept:b60000" had
// marked the bucket's state as one a call leaves as it is, and no debit was stored: 90
// admitted at one instant of a bucket of 10.
func TestRedisIgnoresStrayFields(t *testing.T) {
	srv := redistest.Start(t)
	s := NewRedis(srv.Client())
	limits := []Limit{{Algorithm: TokenBucket, Requests: 10, Window: 60 * second}}
	key := Key("stray")
	now := int64(1_000_000) * 3600 * second
	granted(t, s, key, limits, now, 1)
	for _, f := range []string{"kept:b60000", "id:b60000", "moved:b60000", "raw:b60000", "at:b60000", "tok:b60000#0"} {
		if err := srv.Client().HSet(context.Background(), key, f, 1).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var total int64
	for range 10 {
		total += granted(t, s, key, limits, now, 10)
	}
	if total > 9 {
		t.Errorf("admitted %d more at one instant of a bucket of 10 with 1 spent", total)
	}
}

// identityStores are Memory and real Redis, which must agree.
func identityStores(t *testing.T) []struct {
	name string
	s    func() Store
} {
	srv := redistest.Start(t)
	return []struct {
		name string
		s    func() Store
	}{{"memory", func() Store { return NewMemory(nil) }}, {"redis", func() Store { return NewRedis(srv.Client()) }}}
}

// TestRedisKeepsTheOldLayout: a hash stored by the version before identities (tok0, ts0,
// win1, ...) is read and written by place, as that version does, so that its instances and
// this version's count in the same fields during a rolling upgrade. Migrated and deleted, the
// old fields gave every call of an old instance a fresh key: a bucket of 10 a minute, called
// once a second by both versions in turn, admitted 103 in 20 s.
func TestRedisKeepsTheOldLayout(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("testdata", "lua-v0", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	oldTake := redis.NewScript(read("common.lua") + read("take.lua"))
	limits := []Limit{{Algorithm: TokenBucket, Requests: 10, Window: 60 * second}, {Algorithm: FixedWindow, Requests: 100, Window: 3600 * second}}
	now := int64(1_000_000) * 3600 * second
	newStore := NewRedis(srv.Client())
	takeWith := func(version int, key string, limits []Limit, at, want int64) int64 {
		t.Helper()
		req := TakeRequest{Key: key, Limits: limits, Want: want, Min: 1, Now: at}
		if version == 1 {
			got, err := newStore.Take(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			return got.Granted
		}
		args, err := takeArgs(req)
		if err != nil {
			t.Fatal(err)
		}
		v, err := oldTake.Run(ctx, srv.Client(), []string{key}, args...).Result()
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseTake(v)
		if err != nil {
			t.Fatal(err)
		}
		return got.Granted
	}
	take := func(version int, key string, at int64) int64 { return takeWith(version, key, limits, at, 1) }
	for _, first := range []int{0, 1} {
		key := Key("upgrade", strconv.Itoa(first))
		var admitted int64
		for i := range int64(600) {
			admitted += take((first+int(i))%2, key, now+i*second)
		}
		// Ten minutes of one a second, both versions in turn: the hour's 100 binds (the
		// bucket would admit 110). A key the new version made first is fresh to the old one
		// once, its first call, which then writes the old layout: one more allowance of the
		// bucket at most. Counting apart, the two versions had admitted 200.
		want := int64(100)
		if first == 1 {
			want += 10
		}
		if admitted > want {
			t.Errorf("the new version first: %v: admitted %d in 10 minutes of one a second, want at most %d", first == 1, admitted, want)
		}
		h, err := srv.Client().HGetAll(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := h["tok0"]; !ok {
			t.Errorf("the new version first: %v: the hash lost the old layout: %v", first == 1, h)
		}
	}
	// An hour after this version first met it, a hash of the old layout moves to the new one,
	// by place, with its counts: a key kept busy would otherwise never leave it, and a reload
	// that moves its limits would read them by place for ever.
	key := Key("upgrade", "0")
	at := now + 3600*second + 630*second
	h0, _ := srv.Client().HGetAll(ctx, key).Result()
	var spent int64
	for i := range int64(3) {
		spent += take(1, key, at+i)
	}
	h, err := srv.Client().HGetAll(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := h["tok0"]; ok || h["cur:w3600000"] == "" || h["placed"] != "" {
		t.Errorf("an hour on: want the new layout only, got %v (before: %v)", h, h0)
	}
	// The bucket refilled in the hour; the hour's window is a new one: what matters is that a
	// reload adding a limit before them keeps both counts.
	reloaded := append([]Limit{{Algorithm: FixedWindow, Requests: 1000, Window: second}}, limits...)
	var more int64
	for range 20 {
		got, err := newStore.Take(ctx, TakeRequest{Key: key, Limits: reloaded, Want: 1, Now: at + 10})
		if err != nil {
			t.Fatal(err)
		}
		more += got.Granted
	}
	if spent+more > 10 {
		t.Errorf("after the move, a limit added before the others: %d then %d more at one instant of a bucket of 10", spent, more)
	}
	// A window's state moves by the length it records, not by its place when the move
	// comes: a day spent under the old layout, then, an hour on, a per-minute limit reloaded
	// before it. By place, the day's count went to the minute's name, and 100 more passed.
	day := []Limit{{Algorithm: FixedWindow, Requests: 100, Window: 24 * 3600 * second}}
	dayStart := int64(20_000) * 24 * 3600 * second
	if got := takeWith(0, "upgrade-day", day, dayStart, 100); got != 100 {
		t.Fatalf("the old version, a fresh day: granted %d", got)
	}
	if got := takeWith(1, "upgrade-day", day, dayStart+second, 1); got != 0 {
		t.Errorf("the new version, by place: granted %d of a spent day", got)
	}
	minuteFirst := append([]Limit{{Algorithm: FixedWindow, Requests: 1000, Window: 60 * second}}, day...)
	if got := takeWith(1, "upgrade-day", minuteFirst, dayStart+3660*second, 100); got != 0 {
		t.Errorf("an hour on, a per-minute limit before the day: granted %d of a spent day", got)
	}
}

// TestRedisIgnoresOldNamesInNewHashes: in a hash of the new layout, a field named the old way (a
// stray write, or an instance of the old version during an upgrade) does not make the scripts
// read the hash by place: a spent bucket stays spent.
func TestRedisIgnoresOldNamesInNewHashes(t *testing.T) {
	srv := redistest.Start(t)
	s := NewRedis(srv.Client())
	limits := []Limit{{Algorithm: TokenBucket, Requests: 10, Window: 60 * second}}
	key := Key("old-names")
	now := int64(1_000_000) * 3600 * second
	if got := granted(t, s, key, limits, now, 10); got != 10 {
		t.Fatalf("a fresh bucket of 10 granted %d", got)
	}
	if err := srv.Client().HSet(context.Background(), key, "len7", 1).Err(); err != nil {
		t.Fatal(err)
	}
	if got := granted(t, s, key, limits, now, 10); got != 0 {
		t.Errorf("a spent bucket with a stray len7 field granted %d", got)
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

// TestRedisMovesOldStates: the move of an old-layout hash, an hour after this version met it,
// keeps every count. A place holding a bucket's state and a window's (the old policy changed
// its family there) had its window lost (a spent day granted 100 more), and two old states
// that came to one name kept one of them at random (a sliding window's previous minute lost:
// 99 granted where 2 were right).
func TestRedisMovesOldStates(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	s := NewRedis(srv.Client())
	now := int64(20_000)*24*3600*second + 3600*second + 2*second // 01:00:02 of a day
	long := now - 2*3600*second                                  // met more than an hour ago
	day := now - now%(24*3600*second)
	minute := now - now%(60*second)
	for _, tc := range []struct {
		name   string
		fields []any
		limits []Limit
		want   int64
	}{
		{"a bucket and a day at one place", []any{"tok0", 0, "ts0", now, "win0", day, "cur0", 100, "len0", 24 * 3600 * second, "placed", long},
			[]Limit{{Algorithm: FixedWindow, Requests: 100, Window: 24 * 3600 * second}}, 0},
		{"a fixed and a sliding minute", []any{"win0", minute, "cur0", 1, "len0", 60 * second,
			"win1", minute, "cur1", 1, "prev1", 100, "len1", 60 * second, "placed", long},
			[]Limit{{Algorithm: SlidingWindow, Requests: 100, Window: 60 * second}}, 2},
	} {
		key := Key("moves", tc.name)
		if err := srv.Client().HSet(ctx, key, tc.fields...).Err(); err != nil {
			t.Fatal(err)
		}
		if got := granted(t, s, key, tc.limits, now, 100); got > tc.want {
			t.Errorf("%s: granted %d of 100 asked, want at most %d (hash %v)", tc.name, got, tc.want, srv.Client().HGetAll(ctx, key).Val())
		}
	}
}
