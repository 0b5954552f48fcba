// Package diff owns the semantic comparison of two versions of a policy: the change list per
// rule and domain, and its text, JSON and markdown forms.
//
// # Changes
//
// Compare lists what differs between a base and a head model as Changes, each of one Kind, with
// the positions of the changed value at base and at head. It compares meaning, not text: a rule
// moved to another file, reformatted or given a comment is unchanged, and a value inherited
// from the domain's defaults is compared as the rule sees it, so a changed default shows on
// every rule that inherits it.
//
// Rules are paired by name within their domain. A base rule and a head rule left unpaired that
// have the same match (policy.MatchKey) are one rule renamed: KindRenamed, then its other
// changes under the head's name. The remaining base rules are removed and head rules added.
//
// Limits are paired as follows: when each side has one limit, they are the pair; otherwise a
// head limit pairs with the first unpaired base limit of the same window, then the limits left
// pair in their order, and a limit left over on one side is a limit added (KindLimitTightened)
// or removed (KindLimitLoosened). A pair compares rates, requests per window, as exact
// rationals: a lower rate at head is KindLimitTightened, a higher one KindLimitLoosened, with
// the change in percent of the base rate. A changed window is also KindWindow (100/s → 6000/m
// is the same rate in another window). A burst (a window's is its requests) is compared when
// either side sets one other than its requests (the default), or the window changed: a new rate
// in the same window does not also show as a new burst, but 600/1m → 10/1s, the same rate,
// shows its burst falling from 600 to 10.
//
// Stages are ordered shadow, soft, canary, enforce (an empty stage is enforce). Moving one step
// on is KindStageAdvanced, more than one KindStageSkipped, any step back KindStageRolledBack;
// within canary a higher percent advances and a lower one rolls back. A new since date alone is
// KindStageSince.
//
// Two rules whose wildcards of one key overlap ("/v1/*" and "/v1/orders*", after the same
// entries before them) take the values both match in declared order: a swap of the two is
// KindPrecedence on the rule now ahead.
//
// A changed source (how a request becomes a descriptor entry, such as a header renamed) is
// KindDescriptor on every head rule whose match or sub-shard attribute uses its key, and
// KindDomainSetting on the domain when no rule uses it.
//
// # Order
//
// Compare's order is deterministic: domains by name; in a domain its own changes first, then
// its head rules in precedence order, then the rules removed in base order; a rule's changes in
// the order of the Kind constants.
//
// # Percentages and signs
//
// Percentages are exact to two decimals, with trailing zeros dropped. In Summary and in every
// human form (text and markdown) a negative percentage is written with U+2212 (−25%), a positive
// one with '+'; JSON's "percent" is a plain number (-25).
//
// # Counts
//
// The summary counts things, not changes: a rule or a domain (a Change with an empty Rule) is
// added, removed, or changed when it has any other change. Renamed counts as changed.
package diff

import (
	"cmp"
	"fmt"
	"math/big"
	"slices"

	"github.com/rlctl/rlctl/internal/english"
	"github.com/rlctl/rlctl/policy"
)

// Kind is what a Change changed. The values are stable: JSON output and other tools use them.
type Kind string

// The kinds, in the order Compare lists a rule's changes.
const (
	KindAdded           Kind = "added"             // a rule or domain is new
	KindRemoved         Kind = "removed"           // a rule or domain is gone
	KindRenamed         Kind = "renamed"           // same match, new name
	KindMatch           Kind = "match"             // the rule matches other descriptors
	KindPrecedence      Kind = "precedence"        // the rule now comes before or after a competing wildcard rule
	KindDescriptor      Kind = "descriptor"        // a source the rule uses builds its entry differently
	KindLimitTightened  Kind = "limit_tightened"   // a lower rate, or a limit added
	KindLimitLoosened   Kind = "limit_loosened"    // a higher rate, or a limit removed
	KindWindow          Kind = "window"            // a limit's window
	KindBurst           Kind = "burst"             // a token bucket's capacity (a window's requests)
	KindAlgorithm       Kind = "algorithm"         // token_bucket, sliding_window, fixed_window
	KindCost            Kind = "cost"              // tokens a request spends
	KindStageAdvanced   Kind = "stage_advanced"    // one stage on, or a higher canary percent
	KindStageSkipped    Kind = "stage_skipped"     // more than one stage on
	KindStageRolledBack Kind = "stage_rolled_back" // any stage back, or a lower canary percent
	KindStageSince      Kind = "stage_since"       // the same stage, another since date
	KindStageHold       Kind = "stage_hold"        // a hold (rollout pause) set, changed or lifted
	KindFailureMode     Kind = "failure_mode"      // fail open or closed
	KindFailureReason   Kind = "failure_reason"    // the reason for the failure mode
	KindFallback        Kind = "fallback"          // the local bucket while the store is away
	KindStoreTimeout    Kind = "store_timeout"     // the store call's timeout
	KindLease           Kind = "lease"             // token leasing settings
	KindSubShards       Kind = "sub_shards"        // sub-shard count or attribute
	KindRegions         Kind = "regions"           // regional quota shares
	KindOwner           Kind = "owner"             // the owning team
	KindCapacity        Kind = "capacity"          // expected peak QPS or gateway count
	KindDriftTolerance  Kind = "drift_tolerance"   // accepted over-admission
	KindLegit           Kind = "legit"             // identities known to be legitimate
	KindDomainSetting   Kind = "domain_setting"    // a domain's gateway, critical paths or unused sources
)

