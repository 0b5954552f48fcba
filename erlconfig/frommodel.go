package erlconfig

import (
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"strings"

	"github.com/rlctl/rlctl/policy"
)

// Severity says how much a Note matters; render turns Notes into findings of the same name.
type Severity string

// The note severities.
const (
	// Approximation: ERL cannot express the rule, and the Config holds the nearest equivalent.
	Approximation Severity = "approximation"
	// Assumption: the Config is exact if the deployment provides what the note names.
	Assumption Severity = "assumption"
)

// Note is something FromModel could not convert exactly, or assumed.
type Note struct {
	Severity Severity
	Domain   string
	Rule     string // empty for a note about the domain
	Message  string
	Pos      policy.Pos
}

// FromModel converts m into one Config per domain, in the model's domain order, and says in
// Notes what it approximated or assumed. The same model always gives the same Configs.
//
// Each rule becomes the descriptor path of its Match (key, value as written, no value for a
// key-only match), rules that share a prefix sharing its descriptors. Siblings are in the
// domain's precedence order (exact values, then wildcards in declared order, then key only),
// which is also the order in which ERL tries wildcards. The rule's limit becomes
// rate_limit {unit, requests_per_unit, name: <rule name>}, and the shadow stage shadow_mode.
//
// A fixed_window rule with one limit of one whole unit (1s, 1m, 1h, 1d, 7d, 30d or 365d) in the
// enforce or shadow stage, without sub-shards, burst or cost, converts exactly: ERL then decides
// every request as rlctl-enforcer does. Everything else converts to the nearest equivalent, each
// difference an Approximation note:
//
//   - token_bucket and sliding_window become a fixed window of the same limit;
//   - a burst other than the limit's requests is dropped, and so is a cost other than 1 (ERL
//     charges each request its hits_addend);
//   - of several limits, the one with the lowest rate (requests ÷ window) is kept;
//   - a window that is not one unit is scaled to the longest unit shorter than it,
//     requests × unit ÷ window rounded down (2m of 100 gives 50 per minute, 30s of 100 gives 3
//     per second); when that rounds to 0, to the shortest unit longer than it (30s of 1 gives 2
//     per minute). The rate is kept or rounded down, never up;
//   - requests per unit above 2^32-1, ERL's largest, are capped there;
//   - the soft and canary stages become quota_mode, which admits and reports a request over the
//     limit (in the response's dynamic metadata, not a RateLimit-Warning header): ERL cannot
//     enforce on a share of its instances, so a canary is soft everywhere;
//   - sub-shards are dropped: ERL counts the rule in one key, and Envoy must send the rule's
//     descriptor without the trailing shard entry;
//   - a rule whose descriptor ERL would read as another's (it joins key and value with '_', so
//     a="b_c" and a_b="c" collide) is left out;
//   - a descriptor that ERL also matches for entries of another key is noted with the entries
//     (crossKeyMatches: beside keys "user" and "user_tier", the entry user="tier" selects the
//     descriptor of key "user_tier").
//
// An identity-waterfall key gives an Assumption note per domain: the values rules match, such as
// "api_key:*", are exact only if Envoy sends "<tier>:<identity>" values, as the envoy target's
// actions do.
func FromModel(m *policy.Model) ([]Config, []Note) {
	var cfgs []Config
	var notes []Note
	for _, d := range m.Domains {
		c, ns := fromDomain(d)
		cfgs = append(cfgs, c)
		notes = append(notes, ns...)
	}
	return cfgs, notes
}

// node is a descriptor being built, with its children in insertion order.
type node struct {
	d        Descriptor
	children []*node
	// byKey finds a child by ERL's composite key: the key, or key_value.
	byKey map[string]*node
	// rule names the rule that put the node there, for collision messages.
	rule string
}

func compositeKey(key, value string) string {
	if value == "" {
		return key
	}
	return key + "_" + value
}

