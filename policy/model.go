// Package policy owns the compiled rate-limit model: the typed form of a policy repository that
// every consumer (lint, diff, render, simulate, rollout and the enforcer) reads. It also owns the
// model's validation (Model.Validate, which the loader and the snapshot reader share), its
// versioned JSON snapshot and descriptor matching.
//
// The package does not import CUE: schema/ turns CUE into a *Model, and the enforcer loads a
// snapshot, so the sidecar binary carries no CUE evaluator.
//
// All durations are integer milliseconds and all amounts are integers; nothing in a decision path
// uses floating point.
package policy

import "fmt"

// Pos is a position in a user's policy file. Line and Col are 1-based; the zero Pos means unknown.
type Pos struct {
	File string `json:"file,omitempty"`
	Line int    `json:"line,omitempty"`
	Col  int    `json:"col,omitempty"`
}

// String formats p as file:line:col, dropping the parts that are unknown.
func (p Pos) String() string {
	switch {
	case p.File == "":
		return ""
	case p.Line == 0:
		return p.File
	case p.Col == 0:
		return fmt.Sprintf("%s:%d", p.File, p.Line)
	}
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col)
}

// Model is a compiled policy repository: every domain with defaults applied, durations in
// milliseconds and rules in precedence order.
type Model struct {
	// Domains are sorted by name.
	Domains []*Domain `json:"domains"`
}

// Domain is one rate-limit domain, the unit Envoy names in a RateLimitRequest.
type Domain struct {
	Name string `json:"name"`
	Pos  Pos    `json:"pos"`
	// Gateway describes the fleet that calls the enforcer for this domain.
	Gateway Gateway `json:"gateway"`
	// Sources say how a request becomes descriptor entries, in declaration order.
	Sources []*Source `json:"sources"`
	// CriticalPaths are path patterns (exact, or prefix ending in '*') on which fail-open is a
	// finding.
	CriticalPaths []string `json:"critical_paths,omitempty"`
	// Governance says what `rlctl lint --base` requires of a change to the domain, and how long
	// a rule dwells in a stage (see Dwell).
	Governance Governance `json:"governance,omitzero"`
	// Rollout holds the domain's settings for rlctl rollout: the share a promotion into canary
	// writes, and the evidence gates' thresholds, window and whether they are required. A domain
	// without the block has the zero value, which a snapshot leaves out, so its content_hash is
	// what it was before the block existed.
	Rollout RolloutSettings `json:"rollout,omitzero"`
	// Rules are in precedence order (see Lookup). They must not change after the first Lookup.
	Rules []*Rule `json:"rules"`

	// matcher is the descriptor tree that Lookup walks, built once from Rules.
	matcher matcher
}

// Gateway describes the gateways in front of the enforcer.
type Gateway struct {
	// RLSTimeoutMs is the gateway's timeout for a ShouldRateLimit call.
	RLSTimeoutMs int64 `json:"rls_timeout_ms"`
	// PerKeyQPSBudget is the store QPS one key may take before lint calls it hot.
	PerKeyQPSBudget int64 `json:"per_key_qps_budget"`
}

// Governance is a domain's rules for changing its policy: how long a rule stays in shadow and
// in soft before it advances, whether new and tightened rules must enter at shadow, and the
// reasons for removing rules on a critical path. The loader fills in the defaults (7 days each,
// new rules at shadow); a model built in Go holds what it is given, and its zero value has no
// dwell and no opt-out, since an opt-out needs OptOutReason.
type Governance struct {
	// ShadowDwellMs and SoftDwellMs are the least time a rule stays in shadow and in soft,
	// counted from the stage's since. Zero means no minimum.
	ShadowDwellMs int64 `json:"shadow_dwell_ms"`
	SoftDwellMs   int64 `json:"soft_dwell_ms"`
	// NewRulesAtShadow requires a new rule, or a rule whose limit got tighter, to enter at
	// shadow. It is off only with an OptOutReason.
	NewRulesAtShadow bool   `json:"new_rules_at_shadow"`
	OptOutReason     string `json:"opt_out_reason,omitempty"`
	// Removed gives, by rule name, the reason a rule on a critical path was removed.
	Removed map[string]string `json:"removed,omitempty"`
	// Pos is the governance block's position, or the domain's when it has none.
	Pos Pos `json:"pos"`
}