// Kinds lists every Kind in order.
var Kinds = []Kind{KindAdded, KindRemoved, KindRenamed, KindMatch, KindPrecedence, KindDescriptor, KindLimitTightened,
	KindLimitLoosened, KindWindow, KindBurst, KindAlgorithm, KindCost, KindStageAdvanced, KindStageSkipped,
	KindStageRolledBack, KindStageSince, KindStageHold, KindFailureMode, KindFailureReason, KindFallback, KindStoreTimeout,
	KindLease, KindSubShards, KindRegions, KindOwner, KindCapacity, KindDriftTolerance, KindLegit,
	KindDomainSetting}

// Change is one semantic change. Its JSON field names are stable.
type Change struct {
	Domain string `json:"domain"`
	// Rule is the rule's name at head (at base when removed); empty for a change of the domain.
	Rule string `json:"rule"`
	Kind Kind   `json:"kind"`
	// Summary is the change in one human line, such as "shopify_payments: 200/s → 150/s (−25%)".
	Summary string `json:"summary"`
	// Before and After are the changed value at base and at head, as text; empty when it does
	// not exist on that side.
	Before string `json:"before,omitempty"`
	After  string `json:"after,omitempty"`
	// Percent is the change of a rate or a burst in percent of the base value, when it
	// applies: -25 for 200/s → 150/s.
	Percent *float64 `json:"percent,omitempty"`
	// Base and Head are where the value is in each version's files; the zero Pos on the side
	// where it does not exist.
	Base policy.Pos `json:"base"`
	Head policy.Pos `json:"head"`
}

// Compare returns the changes from base to head, in the order the package doc describes. A nil
// model is an empty one.
func Compare(base, head *policy.Model) []Change {
	var cs []Change
	for _, name := range domainNames(base, head) {
		bd, hd := domainOf(base, name), domainOf(head, name)
		switch {
		case bd == nil:
			cs = append(cs, domainAdded(hd)...)
		case hd == nil:
			cs = append(cs, domainRemoved(bd)...)
		default:
			cs = append(cs, compareDomain(bd, hd)...)
		}
	}
	return cs
}

func domainOf(m *policy.Model, name string) *policy.Domain {
	if m == nil {
		return nil
	}
	return m.Domain(name)
}

