package lint

import (
	"fmt"
	"math/big"
	"slices"
	"strings"
	"time"

	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/finding"
	"github.com/rlctl/rlctl/policy"
)

// This file holds the governance checks (RL020 to RL026, RL031): rules about a change of a policy,
// which compare the policy under review (head) with the one it changes (base). rlctl lint runs
// them with --base only.
//
// A head rule is the same rule as a base rule of its domain when it has the same name or, when
// no base rule has its name, the same match (a rename). A head rule with neither is new; a base
// rule with no head rule is removed.

// govCheck is one governance rule: its description and the function that inspects the change of
// one domain.
type govCheck struct {
	finding.Rule
	run func(c *domainChange, e *emitter)
}

// domainChange is one domain at base and at head. base is nil for a new domain; head is nil for
// a removed one.
type domainChange struct {
	base, head *policy.Domain
	// rules pairs every head rule with its base rule (nil for a new rule), in head's order.
	rules []rulePair
	// removed are the base rules that have no head rule.
	removed []*policy.Rule
	// today is the day of the check, at 00:00 UTC.
	today time.Time
	// baseAt is each base rule's place in the base's declared order (overtakes).
	baseAt map[*policy.Rule]int
}

type rulePair struct {
	base, head *policy.Rule
}

// Governance runs the governance checks on the change from base to head, as of the day today
// (only its UTC date counts), and returns the findings sorted by position. Findings are at head
// positions; a removed rule's is its domain's governance block (the domain's position when it has
// none), or the base rule's when the whole domain is gone.
func Governance(base, head *policy.Model, today time.Time) []finding.Finding {
	if base == nil || head == nil {
		return nil
	}
	y, m, d := today.UTC().Date()
	day := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	var out []finding.Finding
	for _, c := range changes(base, head, day) {
		dom := c.head
		if dom == nil {
			dom = c.base
		}
		for i := range governanceChecks {
			gc := &governanceChecks[i]
			e := emitter{rule: &gc.Rule, domain: dom}
			gc.run(c, &e)
			out = append(out, e.out...)
		}
	}
	finding.Sort(out)
	return out
}

// changes pairs the domains and rules of base and head.
func changes(base, head *policy.Model, today time.Time) []*domainChange {
	var cs []*domainChange
	for _, hd := range head.Domains {
		c := &domainChange{base: base.Domain(hd.Name), head: hd, today: today}
		var baseRules []*policy.Rule
		if c.base != nil {
			baseRules = c.base.Rules
		}
		byName := map[string]*policy.Rule{}
		byMatch := map[string]*policy.Rule{}
		for _, r := range baseRules {
			byName[r.Name] = r
			byMatch[policy.MatchKey(r.Match)] = r
		}
		headNames := map[string]bool{}
		for _, r := range hd.Rules {
			headNames[r.Name] = true
		}
		used := map[*policy.Rule]bool{}
		for _, r := range hd.Rules {
			b := byName[r.Name]
			if b == nil {
				// A rename: a base rule with the same match whose name head no longer has.
				if o := byMatch[policy.MatchKey(r.Match)]; o != nil && !headNames[o.Name] && !used[o] {
					b = o
				}
			}
			if b != nil {
				used[b] = true
			}
			c.rules = append(c.rules, rulePair{base: b, head: r})
		}
		for _, r := range baseRules {
			if !used[r] {
				c.removed = append(c.removed, r)
			}
		}
		cs = append(cs, c)
	}
	for _, bd := range base.Domains {
		if head.Domain(bd.Name) == nil {
			cs = append(cs, &domainChange{base: bd, removed: bd.Rules, today: today})
		}
	}
	return cs
}

// optedOut reports whether the domain lets new and tightened rules skip shadow: it says so, with
// a reason, at head and, for a domain the base has, at base too, so that a change cannot opt out
// of the check it is judged by (as the longer dwell applies).
func (c *domainChange) optedOut() bool {
	out := func(d *policy.Domain) bool {
		g := d.Governance
		return !g.NewRulesAtShadow && strings.TrimSpace(g.OptOutReason) != ""
	}
	return out(c.head) && (c.base == nil || out(c.base))
}

// dwell is the least time a rule stays in stage: the longer of the base's and the head's, so that
// a change cannot shorten the dwell it is judged by.
func (c *domainChange) dwell(stage policy.StageName) int64 {
	d := c.head.Dwell(stage)
	if c.base != nil {
		d = max(d, c.base.Dwell(stage))
	}
	return d
}

