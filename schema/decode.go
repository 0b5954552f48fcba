package schema

import (
	"fmt"
	"math/big"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"cuelang.org/go/cue"

	"github.com/rlctl/rlctl/policy"
)

// Built-in defaults, used when neither a rule nor its domain's defaults set a field.
const (
	DefaultRLSTimeoutMs        = 20 // Envoy's rate limit filter default
	DefaultPerKeyQPSBudget     = 10000
	DefaultStoreTimeoutMs      = 5
	DefaultLeaseMin            = 5
	DefaultLeaseMax            = 500
	DefaultLeaseLookaheadMs    = 250
	DefaultLowWatermarkPercent = 20
	DefaultLeaseTTLMs          = 2000
	DefaultDriftToleranceBP    = 200 // 2%
	DefaultJWTNamespace        = "envoy.filters.http.jwt_authn"
	DefaultJWTMetadataKey      = "jwt_payload"
	DefaultSubjectClaim        = "sub"
	DefaultAPIKeyHeader        = "x-api-key"
	DefaultFingerprintHeader   = "x-ja4"
	DefaultDwellMs             = 7 * 24 * 3600 * 1000 // governance: 7 days in shadow, 7 in soft
)

// decoder turns the validated user value into the model, collecting problems as it goes. It reads
// the user's value alone (the schema adds no values), so every position it takes is the user's.
type decoder struct {
	probs  Problems
	values valueIndex
}

// decode decodes the model and validates it (policy.Model.Validate). When decoding found
// problems, it returns no model and only the model's problems that are lint checks are added: the
// rest restate what decoding already reported about a value, such as a window out of range. When
// decoding found none, it returns the model with the problems Validate found in it.
func decode(user cue.Value, values valueIndex) (*policy.Model, Problems) {
	d := &decoder{values: values}
	// Slices are empty rather than nil, so a snapshot says [] where there is nothing.
	m := &policy.Model{Domains: []*policy.Domain{}}
	for _, f := range fields(objectOf(user).get("domains")) {
		d.name("domain", f.v, f.name)
		m.Domains = append(m.Domains, d.domain(f.name, f.v))
	}
	sort.Slice(m.Domains, func(i, j int) bool { return m.Domains[i].Name < m.Domains[j].Name })
	if len(d.probs) == 0 {
		return m, m.Validate()
	}
	for _, p := range m.Validate() {
		if p.Check != "" {
			d.probs = append(d.probs, p)
		}
	}
	d.probs.Sort()
	return nil, d.probs
}

