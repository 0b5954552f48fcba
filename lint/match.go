package lint

import (
	"fmt"
	"strings"

	"github.com/rlctl/rlctl/policy"
)

// This file holds the checks of rules' descriptor matches: duplicates (RL001), rules the match
// tree never reaches (RL002) and keys or values no source produces (RL003).

// matchPath formats a rule's nested match for messages: tenant="acme" > path="/v1*" > ip.
func matchPath(ms []policy.Match) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = matchString(m)
	}
	return strings.Join(parts, " > ")
}

func matchString(m policy.Match) string {
	if m.Kind == policy.MatchAny {
		return m.Key
	}
	return fmt.Sprintf("%s=%q", m.Key, m.Value)
}

// wildcardPrefix is the prefix a wildcard value matches: the value without its trailing '*'.
func wildcardPrefix(m policy.Match) string {
	return strings.TrimSuffix(m.Value, "*")
}

// checkDuplicate reports a rule whose match path equals an earlier rule's (RL001): the two would
// be one composite descriptor key, and only one limit can apply.
func checkDuplicate(d *policy.Domain, e *emitter) {
	seen := map[string]*policy.Rule{}
	for _, r := range d.Rules {
		key := pathKey(r.Match)
		if first, ok := seen[key]; ok {
			e.at(r.Pos, r, "duplicate match %s: rule %q at %s has the same descriptor key", matchPath(r.Match), first.Name, first.Pos)
			continue
		}
		seen[key] = r
	}
}

// pathKey is a map key that is equal for match paths that match the same descriptors.
func pathKey(ms []policy.Match) string {
	var b strings.Builder
	for _, m := range ms {
		v := m.Value
		if m.Kind == policy.MatchAny {
			v = ""
		}
		fmt.Fprintf(&b, "%q %s %q\x00", m.Key, m.Kind, v)
	}
	return b.String()
}

// matchNode is a node of a domain's match tree, as envoyproxy/ratelimit builds it: rules that
// share a prefix of their match path share nodes. Wildcards keep declaration order per key.
type matchNode struct {
	exact     map[[2]string]*matchChild
	wildcards map[string][]*matchChild
	any       map[string]*matchChild
}

type matchChild struct {
	match policy.Match
	rule  *policy.Rule // the first rule through this child
	next  matchNode
}

// child returns the child for m, adding it (for rule r) if it is new.
func (n *matchNode) child(m policy.Match, r *policy.Rule) *matchChild {
	switch m.Kind {
	case policy.MatchExact:
		k := [2]string{m.Key, m.Value}
		if c := n.exact[k]; c != nil {
			return c
		}
		if n.exact == nil {
			n.exact = map[[2]string]*matchChild{}
		}
		c := &matchChild{match: m, rule: r}
		n.exact[k] = c
		return c
	case policy.MatchWildcard:
		for _, c := range n.wildcards[m.Key] {
			if c.match.Value == m.Value {
				return c
			}
		}
		if n.wildcards == nil {
			n.wildcards = map[string][]*matchChild{}
		}
		c := &matchChild{match: m, rule: r}
		n.wildcards[m.Key] = append(n.wildcards[m.Key], c)
		return c
	}
	if c := n.any[m.Key]; c != nil {
		return c
	}
	if n.any == nil {
		n.any = map[string]*matchChild{}
	}
	c := &matchChild{match: m, rule: r}
	n.any[m.Key] = c
	return c
}

// checkUnreachable reports rules that descriptor lookup never selects (RL002). Lookup walks the
// tree one descriptor entry at a time and at each level takes the exact child for the entry's key
// and value, else the first wildcard child (in declaration order) whose prefix the value has,
// else the key-only child, and never backtracks. So a wildcard child is unreachable when an
// earlier wildcard of the same key has a prefix of its prefix, and a key-only child when a
// wildcard of the same key matches every value ("*"). Exact children only take single values
// from a wildcard, never all of them. Duplicates are RL001's.
func checkUnreachable(d *policy.Domain, e *emitter) {
	var root matchNode
	for _, r := range d.Rules {
		node := &root
		for level, m := range r.Match {
			if shadow := node.shadowing(m); shadow != nil {
				e.at(m.Pos, r, "unreachable: match %s at level %d is shadowed by %s of rule %q at %s, which lookup tries first",
					matchString(m), level+1, describeShadow(shadow.match), shadow.rule.Name, shadow.match.Pos)
				break
			}
			node = &node.child(m, r).next
		}
	}
}