// stageOf returns r's stage name, enforce when it has none (as the loader decodes it).
func stageOf(r *policy.Rule) policy.StageName {
	if r.Stage.Name == "" {
		return policy.StageEnforce
	}
	return r.Stage.Name
}

// checkEnterAtShadow reports a new rule, or a rule with a tighter limit, that is not at shadow
// (RL020).
func checkEnterAtShadow(c *domainChange, e *emitter) {
	if c.head == nil || c.optedOut() {
		return
	}
	const fix = "(or set governance new_rules_at_shadow: false with an opt_out_reason)"
	for i, p := range c.rules {
		st := stageOf(p.head)
		if st == policy.StageShadow {
			continue
		}
		if p.base == nil {
			e.at(p.head.Stage.Pos, p.head, "is new and enters at %q, want \"shadow\" %s", st, fix)
			continue
		}
		if what, ok := c.tightened(p.base, p.head); ok {
			e.at(p.head.Stage.Pos, p.head, "%s (base %s) and is at %q, want \"shadow\" %s", what, p.base.Pos, st, fix)
			continue
		}
		if b, how, what, ok := c.overtakes(i); ok {
			e.at(p.head.Stage.Pos, p.head, "%s %q (base %s), so it takes the values both match, which had %q's limits: %s; it is at %q, want \"shadow\" %s",
				how, b.Name, b.Pos, b.Name, what, st, fix)
		}
	}
}

// overtakes returns a base rule that head rule i came after, whose wildcard competes with rule
// i's (policy.Competing), and that no longer takes all it took before rule i could: it now comes
// after rule i, is removed, or matches less. Lookup gives the values both match to the first of
// the two, so some of those requests now meet rule i's limits instead: reported when they are
// tighter than that rule's were. how says which of the three it is.
func (c *domainChange) overtakes(i int) (b *policy.Rule, how, what string, ok bool) {
	a := c.rules[i]
	if c.baseAt == nil {
		c.baseAt = map[*policy.Rule]int{}
		for j, r := range c.base.Rules {
			c.baseAt[r] = j
		}
	}
	baseAt := c.baseAt
	type passed struct {
		r   *policy.Rule
		how string
	}
	var ps []passed
	for j, p := range c.rules {
		if p.base == nil || baseAt[p.base] >= baseAt[a.base] {
			continue
		}
		switch {
		case j > i:
			ps = append(ps, passed{p.base, "now comes before rule"})
		case !c.within(p.base.Match, p.head.Match):
			ps = append(ps, passed{p.base, "takes values no longer matched by rule"})
		}
	}
	for _, r := range c.removed {
		if baseAt[r] < baseAt[a.base] {
			ps = append(ps, passed{r, "takes over from removed rule"})
		}
	}
	for _, p := range ps {
		if _, ok := policy.Competing(a.head.Match, p.r.Match); !ok {
			continue
		}
		if what, ok := limitsTightened(p.r, a.head); ok {
			return p.r, p.how, what, true
		}
	}
	return nil, "", "", false
}

// tightened says how r got tighter than base: a source of one of its keys that produces values
// otherwise, a match that selects requests base's did not (they meet a limit they had not), or
// limits tighter for one key (limitsTightened).
func (c *domainChange) tightened(base, r *policy.Rule) (string, bool) {
	if what, ok := c.sourceChanged(base, r); ok {
		return what, true
	}
	if !c.within(r.Match, base.Match) {
		return fmt.Sprintf("matches %s, which selects requests the base's %s did not", matchList(r.Match), matchList(base.Match)), true
	}
	return limitsTightened(base, r)
}