// DefaultCanaryPercent is the share of enforcer instances a promotion into canary writes when
// neither the domain (RolloutSettings.CanaryPercent) nor the command line says.
const DefaultCanaryPercent = 5

// RolloutSettings are a domain's settings for rlctl rollout. The zero value of each field is
// "not set": the loader fills in no defaults, so the command line's flags and rollout's own
// defaults apply, and flags given on the command line override what is set here.
type RolloutSettings struct {
	// CanaryPercent is the share of enforcer instances (1-100) that a promotion into canary
	// writes; 0 means DefaultCanaryPercent (see Canary).
	CanaryPercent int `json:"canary_percent,omitempty"`
	// Simulate configures the gate on a log replay's false positives, Prometheus the gate on
	// the enforcers' would-deny share.
	Simulate   GateSettings `json:"simulate,omitzero"`
	Prometheus GateSettings `json:"prometheus,omitzero"`
}

// GateSettings configure one evidence gate of a domain's rollouts.
type GateSettings struct {
	// MaxShareBP is the gate's threshold in basis points (50 is 0.5%): the simulate gate's
	// share of false positives, the prometheus gate's would-deny share. A measured share at most
	// this passes. Nil leaves the threshold to the command line (--max-false-positive).
	MaxShareBP *int64 `json:"max_share_bp,omitempty"`
	// WindowMs is the period the prometheus gate reads the enforcers' metrics over; 0 means the
	// stage's dwell (a day for canary). The simulate gate has no window.
	WindowMs int64 `json:"window_ms,omitempty"`
	// Required makes the gate block when its evidence is not given, as --require does.
	Required bool `json:"required,omitempty"`
}

// Canary returns the share of enforcer instances a promotion into canary writes: CanaryPercent,
// or DefaultCanaryPercent when it is not set.
func (s RolloutSettings) Canary() int {
	if s.CanaryPercent == 0 {
		return DefaultCanaryPercent
	}
	return s.CanaryPercent
}

// SourceKind names how a descriptor entry is produced from a request.
type SourceKind string

// The descriptor source kinds. Each maps onto one Envoy rate-limit action.
const (
	SourceHeader        SourceKind = "header"         // request_headers
	SourceJWTClaim      SourceKind = "jwt_claim"      // dynamic_metadata from jwt_authn
	SourceRemoteAddress SourceKind = "remote_address" // remote_address, optionally masked
	SourceGenericKey    SourceKind = "generic_key"    // generic_key
	SourcePathMatch     SourceKind = "path_match"     // header_value_match on :path
	SourceIdentity      SourceKind = "identity"       // the identity waterfall
)

// Mask says how a remote address is aggregated.
type Mask string

// The remote address masks.
const (
	MaskNone   Mask = "none"   // the whole address
	MaskSubnet Mask = "subnet" // /24 for IPv4, /64 for IPv6
)

// Source produces one descriptor entry, whose key is Key.
type Source struct {
	Key  string     `json:"key"`
	Kind SourceKind `json:"kind"`
	Pos  Pos        `json:"pos"`

	// Header is the request header name (SourceHeader).
	Header string `json:"header,omitempty"`
	// Claim, MetadataNamespace and MetadataKey locate a JWT claim in Envoy's dynamic metadata
	// (SourceJWTClaim).
	Claim             string `json:"claim,omitempty"`
	MetadataNamespace string `json:"metadata_namespace,omitempty"`
	MetadataKey       string `json:"metadata_key,omitempty"`
	// Mask applies to SourceRemoteAddress and to the subnet step of SourceIdentity.
	Mask Mask `json:"mask,omitempty"`
	// Value is the descriptor value of SourceGenericKey and SourcePathMatch.
	Value string `json:"value,omitempty"`
	// PathExact and PathPrefix select requests for SourcePathMatch; one is set. PathExact is
	// the path whatever its query string.
	PathExact  string `json:"path_exact,omitempty"`
	PathPrefix string `json:"path_prefix,omitempty"`
	// Waterfall lists the identity tiers in the order they are tried (SourceIdentity).
	Waterfall []IdentityStep `json:"waterfall,omitempty"`
}