func fromDomain(d *policy.Domain) (Config, []Note) {
	n := &notes{domain: d.Name}
	root := &node{byKey: map[string]*node{}}
	var kept []*policy.Rule
	for _, r := range d.Rules {
		if other, ok := collision(root, r); ok {
			n.add(Approximation, r.Name, r.Pos, "left out: ERL reads its descriptor %s as rule %s's (it joins key and value with '_')",
				describe(r.Match), other)
			continue
		}
		kept = append(kept, r)
		leaf := root
		for _, m := range r.Match {
			ck := compositeKey(m.Key, m.Value)
			next := leaf.byKey[ck]
			if next == nil {
				next = &node{d: Descriptor{Key: m.Key, Value: m.Value}, byKey: map[string]*node{}, rule: r.Name}
				leaf.byKey[ck] = next
				leaf.children = append(leaf.children, next)
			}
			leaf = next
		}
		leaf.rule = r.Name
		leaf.d.RateLimit, leaf.d.ShadowMode, leaf.d.QuotaMode = n.rule(r)
	}
	descs := root.descriptors()
	n.crossKeys(d, descs)
	n.counterClashes(d, kept)
	n.identity(d)
	return Config{Domain: d.Name, Descriptors: descs}, n.list
}

// crossKeys notes each descriptor of descs, converted from domain d, that ERL also matches for
// entries of another key that Envoy sends beside its own (crossKeyMatches): those requests
// ERL limits by that descriptor's limit, and rlctl does not.
func (n *notes) crossKeys(d *policy.Domain, descs []Descriptor) {
	shapes := make([][]string, len(d.Rules))
	pos := map[string]policy.Pos{}
	for i, r := range d.Rules {
		for _, m := range r.Match {
			shapes[i] = append(shapes[i], m.Key)
		}
		pos[r.Name] = r.Pos
	}
	for _, x := range crossKeyMatches(descs, shapes) {
		rule := ruleOf(x.d)
		n.add(Approximation, rule, pos[rule], "descriptor %s: ERL also matches %s to it, since it looks an entry up by its key and value joined with '_'; rlctl does not",
			x.d.text(), x.which)
	}
}

// collision reports whether r's path meets, at some level, a descriptor with the same composite
// key but another key and value, and names the rule that put it there.
func collision(root *node, r *policy.Rule) (string, bool) {
	n := root
	for _, m := range r.Match {
		next := n.byKey[compositeKey(m.Key, m.Value)]
		if next == nil {
			return "", false
		}
		if next.d.Key != m.Key || next.d.Value != m.Value {
			return next.rule, true
		}
		n = next
	}
	return "", false
}

func (n *node) descriptors() []Descriptor {
	if len(n.children) == 0 {
		return nil
	}
	ds := make([]Descriptor, len(n.children))
	for i, c := range n.children {
		ds[i] = c.d
		ds[i].Descriptors = c.descriptors()
	}
	return ds
}

type notes struct {
	domain string
	list   []Note
}

func (n *notes) add(sev Severity, rule string, pos policy.Pos, format string, args ...any) {
	n.list = append(n.list, Note{Severity: sev, Domain: n.domain, Rule: rule, Pos: pos, Message: fmt.Sprintf(format, args...)})
}

// rule converts r's limit and stage.
func (n *notes) rule(r *policy.Rule) (rl *RateLimit, shadow, quota bool) {
	l := r.Limits[0]
	if len(r.Limits) > 1 {
		l = lowestRate(r.Limits)
		var dropped []string
		for _, o := range r.Limits {
			if o != l {
				dropped = append(dropped, describeLimit(o))
			}
		}
		n.add(Approximation, r.Name, r.Pos, "%d limits: ERL has one per descriptor, so %s (the lowest rate) is kept and %s dropped",
			len(r.Limits), describeLimit(l), strings.Join(dropped, ", "))
	}
	if l.Algorithm != policy.FixedWindow {
		n.add(Approximation, r.Name, l.Pos, "%s rendered as fixed_window: ERL counts in fixed windows aligned to the epoch", l.Algorithm)
	}
	if l.Burst != l.Requests {
		n.add(Approximation, r.Name, l.Pos, "burst %d dropped: ERL has no burst", l.Burst)
	}
	if l.Cost != 1 {
		n.add(Approximation, r.Name, l.Pos, "cost %d dropped: ERL charges each request its hits_addend (1 unless Envoy sets one)", l.Cost)
	}
	unit, reqs, exactRate := scale(l.Requests, l.WindowMs)
	if unit.Millis() != l.WindowMs {
		how := "the same rate"
		if !exactRate {
			how = "the rate rounded down"
		}
		n.add(Approximation, r.Name, l.Pos, "window %s is not an ERL unit: %s rendered as %d per %s (%s)",
			windowString(l.WindowMs), describeLimit(l), reqs, unit, how)
	}
	if reqs > math.MaxUint32 {
		n.add(Approximation, r.Name, l.Pos, "%d requests per %s capped at %d, ERL's largest", reqs, unit, uint32(math.MaxUint32))
		reqs = math.MaxUint32
	}
	rl = &RateLimit{Unit: unit, RequestsPerUnit: uint32(reqs), Name: r.Name}

	stagePos := r.Stage.Pos
	if stagePos == (policy.Pos{}) {
		stagePos = r.Pos
	}
	switch r.Stage.Name {
	case policy.StageShadow:
		shadow = true
	case policy.StageSoft:
		quota = true
		n.add(Approximation, r.Name, stagePos, "stage soft rendered as quota_mode: ERL admits a request over the limit and reports it in the response's dynamic metadata, not in a RateLimit-Warning header")
	case policy.StageCanary:
		quota = true
		n.add(Approximation, r.Name, stagePos, "stage canary (%d%% of enforcers enforce) rendered as quota_mode on every instance: ERL cannot enforce on a share of its instances", r.Stage.CanaryPercent)
	}
	if ss := r.SubShards; ss != nil {
		n.add(Approximation, r.Name, r.Pos, "sub_shards (%d by %s) dropped: ERL counts the rule in one key, and Envoy must send its descriptor without the trailing %s entry",
			ss.Count, ss.Attribute, ss.Attribute)
	}
	return rl, shadow, quota
}

