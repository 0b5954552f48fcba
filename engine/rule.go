package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	"github.com/rlctl/rlctl/policy"
)

// This file turns a compiled policy rule into what the engine enforces: its limits, its keys,
// its lease settings and its fallback bucket. The enforcer decides with it and simulate and
// journal replays re-run it, so all of them agree on every figure and every key.

// RulePlan is a policy rule compiled for deciding requests. Build it with PlanRule; it is
// immutable and safe for concurrent use.
type RulePlan struct {
	Domain string
	Rule   *policy.Rule
	// Limits are the limits of each of the rule's keys (RuleLimits): per shard when the rule
	// is sub-sharded.
	Limits []Limit
	// Fallback caps a fail-open rule while the store is unavailable: the policy's fallback
	// (FallbackLimits), or nil when it sets none. A rule without one is still bounded: see
	// Decide.
	Fallback []Limit
	// DefaultFallback caps a key of a fail-open rule without Fallback that has no admitted
	// rate to go by while the store is unavailable: the rule's limits divided among its
	// gateways (DefaultFallbackLimits).
	DefaultFallback []Limit
	// Shards is the number of sub-shard keys, 0 when the rule is not sub-sharded.
	Shards int
	// Cost is what one request spends unless it says otherwise: the first limit's cost, at
	// least 1.
	Cost int64
	// FailClosed denies while the store is unavailable.
	FailClosed bool
	// Lease holds the rule's lease settings (LeaseSettings); Store, Clock and Dispatcher are
	// left for the caller.
	Lease LeaseConfig

	keyPrefix []byte // AppendKey(nil, Domain, Rule.Name), for AppendKey
	// matchKeys are AppendKeyPart(nil, Rule.Match[i].Key), for AppendKey: the entries of a
	// descriptor the rule matched have those keys.
	matchKeys []string
}

// PlanRule compiles rule r of domain. Its errors name the limit or setting at fault, not the
// rule: callers add the rule and its position.
func PlanRule(domain string, r *policy.Rule) (*RulePlan, error) {
	limits, err := RuleLimits(r)
	if err != nil {
		return nil, err
	}
	fallback, err := FallbackLimits(r)
	if err != nil {
		return nil, err
	}
	defaultFallback := DefaultFallbackLimits(r, limits)
	for i, l := range defaultFallback {
		if !UsesDefaultFallback(r) {
			break // a default it never uses
		}
		if err := l.Validate(); err != nil {
			return nil, fmt.Errorf("limit %d, the default fallback's share of %d gateways: %w", i, r.Gateways, err)
		}
	}
	return &RulePlan{
		Domain: domain, Rule: r, Limits: limits, Fallback: fallback, DefaultFallback: defaultFallback,
		Shards: ruleShards(r),
		Cost:   RuleCost(r), FailClosed: r.FailureMode == policy.FailClosed,
		Lease: LeaseSettings(r.Lease), keyPrefix: AppendKey(nil, domain, r.Name), matchKeys: matchKeyParts(r),
	}, nil
}

// matchKeyParts returns the key part of each of r's match entries' keys, as AppendKeyPart
// appends it.
func matchKeyParts(r *policy.Rule) []string {
	parts := make([]string, len(r.Match))
	for i, m := range r.Match {
		parts[i] = string(AppendKeyPart(nil, m.Key))
	}
	return parts
}

// AppendKey is AppendRuleKey(dst, p.Domain, p.Rule, entries) with the start of the key, the
// escaped domain and rule name, and the escaped keys of the rule's entries worked out once by
// PlanRule: the simulator builds one on each key's first denial, for its reports.
func (p *RulePlan) AppendKey(dst []byte, entries []policy.Entry) []byte {
	if p.keyPrefix == nil {
		return AppendRuleKey(dst, p.Domain, p.Rule, entries)
	}
	return appendRuleEntries(append(dst, p.keyPrefix...), p.Rule, entries, p.matchKeys)
}

// Override returns the limits of a descriptor that overrides the rule's limits with requests
// per windowMs (Envoy's limit override): one limit of the rule's first algorithm, and for a
// sub-sharded rule each shard's share of it, as RuleLimits shares the rule's own limits (each
// shard's key would otherwise be given the whole override). The key of such a descriptor is its
// own.
func (p *RulePlan) Override(requests, windowMs int64) []Limit {
	return Shard([]Limit{{Algorithm: p.Limits[0].Algorithm, Requests: requests, Window: windowMs}}, int64(p.Shards))
}

