package simulate

import (
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/policy"
)

// domainSim is one domain prepared for replay: the descriptor shapes its rules need and the
// rules' engine limits.
type domainSim struct {
	d *policy.Domain
	// shapes are the distinct descriptor key sequences of the rules (with the sub-shard
	// attribute appended for sub-sharded rules), each as indexes into d.Sources: the
	// descriptors Envoy's rendered rate-limit actions would send.
	shapes [][]int
	rules  map[*policy.Rule]*ruleSim
	// addrSources are the indexes of remote_address sources; their values are addresses or
	// subnets whose users the shared-NAT check counts.
	addrSources []int
}

// ruleSim is a rule prepared for replay.
type ruleSim struct {
	domain  string
	rule    *policy.Rule
	limits  []engine.Limit // per shard when sub-sharded
	shards  int64
	cost    int64
	depth   int // matched entries, without the sub-shard entry
	stats   *ruleStats
	gateway []*gatewayRule // per virtual gateway
}

func newDomainSim(d *policy.Domain) (*domainSim, error) {
	ds := &domainSim{d: d, rules: map[*policy.Rule]*ruleSim{}}
	index := map[string]int{}
	for i, s := range d.Sources {
		index[s.Key] = i
		if s.Kind == policy.SourceRemoteAddress {
			ds.addrSources = append(ds.addrSources, i)
		}
	}
	seen := map[string]bool{}
	for _, r := range d.Rules {
		keys := make([]string, 0, len(r.Match)+1)
		for _, m := range r.Match {
			keys = append(keys, m.Key)
		}
		if r.SubShards != nil && r.SubShards.Count > 1 {
			keys = append(keys, r.SubShards.Attribute)
		}
		var shape []int
		for _, k := range keys {
			i, ok := index[k]
			if !ok {
				return nil, fmt.Errorf("domain %s: rule %s: no source for descriptor key %q", d.Name, r.Name, k)
			}
			shape = append(shape, i)
		}
		if sig := strings.Join(keys, "\x00"); !seen[sig] {
			seen[sig] = true
			ds.shapes = append(ds.shapes, shape)
		}
		rs, err := newRuleSim(d.Name, r)
		if err != nil {
			return nil, err
		}
		ds.rules[r] = rs
	}
	d.Compile()
	return ds, nil
}

func newRuleSim(domain string, r *policy.Rule) (*ruleSim, error) {
	rs := &ruleSim{domain: domain, rule: r, cost: 1, depth: len(r.Match)}
	if r.SubShards != nil && r.SubShards.Count > 1 {
		rs.shards = int64(r.SubShards.Count)
	}
	for i, l := range r.Limits {
		el, err := engineLimit(l)
		if err != nil {
			return nil, fmt.Errorf("domain %s: rule %s: limit %d: %w", domain, r.Name, i, err)
		}
		if rs.shards > 0 {
			el = shardLimit(el, rs.shards)
		}
		rs.limits = append(rs.limits, el)
	}
	if len(r.Limits) > 0 && r.Limits[0].Cost > 0 {
		rs.cost = r.Limits[0].Cost
	}
	rs.stats = newRuleStats(domain, r)
	return rs, nil
}

// The three functions below mirror the enforcer's (enforcer/rules.go) so that simulated and
// enforced decisions agree; they belong in one exported place shared by both (see the package
// documentation's note).

// engineLimit converts a policy limit to the engine's, validated.
func engineLimit(l policy.Limit) (engine.Limit, error) {
	el := engine.Limit{Requests: l.Requests, Window: l.WindowMs, Burst: l.Burst}
	switch l.Algorithm {
	case policy.TokenBucket, "":
		el.Algorithm = engine.TokenBucket
	case policy.SlidingWindow:
		el.Algorithm = engine.SlidingWindow
	case policy.FixedWindow:
		el.Algorithm = engine.FixedWindow
	default:
		return el, fmt.Errorf("unknown algorithm %q", l.Algorithm)
	}
	if el.Burst == el.Requests {
		el.Burst = 0
	}
	return el, el.Validate()
}

// shardLimit is one of n sub-shards of l: 1/n of its requests and burst, at least 1.
func shardLimit(l engine.Limit, n int64) engine.Limit {
	l.Requests = max(l.Requests/n, 1)
	if l.Burst > 0 {
		l.Burst = max(l.Burst/n, 1)
	}
	return l
}

// shardOf picks the sub-shard of value among n: FNV-1a of the value, modulo n.
func shardOf(value string, n int64) int64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(value); i++ {
		h ^= uint64(value[i])
		h *= 1099511628211
	}
	return int64(h % uint64(n))
}

// canaryBucket places a gateway in [0, 100) as the enforcer places an instance: it enforces a
// canary rule whose percent is above its bucket.
func canaryBucket(instance string) int {
	h := fnv.New64a()
	h.Write([]byte(instance))
	return int(h.Sum64() % 100)
}

// limitString describes a rule's limits for reports, such as "100/1s burst 200".
func limitString(r *policy.Rule) string {
	var parts []string
	for _, l := range r.Limits {
		s := fmt.Sprintf("%d/%s", l.Requests, msString(l.WindowMs))
		if l.Burst > 0 && l.Burst != l.Requests {
			s += fmt.Sprintf(" burst %d", l.Burst)
		}
		if l.Algorithm != "" && l.Algorithm != policy.TokenBucket {
			s += " " + string(l.Algorithm)
		}
		parts = append(parts, s)
	}
	if r.SubShards != nil && r.SubShards.Count > 1 {
		parts = append(parts, fmt.Sprintf("%d sub-shards", r.SubShards.Count))
	}
	return strings.Join(parts, " + ")
}

func msString(ms int64) string {
	switch {
	case ms%86_400_000 == 0:
		return fmt.Sprintf("%dd", ms/86_400_000)
	case ms%3_600_000 == 0:
		return fmt.Sprintf("%dh", ms/3_600_000)
	case ms%60_000 == 0:
		return fmt.Sprintf("%dm", ms/60_000)
	case ms%1000 == 0:
		return fmt.Sprintf("%ds", ms/1000)
	}
	return fmt.Sprintf("%dms", ms)
}