// identity notes once per identity-waterfall key that a rule matches what the values assume.
func (n *notes) identity(d *policy.Domain) {
	for _, s := range d.Sources {
		if s.Kind != policy.SourceIdentity || !matched(d, s.Key) {
			continue
		}
		n.add(Assumption, "", s.Pos, "descriptor key %s is the identity waterfall: ERL matches values such as \"api_key:*\" only if Envoy sends \"<tier>:<identity>\" values, as the envoy target's actions do", s.Key)
	}
}

func matched(d *policy.Domain, key string) bool {
	for _, r := range d.Rules {
		for _, m := range r.Match {
			if m.Key == key {
				return true
			}
		}
	}
	return false
}

// lowestRate returns the limit with the lowest requests ÷ window, the first of equals.
func lowestRate(ls []policy.Limit) policy.Limit {
	best := ls[0]
	for _, l := range ls[1:] {
		// l.Requests/l.WindowMs < best.Requests/best.WindowMs, in 128 bits.
		ah, al := bits.Mul64(uint64(l.Requests), uint64(best.WindowMs))
		bh, bl := bits.Mul64(uint64(best.Requests), uint64(l.WindowMs))
		if ah < bh || ah == bh && al < bl {
			best = l
		}
	}
	return best
}

// scale converts requests per windowMs into requests per ERL unit (see FromModel). exact is false
// when the count was rounded down. The count may exceed uint32.
func scale(requests, windowMs int64) (unit Unit, n int64, exact bool) {
	for _, u := range units {
		if u.ms == windowMs {
			return u.unit, requests, true
		}
	}
	per := func(ms int64) (int64, bool) {
		num := new(big.Int).Mul(big.NewInt(requests), big.NewInt(ms))
		q, r := new(big.Int).QuoRem(num, big.NewInt(windowMs), new(big.Int))
		if !q.IsInt64() {
			return math.MaxInt64, false
		}
		return q.Int64(), r.Sign() == 0
	}
	for i := len(units) - 1; i >= 0; i-- {
		if units[i].ms < windowMs {
			if n, exact := per(units[i].ms); n >= 1 {
				return units[i].unit, n, exact
			}
			break
		}
	}
	for _, u := range units {
		if u.ms > windowMs {
			n, exact := per(u.ms)
			return u.unit, n, exact
		}
	}
	// Longer than a year, which the model does not allow: a year, rounded down.
	n, exact = per(units[len(units)-1].ms)
	return Year, max(n, 1), exact
}

func describeLimit(l policy.Limit) string {
	return fmt.Sprintf("%d per %s", l.Requests, windowString(l.WindowMs))
}

// windowString writes a window as a policy does: the largest unit that divides it.
func windowString(ms int64) string {
	for _, u := range []struct {
		s  string
		ms int64
	}{{"d", 86400000}, {"h", 3600000}, {"m", 60000}, {"s", 1000}} {
		if ms%u.ms == 0 {
			return fmt.Sprintf("%d%s", ms/u.ms, u.s)
		}
	}
	return fmt.Sprintf("%dms", ms)
}

func describe(ms []policy.Match) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = m.String()
	}
	return strings.Join(parts, " > ")
}
