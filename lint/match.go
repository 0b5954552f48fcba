package lint

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/rlctl/rlctl/policy"
)

// This file holds the checks of rules' descriptor matches that lint makes itself: rules the match
// tree never reaches (RL002) and values no source produces (RL003). Duplicate matches (RL001) and
// keys no source produces (RL003) are the model's own checks (policy.Model.Validate).

// wildcardPrefix is the prefix a wildcard value matches: the value without its trailing '*'.
func wildcardPrefix(m policy.Match) string {
	return strings.TrimSuffix(m.Value, "*")
}

// checkUnreachable reports rules that descriptor lookup never selects (RL002); policy's
// Domain.Shadowed finds them on the tree Lookup walks.
func checkUnreachable(d *policy.Domain, e *emitter) {
	for _, s := range d.Shadowed() {
		m, by := s.Rule.Match[s.Level], s.By.Match[s.Level]
		e.at(m.Pos, s.Rule, "unreachable: match %s at level %d is shadowed by %s of rule %q at %s, which lookup tries first",
			m, s.Level+1, describeShadow(by), s.By.Name, by.Pos)
	}
}

func describeShadow(m policy.Match) string {
	if wildcardPrefix(m) == "" {
		return fmt.Sprintf("the catch-all wildcard %s", m)
	}
	return fmt.Sprintf("the earlier wildcard %s", m)
}

// checkUnknownDescriptor reports match values that the key's source never produces (RL003). A key
// no source produces is the model's own check.
func checkUnknownDescriptor(d *policy.Domain, r *policy.Rule, e *emitter) {
	for level, m := range r.Match {
		s := d.Source(m.Key)
		if s == nil {
			continue
		}
		if values, ok := producible(s, m); !ok {
			e.at(m.Pos, r, "match %s at level %d: source %q (%s) only produces %s", m, level+1, s.Key, s.Kind, values)
		}
	}
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
	case policy.SourceRemoteAddress:
		if m.Kind != policy.MatchExact {
			return "", true
		}
		if s.Mask == policy.MaskSubnet {
			return "networks such as \"203.0.113.0/24\" and \"2001:db8:1:2::/64\"", isNetwork(m.Value)
		}
		return "addresses such as \"203.0.113.7\" and \"2001:db8::7\"", isAddress(m.Value)
	case policy.SourceIdentity:
		var tiers []string
		for _, step := range s.Waterfall {
			p := string(step.Tier) + ":"
			if rest, ok := strings.CutPrefix(m.Value, p); ok && m.Kind == policy.MatchExact && step.Tier == policy.TierSubnet && !isNetwork(rest) {
				return fmt.Sprintf("%q with a network such as \"subnet:203.0.113.0/24\"", p+"..."), false
			}
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

// isAddress reports whether v is an address as a remote_address source with mask "none" writes
// it: canonical text, without zone or port, IPv4 unmapped.
func isAddress(v string) bool {
	a, err := netip.ParseAddr(v)
	return err == nil && a.Zone() == "" && !a.Is4In6() && a.String() == v
}

// isNetwork reports whether v is a network as a subnet mask writes it: the /24 of an IPv4
// address or the /64 of an IPv6 one, in canonical text.
func isNetwork(v string) bool {
	p, err := netip.ParsePrefix(v)
	if err != nil || p.Addr().Is4In6() || p != p.Masked() || p.String() != v {
		return false
	}
	return p.Addr().Is4() && p.Bits() == 24 || p.Addr().Is6() && p.Bits() == 64
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

// checkPathWithQuery reports a rule's matches on a header source of :path (RL027), whose values
// hold the query string: an exact value is skipped by adding "?", and a wildcard or key-only match
// keys the limit by a value the caller varies at will.
func checkPathWithQuery(d *policy.Domain, r *policy.Rule, e *emitter) {
	for _, m := range r.Match {
		src := d.Source(m.Key)
		if src == nil || src.Kind != policy.SourceHeader || !strings.EqualFold(src.Header, ":path") {
			continue
		}
		switch m.Kind {
		case policy.MatchExact:
			e.at(m.Pos, r, "matches %s on :path, which holds the query string: a caller skips the rule by adding \"?\"; match a path_match source with exact: %q, which ignores the query",
				m, m.Value)
		default:
			e.at(m.Pos, r, "keys its limit by %s on :path, which holds the query string: each query string is a bucket of its own, so a caller who varies it is never limited; match a path_match source (prefix or exact) instead",
				m)
		}
	}
}

// checkLiteralPattern reports a match value that reads as a pattern but is matched as it is
// (RL030): a '*' before its end (only a trailing '*' is a wildcard, a prefix), or a '|' (there is
// no alternation). "big*co" selects the one value "big*co", not "bigfooco".
func checkLiteralPattern(d *policy.Domain, r *policy.Rule, e *emitter) {
	for _, m := range r.Match {
		body := strings.TrimSuffix(m.Value, "*")
		switch {
		case m.Kind == policy.MatchAny:
		case strings.Contains(body, "*"):
			e.at(m.Pos, r, "match %s holds '*' before its end, which is matched as it is: only a trailing * is a wildcard (a prefix); use one rule per value, or a prefix", m)
		case strings.Contains(m.Value, "|"):
			e.at(m.Pos, r, "match %s holds '|', which is matched as it is: there is no alternation; use one rule per value", m)
		}
	}
}
