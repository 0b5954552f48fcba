package simulate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/rlctl/rlctl/engine"
)

func TestEventQueueOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var q eventQueue
	var want []event // what is queued, kept sorted
	seq := uint64(0)
	for step := 0; step < 5000; step++ {
		if len(want) == 0 || rng.IntN(3) > 0 {
			seq++
			e := event{atUs: rng.Int64N(50), seq: seq}
			q.push(e)
			want = append(want, e)
			slices.SortFunc(want, func(a, b event) int {
				if a.atUs != b.atUs {
					return int(a.atUs - b.atUs)
				}
				return int(a.seq) - int(b.seq)
			})
			continue
		}
		got := q.pop()
		if got.atUs != want[0].atUs || got.seq != want[0].seq {
			t.Fatalf("step %d: got event (%d, %d), want (%d, %d)", step, got.atUs, got.seq, want[0].atUs, want[0].seq)
		}
		want = want[1:]
	}
	if len(q) != len(want) {
		t.Errorf("left: got %d events, want %d", len(q), len(want))
	}
}

// A key table finds keys by hash and keyID, keeps keys whose hashes collide apart, and pruning
// drops exactly the keys it is told to, wherever they sit in a run of colliding slots.
func TestKeyTable(t *testing.T) {
	tab := newKeyTable()
	keys := []struct {
		key     string
		hash    uint64
		denials int64
	}{{"a", 1, 0}, {"b", 1, 1}, {"c", 1, 0}, {"d", 2, 0}, {"e", 3, 2}}
	for i, k := range keys {
		ks := tab.newKeyState(0, 1)
		ks.lastMs, ks.id = int64(i), keyID([]byte(k.key))
		if k.denials > 0 {
			ks.keyDenials = &keyDenials{denials: k.denials}
			tab.denied++
		}
		tab.add(k.hash, ks)
	}
	id := func(key string) uint64 { return keyID([]byte(key)) }
	b := id("b")
	if ks := tab.get(1, b); ks == nil || ks.id != b {
		t.Fatalf("get b: got %v", ks)
	}
	if ks := tab.get(2, b); ks != nil {
		t.Errorf("get b with d's hash: got %+v, want nil", ks)
	}
	tab.prune(func(ks *keyState) bool { return ks.id == id("a") || ks.id == id("c") || ks.id == id("e") })
	for _, k := range keys {
		want := k.key == "b" || k.key == "d"
		if got := tab.get(k.hash, keyID([]byte(k.key))) != nil; got != want {
			t.Errorf("after prune, %q kept: got %v, want %v", k.key, got, want)
		}
	}
	if tab.denied != 1 {
		t.Errorf("denied keys after prune: got %d, want 1", tab.denied)
	}
	if tab.n != 2 {
		t.Errorf("keys after prune: got %d, want 2", tab.n)
	}
	// a and c, never denied, are kept for reuse; e, denied, is not (a record not yet merged
	// may read it).
	if len(tab.free) != 2 {
		t.Fatalf("free key states after prune: got %d, want 2", len(tab.free))
	}
	freed := map[*keyState]bool{tab.free[0]: true, tab.free[1]: true}
	tab.free[0].requests, tab.free[1].requests = 5, 5
	ks := tab.newKeyState(3, 6)
	if !freed[ks] || ks.id != 0 || ks.rule != 3 || ks.requests != 0 || ks.gateways() != 6 || len(tab.free) != 1 {
		t.Errorf("a new key state after prune: got %+v (reused: %v), want a cleared one of the free list", ks, freed[ks])
	}
	// No more are kept than the keys made since the prune before.
	tab.prune(func(*keyState) bool { return true })
	if len(tab.free) != 1 {
		t.Errorf("free key states after a prune with one key made since the last: got %d, want 1", len(tab.free))
	}
}