// LimitOf converts a policy limit into the engine's and validates it. A burst equal to the
// requests is the default, 0. When validation fails it returns the converted limit with the
// error, so that a caller such as lint can explain the figures; an unknown algorithm gives the
// zero Limit and ParseAlgorithm's error.
func LimitOf(l policy.Limit) (Limit, error) {
	alg, err := ParseAlgorithm(string(l.Algorithm))
	if err != nil {
		return Limit{}, err
	}
	el := Limit{Algorithm: alg, Requests: l.Requests, Window: l.WindowMs, Burst: l.Burst}
	// Validated before the default burst becomes 0, so that an error names the burst the policy
	// has; the capacity, and so the verdict, is the same either way.
	err = el.Validate()
	if el.Burst == el.Requests {
		el.Burst = 0
	}
	return el, err
}

// RuleLimits returns the limits the engine enforces on each key of rule r, in r's order: LimitOf
// of every limit and, for a sub-sharded rule, each shard's share of it (Shard: 1/S of the
// requests and of the burst). An error names the limit by its index.
func RuleLimits(r *policy.Rule) ([]Limit, error) {
	if len(r.Limits) == 0 {
		return nil, errors.New("no limits")
	}
	out := make([]Limit, len(r.Limits))
	for i, l := range r.Limits {
		el, err := LimitOf(l)
		if err != nil {
			return nil, fmt.Errorf("limit %d: %w", i, err)
		}
		out[i] = el
	}
	shards := ruleShards(r)
	if shards < 2 {
		return out, nil
	}
	out = Shard(out, int64(shards))
	for i, l := range out {
		// A shard's share has other figures, and so another exact range (a gcd that changes).
		if err := l.Validate(); err != nil {
			return nil, fmt.Errorf("limit %d, each of %d sub-shards: %w", i, shards, err)
		}
	}
	return out, nil
}

// FallbackLimits returns the local token bucket that caps fail-open rule r while its store is
// unavailable, or nil when r has none (Decide then bounds it by default). A sub-sharded rule's
// keys are its shards' keys, so each gets its shard's share of the fallback, as of the rule's
// limits: the whole fallback on each shard's key let a user spread over the shards have it that
// many times over. When the bucket is invalid it returns it with the error, as LimitOf does.
func FallbackLimits(r *policy.Rule) ([]Limit, error) {
	if r.Fallback == nil {
		return nil, nil
	}
	fb := []Limit{{Algorithm: TokenBucket, Requests: r.Fallback.Requests, Window: r.Fallback.WindowMs}}
	if err := fb[0].Validate(); err != nil {
		return fb, fmt.Errorf("fallback: %w", err)
	}
	if shards := ruleShards(r); shards >= 2 {
		fb = Shard(fb, int64(shards))
		if err := fb[0].Validate(); err != nil {
			return fb, fmt.Errorf("fallback, each of %d sub-shards: %w", shards, err)
		}
	}
	return fb, nil
}

// RuleCost is what one request of r spends unless it says otherwise: the first limit's cost (every
// limit's, as policy.Validate requires them equal), at least 1.
func RuleCost(r *policy.Rule) int64 {
	if len(r.Limits) == 0 {
		return 1
	}
	return max(r.Limits[0].Cost, 1)
}

// RuleShards is the number of sub-shards r's keys are split into, 1 when it has none.
func RuleShards(r *policy.Rule) int64 {
	return max(int64(ruleShards(r)), 1)
}

// UsesDefaultFallback reports whether a store outage bounds r's keys by DefaultFallbackLimits:
// a fail-open rule without a fallback of its own.
func UsesDefaultFallback(r *policy.Rule) bool {
	return r.FailureMode != policy.FailClosed && r.Fallback == nil
}

// DefaultFallbackLimits returns the bound of a key of fail-open rule r, whose engine limits are
// limits, while the store is unavailable and the key has no recently admitted rate on this
// instance: this instance's share of the limits when the policy says how many gateways share
// them (each limit's requests and burst divided by r.Gateways, as Shard divides), else the
// limits themselves. It is the conservative default: a key never gets more locally than the
// store would have granted it, spread evenly over the gateways.
func DefaultFallbackLimits(r *policy.Rule, limits []Limit) []Limit {
	return Shard(limits, r.Gateways)
}