// IdentityTier names one step of the identity waterfall.
type IdentityTier string

// The identity tiers, in their fixed order.
const (
	TierJWTSubject     IdentityTier = "jwt_subject"
	TierAPIKey         IdentityTier = "api_key"
	TierTLSFingerprint IdentityTier = "tls_fingerprint"
	TierSubnet         IdentityTier = "subnet"
)

// IdentityStep is one tier of the waterfall. The descriptor value it produces is
// "<tier>:<value>", so rules can match a tier with a wildcard such as "api_key:*".
type IdentityStep struct {
	Tier IdentityTier `json:"tier"`
	// Header carries the value for TierAPIKey and TierTLSFingerprint (for example x-api-key,
	// x-ja4); Claim for TierJWTSubject (normally "sub").
	Header string `json:"header,omitempty"`
	Claim  string `json:"claim,omitempty"`
}

// MatchKind is how a rule matches one descriptor entry, in envoyproxy/ratelimit's terms.
type MatchKind string

// The match kinds, from most to least specific.
const (
	MatchExact    MatchKind = "exact"    // key and value equal
	MatchWildcard MatchKind = "wildcard" // value ends in '*': key equal, value has the prefix
	MatchAny      MatchKind = "any"      // key only: any value
)

// Match is one level of a rule's nested descriptor match.
type Match struct {
	Key   string    `json:"key"`
	Value string    `json:"value,omitempty"` // as written, including a trailing '*'
	Kind  MatchKind `json:"kind"`
	Pos   Pos       `json:"pos"`
}

// Algorithm names a rate-limit algorithm.
type Algorithm string

// The algorithms.
const (
	TokenBucket   Algorithm = "token_bucket"
	SlidingWindow Algorithm = "sliding_window"
	FixedWindow   Algorithm = "fixed_window"
)

// Limit is one limit of a rule. A rule with several limits (burst and sustained) debits all or
// none.
type Limit struct {
	Requests int64 `json:"requests"`
	WindowMs int64 `json:"window_ms"`
	// Burst is the token bucket's capacity; it defaults to Requests.
	Burst     int64     `json:"burst"`
	Algorithm Algorithm `json:"algorithm"`
	// Cost is the tokens one request spends unless the request says otherwise (hits_addend).
	Cost int64 `json:"cost"`
	Pos  Pos   `json:"pos"`
}

// StageName is a rollout stage.
type StageName string

// The rollout stages, in order.
const (
	StageShadow  StageName = "shadow"
	StageSoft    StageName = "soft"
	StageCanary  StageName = "canary"
	StageEnforce StageName = "enforce"
)

// Stage is where a rule is in its rollout.
type Stage struct {
	Name StageName `json:"name"`
	// CanaryPercent is the share of enforcer instances (0-100) that enforce in StageCanary.
	CanaryPercent int `json:"canary_percent,omitempty"`
	// Since is the date (YYYY-MM-DD) the stage began.
	Since string `json:"since,omitempty"`
	// Hold, when set, says why the rule must not advance: rlctl rollout pause writes it, and
	// rollout plan promotes no held rule. It does not change what the rule does.
	Hold string `json:"hold,omitempty"`
	Pos  Pos    `json:"pos"`
}

// FailureMode says what a rule does when the store is unavailable.
type FailureMode string

// The failure modes.
const (
	FailOpen   FailureMode = "open"
	FailClosed FailureMode = "closed"
)

// Rate is a plain rate, used for the local fallback bucket.
type Rate struct {
	Requests int64 `json:"requests"`
	WindowMs int64 `json:"window_ms"`
}

// Lease holds a rule's token-leasing settings.
type Lease struct {
	Min         int64 `json:"min"`
	Max         int64 `json:"max"`
	LookaheadMs int64 `json:"lookahead_ms"`
	// LowWatermark is the local balance, in tokens, below which the next lease is prefetched.
	// When LowWatermarkPercent is set instead, the watermark is that percentage of the current
	// lease size.
	LowWatermark        int64 `json:"low_watermark,omitempty"`
	LowWatermarkPercent int64 `json:"low_watermark_percent,omitempty"`
	TTLMs               int64 `json:"ttl_ms"`
}