// domainNames are the names of the domains of both models, sorted.
func domainNames(base, head *policy.Model) []string {
	var names []string
	for _, m := range []*policy.Model{base, head} {
		if m == nil {
			continue
		}
		for _, d := range m.Domains {
			names = append(names, d.Name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

func domainAdded(d *policy.Domain) []Change {
	cs := []Change{{Domain: d.Name, Kind: KindAdded, Head: d.Pos,
		Summary: "domain " + d.Name + " added (" + english.Plural(len(d.Rules), "rule") + ")"}}
	for _, r := range d.Rules {
		cs = append(cs, ruleAdded(d.Name, r))
	}
	return cs
}

func domainRemoved(d *policy.Domain) []Change {
	cs := []Change{{Domain: d.Name, Kind: KindRemoved, Base: d.Pos,
		Summary: "domain " + d.Name + " removed (" + english.Plural(len(d.Rules), "rule") + ")"}}
	for _, r := range d.Rules {
		cs = append(cs, ruleRemoved(d.Name, r))
	}
	return cs
}

func ruleAdded(domain string, r *policy.Rule) Change {
	v := ruleString(r)
	return Change{Domain: domain, Rule: r.Name, Kind: KindAdded, After: v, Head: r.Pos,
		Summary: r.Name + ": added, " + v}
}

func ruleRemoved(domain string, r *policy.Rule) Change {
	v := ruleString(r)
	return Change{Domain: domain, Rule: r.Name, Kind: KindRemoved, Before: v, Base: r.Pos,
		Summary: r.Name + ": removed, was " + v}
}

// rulePair is a base rule and the head rule it became; either is nil when the rule was added
// or removed.
type rulePair struct{ base, head *policy.Rule }

// pairRules pairs the rules of two versions of a domain: by name, then unpaired ones by match.
// The head's rules come first, in precedence order, then the removed ones in base order.
func pairRules(bd, hd *policy.Domain) []rulePair {
	byName := map[string]*policy.Rule{}
	for _, r := range bd.Rules {
		byName[r.Name] = r
	}
	used := map[*policy.Rule]bool{}
	pairs := make([]rulePair, len(hd.Rules))
	for i, r := range hd.Rules {
		pairs[i].head = r
		if b := byName[r.Name]; b != nil {
			pairs[i].base, used[b] = b, true
		}
	}
	byMatch := map[string]*policy.Rule{}
	for _, r := range bd.Rules {
		if k := policy.MatchKey(r.Match); !used[r] && byMatch[k] == nil {
			byMatch[k] = r
		}
	}
	for i := range pairs {
		if pairs[i].base != nil {
			continue
		}
		if b := byMatch[policy.MatchKey(pairs[i].head.Match)]; b != nil && !used[b] {
			pairs[i].base, used[b] = b, true
		}
	}
	for _, r := range bd.Rules {
		if !used[r] {
			pairs = append(pairs, rulePair{base: r})
		}
	}
	return pairs
}

func compareDomain(bd, hd *policy.Domain) []Change {
	cs := domainSettings(bd, hd)
	pairs := pairRules(bd, hd)
	ahead := precedence(bd, hd.Name, pairs)
	for _, p := range pairs {
		switch {
		case p.base == nil:
			cs = append(cs, ruleAdded(hd.Name, p.head))
		case p.head == nil:
			cs = append(cs, ruleRemoved(bd.Name, p.base))
		default:
			rc := append(compareRule(bd, hd, p.base, p.head), ahead[p.head]...)
			slices.SortStableFunc(rc, func(a, b Change) int { return cmp.Compare(kindIndex(a.Kind), kindIndex(b.Kind)) })
			cs = append(cs, rc...)
		}
	}
	return cs
}

// precedence returns, by head rule, a KindPrecedence change for each rule of both versions that
// now comes before another that it competes with: the two share their match up to an entry
// where both are wildcards of one key whose prefixes overlap ("/v1/*" and "/v1/orders*"). There
// a descriptor goes to the first such rule in declared order, and never back, so swapping them
// changes which limit a request gets with no other change to show.
func precedence(bd *policy.Domain, domain string, pairs []rulePair) map[*policy.Rule][]Change {
	var both []rulePair
	for _, p := range pairs {
		if p.base != nil && p.head != nil {
			both = append(both, p)
		}
	}
	baseAt := map[*policy.Rule]int{} // the base's declared order (pairs holds the head's)
	for i, r := range bd.Rules {
		baseAt[r] = i
	}
	out := map[*policy.Rule][]Change{}
	for i, a := range both { // head order: a is before b at head
		for _, b := range both[i+1:] {
			if baseAt[a.base] < baseAt[b.base] {
				continue
			}
			at, ok := policy.Competing(a.head.Match, b.head.Match)
			if !ok {
				continue
			}
			m := a.head.Match[at]
			out[a.head] = append(out[a.head], Change{Domain: domain, Rule: a.head.Name, Kind: KindPrecedence,
				Before: "after " + b.head.Name, After: "before " + b.head.Name, Base: a.base.Pos, Head: a.head.Pos,
				Summary: fmt.Sprintf("%s: now before %s, so it takes the %s values both match (%s=%q, %s=%q: wildcards in declared order)",
					a.head.Name, b.head.Name, m.Key, m.Key, m.Value, m.Key, b.head.Match[at].Value)})
		}
	}
	return out
}

func kindIndex(k Kind) int {
	if i := slices.Index(Kinds, k); i >= 0 {
		return i
	}
	return len(Kinds)
}

// percent returns (after − before) / before in percent, exact to two decimals, and its text
// with a sign ("−25%", "+33.33%").
func percent(after, before *big.Rat) (*float64, string) {
	if before.Sign() == 0 {
		return nil, ""
	}
	d := new(big.Rat).Sub(after, before)
	d.Quo(d, before)
	d.Mul(d, big.NewRat(100, 1))
	s := trimZeros(d.FloatString(2))
	if s == "0" || s == "-0" {
		v, _ := d.Float64()
		switch d.Sign() {
		case 0:
			return &v, "0%"
		case -1:
			return &v, "\u2212<0.01%"
		}
		return &v, "+<0.01%"
	}
	f, _ := new(big.Rat).SetString(s)
	v, _ := f.Float64()
	if s[0] == '-' {
		return &v, "\u2212" + s[1:] + "%"
	}
	return &v, "+" + s + "%"
}