// limitsTightened is tightened without the match: how r's limits are tighter than base's for
// one key, paired as rlctl diff pairs them (policy.PairLimits): a limit base did not have, or a
// rate or burst lower in what a key gets of it, in requests of the rule's cost and in one
// sub-shard (a key whose traffic comes from one attribute value gets one shard's share). 100/1s
// becoming 500/1s at cost 5, or 400/1s over 4 sub-shards, is no tighter.
func limitsTightened(base, r *policy.Rule) (string, bool) {
	bc, hc := engine.RuleCost(base), engine.RuleCost(r)
	bs, hs := engine.RuleShards(base), engine.RuleShards(r)
	share := func(c, s int64) string { // the cost and sharding a rate is of, where they changed
		var out string
		if bc != hc {
			out += fmt.Sprintf(" at cost %d", c)
		}
		switch {
		case bs == hs:
		case s > 1:
			out += fmt.Sprintf(" over %d sub-shards", s)
		default:
			out += " unsharded"
		}
		return out
	}
	for _, p := range policy.PairLimits(base.Limits, r.Limits) {
		switch {
		case p.Head == nil:
			continue // a limit removed: looser
		case p.Base == nil:
			return fmt.Sprintf("has a new %s %s", limitName(r, p.Index), rateString(p.Head.Requests, p.Head.WindowMs)), true
		}
		l, b := *p.Head, *p.Base
		// l.Requests/(hc·hs)/l.WindowMs < b.Requests/(bc·bs)/b.WindowMs, exactly.
		lhs := product(l.Requests, b.WindowMs, bc, bs)
		rhs := product(b.Requests, l.WindowMs, hc, hs)
		if lhs.Cmp(rhs) < 0 {
			return fmt.Sprintf("%s tightened from %s%s to %s%s (%s)", limitName(r, p.Index),
				rateString(b.Requests, b.WindowMs), share(bc, bs), rateString(l.Requests, l.WindowMs), share(hc, hs), percentChange(lhs, rhs)), true
		}
		if product(l.Burst, bc, bs).Cmp(product(b.Burst, hc, hs)) < 0 {
			return fmt.Sprintf("%s burst tightened from %d%s to %d%s", limitName(r, p.Index), b.Burst, share(bc, bs), l.Burst, share(hc, hs)), true
		}
	}
	return "", false
}

// product multiplies xs exactly.
func product(xs ...int64) *big.Int {
	p := big.NewInt(1)
	for _, x := range xs {
		p.Mul(p, big.NewInt(x))
	}
	return p
}

// within reports whether every descriptor that match m selects, match base selects too: the same
// keys level by level, each of m's values one that base's matches (a value of any, a value with a
// wildcard's prefix, or the same exact value).
func (c *domainChange) within(m, base []policy.Match) bool {
	if len(m) != len(base) {
		return false
	}
	for i, x := range m {
		b := base[i]
		if x.Key != b.Key && !sameSource(c.head.Source(x.Key), c.base.Source(b.Key)) {
			return false // another key, not a key renamed with its source
		}
		switch b.Kind {
		case policy.MatchAny:
		case policy.MatchWildcard:
			if wildcardPrefix(b) == "" {
				break // "*" matches every value, as a key-only match does
			}
			if x.Kind == policy.MatchAny || !strings.HasPrefix(wildcardPrefix(x), wildcardPrefix(b)) {
				return false
			}
		default:
			if x.Kind != policy.MatchExact || x.Value != b.Value {
				return false
			}
		}
	}
	return true
}

// sourceChanged reports a match key of r whose source, of the same name at base, produces its
// values otherwise (a path_match exact becoming a prefix, an address mask becoming a subnet):
// the rule's buckets then take other requests, or group them otherwise, for example a whole /24
// into one.
func (c *domainChange) sourceChanged(base, r *policy.Rule) (string, bool) {
	for _, m := range r.Match {
		if !slices.ContainsFunc(base.Match, func(b policy.Match) bool { return b.Key == m.Key }) {
			continue
		}
		hs, bs := c.head.Source(m.Key), c.base.Source(m.Key)
		if hs != nil && bs != nil && !sameSource(hs, bs) {
			return fmt.Sprintf("matches key %q, whose source changed from %s to %s", m.Key, bs.Describe(), hs.Describe()), true
		}
	}
	return "", false
}

// sameSource reports whether a and b produce the same entry values from every request, as rlctl
// diff compares them (policy.Source.Describe).
func sameSource(a, b *policy.Source) bool {
	return a != nil && b != nil && a.Describe() == b.Describe()
}

