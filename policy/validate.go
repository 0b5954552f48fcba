package policy

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// MaxWindowMs is the longest window a limit may have: a year.
const MaxWindowMs = 365 * 24 * 3600 * 1000

// Validate checks what every consumer of a model relies on and returns the problems, sorted by
// position (nil when there are none). It is the one place for checks of the model as a whole:
// schema.Load runs it on the model it decodes and ReadSnapshot on the model it reads.
//
// Problems that are lint checks carry the check's name (see Problem.Check): duplicate matches
// ("duplicate-match"), match keys and sub-shard attributes no source produces
// ("unknown-descriptor"), a minimum lease above the maximum ("lease-bounds") and a canary without
// a share of instances ("canary-percent"). The rest are values no model may hold, such as a zero
// window, an unknown algorithm, stage or failure mode, a bad sub-shard count, a negative timing
// or dwell, rollout settings out of range, and a sub-sharded rule whose shard entry a deeper rule
// would take. A zero timing is not one:
// the engine reads a zero lease setting as its default, and the enforcer takes its store timeout
// from its own flag. The loader's schema requires positive timings all the same.
//
// The order of a domain's rules is not checked: it is the declared order that decides between
// wildcards, and any order is one.
func (m *Model) Validate() Problems {
	var v validator
	seen := map[string]*Domain{}
	for i, d := range m.Domains {
		if d == nil {
			// A snapshot decoded from JSON may hold null where a domain goes: a problem, not
			// a crash of the enforcer that loads it.
			v.add("", "domains", nil, "domain %d is null", i)
			continue
		}
		if o, ok := seen[d.Name]; ok {
			v.add("", Path("domains", d.Name), []Pos{d.Pos}, "domain %q is declared twice", d.Name)
			v.probs[len(v.probs)-1].Related = []Pos{o.Pos}
			continue
		}
		seen[d.Name] = d
		v.domain(d)
	}
	v.probs.Sort()
	return v.probs
}

type validator struct {
	probs Problems
}

func (v *validator) add(check, path string, ps []Pos, format string, args ...any) {
	v.probs = append(v.probs, problemf(check, path, ps, format, args...))
}

// rollout checks a domain's rollout settings; their zero values mean "not set".
func (v *validator) rollout(rp string, d *Domain) {
	at := []Pos{d.Pos}
	s := d.Rollout
	if s.CanaryPercent < 0 || s.CanaryPercent > 100 {
		v.add("", rp+".canary_percent", at, "rollout canary_percent %d is out of range: want 1 to 100 (0 for the default)", s.CanaryPercent)
	}
	for _, g := range []struct {
		name string
		s    GateSettings
	}{{"simulate", s.Simulate}, {"prometheus", s.Prometheus}} {
		gp := rp + ".gates." + g.name
		if m := g.s.MaxShareBP; m != nil && (*m < 0 || *m > 10000) {
			v.add("", gp, at, "rollout gate %s threshold %d basis points is out of range: want 0 to 10000", g.name, *m)
		}
		if g.s.WindowMs < 0 {
			v.add("", gp+".window", at, "rollout gate %s window %dms must not be negative", g.name, g.s.WindowMs)
		}
	}
	if s.Simulate.WindowMs != 0 {
		v.add("", rp+".gates.simulate.window", at, "rollout gate simulate has no window (it replays a log), got %dms", s.Simulate.WindowMs)
	}
}