// A key table grows as keys come and shrinks as pruning drops them, and finds every key it
// holds throughout, among hashes whose low bits collide and runs of slots that wrap around
// the table's end.
func TestKeyTableGrowsAndShrinks(t *testing.T) {
	tab := newKeyTable()
	const n = 5000
	hashOf := func(i int) uint64 {
		// Low bits from a few values only, so that probes run long and wrap: every 8th key
		// ends in all ones, the table's last slot whatever its size.
		low := uint64(i % 8)
		if low == 7 {
			low = 1<<20 - 1
		}
		return uint64(i)<<32 | low
	}
	ids := make([]uint64, n)
	index := map[uint64]int{} // i by ID
	for i := range n {
		ks := tab.newKeyState(0, 1)
		ks.id = keyID(fmt.Appendf(nil, "k%d", i))
		ids[i], index[ks.id] = ks.id, i
		tab.add(hashOf(i), ks)
	}
	if tab.n != n || len(tab.slots) < n || 4*tab.n > 3*len(tab.slots) {
		t.Fatalf("after %d adds: %d keys in %d slots", n, tab.n, len(tab.slots))
	}
	check := func(keep func(i int) bool) {
		t.Helper()
		for i := range n {
			ks := tab.get(hashOf(i), ids[i])
			if got := ks != nil; got != keep(i) {
				t.Fatalf("key %d: found %v, want %v", i, got, keep(i))
			}
			if ks != nil && ks.id != ids[i] {
				t.Fatalf("key %d: got the state of key %d", i, index[ks.id])
			}
		}
		seen := 0
		tab.each(func(*keyState) { seen++ })
		if seen != tab.n {
			t.Fatalf("each: %d key states, want %d", seen, tab.n)
		}
	}
	check(func(int) bool { return true })
	big := len(tab.slots)
	prune := func(keep func(i int) bool) {
		t.Helper()
		tab.prune(func(ks *keyState) bool {
			i, ok := index[ks.id]
			if !ok {
				t.Fatalf("pruning a key of ID %x, which was never added", ks.id)
			}
			return !keep(i)
		})
	}
	// Drop one key in ten: the keys left are placed again within the same table, past the
	// holes the dropped ones leave in the long probes.
	slots := &tab.slots[0]
	most := func(i int) bool { return i%10 != 3 }
	prune(most)
	check(most)
	if len(tab.slots) != big || &tab.slots[0] != slots {
		t.Errorf("after pruning a tenth: %d slots in a new table, want the %d slots of the same one", len(tab.slots), big)
	}
	// Keep one key in ten: the table shrinks to fit what is left.
	keep := func(i int) bool { return i%10 == 0 }
	prune(keep)
	check(keep)
	if len(tab.slots) >= big || 4*tab.n > 3*len(tab.slots) {
		t.Errorf("after pruning to %d keys: %d slots, want fewer than %d", tab.n, len(tab.slots), big)
	}
	tab.prune(func(*keyState) bool { return true })
	check(func(int) bool { return false })
	if len(tab.slots) != minSlots {
		t.Errorf("empty: %d slots, want %d", len(tab.slots), minSlots)
	}
}

// The shared-NAT tracker counts distinct users per address up to its cap.
func TestNATTracker(t *testing.T) {
	n := newNATTracker(3, 100)
	steps := []struct {
		addr, user string
		want       int  // users counted behind addr afterwards
		capped     bool // and whether the count reached the cap
	}{
		{"a", "u1", 1, false},
		{"a", "u1", 1, false},
		{"b", "u1", 1, false},
		{"a", "u2", 2, false},
		{"a", "u1", 2, false},
		{"a", "u3", 3, true},
		{"a", "u4", 3, true},
		{"b", "u2", 2, false},
	}
	for i, st := range steps {
		n.see(st.addr, st.user)
		if got, capped := n.countOf(st.addr); got != st.want || capped != st.capped {
			t.Errorf("step %d: %s after %s: got %d users (capped %v), want %d (%v)", i, st.addr, st.user, got, capped, st.want, st.capped)
		}
	}
	if got, capped := n.countOf("c"); got != 0 || capped {
		t.Errorf("unseen address: got %d users (capped %v), want 0", got, capped)
	}
	one := newNATTracker(1, 100)
	one.see("a", "u1")
	one.see("a", "u2")
	if got, capped := one.countOf("a"); got != 1 || !capped {
		t.Errorf("cap 1: got %d users (capped %v), want 1 (capped)", got, capped)
	}
}

// The tracker grows past its first table and keeps every address's users through it, among
// address hashes whose low bits collide and runs of slots that wrap around the table's end.
func TestNATTrackerGrows(t *testing.T) {
	n := newNATTracker(5, 1<<20)
	const addrs = 3000
	addrOf := func(i int) uint64 {
		low := uint64(i % 4)
		if low == 3 {
			low = 1<<20 - 1 // the last slot of any table up to 2^20 slots
		}
		return uint64(i+1)<<32 | low
	}
	// Address i shows i%7 distinct users, each twice, the first of them again at the end.
	for round := range 2 {
		for i := range addrs {
			for u := range i % 7 {
				n.seeHash(addrOf(i), uint64(1000+u))
			}
			if round == 1 && i%7 > 0 {
				n.seeHash(addrOf(i), 1000)
			}
		}
	}
	if n.n != addrs-(addrs+6)/7 || len(n.slots) <= minSlots {
		t.Fatalf("%d addresses in %d slots, want %d in more than %d", n.n, len(n.slots), addrs-(addrs+6)/7, minSlots)
	}
	for i := range addrs {
		want := min(i%7, 5)
		got, capped := n.count(addrOf(i))
		if got != want || capped != (i%7 >= 5) {
			t.Fatalf("address %d: got %d users (capped %v), want %d (capped %v)", i, got, capped, want, i%7 >= 5)
		}
	}
}

