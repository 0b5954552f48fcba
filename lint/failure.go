package lint

import (
	"fmt"
	"strings"

	"github.com/rlctl/rlctl/policy"
)

// This file holds the checks of what a rule does under failure and whom it counts: fail-open on a
// critical path (RL008), fail-closed without a reason (RL009), per-IP limits behind shared NAT
// (RL010) and store timeouts the gateway never waits for (RL012).

// pathSelector is a set of request paths: one exact path, or every path with a prefix.
type pathSelector struct {
	path   string
	prefix bool
}

func (p pathSelector) String() string {
	if p.prefix {
		return fmt.Sprintf("prefix %q", p.path)
	}
	return fmt.Sprintf("path %q", p.path)
}

// overlaps reports whether some request path is in both p and q.
func (p pathSelector) overlaps(q pathSelector) bool {
	switch {
	case p.prefix && q.prefix:
		return strings.HasPrefix(p.path, q.path) || strings.HasPrefix(q.path, p.path)
	case p.prefix:
		return strings.HasPrefix(q.path, p.path)
	case q.prefix:
		return strings.HasPrefix(p.path, q.path)
	}
	return p.path == q.path
}

// criticalSelector parses a critical path pattern: exact, or a prefix ending in '*'.
func criticalSelector(pattern string) pathSelector {
	if p, ok := strings.CutSuffix(pattern, "*"); ok {
		return pathSelector{path: p, prefix: true}
	}
	return pathSelector{path: pattern}
}

// ruleSelectors returns the request paths rule r is restricted to by its match entries on
// path_match sources or on a ":path" header, with the key that restricts them.
func ruleSelectors(d *policy.Domain, r *policy.Rule) (sels []pathSelector, keys []string) {
	for _, m := range r.Match {
		s := d.Source(m.Key)
		if s == nil {
			continue
		}
		switch {
		case s.Kind == policy.SourcePathMatch && valueMatches(m, s.Value):
			if s.PathExact != "" {
				sels, keys = append(sels, pathSelector{path: s.PathExact}), append(keys, m.Key)
			}
			if s.PathPrefix != "" {
				sels, keys = append(sels, pathSelector{path: s.PathPrefix, prefix: true}), append(keys, m.Key)
			}
		case s.Kind == policy.SourceHeader && s.Header == ":path" && m.Kind != policy.MatchAny:
			sel := pathSelector{path: m.Value}
			if m.Kind == policy.MatchWildcard {
				sel = pathSelector{path: wildcardPrefix(m), prefix: true}
			}
			sels, keys = append(sels, sel), append(keys, m.Key)
		}
	}
	return sels, keys
}

// checkFailOpenCritical reports a fail-open rule that selects a path the domain marks critical
// (RL008). A rule that selects no path is not reported: it is the critical path's own rules that
// must fail closed.
func checkFailOpenCritical(d *policy.Domain, r *policy.Rule, e *emitter) {
	if r.FailureMode != policy.FailOpen || len(d.CriticalPaths) == 0 {
		return
	}
	sels, keys := ruleSelectors(d, r)
	for i, sel := range sels {
		for _, c := range d.CriticalPaths {
			if sel.overlaps(criticalSelector(c)) {
				e.at(r.Pos, r, "fails open on critical path %q (match key %q selects %s); make it fail closed with a reason",
					c, keys[i], sel)
				return
			}
		}
	}
}

// checkFailClosedReason reports a fail-closed rule that does not say why (RL009).
func checkFailClosedReason(_ *policy.Domain, r *policy.Rule, e *emitter) {
	if r.FailureMode == policy.FailClosed && strings.TrimSpace(r.FailureReason) == "" {
		e.at(r.Pos, r, "fails closed without a reason: a store outage rejects all of its traffic")
	}
}

// checkNATTrap reports rules that limit each client address separately (RL010): the source is a
// remote address, or the identity waterfall's subnet step, without subnet aggregation, and the
// rule matches any address rather than a named one.
func checkNATTrap(d *policy.Domain, r *policy.Rule, e *emitter) {
	for _, m := range r.Match {
		s := d.Source(m.Key)
		if s == nil || s.Mask == policy.MaskSubnet {
			continue
		}
		switch s.Kind {
		case policy.SourceRemoteAddress:
			if m.Kind == policy.MatchExact {
				continue // one named address, not a per-client limit
			}
		case policy.SourceIdentity:
			if !hasTier(s, policy.TierSubnet) || !matchesPrefix(m, string(policy.TierSubnet)+":") {
				continue // the rule never sees the anonymous tier
			}
		default:
			continue
		}
		e.at(m.Pos, r, "per-IP limit: source %q (%s) has mask %q, so everyone behind one NAT shares %s; set mask \"subnet\" or key on an identity",
			s.Key, s.Kind, maskName(s.Mask), limitSummary(r))
		return
	}
}

func hasTier(s *policy.Source, t policy.IdentityTier) bool {
	for _, step := range s.Waterfall {
		if step.Tier == t {
			return true
		}
	}
	return false
}

func maskName(m policy.Mask) string {
	if m == "" {
		return string(policy.MaskNone)
	}
	return string(m)
}

// limitSummary formats a rule's first limit as "100 requests per 60000ms".
func limitSummary(r *policy.Rule) string {
	if len(r.Limits) == 0 {
		return "its limit"
	}
	l := r.Limits[0]
	return fmt.Sprintf("%d requests per %dms", l.Requests, l.WindowMs)
}

// checkStoreTimeout reports a store timeout that is not below the gateway's RLS timeout (RL012):
// the gateway gives up on the enforcer before the enforcer gives up on the store, so the rule's
// failure mode never applies and a slow store becomes the gateway's own failure.
func checkStoreTimeout(d *policy.Domain, r *policy.Rule, e *emitter) {
	rls := d.Gateway.RLSTimeoutMs
	if rls > 0 && r.StoreTimeoutMs >= rls {
		e.at(r.Pos, r, "store timeout %dms is not below the gateway's RLS timeout %dms", r.StoreTimeoutMs, rls)
	}
}