func (v *validator) domain(d *Domain) {
	dp := Path("domains", d.Name)
	// A snapshot decoded from JSON may hold null where a source or a rule goes: problems, and
	// nothing more of the domain is checked, as every check reads them.
	nulls := false
	for i, s := range d.Sources {
		if s == nil {
			v.add("", dp+".sources", []Pos{d.Pos}, "source %d is null", i)
			nulls = true
		}
	}
	for i, r := range d.Rules {
		if r == nil {
			v.add("", dp+".rules", []Pos{d.Pos}, "rule %d is null", i)
			nulls = true
		}
	}
	if nulls {
		return
	}
	if d.Name == "" {
		v.add("", "domains", []Pos{d.Pos}, "a domain has no name")
	}
	if d.Gateway.RLSTimeoutMs < 0 || d.Gateway.PerKeyQPSBudget < 0 {
		v.add("", dp+".gateway", []Pos{d.Pos}, "gateway rls_timeout %dms and per_key_qps_budget %d must not be negative",
			d.Gateway.RLSTimeoutMs, d.Gateway.PerKeyQPSBudget)
	}
	if g := d.Governance; g.ShadowDwellMs < 0 || g.SoftDwellMs < 0 {
		v.add("", dp+".governance.dwell", []Pos{g.Pos, d.Pos}, "governance dwell shadow %dms and soft %dms must not be negative",
			g.ShadowDwellMs, g.SoftDwellMs)
	}
	v.rollout(dp+".rollout", d)
	keys := map[string]bool{}
	var jwt *Source // the first jwt_claim source
	for _, s := range d.Sources {
		if s.Kind == SourceJWTClaim {
			// The model holds one JWT payload per request, and the identity waterfall's
			// jwt_subject tier reads the first source's.
			if jwt == nil {
				jwt = s
			} else if s.MetadataNamespace != jwt.MetadataNamespace || s.MetadataKey != jwt.MetadataKey {
				v.add("", Path("domains", d.Name, "sources", s.Key), []Pos{s.Pos, d.Pos},
					"source %q reads the JWT payload at %s/%s, and source %q at %s/%s: the jwt_claim sources of a domain read one payload, so give them the same metadata_namespace and metadata_key",
					s.Key, s.MetadataNamespace, s.MetadataKey, jwt.Key, jwt.MetadataNamespace, jwt.MetadataKey)
			}
		}
		if keys[s.Key] {
			v.add("", Path("domains", d.Name, "sources", s.Key), []Pos{s.Pos, d.Pos}, "source %q is declared twice", s.Key)
		}
		keys[s.Key] = true
		if !validSourceKind[s.Kind] {
			v.add("", Path("domains", d.Name, "sources", s.Key), []Pos{s.Pos, d.Pos}, "unknown source kind %q", s.Kind)
		}
	}
	names := map[string]bool{}
	matches := map[string]*Rule{}
	for _, r := range d.Rules {
		rp := Path("domains", d.Name, "rules", r.Name)
		at := []Pos{r.Pos, d.Pos}
		if names[r.Name] || r.Name == "" {
			v.add("", rp, at, "rule name %q is empty or not unique in domain %s", r.Name, d.Name)
		}
		names[r.Name] = true
		k := MatchKey(r.Match)
		if o, ok := matches[k]; ok {
			v.add("duplicate-match", rp, at, "rule %s has the same match as rule %s (%s): only one of their limits can apply",
				r.Name, o.Name, describeMatch(r.Match))
			v.probs[len(v.probs)-1].Related = []Pos{o.Pos}
		} else {
			matches[k] = r
		}
		v.rule(d, r, rp, at)
	}
	v.shardEntries(d)
}

var validSourceKind = map[SourceKind]bool{
	SourceHeader: true, SourceJWTClaim: true, SourceRemoteAddress: true,
	SourceGenericKey: true, SourcePathMatch: true, SourceIdentity: true,
}

