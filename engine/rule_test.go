package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/rlctl/rlctl/internal/policyfixture"
	"github.com/rlctl/rlctl/policy"
)

func TestLimitOf(t *testing.T) {
	tests := []struct {
		in      policy.Limit
		want    Limit
		wantErr bool
	}{
		{policy.Limit{Requests: 100, WindowMs: 1000, Burst: 100}, Limit{Requests: 100, Window: 1000}, false},
		{policy.Limit{Requests: 100, WindowMs: 1000, Burst: 250, Algorithm: policy.TokenBucket}, Limit{Requests: 100, Window: 1000, Burst: 250}, false},
		{policy.Limit{Requests: 5, WindowMs: 60_000, Algorithm: policy.SlidingWindow}, Limit{Algorithm: SlidingWindow, Requests: 5, Window: 60_000}, false},
		{policy.Limit{Requests: 5, WindowMs: 60_000, Algorithm: policy.FixedWindow}, Limit{Algorithm: FixedWindow, Requests: 5, Window: 60_000}, false},
		{policy.Limit{Requests: 5, WindowMs: 1000, Algorithm: "leaky_bucket"}, Limit{}, true},
		// Invalid figures come back with the error, for lint to explain.
		{policy.Limit{Requests: MaxExact, WindowMs: MaxExact, Algorithm: policy.FixedWindow}, Limit{Algorithm: FixedWindow, Requests: MaxExact, Window: MaxExact}, true},
		{policy.Limit{Requests: 0, WindowMs: 1000}, Limit{Window: 1000}, true},
	}
	for i, tt := range tests {
		got, err := LimitOf(tt.in)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("step %d: LimitOf(%+v) = %+v, %v; want %+v, error %v", i, tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

// TestLimitOfErrorNamesBurst: the error names the burst the policy has, not the 0 it becomes when
// it equals the requests.
func TestLimitOfErrorNamesBurst(t *testing.T) {
	_, err := LimitOf(policy.Limit{Requests: 99999999, WindowMs: 365 * 24 * 3600 * 1000, Burst: 99999999})
	if !errors.Is(err, ErrInexact) {
		t.Fatalf("got %v, want ErrInexact", err)
	}
	if got, want := err.Error(), "limit: 99999999 per 31536000000ms burst 99999999 token_bucket: "; !strings.HasPrefix(got, want) {
		t.Errorf("got %q, want it to start with %q", got, want)
	}
}

func TestPlanRule(t *testing.T) {
	r := &policy.Rule{Name: "hot", Match: []policy.Match{{Key: "tenant", Value: "big", Kind: policy.MatchExact}},
		Limits:      []policy.Limit{{Requests: 1600, WindowMs: 1000, Burst: 3200, Cost: 2}, {Requests: 3, WindowMs: 1000, Algorithm: policy.FixedWindow}},
		SubShards:   &policy.SubShards{Count: 16, Attribute: "ip"},
		FailureMode: policy.FailClosed, Fallback: &policy.Rate{Requests: 10, WindowMs: 1000},
		Lease: policyfixture.Lease(policyfixture.Bounds(5, 200), policyfixture.Watermark(50))}
	p, err := PlanRule("edge", r)
	if err != nil {
		t.Fatal(err)
	}
	wantLimits := []Limit{{Requests: 100, Window: 1000, Burst: 200}, {Algorithm: FixedWindow, Requests: 1, Window: 1000}}
	for i, want := range wantLimits {
		if p.Limits[i] != want {
			t.Errorf("limit %d: got %+v, want %+v", i, p.Limits[i], want)
		}
	}
	if p.Shards != 16 || p.Cost != 2 || !p.FailClosed || p.Domain != "edge" || p.Rule != r {
		t.Errorf("plan: got shards %d cost %d fail closed %v domain %q", p.Shards, p.Cost, p.FailClosed, p.Domain)
	}
	// The fallback is shared by the 16 sub-shards too: 10/16, at least 1 a shard.
	if want := (Limit{Requests: 1, Window: 1000}); len(p.Fallback) != 1 || p.Fallback[0] != want {
		t.Errorf("fallback: got %+v, want [%+v]", p.Fallback, want)
	}
	if want := (LeaseConfig{MinLease: 5, MaxLease: 200, Lookahead: 250, LowWater: 50, TTL: 2000}); p.Lease != want {
		t.Errorf("lease: got %+v, want %+v", p.Lease, want)
	}
	// An override is shared among the 16 sub-shards as the rule's own limits are.
	if got := p.Override(160, 60_000); len(got) != 1 || got[0] != (Limit{Requests: 10, Window: 60_000}) {
		t.Errorf("override: got %+v, want 10 a shard", got)
	}

	bad := []*policy.Rule{
		{Name: "none"},
		{Name: "alg", Limits: []policy.Limit{{Requests: 1, WindowMs: 1000, Algorithm: "gcra"}}},
		{Name: "fallback", Limits: []policy.Limit{{Requests: 1, WindowMs: 1000}}, Fallback: &policy.Rate{Requests: 0, WindowMs: 1000}},
	}
	for _, r := range bad {
		if _, err := PlanRule("edge", r); err == nil {
			t.Errorf("rule %s: no error", r.Name)
		}
	}
}

func TestAppendRuleKey(t *testing.T) {
	plain := &policy.Rule{Name: "per-tenant", Match: []policy.Match{{Key: "tenant", Kind: policy.MatchAny}}}
	sharded := &policy.Rule{Name: "hot", Match: []policy.Match{{Key: "tenant", Value: "big", Kind: policy.MatchExact}},
		SubShards: &policy.SubShards{Count: 8, Attribute: "ip"}}
	shard := ShardOf("10.0.0.7", 8)
	tests := []struct {
		r       *policy.Rule
		entries []policy.Entry
		want    string
	}{
		{plain, []policy.Entry{{Key: "tenant", Value: "acme"}}, "rl:edge:per-tenant:tenant:acme"},
		{plain, []policy.Entry{{Key: "tenant", Value: "a:b{c}"}}, "rl:edge:per-tenant:tenant:a%3Ab%7Bc%7D"},
		{sharded, []policy.Entry{{Key: "tenant", Value: "big"}, {Key: "ip", Value: "10.0.0.7"}}, Key("edge", "hot", "tenant", "big", "shard", string(rune('0'+shard)))},
		{sharded, []policy.Entry{{Key: "tenant", Value: "big"}}, "rl:edge:hot:tenant:big:shard:0"},
	}
	for i, tt := range tests {
		if got := string(AppendRuleKey(nil, "edge", tt.r, tt.entries)); got != tt.want {
			t.Errorf("step %d: got %q, want %q", i, got, tt.want)
		}
	}
	if got, want := string(AppendKeyPart([]byte("rl:edge"), "override=5/1000")), "rl:edge:override=5/1000"; got != want {
		t.Errorf("AppendKeyPart: got %q, want %q", got, want)
	}
	buf := make([]byte, 0, 128)
	ents := []policy.Entry{{Key: "tenant", Value: "big"}, {Key: "ip", Value: "10.0.0.7"}}
	if n := testing.AllocsPerRun(100, func() { buf = AppendRuleKey(buf[:0], "edge", sharded, ents) }); n != 0 {
		t.Errorf("AppendRuleKey allocates %v times", n)
	}
}

// TestLongValueKey: a value past MaxKeyValueLen is held in the key as its digest: the key stays
// short, two long values keep two keys, and no value held as it is reads as a digest.
func TestLongValueKey(t *testing.T) {
	r := &policy.Rule{Name: "per-tenant", Match: []policy.Match{{Key: "tenant", Kind: policy.MatchAny}}}
	key := func(v string) string {
		return string(AppendRuleKey(nil, "edge", r, []policy.Entry{{Key: "tenant", Value: v}}))
	}
	edge := strings.Repeat("x", MaxKeyValueLen)
	if got := key(edge); got != "rl:edge:per-tenant:tenant:"+edge {
		t.Errorf("a value of MaxKeyValueLen bytes is not held as it is: %.60q...", got)
	}
	long, long2 := edge+"y", edge+"z"
	sum := sha256.Sum256([]byte(long))
	want := "rl:edge:per-tenant:tenant:%sha256-" + hex.EncodeToString(sum[:])
	if got := key(long); got != want {
		t.Errorf("long value: got %q, want %q", got, want)
	}
	if key(long) == key(long2) {
		t.Error("two long values share a key")
	}
	if forged := key("%sha256-" + hex.EncodeToString(sum[:])); forged == want {
		t.Error("a short value reads as a long one's digest")
	}
}

// KeyParts names what a rule's key is made of: two descriptors of the rule have equal keys
// exactly when their parts are equal, over values that only the key's escaping tells apart and
// addresses many to a sub-shard.
func TestKeyPartsTellKeysApart(t *testing.T) {
	limits := []policy.Limit{{Requests: 10, WindowMs: 1000}}
	plain := &policy.Rule{Name: "per-tenant", Limits: limits, Match: []policy.Match{{Key: "tenant", Kind: policy.MatchAny}, {Key: "path", Kind: policy.MatchAny}}}
	sharded := &policy.Rule{Name: "hot", Limits: limits, Match: []policy.Match{{Key: "tenant", Kind: policy.MatchAny}},
		SubShards: &policy.SubShards{Count: 8, Attribute: "ip"}}
	values := []string{"", "a", "%", ":", "a:", "%3A", "{", "}", "a:path:", "a:path:a"} // unescaped, the last two would make equal keys
	for _, r := range []*policy.Rule{plain, sharded} {
		p, err := PlanRule("edge", r)
		if err != nil {
			t.Fatal(err)
		}
		keys, partsOf := map[string]string{}, map[string]string{}
		for i := range len(values) * len(values) * 32 {
			ents := []policy.Entry{{Key: "tenant", Value: values[i%len(values)]}}
			if r == plain {
				ents = append(ents, policy.Entry{Key: "path", Value: values[i/len(values)%len(values)] + values[i%3]})
			} else if i%5 > 0 {
				ents = append(ents, policy.Entry{Key: "ip", Value: "10.0.0." + strings.Repeat("1", i/len(values)%32)})
			}
			matched, shard := p.KeyParts(ents)
			if r == plain && (shard != -1 || len(matched) != len(ents)) || r == sharded && (shard < 0 || len(matched) != 1) {
				t.Fatalf("rule %s, entries %v: KeyParts gave %v and shard %d", r.Name, ents, matched, shard)
			}
			parts := fmt.Sprintf("%q %d", matched, shard)
			key := string(p.AppendKey(nil, ents))
			if prev, ok := partsOf[key]; ok && prev != parts {
				t.Fatalf("rule %s: key %q from parts %s and %s", r.Name, key, prev, parts)
			}
			if prev, ok := keys[parts]; ok && prev != key {
				t.Fatalf("rule %s: parts %s make keys %q and %q", r.Name, parts, prev, key)
			}
			keys[parts], partsOf[key] = key, parts
		}
		if len(keys) < 16 {
			t.Errorf("rule %s: only %d distinct keys", r.Name, len(keys))
		}
	}
}

// FuzzPlanAppendKey checks that a plan builds the keys AppendRuleKey builds, with and without
// the sub-shard entry, when an entry's key is not the rule's (the plan's escaped match keys do
// not apply), and when the plan was not made by PlanRule.
func FuzzPlanAppendKey(f *testing.F) {
	f.Add("edge", "per-tenant", "tenant", "acme", "10.0.0.7")
	f.Add("a:b", "{r}", "t{1}", "x%3Ay", "")
	f.Add("", "", "", ":", "::1")
	f.Fuzz(func(t *testing.T, domain, name, key, value, ip string) {
		limits := []policy.Limit{{Requests: 10, WindowMs: 1000}}
		plain := &policy.Rule{Name: name, Limits: limits, Match: []policy.Match{{Key: key, Kind: policy.MatchAny}}}
		sharded := &policy.Rule{Name: name, Limits: limits, Match: []policy.Match{{Key: key, Kind: policy.MatchAny}},
			SubShards: &policy.SubShards{Count: 8, Attribute: "ip"}}
		for _, r := range []*policy.Rule{plain, sharded} {
			p, err := PlanRule(domain, r)
			if err != nil {
				t.Fatal(err)
			}
			bare := &RulePlan{Domain: domain, Rule: r}
			for _, ents := range [][]policy.Entry{{{Key: key, Value: value}}, {{Key: key, Value: value}, {Key: "ip", Value: ip}},
				{{Key: key + ":", Value: value}}} {
				want := string(AppendRuleKey([]byte("x"), domain, r, ents))
				if got := string(p.AppendKey([]byte("x"), ents)); got != want {
					t.Fatalf("rule %q of %q, entries %v: got %q, want %q", name, domain, ents, got, want)
				}
				if got := string(bare.AppendKey([]byte("x"), ents)); got != want {
					t.Fatalf("rule %q of %q, entries %v, plan without prefix: got %q, want %q", name, domain, ents, got, want)
				}
			}
		}
	})
}