// validName is what a domain, rule, source or region name must look like. The schema's #Name
// says the same for the names a value refers to (match keys, sub_shards attribute); the loader
// checks field names here, since a schema pattern on a field name can only say "field not
// allowed".
var validName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]*$`)

// name reports a field name that is not a valid name, at the field.
func (d *decoder) name(what string, v cue.Value, name string) {
	if !validName.MatchString(name) {
		d.probs = append(d.probs, problemf(firstPos(v), path(v),
			"%s name %q must start with a letter or '_' and hold only letters, digits, '_', '.' and '-'", what, name))
	}
}

type field struct {
	name string
	v    cue.Value
}

// fields lists the regular fields of v in order.
func fields(v cue.Value) []field {
	if !v.Exists() {
		return nil
	}
	it, err := v.Fields()
	if err != nil {
		return nil
	}
	var fs []field
	for it.Next() {
		fs = append(fs, field{it.Selector().Unquoted(), it.Value()})
	}
	return fs
}

func elems(v cue.Value) []cue.Value {
	if !v.Exists() {
		return nil
	}
	it, err := v.List()
	if err != nil {
		return nil
	}
	var es []cue.Value
	for it.Next() {
		es = append(es, it.Value())
	}
	return es
}

func pos(v cue.Value) policy.Pos { return toPos(v.Pos()) }

// firstPos is pos for a struct that may be spread over files: it returns the earliest of its
// positions, so a domain points at its first declaration rather than its last.
func firstPos(v cue.Value) policy.Pos {
	best := pos(v)
	if op, vs := v.Expr(); op == cue.AndOp {
		for _, x := range vs {
			if p := pos(x); p.File != "" && (best.File == "" || posLess(p, best)) {
				best = p
			}
		}
	}
	return best
}

func posLess(a, b policy.Pos) bool { return a.Compare(b) < 0 }

// path formats v's path the way CUE's errors do: labels joined by dots, list indexes as numbers.
func path(v cue.Value) string {
	sels := v.Path().Selectors()
	labels := make([]string, len(sels))
	for i, s := range sels {
		if s.Type() == cue.IndexLabel {
			labels[i] = strconv.Itoa(s.Index())
		} else {
			labels[i] = s.String()
		}
	}
	return cuePath(labels)
}

// errorf reports a problem with the value v, at the value (see valueIndex).
func (d *decoder) errorf(v cue.Value, format string, args ...any) {
	d.probs = append(d.probs, problemf(d.values.value(pos(v)), path(v), format, args...))
}

// An object is a struct's regular fields by name, read in one pass. The decoder reads fields
// from objects rather than with LookupPath, which sets up a fresh evaluation context and, for a
// missing field, an error value on every call: with thousands of rules that was most of decode's
// time and memory.
type object map[string]cue.Value

func objectOf(v cue.Value) object {
	fs := fields(v)
	o := make(object, len(fs))
	for _, f := range fs {
		o[f.name] = f.v
	}
	return o
}

// get returns the field name, or the zero Value (which does not exist) when there is none.
func (o object) get(name string) cue.Value { return o[name] }

// setting returns a rule's field, or its domain's default, whichever exists first.
func setting(rule, defaults object, name string) cue.Value {
	if f := rule.get(name); f.Exists() {
		return f
	}
	return defaults.get(name)
}

func (d *decoder) str(v cue.Value) string {
	if !v.Exists() {
		// Validation requires every field read this way, so this is a loader bug, not a
		// policy's; report it rather than panic.
		d.errorf(v, "internal error: missing value")
		return ""
	}
	s, err := v.String()
	if err != nil {
		d.errorf(v, "%v", err)
	}
	return s
}

func (d *decoder) optStr(v cue.Value, def string) string {
	if !v.Exists() {
		return def
	}
	return d.str(v)
}

func (d *decoder) int(v cue.Value, def int64) int64 {
	if !v.Exists() {
		return def
	}
	n, err := v.Int64()
	if err != nil {
		d.errorf(v, "%v", err)
	}
	return n
}

// duration parses a duration field, or returns def when it is absent. ok is false when the
// field is there but not a duration (the problem is reported).
func (d *decoder) duration(v cue.Value, def int64) (ms int64, ok bool) {
	if !v.Exists() {
		return def, true
	}
	ms, err := ParseDuration(d.str(v))
	if err != nil {
		d.errorf(v, "%v", err)
		return 0, false
	}
	return ms, true
}

// ms is duration for fields whose range the schema already states (#PositiveDuration).
func (d *decoder) ms(v cue.Value, def int64) int64 {
	ms, _ := d.duration(v, def)
	return ms
}

// window parses a limit's or a fallback's window and checks its range, 1s to 365d.
func (d *decoder) window(v cue.Value) int64 {
	ms, ok := d.duration(v, 0)
	if ok && (ms < minWindowMs || ms > policy.MaxWindowMs) {
		d.errorf(v, "window %s is out of range: a window runs from 1s to 365d", d.str(v))
	}
	return ms
}

func (d *decoder) strings(v cue.Value) []string {
	var ss []string
	for _, e := range elems(v) {
		ss = append(ss, d.str(e))
	}
	return ss
}

func (d *decoder) domain(name string, v cue.Value) *policy.Domain {
	dom := &policy.Domain{Name: name, Pos: firstPos(v)}
	o := objectOf(v)
	gw := objectOf(o.get("gateway"))
	dom.Gateway = policy.Gateway{
		RLSTimeoutMs:    d.ms(gw.get("rls_timeout"), DefaultRLSTimeoutMs),
		PerKeyQPSBudget: d.int(gw.get("per_key_qps_budget"), DefaultPerKeyQPSBudget),
	}
	dom.Sources = []*policy.Source{}
	for _, f := range fields(o.get("sources")) {
		d.name("source", f.v, f.name)
		dom.Sources = append(dom.Sources, d.source(f.name, f.v))
	}
	dom.CriticalPaths = d.strings(o.get("critical_paths"))
	dom.Governance = d.governance(o.get("governance"), dom.Pos)
	dom.Rollout = d.rollout(o.get("rollout"))
	defaults := objectOf(o.get("defaults"))
	leaseDefaults := objectOf(defaults.get("lease"))
	dom.Rules = []*policy.Rule{}
	for _, f := range fields(o.get("rules")) {
		d.name("rule", f.v, f.name)
		dom.Rules = append(dom.Rules, d.rule(f.name, f.v, defaults, leaseDefaults))
	}
	// Declared order is file order, then position in the file (CUE's field order across files is
	// not), and it decides between wildcards at the same level.
	sort.SliceStable(dom.Rules, func(i, j int) bool { return posLess(dom.Rules[i].Pos, dom.Rules[j].Pos) })
	policy.SortRules(dom.Rules)
	return dom
}

// governance decodes a domain's governance block, with its defaults when there is none.
func (d *decoder) governance(v cue.Value, domainPos policy.Pos) policy.Governance {
	g := policy.Governance{Pos: domainPos}
	if v.Exists() {
		g.Pos = pos(v)
	}
	o := objectOf(v)
	dwell := objectOf(o.get("dwell"))
	g.ShadowDwellMs, _ = d.duration(dwell.get("shadow"), DefaultDwellMs)
	g.SoftDwellMs, _ = d.duration(dwell.get("soft"), DefaultDwellMs)
	g.NewRulesAtShadow = true
	if ns := o.get("new_rules_at_shadow"); ns.Exists() {
		b, err := ns.Bool()
		if err != nil {
			d.errorf(ns, "%v", err)
		}
		g.NewRulesAtShadow = b
	}
	g.OptOutReason = d.optStr(o.get("opt_out_reason"), "")
	if !g.NewRulesAtShadow && strings.TrimSpace(g.OptOutReason) == "" {
		d.errorf(o.get("new_rules_at_shadow"), "opt_out_reason is required when new_rules_at_shadow is false")
	}
	for _, f := range fields(o.get("removed")) {
		if g.Removed == nil {
			g.Removed = map[string]string{}
		}
		g.Removed[f.name] = d.str(f.v)
	}
	return g
}

// rollout decodes a domain's rollout block. It fills in no defaults: what is not set stays zero,
// for the command line's flags and rollout's defaults to apply, and a domain without the block
// keeps its snapshot's content_hash.
func (d *decoder) rollout(v cue.Value) policy.RolloutSettings {
	o := objectOf(v)
	gates := objectOf(o.get("gates"))
	sim, prom := objectOf(gates.get("simulate")), objectOf(gates.get("prometheus"))
	return policy.RolloutSettings{
		CanaryPercent: int(d.int(o.get("canary_percent"), 0)),
		Simulate: policy.GateSettings{
			MaxShareBP: d.optBasisPoints(sim.get("max_false_positive")),
			Required:   d.bool(sim.get("required"), false),
		},
		Prometheus: policy.GateSettings{
			MaxShareBP: d.optBasisPoints(prom.get("max_would_deny")),
			WindowMs:   d.ms(prom.get("window"), 0),
			Required:   d.bool(prom.get("required"), false),
		},
	}
}

func (d *decoder) bool(v cue.Value, def bool) bool {
	if !v.Exists() {
		return def
	}
	b, err := v.Bool()
	if err != nil {
		d.errorf(v, "%v", err)
	}
	return b
}

// optBasisPoints is basisPoints for an optional field: nil when it is absent.
func (d *decoder) optBasisPoints(v cue.Value) *int64 {
	if !v.Exists() {
		return nil
	}
	bp := d.basisPoints(v)
	return &bp
}

func (d *decoder) source(key string, v cue.Value) *policy.Source {
	o := objectOf(v)
	s := &policy.Source{Key: key, Pos: pos(v), Kind: policy.SourceKind(d.str(o.get("kind")))}
	switch s.Kind {
	case policy.SourceHeader:
		s.Header = strings.ToLower(d.str(o.get("header")))
	case policy.SourceJWTClaim:
		s.Claim = d.str(o.get("claim"))
		s.MetadataNamespace = d.optStr(o.get("metadata_namespace"), DefaultJWTNamespace)
		s.MetadataKey = d.optStr(o.get("metadata_key"), DefaultJWTMetadataKey)
	case policy.SourceRemoteAddress:
		s.Mask = policy.Mask(d.optStr(o.get("mask"), string(policy.MaskNone)))
	case policy.SourceGenericKey:
		s.Value = d.str(o.get("value"))
	case policy.SourcePathMatch:
		s.Value = d.str(o.get("value"))
		s.PathExact = d.optStr(o.get("exact"), "")
		s.PathPrefix = d.optStr(o.get("prefix"), "")
		if (s.PathExact == "") == (s.PathPrefix == "") {
			d.errorf(v, "path_match source needs exactly one of exact and prefix")
		}
	case policy.SourceIdentity:
		s.Mask = policy.MaskSubnet
		s.Waterfall = d.waterfall(o.get("waterfall"))
	}
	return s
}

var tierOrder = map[policy.IdentityTier]int{
	policy.TierJWTSubject:     0,
	policy.TierAPIKey:         1,
	policy.TierTLSFingerprint: 2,
	policy.TierSubnet:         3,
}

func (d *decoder) waterfall(v cue.Value) []policy.IdentityStep {
	if !v.Exists() {
		return []policy.IdentityStep{
			{Tier: policy.TierJWTSubject, Claim: DefaultSubjectClaim},
			{Tier: policy.TierAPIKey, Header: DefaultAPIKeyHeader},
			{Tier: policy.TierTLSFingerprint, Header: DefaultFingerprintHeader},
			{Tier: policy.TierSubnet},
		}
	}
	var steps []policy.IdentityStep
	last := -1
	for _, e := range elems(v) {
		o := objectOf(e)
		st := policy.IdentityStep{Tier: policy.IdentityTier(d.str(o.get("tier")))}
		switch st.Tier {
		case policy.TierJWTSubject:
			st.Claim = d.optStr(o.get("claim"), DefaultSubjectClaim)
		case policy.TierAPIKey:
			st.Header = strings.ToLower(d.optStr(o.get("header"), DefaultAPIKeyHeader))
		case policy.TierTLSFingerprint:
			st.Header = strings.ToLower(d.optStr(o.get("header"), DefaultFingerprintHeader))
		}
		if o := tierOrder[st.Tier]; o <= last {
			d.errorf(e, "identity tier %s is out of order: the waterfall is jwt_subject, api_key, tls_fingerprint, subnet, each at most once", st.Tier)
		} else {
			last = o
		}
		steps = append(steps, st)
	}
	if len(steps) == 0 {
		d.errorf(v, "identity waterfall needs at least one tier")
	}
	return steps
}

func (d *decoder) rule(name string, v cue.Value, defaults, leaseDefaults object) *policy.Rule {
	r := &policy.Rule{Name: name, Pos: firstPos(v)}
	o := objectOf(v)
	for _, e := range elems(o.get("match")) {
		eo := objectOf(e)
		m := policy.Match{Key: d.str(eo.get("key")), Pos: pos(e), Kind: policy.MatchAny}
		if val := eo.get("value"); val.Exists() {
			m.Value = d.str(val)
			m.Kind = policy.MatchExact
			if strings.HasSuffix(m.Value, "*") {
				m.Kind = policy.MatchWildcard
			}
		}
		r.Match = append(r.Match, m)
	}
	for _, e := range elems(o.get("limits")) {
		r.Limits = append(r.Limits, d.limit(e))
	}
	r.SettingPos = map[string]policy.Pos{}
	for field, v := range map[string]cue.Value{
		policy.SettingFailure:         setting(o, defaults, "failure"),
		policy.SettingStoreTimeout:    setting(o, defaults, "store_timeout"),
		policy.SettingLowWatermark:    setting(objectOf(o.get("lease")), leaseDefaults, "low_watermark"),
		policy.SettingExpectedPeakQPS: setting(o, defaults, "expected_peak_qps"),
		policy.SettingRegions:         setting(o, defaults, "regions"),
	} {
		if p := pos(v); v.Exists() && p.File != "" {
			r.SettingPos[field] = p
		}
	}
	r.Reason = d.optStr(o.get("reason"), "")
	d.stage(r, setting(o, defaults, "stage"))
	d.failure(r, setting(o, defaults, "failure"))
	r.StoreTimeoutMs = d.ms(setting(o, defaults, "store_timeout"), DefaultStoreTimeoutMs)
	r.Lease = d.lease(objectOf(o.get("lease")), leaseDefaults)
	if ss := setting(o, defaults, "sub_shards"); ss.Exists() {
		so := objectOf(ss)
		r.SubShards = &policy.SubShards{
			Count:     int(d.int(so.get("count"), 0)),
			Attribute: d.str(so.get("attribute")),
		}
	}
	for _, f := range fields(setting(o, defaults, "regions")) {
		d.name("region", f.v, f.name)
		r.Regions = append(r.Regions, policy.RegionShare{Region: f.name, Percent: int(d.int(f.v, 0))})
	}
	r.Owner = d.optStr(setting(o, defaults, "owner"), "")
	r.ExpectedPeakQPS = d.int(setting(o, defaults, "expected_peak_qps"), 0)
	r.Gateways = d.int(setting(o, defaults, "gateways"), 0)
	r.DriftToleranceBP = DefaultDriftToleranceBP
	if dt := setting(o, defaults, "drift_tolerance"); dt.Exists() {
		r.DriftToleranceBP = d.basisPoints(dt)
	}
	r.Legit = d.strings(setting(o, defaults, "legit"))
	return r
}

func (d *decoder) limit(v cue.Value) policy.Limit {
	o := objectOf(v)
	l := policy.Limit{
		Requests:  d.int(o.get("requests"), 0),
		Algorithm: policy.Algorithm(d.optStr(o.get("algorithm"), string(policy.TokenBucket))),
		Cost:      d.int(o.get("cost"), 1),
		Pos:       pos(v),
	}
	l.Burst = d.int(o.get("burst"), l.Requests)
	// A window admits requests per window and holds no tokens, so a burst would be ignored:
	// say so rather than accept a setting that does nothing.
	if b := o.get("burst"); b.Exists() && l.Algorithm != policy.TokenBucket {
		d.errorf(b, "burst applies to token_bucket only: a %s admits at most requests per window; remove burst, or set algorithm: \"token_bucket\"", l.Algorithm)
		l.Burst = l.Requests
	}
	l.WindowMs = d.window(o.get("window"))
	return l
}

func (d *decoder) stage(r *policy.Rule, v cue.Value) {
	if !v.Exists() {
		r.Stage = policy.Stage{Name: policy.StageEnforce}
		return
	}
	o := objectOf(v)
	r.Stage = policy.Stage{
		Name:          policy.StageName(d.str(o.get("name"))),
		CanaryPercent: int(d.int(o.get("percent"), 0)),
		Since:         d.optStr(o.get("since"), ""),
		Hold:          d.optStr(o.get("hold"), ""),
		Pos:           pos(v),
	}
	// The schema checks the form YYYY-MM-DD; this checks the day exists.
	if since := r.Stage.Since; since != "" {
		if _, err := time.Parse(time.DateOnly, since); err != nil {
			d.errorf(o.get("since"), "since %q is not a calendar date", since)
		}
	}
}

func (d *decoder) failure(r *policy.Rule, v cue.Value) {
	r.FailureMode = policy.FailOpen
	if !v.Exists() {
		return
	}
	o := objectOf(v)
	r.FailureMode = policy.FailureMode(d.str(o.get("mode")))
	r.FailureReason = d.optStr(o.get("reason"), "")
	if fb := o.get("fallback"); fb.Exists() {
		fo := objectOf(fb)
		r.Fallback = &policy.Rate{Requests: d.int(fo.get("requests"), 0), WindowMs: d.window(fo.get("window"))}
	}
}

// lease merges the rule's lease settings over the domain's, field by field.
func (d *decoder) lease(rule, defaults object) policy.Lease {
	l := policy.Lease{
		Min:         d.int(setting(rule, defaults, "min"), DefaultLeaseMin),
		Max:         d.int(setting(rule, defaults, "max"), DefaultLeaseMax),
		LookaheadMs: d.ms(setting(rule, defaults, "lookahead"), DefaultLeaseLookaheadMs),
		TTLMs:       d.ms(setting(rule, defaults, "ttl"), DefaultLeaseTTLMs),
	}
	switch lw := setting(rule, defaults, "low_watermark"); {
	case !lw.Exists():
		l.LowWatermarkPercent = DefaultLowWatermarkPercent
	case lw.Kind() == cue.StringKind:
		n, _ := strconv.ParseInt(strings.TrimSuffix(d.str(lw), "%"), 10, 64)
		l.LowWatermarkPercent = n
	default:
		l.LowWatermark = d.int(lw, 0)
	}
	return l
}

// basisPoints converts a percentage such as 2 or 0.25 into basis points, exactly.
func (d *decoder) basisPoints(v cue.Value) int64 {
	name := "percent"
	if sels := v.Path().Selectors(); len(sels) > 0 {
		name = sels[len(sels)-1].String()
	}
	var x big.Rat
	if _, ok := x.SetString(fmt.Sprint(v)); !ok {
		d.errorf(v, "%s must be a number", name)
		return 0
	}
	x.Mul(&x, big.NewRat(100, 1))
	if !x.IsInt() {
		d.errorf(v, "%s has more than two decimals", name)
		return 0
	}
	return x.Num().Int64()
}
