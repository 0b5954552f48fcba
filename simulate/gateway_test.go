package simulate

import (
	"math/rand/v2"
	"slices"
	"testing"
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

// Keys whose hashes collide share a chain; lookups and pruning must keep them apart.
func TestRuleStatsKeyChains(t *testing.T) {
	st := &ruleStats{keys: map[uint64]*keyState{}}
	for _, k := range []struct {
		hash          uint64
		key           string
		denials, last int64
	}{{1, "a", 0, 10}, {1, "b", 1, 0}, {1, "c", 0, 0}, {2, "d", 0, 0}} {
		st.insert(k.hash, &keyState{key: k.key, denials: k.denials, lastMs: k.last})
	}
	st.prune(5) // drops c and d: idle and never denied
	for _, tt := range []struct {
		hash uint64
		key  string
		want bool
	}{{1, "a", true}, {1, "b", true}, {1, "c", false}, {2, "d", false}, {2, "a", false}, {3, "x", false}} {
		ks := st.lookup(tt.hash, []byte(tt.key))
		if got := ks != nil; got != tt.want || (got && ks.key != tt.key) {
			t.Errorf("lookup(%d, %q): got %v, want %v", tt.hash, tt.key, ks, tt.want)
		}
	}
	if len(st.keys) != 1 {
		t.Errorf("hashes left: got %d, want 1", len(st.keys))
	}
}