func (v *validator) rule(d *Domain, r *Rule, rp string, at []Pos) {
	if len(r.Match) == 0 {
		v.add("", rp+".match", at, "rule has no match entries")
	}
	levels := make(map[string]int, len(r.Match))
	for i, m := range r.Match {
		mp, mat := rp+".match."+strconv.Itoa(i), append([]Pos{m.Pos}, at...)
		if first, dup := levels[m.Key]; dup {
			// A descriptor carries each source's entry once per level it is named at, all with
			// the one value the request gives it: two exact values never match together, and a
			// key named twice otherwise only repeats it.
			v.add("", mp, mat, "match key %q is at levels %d and %d: a request gives it one value, so two different values never match; name it once",
				m.Key, first+1, i+1)
		} else {
			levels[m.Key] = i
		}
		if !validMatch(m) {
			v.add("", mp, mat, "match %q=%q of kind %q: want exact (a value without a trailing '*'), wildcard (a value ending in '*') or any (no value)",
				m.Key, m.Value, m.Kind)
		}
		if d.Source(m.Key) == nil {
			v.add("unknown-descriptor", mp, mat, "match key %q at level %d: no source produces it (sources: %s)", m.Key, i+1, sourceKeys(d))
		}
	}
	if len(r.Limits) == 0 {
		v.add("", rp+".limits", at, "rule has no limits")
	}
	for i, l := range r.Limits {
		lp, lat := rp+".limits."+strconv.Itoa(i), append([]Pos{l.Pos}, at...)
		if l.Requests < 1 || l.Burst < 0 || l.Cost < 1 {
			v.add("", lp, lat, "requests %d, burst %d and cost %d: requests and cost must be at least 1, burst must not be negative",
				l.Requests, l.Burst, l.Cost)
		}
		if l.WindowMs < 1 || l.WindowMs > MaxWindowMs {
			v.add("", lp+".window", lat, "window %dms is out of range: want 1ms to 365d", l.WindowMs)
		}
		if i > 0 && l.Cost != r.Limits[0].Cost && l.Cost >= 1 && r.Limits[0].Cost >= 1 {
			// The engine takes one cost from every limit of a rule (the first limit's): a
			// different cost here would be ignored, and checked against the wrong capacity.
			v.add("", lp+".cost", lat, "cost %d differs from the first limit's %d: a request spends the same cost from every limit of its rule, so give each limit the same cost",
				l.Cost, r.Limits[0].Cost)
		}
		switch l.Algorithm {
		case TokenBucket, SlidingWindow, FixedWindow:
		default:
			v.add("", lp+".algorithm", lat, "unknown algorithm %q: want token_bucket, sliding_window or fixed_window", l.Algorithm)
		}
	}
	st, sat := r.Stage, append([]Pos{r.Stage.Pos}, at...)
	switch {
	case !st.Name.Valid():
		v.add("", rp+".stage.name", sat, "unknown stage %q: want shadow, soft, canary or enforce", st.Name)
	case st.CanaryPercent < 0 || st.CanaryPercent > 100:
		v.add("", rp+".stage.percent", sat, "canary percent %d is out of range: want 0 to 100", st.CanaryPercent)
	case st.Name == StageCanary && st.CanaryPercent < 1:
		v.add("canary-percent", rp+".stage.percent", sat, "canary stage has percent %d, want 1 to 100", st.CanaryPercent)
	}
	if r.FailureMode != FailOpen && r.FailureMode != FailClosed {
		v.add("", rp+".failure.mode", at, "unknown failure mode %q: want open or closed", r.FailureMode)
	}
	if fb := r.Fallback; fb != nil && (fb.Requests < 1 || fb.WindowMs < 1 || fb.WindowMs > MaxWindowMs) {
		v.add("", rp+".failure.fallback", at, "fallback %d requests per %dms: want at least 1 request per 1ms to 365d", fb.Requests, fb.WindowMs)
	}
	if r.StoreTimeoutMs < 0 {
		v.add("", rp+".store_timeout", at, "store timeout %dms must not be negative", r.StoreTimeoutMs)
	}
	v.lease(r, rp+".lease", at)
	if ss := r.SubShards; ss != nil {
		if ss.Count < 2 || ss.Count > 1024 {
			v.add("", rp+".sub_shards.count", at, "sub_shards count %d is out of range: want 2 to 1024", ss.Count)
		}
		if d.Source(ss.Attribute) == nil {
			v.add("unknown-descriptor", rp+".sub_shards.attribute", at, "sub_shards attribute %q: no source produces it (sources: %s)",
				ss.Attribute, sourceKeys(d))
		}
		// Each shard admits at least one request (and holds at least one token), so fewer than
		// one a shard would admit the shard count, not the limit: 64 of 10 a minute.
		for i, l := range r.Limits {
			switch {
			case ss.Count >= 2 && l.Requests > 0 && l.Requests < int64(ss.Count):
				v.add("", fmt.Sprintf("%s.limits[%d]", rp, i), at, "requests %d is fewer than the %d sub_shards: each shard admits at least 1, so the rule would admit %d; use fewer sub_shards or none",
					l.Requests, ss.Count, ss.Count)
			case ss.Count >= 2 && l.Burst > 0 && l.Burst < int64(ss.Count):
				v.add("", fmt.Sprintf("%s.limits[%d].burst", rp, i), at, "burst %d is less than the %d sub_shards: each shard holds at least 1 token, so the rule's burst would be %d; use fewer sub_shards or none",
					l.Burst, ss.Count, ss.Count)
			}
		}
	}
}