// matchList formats a rule's match as its entries, such as [tenant="acme", path].
func matchList(m []policy.Match) string {
	parts := make([]string, len(m))
	for i, x := range m {
		parts[i] = x.String()
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// percentChange formats (lhs−rhs)/rhs as a whole percentage rounded toward zero, such as "−25%".
func percentChange(lhs, rhs *big.Int) string {
	if rhs.Sign() == 0 {
		return "new"
	}
	d := new(big.Int).Sub(lhs, rhs)
	d.Mul(d, big.NewInt(100))
	d.Quo(d, rhs)
	if d.Sign() < 0 {
		return "−" + new(big.Int).Neg(d).String() + "%"
	}
	return "+" + d.String() + "%"
}

// rateString formats a rate as "150/1s".
func rateString(requests, windowMs int64) string {
	return fmt.Sprintf("%d/%s", requests, durationString(windowMs))
}

// durationString formats ms in the largest unit that divides it, as a policy writes it: "1s",
// "36h", "7d".
func durationString(ms int64) string {
	for _, u := range []struct {
		ms   int64
		unit string
	}{{86_400_000, "d"}, {3_600_000, "h"}, {60_000, "m"}, {1000, "s"}} {
		if ms != 0 && ms%u.ms == 0 {
			return fmt.Sprintf("%d%s", ms/u.ms, u.unit)
		}
	}
	return fmt.Sprintf("%dms", ms)
}

// checkStageSkip reports a rule that advanced more than one stage (RL021).
func checkStageSkip(c *domainChange, e *emitter) {
	for _, p := range c.rules {
		if p.base == nil {
			continue
		}
		from, to := stageOf(p.base), stageOf(p.head)
		i, j := from.Index(), to.Index()
		if i < 0 || j <= i+1 {
			continue
		}
		next, _ := from.Next()
		e.at(p.head.Stage.Pos, p.head, "advanced from %q to %q, skipping %s: stages advance one at a time, next is %q (base %s)",
			from, to, skipped(i, j), next, p.base.Stage.Pos)
	}
}

// skipped lists the stages strictly between indexes i and j, such as `"soft" and "canary"`.
func skipped(i, j int) string {
	var names []string
	for n := policy.StageShadow; ; {
		if k := n.Index(); k > i && k < j {
			names = append(names, fmt.Sprintf("%q", n))
		}
		next, ok := n.Next()
		if !ok {
			break
		}
		n = next
	}
	return strings.Join(names, " and ")
}

// checkDwell reports a rule that left shadow or soft before its minimum dwell, counted in whole
// days from the base stage's since to today (RL022).
func checkDwell(c *domainChange, e *emitter) {
	for _, p := range c.rules {
		if p.base == nil {
			continue
		}
		from, to := stageOf(p.base), stageOf(p.head)
		if to.Index() <= from.Index() {
			continue
		}
		dwell := c.dwell(from)
		if dwell <= 0 {
			continue
		}
		want := durationString(dwell)
		since, err := time.Parse(time.DateOnly, p.base.Stage.Since)
		if err != nil {
			e.at(p.head.Stage.Pos, p.head, "advanced from %q to %q, but its base stage has no since (base %s): the %s dwell in %q cannot be counted",
				from, to, p.base.Stage.Pos, want, from)
			continue
		}
		days := int64(c.today.Sub(since) / (24 * time.Hour))
		if days*86_400_000 < dwell {
			e.at(p.head.Stage.Pos, p.head, "advanced from %q to %q after %s in %q (since %s, base %s), want at least %s (governance dwell %s)",
				from, to, dayCount(days), from, p.base.Stage.Since, p.base.Stage.Pos, want, from)
		}
	}
}

func dayCount(n int64) string {
	if n == 1 {
		return "1 day"
	}
	return fmt.Sprintf("%d days", n)
}

// checkSinceUpdated reports a stage change whose since did not move forward, and a since moved
// back while the stage stayed (RL023). A change on the day the old stage began keeps its since:
// both stages began today.
func checkSinceUpdated(c *domainChange, e *emitter) {
	today := c.today.Format(time.DateOnly)
	for _, p := range c.rules {
		if p.base == nil {
			continue
		}
		from, to := stageOf(p.base), stageOf(p.head)
		bs, hs := p.base.Stage.Since, p.head.Stage.Since
		switch {
		case hs == "" || bs == "":
			// A stage without a date is RL014's; nothing to compare.
		case from != to && !SinceMovesOn(bs, hs, today):
			e.at(p.head.Stage.Pos, p.head, "stage changed from %q to %q but since %s is not after the base's %s (base %s): set since to the day the new stage began",
				from, to, hs, bs, p.base.Stage.Pos)
		case from == to && hs < bs:
			e.at(p.head.Stage.Pos, p.head, "since moved back from %s to %s while the stage stayed %q (base %s): that counts dwell that did not happen",
				bs, hs, to, p.base.Stage.Pos)
		}
	}
}

// SinceMovesOn reports whether since, the day a rule's new stage began, may follow a stage that
// began on base, on day today (RL023): after base, or on it when that is today. rlctl rollout
// checks the day it writes with it.
func SinceMovesOn(base, since, today string) bool {
	return since > base || since == base && since == today
}

// checkSinceFuture reports a stage whose since is after today (RL024).
func checkSinceFuture(c *domainChange, e *emitter) {
	if c.head == nil {
		return
	}
	today := c.today.Format(time.DateOnly)
	for _, p := range c.rules {
		if s := p.head.Stage.Since; s != "" && s > today {
			e.at(p.head.Stage.Pos, p.head, "stage %q since %s is in the future (today is %s)", stageOf(p.head), s, today)
		}
	}
}

// onCriticalPath returns the critical path r selects in d, if d is not nil.
func onCriticalPath(d *policy.Domain, r *policy.Rule) (criticalMatch, bool) {
	if d == nil || r == nil {
		return criticalMatch{}, false
	}
	return criticalPath(d, r)
}

// checkCriticalFailOpen reports a rule on a critical path, at base or at head, that went from
// fail-closed to fail-open without a reason (RL025).
func checkCriticalFailOpen(c *domainChange, e *emitter) {
	for _, p := range c.rules {
		if p.base == nil || p.base.FailureMode != policy.FailClosed || p.head.FailureMode != policy.FailOpen ||
			strings.TrimSpace(p.head.Reason) != "" {
			continue
		}
		cm, ok := onCriticalPath(c.base, p.base)
		if !ok {
			cm, ok = onCriticalPath(c.head, p.head)
		}
		if ok {
			e.at(p.head.PosOf(policy.SettingFailure), p.head, "goes from fail-closed (base %s) to fail-open on critical path %q without a reason: set the rule's reason",
				p.base.Pos, cm.pattern)
		}
	}
}

// checkCriticalRemoved reports a rule on a critical path at base that head removed without a
// reason in governance.removed (RL026).
func checkCriticalRemoved(c *domainChange, e *emitter) {
	for _, r := range c.removed {
		cm, ok := onCriticalPath(c.base, r)
		if !ok {
			continue
		}
		if c.head == nil {
			e.at(r.Pos, r, "on critical path %q is removed with its domain (base %s): remove the rule first, with a reason in governance.removed, then the domain",
				cm.pattern, r.Pos)
			continue
		}
		if strings.TrimSpace(c.head.Governance.Removed[r.Name]) != "" {
			continue
		}
		e.at(c.head.Governance.Pos, r, "on critical path %q is removed (base %s) without a reason: add governance: removed: %s: \"...\"",
			cm.pattern, r.Pos, policy.Path(r.Name))
	}
}

// checkCountsReset reports a rule whose keys the store names otherwise after the change, so that
// every key of it starts with a full allowance (RL031): renamed, its descriptor keys changed, or
// its sub-shards; or a limit's state (a token bucket become a window, or back).
func checkCountsReset(c *domainChange, e *emitter) {
	keys := func(r *policy.Rule) []string {
		ks := make([]string, len(r.Match))
		for i, m := range r.Match {
			ks[i] = m.Key
		}
		return ks
	}
	const renamed = "the store keeps its keys' counts under the rule's name, keys and sub-shard, so every key of it starts with a full allowance once"
	for _, p := range c.rules {
		if p.base == nil {
			continue
		}
		var what, why string
		switch bk, hk := keys(p.base), keys(p.head); {
		case p.base.Name != p.head.Name:
			what, why = fmt.Sprintf("is renamed from %q", p.base.Name), renamed
		case !slices.Equal(bk, hk):
			what, why = fmt.Sprintf("matches the descriptor keys %s where it matched %s", strings.Join(hk, ", "), strings.Join(bk, ", ")), renamed
		case engine.RuleShards(p.base) != engine.RuleShards(p.head):
			what, why = fmt.Sprintf("has %d sub-shards where it had %d", engine.RuleShards(p.head), engine.RuleShards(p.base)), renamed
		default:
			// The store keeps a limit's state by its family and window (engine/identity.go),
			// whatever its place: a family changed is a window that one side has of one family
			// only and the other side of the other only.
			type kind struct {
				bucket bool
				window int64
			}
			kinds := func(ls []policy.Limit) map[kind]policy.Algorithm {
				m := map[kind]policy.Algorithm{}
				for _, l := range ls {
					m[kind{l.Algorithm == policy.TokenBucket, l.WindowMs}] = l.Algorithm
				}
				return m
			}
			bk, hk := kinds(p.base.Limits), kinds(p.head.Limits)
			for i, l := range p.head.Limits {
				k := kind{l.Algorithm == policy.TokenBucket, l.WindowMs}
				other := kind{!k.bucket, k.window}
				if was, ok := bk[other]; ok {
					if _, kept := bk[k]; !kept {
						if _, also := hk[other]; !also {
							what = fmt.Sprintf("%s is a %s where it was a %s", limitName(p.head, i), l.Algorithm, was)
							why = "a token bucket's state and a window's are not one another's, so every key starts it with a full allowance once"
							break
						}
					}
				}
			}
			if what == "" {
				continue
			}
		}
		e.at(p.head.Pos, p.head, "%s (base %s): %s", what, p.base.Pos, why)
	}
}
