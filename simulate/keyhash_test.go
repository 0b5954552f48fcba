package simulate

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/schema"
)

// Two hits have equal store key hashes exactly when their store keys, as the rule's plan builds
// them, are equal: for every rule of the example policies, over values from a small alphabet
// that AppendKey escapes parts of (so that different values make keys that only escaping tells
// apart), and for the sub-sharded rule over addresses of which many fall in one shard (equal
// keys from different values). The shard that keeps a new key builds the same bytes
// (shard.storeKey).
func TestStoreKeyHashesFollowKeys(t *testing.T) {
	m, err := schema.Load("../policies")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Model: m})
	if err != nil {
		t.Fatal(err)
	}
	type pair struct{ hash, id uint64 }
	rng := rand.New(rand.NewPCG(1, 2))
	parts := []string{"a", "b", "%", ":", "{", "}", "%3A", "a:b", ""}
	value := func() string {
		v := ""
		for range rng.IntN(4) {
			v += parts[rng.IntN(len(parts))]
		}
		return v
	}
	sharded := 0
	for di, ds := range s.domains {
		for _, rs := range ds.rules {
			si := -1
			for i, shape := range ds.shapes {
				if len(shape) == rs.descriptorLen() && shapeSelects(ds, shape, rs) {
					si = i
				}
			}
			if si < 0 {
				t.Fatalf("rule %s: no shape of its own", rs.rule.Name)
			}
			if rs.plan.Shards > 0 {
				sharded++
			}
			shape := ds.shapes[si]
			byKey, byHash := map[string]pair{}, map[pair]string{}
			var vh valueHashes
			sh := s.shards[0]
			for range 20000 {
				values := make([]string, len(ds.d.Sources))
				few := rng.IntN(2) == 0 // keys that recur, so that equal keys meet with other values for the shard
				for i := range values {
					if values[i] = value(); few {
						values[i] = parts[rng.IntN(2)]
					}
				}
				if rs.plan.Shards > 0 {
					values[shape[len(shape)-1]] = fmt.Sprintf("10.0.0.%d", rng.IntN(256)) // 16 in a shard
				}
				entries := make([]policy.Entry, len(shape))
				for j, i := range shape {
					entries[j] = policy.Entry{Key: ds.d.Sources[i].Key, Value: values[i]}
				}
				vh.reset(len(values))
				h, id := vh.storeKeyHashes(rs, shape, entries, values)
				// storeKey reads the domain's values at Simulator.domainAt: lay them out there.
				all := append(make([]string, s.domainAt[di]), values...)
				p := &prepared{values: all, oks: make([]bool, len(all))}
				key := sh.storeKey(p, &hit{rs: rs, domain: uint16(di), shape: uint16(si)})
				if want := string(rs.plan.AppendKey(nil, entries)); key != want {
					t.Fatalf("rule %s: storeKey %q, AppendKey %q", rs.rule.Name, key, want)
				}
				got := pair{h, id}
				if prev, ok := byKey[key]; ok && prev != got {
					t.Fatalf("rule %s: key %q hashed to %x and to %x", rs.rule.Name, key, prev, got)
				}
				if prev, ok := byHash[got]; ok && prev != key {
					t.Fatalf("rule %s: keys %q and %q both hashed to %x", rs.rule.Name, prev, key, got)
				}
				byKey[key], byHash[got] = got, key
			}
			if len(byKey) < 100 {
				t.Errorf("rule %s: only %d distinct keys in 20,000 tries", rs.rule.Name, len(byKey))
			}
		}
	}
	if sharded == 0 {
		t.Error("no sub-sharded rule in the example policies")
	}
}

// shapeSelects reports whether shape's keys are rule rs's: its match keys and its sub-shard
// attribute.
func shapeSelects(ds *domainSim, shape []int, rs *ruleSim) bool {
	for j, i := range shape {
		key := ds.d.Sources[i].Key
		if j < len(rs.rule.Match) {
			if key != rs.rule.Match[j].Key {
				return false
			}
		} else if rs.rule.SubShards == nil || key != rs.rule.SubShards.Attribute {
			return false
		}
	}
	return true
}
