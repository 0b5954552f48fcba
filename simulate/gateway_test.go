package simulate

import (
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"
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

// Pruning drops the keys that are idle and were never denied, and marks them so that the
// slots still holding them look their keys up again.
func TestRuleStatsPrune(t *testing.T) {
	st := &ruleStats{keys: map[string]*keyState{}}
	all := map[string]*keyState{}
	for _, k := range []struct {
		key           string
		denials, last int64
	}{{"a", 0, 10}, {"b", 1, 0}, {"c", 0, 0}, {"d", 0, 4}, {"e", 0, 5}} {
		ks := &keyState{key: k.key, denials: k.denials, lastMs: k.last}
		st.keys[k.key], all[k.key] = ks, ks
	}
	st.prune(5) // drops c and d: idle before 5 and never denied
	for key, want := range map[string]bool{"a": true, "b": true, "c": false, "d": false, "e": true} {
		if got := st.keys[key] != nil; got != want {
			t.Errorf("key %q kept: got %v, want %v", key, got, want)
		}
		if got := all[key].pruned; got == want {
			t.Errorf("key %q pruned: got %v, want %v", key, got, !want)
		}
	}
}

// A key keeps its slot while it is seen at least once a generation; one idle for longer gets
// a new slot. Slots own their keys: the buffer a key is looked up with may be reused.
func TestKeySlots(t *testing.T) {
	c := newKeySlots()
	buf := []byte("rl:d:r:k:v1")
	first := c.get(buf, 1000)
	copy(buf[len(buf)-2:], "v2")
	other := c.get(buf, 1000)
	if first == other || first.key != "rl:d:r:k:v1" || other.key != "rl:d:r:k:v2" {
		t.Fatalf("slots: got %q and %q (same %v), want two", first.key, other.key, first == other)
	}
	steps := []struct {
		key  string
		ms   int64
		same bool // the slot is first's
	}{
		{"rl:d:r:k:v1", 1000 + slotGeneration - 1, true},
		{"rl:d:r:k:v1", 1000 + 2*slotGeneration - 1, true}, // still in the generation before
		{"rl:d:r:k:v1", 1000 + 3*slotGeneration, true},
		{"rl:d:r:k:v2", 1000 + 3*slotGeneration, false},
		{"rl:d:r:k:v3", 1000 + 4*slotGeneration, false},
		{"rl:d:r:k:v3", 1000 + 5*slotGeneration, false},
		{"rl:d:r:k:v1", 1000 + 5*slotGeneration, false}, // not seen in the last two generations
	}
	for i, st := range steps {
		sl := c.get([]byte(st.key), st.ms)
		if sl.key != st.key {
			t.Fatalf("step %d: got slot of %q, want %q", i, sl.key, st.key)
		}
		if got := sl == first; got != st.same {
			t.Errorf("step %d: got first slot %v, want %v", i, got, st.same)
		}
		if st.key == "rl:d:r:k:v2" && sl == other {
			t.Errorf("step %d: key idle for two generations kept its slot", i)
		}
	}
}

// The shared-NAT tracker counts distinct users per address up to its cap.
func TestNATTracker(t *testing.T) {
	n := natTracker{cap: 3, addrs: map[string]userSet{}}
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
		if got, capped := n.count(st.addr); got != st.want || capped != st.capped {
			t.Errorf("step %d: %s after %s: got %d users (capped %v), want %d (%v)", i, st.addr, st.user, got, capped, st.want, st.capped)
		}
	}
	if got, capped := n.count("c"); got != 0 || capped {
		t.Errorf("unseen address: got %d users (capped %v), want 0", got, capped)
	}
	// Addresses and users may view a buffer the caller reuses: the tracker keeps copies.
	buf := []byte("x1")
	view := func() string { return unsafe.String(&buf[0], len(buf)) }
	for _, u := range []string{"u1", "u2", "u3"} {
		n.see(view(), u)
	}
	buf[1] = '2'
	if got, _ := n.count("x1"); got != 3 {
		t.Errorf("address seen through a reused buffer: got %d users, want 3", got)
	}
	if got, _ := n.count("x2"); got != 0 {
		t.Errorf("address never seen: got %d users, want 0", got)
	}
	one := natTracker{cap: 1, addrs: map[string]userSet{}}
	one.see("a", "u1")
	one.see("a", "u2")
	if got, capped := one.count("a"); got != 1 || !capped {
		t.Errorf("cap 1: got %d users (capped %v), want 1 (capped)", got, capped)
	}
}

// Trackers that each saw part of the records, merged, count what one tracker that saw them
// all counts, whichever part each saw.
func TestNATTrackerMerge(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for round := range 50 {
		one := natTracker{cap: 4, addrs: map[string]userSet{}}
		parts := [2]natTracker{one.empty(), one.empty()}
		for range 200 {
			addr, user := string(rune('a'+rng.IntN(8))), string(rune('A'+rng.IntN(6)))
			one.see(addr, user)
			parts[rng.IntN(2)].see(addr, user)
		}
		parts[0].merge(&parts[1])
		for a := 'a'; a < 'a'+8; a++ {
			got, gotCapped := parts[0].count(string(a))
			want, wantCapped := one.count(string(a))
			if got != want || gotCapped != wantCapped {
				t.Fatalf("round %d: address %c: merged count %d (capped %v), want %d (%v)", round, a, got, gotCapped, want, wantCapped)
			}
		}
	}
}
