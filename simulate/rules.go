package simulate

import (
	"fmt"
	"hash/maphash"
	"strings"

	"github.com/cespare/xxhash/v2"
	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/simulate/report"
)

// domainSim is one domain prepared for replay: the descriptor shapes its rules need and the
// rules' engine limits.
type domainSim struct {
	d *policy.Domain
	// shapes are the distinct descriptor key sequences of the rules (with the sub-shard
	// attribute appended for sub-sharded rules), each as indexes into d.Sources: the
	// descriptors Envoy's rendered rate-limit actions would send.
	shapes [][]int
	rules  []*ruleSim // by index in d.Rules (policy.Domain.LookupIndex)
	// sel selects the rule of each shape's descriptor by its values' classes, and classed are
	// the indexes of the sources whose classes place a shape's table (selectByClass; a replay's
	// only: a Matcher walks the tree).
	sel     *policy.Selector
	classed []int
}

// ruleSim is a rule prepared for replay.
type ruleSim struct {
	plan  *engine.RulePlan // limits per shard when sub-sharded, cost, lease settings
	rule  *policy.Rule
	depth int // matched entries, without the sub-shard entry
	index int // in Simulator.rules
	// name is "domain/rule", how errors of the replay name the rule.
	name string
	// keySeed and idSeed start the hashes of the rule's store keys (storeKeyHashes): hashes
	// of the keys' common start, its domain and name, so that where a key lands does not
	// depend on where its rule is in the policies.
	keySeed, idSeed uint64
}

// sweepEvery is how many seconds apart the replay sweeps the rule's lease managers: every lease
// TTL, at most every second (shard.tick).
func (rs *ruleSim) sweepEvery() int64 { return max(1, rs.rule.Lease.TTLMs/1000) }

func newDomainSim(d *policy.Domain) (*domainSim, error) {
	ds := &domainSim{d: d, rules: make([]*ruleSim, 0, len(d.Rules))}
	index := map[string]int{}
	for i, s := range d.Sources {
		index[s.Key] = i
	}
	seen := map[string]bool{}
	for _, r := range d.Rules {
		keys := r.DescriptorKeys()
		var shape []int
		for _, k := range keys {
			i, ok := index[k]
			if !ok {
				return nil, fmt.Errorf("rule %s: no source for descriptor key %q", ruleWhere(d.Name, r), k)
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
		ds.rules = append(ds.rules, rs)
	}
	d.Compile()
	return ds, nil
}

// selectByClass readies ds.sel and ds.classed for a replay's selectRules.
func (ds *domainSim) selectByClass() {
	keys := make([]string, len(ds.d.Sources))
	for i, s := range ds.d.Sources {
		keys[i] = s.Key
	}
	ds.sel = ds.d.NewSelector(keys, ds.shapes)
	for i := range keys {
		if ds.sel.Classed(i) {
			ds.classed = append(ds.classed, i)
		}
	}
}

func newRuleSim(domain string, r *policy.Rule) (*ruleSim, error) {
	plan, err := engine.PlanRule(domain, r)
	if err != nil {
		return nil, fmt.Errorf("rule %s: %w", ruleWhere(domain, r), err)
	}
	prefix := engine.AppendKey(nil, domain, r.Name)
	return &ruleSim{plan: plan, rule: r, depth: len(r.Match), name: domain + "/" + r.Name,
		keySeed: xxhash.Sum64(prefix), idSeed: maphash.Bytes(keyIDSeed, prefix)}, nil
}

// report returns the rule's report entry, named, without figures.
func (rs *ruleSim) report() report.Rule {
	r := rs.rule
	return report.Rule{Domain: rs.plan.Domain, Rule: r.Name, Stage: string(r.Stage.Name), Pos: r.Pos.String(), Limit: limitString(r)}
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
	if r.Sharded() {
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
