package lint

import (
	"fmt"
	"strings"

	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/schema"
)

// This file holds the checks of what a rule does under failure and whom it counts: fail-open on a
// critical path (RL008), fail-closed without a reason (RL009), per-IP limits behind shared NAT
// (RL010), store timeouts the gateway never waits for (RL012) and expensive fail-open rules left
// to the default fallback bucket (RL019).

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

// criticalMatch is a critical path pattern that a rule selects, with the match key and the
// paths that select it.
type criticalMatch struct {
	pattern string
	key     string
	sel     pathSelector
}

// criticalPath returns the first of the domain's critical paths that rule r selects; ok is false
// when r selects none. A rule that selects no path selects no critical path: it is the critical
// path's own rules that must fail closed.
func criticalPath(d *policy.Domain, r *policy.Rule) (c criticalMatch, ok bool) {
	if len(d.CriticalPaths) == 0 {
		return criticalMatch{}, false
	}
	sels, keys := ruleSelectors(d, r)
	for i, sel := range sels {
		for _, p := range d.CriticalPaths {
			if sel.overlaps(criticalSelector(p)) {
				return criticalMatch{pattern: p, key: keys[i], sel: sel}, true
			}
		}
	}
	return criticalMatch{}, false
}

// checkFailOpenCritical reports a fail-open rule that selects a path the domain marks critical
// (RL008).
func checkFailOpenCritical(d *policy.Domain, r *policy.Rule, e *emitter) {
	if r.FailureMode != policy.FailOpen {
		return
	}
	if c, ok := criticalPath(d, r); ok {
		e.at(r.PosOf(policy.SettingFailure), r, "fails open on critical path %q (match key %q selects %s); make it fail closed with a reason",
			c.pattern, c.key, c.sel)
	}
}

// checkFailOpenNoFallback reports a fail-open rule whose requests are expensive, a limit's cost
// above 1, that has no fallback bucket of its own (RL019): while the store is unavailable only
// the engine's default bucket, sized from traffic rather than from what the backend can take,
// caps it. A fail-open rule on a critical path is RL008's error whatever its fallback, and its
// fix is to fail closed, so it is not reported twice.
func checkFailOpenNoFallback(d *policy.Domain, r *policy.Rule, e *emitter) {
	if r.FailureMode != policy.FailOpen || r.Fallback != nil {
		return
	}
	if _, critical := criticalPath(d, r); critical {
		return
	}
	for i, l := range r.Limits {
		if l.Cost <= 1 {
			continue
		}
		share := "its whole limit on every gateway, as gateways is not set"
		switch {
		case r.Gateways == 1:
			share = "its whole limit"
		case r.Gateways > 1:
			share = fmt.Sprintf("1/%d of its limit per gateway", r.Gateways)
		}
		e.at(r.PosOf(policy.SettingFailure), r, "fails open without a fallback, and its requests are expensive (%s: cost %d): while the store is unavailable only the default bucket caps it (twice a key's recently admitted rate, else %s); set failure.fallback",
			limitName(r, i), l.Cost, share)
		return
	}
}

// checkFailClosedReason reports a fail-closed rule that does not say why (RL009).
func checkFailClosedReason(_ *policy.Domain, r *policy.Rule, e *emitter) {
	if r.FailureMode == policy.FailClosed && strings.TrimSpace(r.FailureReason) == "" {
		e.at(r.PosOf(policy.SettingFailure), r, "fails closed without a reason: a store outage rejects all of its traffic")
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

// limitSummary formats a rule's first limit as "100 requests per 1m".
func limitSummary(r *policy.Rule) string {
	if len(r.Limits) == 0 {
		return "its limit"
	}
	l := r.Limits[0]
	return fmt.Sprintf("%d requests per %s", l.Requests, schema.FormatDuration(l.WindowMs))
}

// checkStoreTimeout reports a store timeout that is not below the gateway's RLS timeout (RL012):
// the gateway gives up on the enforcer before the enforcer gives up on the store, so the rule's
// failure mode never applies and a slow store becomes the gateway's own failure.
func checkStoreTimeout(d *policy.Domain, r *policy.Rule, e *emitter) {
	rls := d.Gateway.RLSTimeoutMs
	if rls > 0 && r.StoreTimeoutMs >= rls {
		e.at(r.PosOf(policy.SettingStoreTimeout), r, "store timeout %dms is not below the gateway's RLS timeout %dms", r.StoreTimeoutMs, rls)
	}
}