// The tracker holds at most its limit of addresses: sightings behind further addresses are
// counted as untracked, and addresses already tracked go on counting.
func TestNATTrackerBound(t *testing.T) {
	n := newNATTracker(10, 2)
	for _, s := range []struct{ addr, user string }{{"a", "u1"}, {"b", "u1"}, {"c", "u1"}, {"c", "u2"}, {"a", "u2"}} {
		n.see(s.addr, s.user)
	}
	if got, _ := n.countOf("a"); got != 2 {
		t.Errorf("tracked address a: got %d users, want 2", got)
	}
	if got, _ := n.countOf("c"); got != 0 {
		t.Errorf("address c past the bound: got %d users, want 0", got)
	}
	if n.untracked != 2 {
		t.Errorf("untracked sightings: got %d, want 2", n.untracked)
	}
}

// failingStore is a virtual store with a bug: every call fails.
type failingStore struct{}

var errStoreBug = errors.New("store bug")

func (failingStore) Take(context.Context, engine.TakeRequest) (engine.Result, error) {
	return engine.Result{}, errStoreBug
}
func (failingStore) Return(context.Context, engine.ReturnRequest) error { return errStoreBug }

// TestStoreErrorEndsReplay checks that an error of the virtual store, which a lease manager
// would take for an outage and fail open on, ends the replay instead of changing its figures.
func TestStoreErrorEndsReplay(t *testing.T) {
	s, err := New(Config{Model: testModel()})
	if err != nil {
		t.Fatal(err)
	}
	sh := s.shards[0]
	if err := sh.tick(0, 1, nil); err != nil {
		t.Fatalf("tick before any failure: %v", err)
	}
	m := &meteredStore{sh: sh, inner: failingStore{}, st: &sh.rules[0].stats, rule: "edge/per-tenant"}
	if err := m.Return(context.Background(), engine.ReturnRequest{}); !errors.Is(err, errStoreBug) {
		t.Fatalf("Return: got %v", err)
	}
	// The engines name no key (cellKey): the error names the rule.
	if err := sh.tick(1, 2, nil); !errors.Is(err, errStoreBug) || !strings.Contains(err.Error(), "rule edge/per-tenant: ") {
		t.Errorf("tick after a failed store call: got %v, want the store's error, naming the rule", err)
	}
	if _, err := s.Finish(); !errors.Is(err, errStoreBug) {
		t.Errorf("Finish after a failed store call: got %v, want the store's error", err)
	}
}

// A key state has a lease reference for each gateway: the first four in the state, further
// ones (a gateway added since, or more than four) beside it. A lease on one of those keeps the
// key live, and a key state reused from the free list keeps none of its last key's.
func TestKeyStateLeases(t *testing.T) {
	s, err := New(Config{Model: testModel(), Gateways: 6})
	if err != nil {
		t.Fatal(err)
	}
	sh := s.shards[0]
	ks := sh.keys.newKeyState(0, 6)
	if ks.gateways() != 6 {
		t.Fatalf("a key state for 6 gateways has room for %d", ks.gateways())
	}
	seen := map[*engine.LeaseRef]bool{}
	for g := range 9 { // a 7th to 9th gateway added since
		r := ks.lease(g)
		if seen[r] || ks.lease(g) != r {
			t.Fatalf("gateway %d: lease reference %p not its own", g, r)
		}
		seen[r] = true
	}
	if ks.gateways() != 9 {
		t.Errorf("after gateways up to 8: room for %d, want 9", ks.gateways())
	}

	// A lease on the 6th gateway, and no state left in the store or the ideal engine.
	plan := s.rules[0].plan
	if _, err := sh.manager(0, 5).TakeCell(sh.ctx, ks.lease(5), &ks.store, cellKey, plan.Limits, plan.Cost); err != nil {
		t.Fatal(err)
	}
	sh.store.Expire(math.MaxInt64 / 2)
	if sh.store.LiveCell(&ks.store) || !sh.live(ks) {
		t.Errorf("a key whose only state is a lease on gateway 5: store live %v, key live %v; want false, true",
			sh.store.LiveCell(&ks.store), sh.live(ks))
	}

	sh.keys.add(1, ks)
	sh.keys.created = 1
	sh.keys.prune(func(*keyState) bool { return true })
	if reused := sh.keys.newKeyState(0, 1); reused != ks || reused.more != nil || *reused.lease(0) != (engine.LeaseRef{}) {
		t.Errorf("a key state reused for 1 gateway: %p (freed %p), more %v, lease %v", reused, ks, reused.more, *reused.lease(0))
	}
}