// LeaseSettings returns the LeaseConfig of a rule's lease settings, without Store, Clock and
// Dispatcher: a low watermark in tokens is LowWater, one in percent LowWaterPercent, and zero
// values take NewLeaseManager's defaults.
func LeaseSettings(p policy.Lease) LeaseConfig {
	return LeaseConfig{MinLease: p.Min, MaxLease: p.Max, Lookahead: p.LookaheadMs,
		LowWaterPercent: p.LowWatermarkPercent, LowWater: p.LowWatermark, TTL: p.TTLMs}
}

// AppendRuleKey appends to dst the store key of a descriptor that rule r of domain matched, and
// returns the extended slice. The key is AppendKey of the domain, the rule's name, then the key
// and the value of every matched entry and, for a sub-sharded rule, "shard" and the shard that
// the descriptor's trailing sub-shard entry picks (ShardOf its value; shard 0 when the
// descriptor has no such entry). The enforcer, simulate and journal replays all build keys
// here, so that one key names one bucket everywhere. It does not allocate when dst has room.
func AppendRuleKey(dst []byte, domain string, r *policy.Rule, entries []policy.Entry) []byte {
	return appendRuleEntries(AppendKey(dst, domain, r.Name), r, entries, nil)
}

// KeyParts returns what of a descriptor's entries the rule's key (AppendKey) is made of: the
// entries whose keys and values it holds, a prefix of entries, and for a sub-sharded rule the
// number of the sub-shard, -1 otherwise. A rule's descriptors have equal keys exactly when
// they have equal such entries and shards, since the key escapes them (one to one) after the
// rule's own domain and name; a caller can so tell keys apart without building them.
func (p *RulePlan) KeyParts(entries []policy.Entry) (matched []policy.Entry, shard int) {
	return keyParts(p.Rule, ruleShards(p.Rule), entries) // as AppendKey, for a plan PlanRule did not make too
}

// keyParts is KeyParts of rule r, whose number of sub-shards is shards (ruleShards).
func keyParts(r *policy.Rule, shards int, entries []policy.Entry) (matched []policy.Entry, shard int) {
	switch {
	case shards == 0:
		return entries, -1
	case len(entries) <= len(r.Match):
		return entries, 0 // without the sub-shard entry
	}
	return entries[:len(entries)-1], ShardOf(entries[len(entries)-1].Value, shards)
}

// appendRuleEntries appends the part of rule r's key that follows its domain and name. An
// entry whose key is that of r's match entry at its place takes matchKeys' part for it, when
// there is one (RulePlan.matchKeys).
func appendRuleEntries(dst []byte, r *policy.Rule, entries []policy.Entry, matchKeys []string) []byte {
	matched, shard := keyParts(r, ruleShards(r), entries)
	for i := range matched {
		e := &matched[i] // not a copy: the loop's calls would spill and reload it
		if i < len(matchKeys) && e.Key == r.Match[i].Key {
			dst = append(dst, matchKeys[i]...)
		} else {
			dst = AppendKeyPart(dst, e.Key)
		}
		dst = appendValuePart(dst, e.Value)
	}
	if shard >= 0 {
		dst = AppendKeyPart(dst, "shard")
		dst = strconv.AppendInt(append(dst, ':'), int64(shard), 10)
	}
	return dst
}

// MaxKeyValueLen is the longest descriptor value a store key holds as it is. A longer one (a
// header a client chose) is held as its SHA-256, "%sha256-<hex>": a key stays short whatever the
// request, and no value escaped as AppendKey escapes reads so ('%' always escapes to "%25").
// Refusing the call instead turned limiting off: Envoy's fail-open filter admits a request whose
// call fails, with every other descriptor of it.
const MaxKeyValueLen = 1024

// appendValuePart appends a descriptor value's part of a key: AppendKeyPart, or the value's
// digest when it is longer than MaxKeyValueLen.
func appendValuePart(dst []byte, v string) []byte {
	if len(v) <= MaxKeyValueLen {
		return AppendKeyPart(dst, v)
	}
	sum := sha256.Sum256([]byte(v))
	return hex.AppendEncode(append(dst, ":%sha256-"...), sum[:])
}

// AppendKeyPart appends one more part to a key that AppendKey or AppendRuleKey built: ':' and
// the part, escaped as AppendKey escapes.
func AppendKeyPart(dst []byte, part string) []byte {
	return appendEscaped(append(dst, ':'), part)
}

// ruleShards is r's number of sub-shard keys, 0 when it is not sub-sharded.
func ruleShards(r *policy.Rule) int {
	if !r.Sharded() {
		return 0
	}
	return r.SubShards.Count
}