// shadowing returns the child of n that lookup selects instead of m for every entry m matches,
// or nil. For a wildcard only wildcards declared before it count, since lookup tries them in
// declaration order; for a key-only match every wildcard counts, since lookup tries them first.
func (n *matchNode) shadowing(m policy.Match) *matchChild {
	if m.Kind == policy.MatchExact {
		return nil
	}
	p := wildcardPrefix(m)
	for _, c := range n.wildcards[m.Key] {
		q := wildcardPrefix(c.match)
		switch {
		case m.Kind == policy.MatchAny && q == "":
			return c
		case m.Kind == policy.MatchWildcard && q == p:
			return nil // m's own child: later wildcards come after it
		case m.Kind == policy.MatchWildcard && strings.HasPrefix(p, q):
			return c
		}
	}
	return nil
}

func describeShadow(m policy.Match) string {
	if wildcardPrefix(m) == "" {
		return fmt.Sprintf("the catch-all wildcard %s", matchString(m))
	}
	return fmt.Sprintf("the earlier wildcard %s", matchString(m))
}

// checkUnknownDescriptor reports match entries and sub-shard attributes whose key no source of
// the domain produces, and match values the key's source can never produce (RL003).
func checkUnknownDescriptor(d *policy.Domain, r *policy.Rule, e *emitter) {
	for level, m := range r.Match {
		s := d.Source(m.Key)
		if s == nil {
			e.at(m.Pos, r, "match key %q at level %d: no source produces it (sources: %s)", m.Key, level+1, sourceKeys(d))
			continue
		}
		if values, ok := producible(s, m); !ok {
			e.at(m.Pos, r, "match %s at level %d: source %q (%s) only produces %s", matchString(m), level+1, s.Key, s.Kind, values)
		}
	}
	if ss := r.SubShards; ss != nil && d.Source(ss.Attribute) == nil {
		e.at(r.Pos, r, "sub_shards attribute %q: no source produces it (sources: %s)", ss.Attribute, sourceKeys(d))
	}
}

func sourceKeys(d *policy.Domain) string {
	if len(d.Sources) == 0 {
		return "none"
	}
	keys := make([]string, len(d.Sources))
	for i, s := range d.Sources {
		keys[i] = s.Key
	}
	return strings.Join(keys, ", ")
}

// producible reports whether source s can produce a value that m matches; when it cannot, values
// describes what s does produce.
func producible(s *policy.Source, m policy.Match) (values string, ok bool) {
	if m.Kind == policy.MatchAny {
		return "", true
	}
	switch s.Kind {
	case policy.SourceGenericKey, policy.SourcePathMatch:
		return fmt.Sprintf("%q", s.Value), valueMatches(m, s.Value)
	case policy.SourceIdentity:
		var tiers []string
		for _, step := range s.Waterfall {
			p := string(step.Tier) + ":"
			tiers = append(tiers, fmt.Sprintf("%q", p+"..."))
			if matchesPrefix(m, p) {
				return "", true
			}
		}
		if len(s.Waterfall) == 0 {
			return "", true // no waterfall: the loader's default applies
		}
		return strings.Join(tiers, ", "), false
	}
	return "", true
}

// valueMatches reports whether m matches the descriptor value v.
func valueMatches(m policy.Match, v string) bool {
	switch m.Kind {
	case policy.MatchExact:
		return m.Value == v
	case policy.MatchWildcard:
		return strings.HasPrefix(v, wildcardPrefix(m))
	}
	return true
}

// matchesPrefix reports whether m matches some value that starts with p.
func matchesPrefix(m policy.Match, p string) bool {
	switch m.Kind {
	case policy.MatchExact:
		return strings.HasPrefix(m.Value, p)
	case policy.MatchWildcard:
		w := wildcardPrefix(m)
		return strings.HasPrefix(w, p) || strings.HasPrefix(p, w)
	}
	return true
}
