package simulate

import (
	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/policy"
)

// Matcher finds the rules a request selects in one domain, with the store key and engine limits
// each decision uses: the descriptor construction of the simulator, for other consumers such as
// policy tests. It is not safe for concurrent use.
type Matcher struct {
	ds      *domainSim
	values  []string
	oks     []bool
	entries []policy.Entry
}

// Match is one rule a request selects.
type Match struct {
	Rule    *policy.Rule
	Entries []policy.Entry // the descriptor, including a sub-shard entry
	Key     string         // the store key
	Limits  []engine.Limit // per shard when sub-sharded
	Cost    int64          // the rule's default cost per request
}

// NewMatcher prepares domain d.
func NewMatcher(d *policy.Domain) (*Matcher, error) {
	ds, err := newDomainSim(d)
	if err != nil {
		return nil, err
	}
	return &Matcher{ds: ds}, nil
}

// Match returns the rules req selects, in the order of the domain's descriptor shapes.
func (m *Matcher) Match(req policy.Request) []Match {
	m.values, m.oks = req.AppendValues(m.values[:0], m.oks[:0], m.ds.d.Sources)
	var out []Match
	for _, shape := range m.ds.shapes {
		m.entries = m.entries[:0]
		ok := true
		for _, i := range shape {
			if !m.oks[i] {
				ok = false
				break
			}
			m.entries = append(m.entries, policy.Entry{Key: m.ds.d.Sources[i].Key, Value: m.values[i]})
		}
		if !ok {
			continue
		}
		if mt, ok := m.MatchDescriptor(m.entries); ok {
			out = append(out, mt)
		}
	}
	return out
}

// MatchDescriptor returns the rule one explicit descriptor selects, if any.
func (m *Matcher) MatchDescriptor(entries []policy.Entry) (Match, bool) {
	i, ok := m.ds.d.LookupIndex(entries)
	if !ok {
		return Match{}, false
	}
	rs := m.ds.rules[i]
	key, ok := storeKey(m.ds.d.Name, rs, entries)
	if !ok {
		return Match{}, false
	}
	return Match{Rule: rs.rule, Entries: append([]policy.Entry(nil), entries...), Key: key, Limits: rs.plan.Limits, Cost: rs.plan.Cost}, true
}

// descriptorLen is the number of entries in the rule's descriptor: its matches, plus the
// sub-shard entry.
func (rs *ruleSim) descriptorLen() int {
	if rs.plan.Shards > 0 {
		return rs.depth + 1
	}
	return rs.depth
}

// storeKey is the store key of a rule's descriptor (engine.AppendRuleKey), when the descriptor
// has the rule's length.
func storeKey(domain string, rs *ruleSim, entries []policy.Entry) (string, bool) {
	if len(entries) != rs.descriptorLen() {
		return "", false
	}
	return string(engine.AppendRuleKey(nil, domain, rs.rule, entries)), true
}