func (v *validator) lease(r *Rule, lp string, at []Pos) {
	l := r.Lease
	if l.Min < 0 || l.Max < 0 || l.LookaheadMs < 0 || l.TTLMs < 0 {
		v.add("", lp, at, "lease min %d, max %d, lookahead %dms and ttl %dms must not be negative", l.Min, l.Max, l.LookaheadMs, l.TTLMs)
	}
	if l.LowWatermark < 0 || l.LowWatermarkPercent < 0 || l.LowWatermarkPercent > 100 {
		v.add("", lp+".low_watermark", at, "lease low watermark %d tokens or %d%% is out of range", l.LowWatermark, l.LowWatermarkPercent)
	}
	if l.Max > 0 && l.Min > l.Max {
		v.add("lease-bounds", lp, at, "lease min %d is above lease max %d", l.Min, l.Max)
	}
}

// shardEntries reports a rule one level below a sub-sharded rule, through the same match, whose
// entry is the shard attribute: Lookup would give the sub-sharded rule's shard entries to it.
func (v *validator) shardEntries(d *Domain) {
	for _, r := range d.Rules {
		if r.SubShards == nil {
			continue
		}
		k := MatchKey(r.Match)
		for _, o := range d.Rules {
			if len(o.Match) != len(r.Match)+1 || o.Match[len(r.Match)].Key != r.SubShards.Attribute ||
				!strings.HasPrefix(MatchKey(o.Match), k) {
				continue
			}
			v.add("", Path("domains", d.Name, "rules", o.Name), []Pos{o.Match[len(r.Match)].Pos, o.Pos, d.Pos},
				"rule %s matches %s below rule %s, which uses it to pick a sub-shard", o.Name, r.SubShards.Attribute, r.Name)
			v.probs[len(v.probs)-1].Related = []Pos{r.Pos}
		}
	}
}

func validMatch(m Match) bool {
	switch m.Kind {
	case MatchExact:
		return m.Value != "" && !strings.HasSuffix(m.Value, "*")
	case MatchWildcard:
		return strings.HasSuffix(m.Value, "*")
	case MatchAny:
		return m.Value == ""
	}
	return false
}

// describeMatch formats a match path for messages: tenant="acme" > path="/v1*" > ip.
func describeMatch(ms []Match) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = m.String()
	}
	return strings.Join(parts, " > ")
}

// String formats m for messages: key="value", or the key alone for a key-only match.
func (m Match) String() string {
	if m.Kind == MatchAny {
		return m.Key
	}
	return fmt.Sprintf("%s=%q", m.Key, m.Value)
}

func sourceKeys(d *Domain) string {
	if len(d.Sources) == 0 {
		return "none"
	}
	keys := make([]string, len(d.Sources))
	for i, s := range d.Sources {
		keys[i] = s.Key
	}
	return strings.Join(keys, ", ")
}

var identifier = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]*$`)

// Path joins labels into a CUE path as CUE's errors write it and Problem.Path holds it, quoting
// labels that are not identifiers: domains.edge.rules."tier-1".
func Path(labels ...string) string {
	q := make([]string, len(labels))
	for i, l := range labels {
		if identifier.MatchString(l) {
			q[i] = l
		} else {
			q[i] = strconv.Quote(l)
		}
	}
	return strings.Join(q, ".")
}