// SubShards splits a hot key into Count shard keys, chosen by a hash of the descriptor entry
// whose key is Attribute. That entry follows the rule's matched entries in the descriptor.
type SubShards struct {
	Count     int    `json:"count"`
	Attribute string `json:"attribute"`
}

// RegionShare is one region's share of a rule's quota.
type RegionShare struct {
	Region  string `json:"region"`
	Percent int    `json:"percent"`
}

// The settings whose positions Rule.SettingPos holds.
const (
	SettingFailure         = "failure"
	SettingStoreTimeout    = "store_timeout"
	SettingLowWatermark    = "lease.low_watermark"
	SettingExpectedPeakQPS = "expected_peak_qps"
	SettingRegions         = "regions"
)

// Rule is one compiled rate-limit rule.
type Rule struct {
	// Name is unique within its domain.
	Name string `json:"name"`
	Pos  Pos    `json:"pos"`
	// SettingPos holds where some of the rule's settings are written, in the rule or in its
	// domain's defaults, for lint to point at (PosOf). It is not part of a snapshot: a rule
	// read from one has none.
	SettingPos map[string]Pos `json:"-"`
	// Match is the nested descriptor match, outermost entry first.
	Match  []Match `json:"match"`
	Limits []Limit `json:"limits"`
	Stage  Stage   `json:"stage"`
	// Reason is the author's reason for a change to the rule, which governance lint reads: a
	// rule on a critical path that goes from fail-closed to fail-open needs one.
	Reason string `json:"reason,omitempty"`

	FailureMode FailureMode `json:"failure_mode"`
	// FailureReason explains a fail-closed choice.
	FailureReason string `json:"failure_reason,omitempty"`
	// Fallback is the local bucket that caps a fail-open rule while the store is unavailable;
	// nil leaves the engine's default bound (engine.RulePlan.Decide).
	Fallback       *Rate `json:"fallback,omitempty"`
	StoreTimeoutMs int64 `json:"store_timeout_ms"`
	Lease          Lease `json:"lease"`

	SubShards *SubShards    `json:"sub_shards,omitempty"`
	Regions   []RegionShare `json:"regions,omitempty"`
	Owner     string        `json:"owner,omitempty"`

	// ExpectedPeakQPS and Gateways are capacity-planning figures that lint uses.
	ExpectedPeakQPS int64 `json:"expected_peak_qps,omitempty"`
	Gateways        int64 `json:"gateways,omitempty"`
	// DriftToleranceBP is the accepted over-admission, in basis points of the limit (200 = 2%).
	DriftToleranceBP int64 `json:"drift_tolerance_bp"`
	// Legit lists identities known to be legitimate (descriptor values, such as a tenant or an
	// "api_key:..." identity); simulate counts their denials as false positives.
	Legit []string `json:"legit,omitempty"`
}

// Domain returns the domain named name, or nil.
func (m *Model) Domain(name string) *Domain {
	for _, d := range m.Domains {
		if d.Name == name {
			return d
		}
	}
	return nil
}

// Source returns the source producing descriptor key key, or nil.
func (d *Domain) Source(key string) *Source {
	for _, s := range d.Sources {
		if s.Key == key {
			return s
		}
	}
	return nil
}

// FailureModeHeader is the gRPC metadata key by which a caller of the enforcer asks it to answer
// only the descriptors of rules with one failure mode ("open" or "closed"). Envoy's
// failure_mode_deny is a setting of a whole rate-limit filter, so `rlctl render --target envoy`
// renders two filters, one per failure mode, each sending this key in its gRPC service's
// initial_metadata. A descriptor can reach both filters (rules of both modes share a descriptor
// shape); the filter of the other mode gets OK for it, as for a descriptor no rule matches, so no
// request is counted twice. Without the key, every descriptor is answered.
const FailureModeHeader = "x-rlctl-failure-mode"

// PosOf returns where the rule's setting (one of the Setting constants) is written, or the
// rule's own position when that is unknown: a setting left at its built-in default, or a rule
// read from a snapshot.
func (r *Rule) PosOf(setting string) Pos {
	if p, ok := r.SettingPos[setting]; ok {
		return p
	}
	return r.Pos
}
