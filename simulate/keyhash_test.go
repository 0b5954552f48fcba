package simulate

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/simulate/accesslog"
)

// Two hits have equal store key hashes exactly when their store keys, as the rule's plan builds
// them, are equal: for every rule of the example policies, over values from a small alphabet
// that AppendKey escapes parts of (so that different values make keys that only escaping tells
// apart), and for the sub-sharded rule over addresses of which many fall in one shard (equal
// keys from different values). The shard that keeps a new key builds the same bytes
// (shard.storeKey).
func TestStoreKeyHashesFollowKeys(t *testing.T) {
	m := examplePolicies(t)
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
	byHash := map[pair]string{} // over every rule: keys of different rules hash apart too
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
			byKey := map[string]pair{}
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
				h, id := vh.storeKeyHashes(rs, shape, entries)
				// storeKey reads the domain's values at Simulator.domainAt: lay them out there.
				all := append(make([]string, s.domainAt[di]), values...)
				p := &prepared{values: all, oks: make([]bool, len(all))}
				hi := &hit{rs: rs, domain: uint16(di), shape: uint16(si)}
				key, want := sh.storeKey(p, hi), string(rs.plan.AppendKey(nil, entries))
				if key != want {
					t.Fatalf("rule %s: storeKey %q, AppendKey %q", rs.rule.Name, key, want)
				}
				// A key's first denial keeps its store key (describe), which orders denied keys.
				var ks keyState
				if sh.describe(p, hi, &ks, values); ks.keyDenials == nil || ks.key != want {
					t.Fatalf("rule %s: a denied key's store key: got %+v, want %q", rs.rule.Name, ks.keyDenials, want)
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

// Through prepare, on a model of two domains whose sources sit in a different order (so that a
// domain's values are not at the start of a record's): every hit's store key, as the shard
// that keeps it builds it, and its hashes go one to one, across domains and records.
func TestStoreKeyHashesAcrossDomains(t *testing.T) {
	rule := func(name string, match []policy.Match) *policy.Rule {
		return &policy.Rule{Name: name, Match: match, Stage: policy.Stage{Name: policy.StageEnforce},
			Limits: []policy.Limit{{Requests: 10, WindowMs: 60_000, Algorithm: policy.TokenBucket, Cost: 1}}}
	}
	tenant := &policy.Source{Key: "tenant", Kind: policy.SourceHeader, Header: "x-tenant-id"}
	ip := &policy.Source{Key: "ip", Kind: policy.SourceRemoteAddress, Mask: policy.MaskNone}
	sharded := rule("hot", []policy.Match{{Key: "tenant", Value: "big", Kind: policy.MatchExact}})
	sharded.SubShards = &policy.SubShards{Count: 4, Attribute: "ip"}
	m := &policy.Model{Domains: []*policy.Domain{
		{Name: "a", Sources: []*policy.Source{tenant, ip}, Rules: []*policy.Rule{
			sharded, rule("per-tenant", []policy.Match{{Key: "tenant", Kind: policy.MatchAny}})}},
		{Name: "b", Sources: []*policy.Source{ip, tenant}, Rules: []*policy.Rule{
			rule("per-ip", []policy.Match{{Key: "ip", Kind: policy.MatchAny}}),
			rule("per-pair", []policy.Match{{Key: "ip", Kind: policy.MatchAny}, {Key: "tenant", Kind: policy.MatchAny}})}},
	}}
	s, err := New(Config{Model: m})
	if err != nil {
		t.Fatal(err)
	}
	type pair struct{ hash, id uint64 }
	byKey, byHash := map[string]pair{}, map[pair]string{}
	rb, buf := s.newBuilder(), &prepBuffers{}
	tenants := []string{"big", "a", "a:b", "%", "{x}"}
	hits := 0
	for i := range 2000 {
		rec := accesslog.Record{TimeMs: int64(i), RemoteAddr: fmt.Sprintf("10.0.%d.%d", i%3, i%7),
			Headers: []accesslog.Header{{Name: "x-tenant-id", Value: tenants[i%len(tenants)]}}}
		var p prepared
		s.prepare(&p, rb, &rec, buf)
		for j := range p.hits {
			h := &p.hits[j]
			key, got := s.shards[0].storeKey(&p, h), pair{h.hash, h.id}
			if prev, ok := byKey[key]; ok && prev != got {
				t.Fatalf("key %q hashed to %x and to %x", key, prev, got)
			}
			if prev, ok := byHash[got]; ok && prev != key {
				t.Fatalf("keys %q and %q both hashed to %x", prev, key, got)
			}
			byKey[key], byHash[got] = got, key
			hits++
		}
		buf.reset()
	}
	// 5 tenants × 21 addresses: hot takes tenant big (an exact match comes first), in 4 keys
	// (its sub-shards); per-tenant the other 4 tenants; per-ip 21 keys; per-pair 105. A record
	// hits one rule of a and both of b.
	if want := 4 + 4 + 21 + 105; len(byKey) != want || hits != 2000*3 {
		t.Errorf("%d keys in %d hits; want %d in %d", len(byKey), hits, want, 2000*3)
	}
}

// A rule's keys hash the same wherever the rule is in the policies: the hashes start from the
// rule's domain and name, not its place.
func TestStoreKeyHashesIgnoreRuleOrder(t *testing.T) {
	hashes := func(reverse bool) map[string]uint64 {
		m := examplePolicies(t)
		if reverse {
			slices.Reverse(m.Domains[0].Rules)
		}
		s, err := New(Config{Model: m})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]uint64{}
		for _, ds := range s.domains {
			for _, rs := range ds.rules {
				var vh valueHashes
				values := make([]string, len(ds.d.Sources))
				for i := range values {
					values[i] = "v"
				}
				vh.reset(len(values))
				shape := ds.shapes[slices.IndexFunc(ds.shapes, func(sh []int) bool { return shapeSelects(ds, sh, rs) && len(sh) == rs.descriptorLen() })]
				entries := make([]policy.Entry, len(shape))
				for j, i := range shape {
					entries[j] = policy.Entry{Key: ds.d.Sources[i].Key, Value: values[i]}
				}
				out[rs.rule.Name], _ = vh.storeKeyHashes(rs, shape, entries)
			}
		}
		return out
	}
	a, b := hashes(false), hashes(true)
	if len(a) < 2 || !maps.Equal(a, b) {
		t.Errorf("hashes by rule: %v in the policies' order, %v with the rules reversed", a, b)
	}
}
