package render

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	xdscorev3 "github.com/cncf/xds/go/xds/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	metadatav3 "github.com/envoyproxy/go-control-plane/envoy/type/metadata/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/schema"
)

// The rate-limit filter stages. Envoy's failure_mode_deny is a setting of a whole filter, so each
// failure mode gets a filter of its own, and each rule's rate_limits entries the stage of its
// mode's filter.
const (
	StageClosed uint32 = 0 // fail-closed rules: the filter denies when the sidecar is unreachable
	StageOpen   uint32 = 1 // fail-open rules: the filter admits when the sidecar is unreachable
)

// The request headers that the rlctl_identity filter (envoyIdentityFilter) sets before the
// rate-limit filters run, from values that header matchers cannot see: the client address Envoy
// trusts, and JWT claims that jwt_authn verified. It removes what a client sent under these names
// first, so a client cannot forge them.
const (
	HeaderRemoteAddress = "x-rlctl-remote-address"
	headerClaimPrefix   = "x-rlctl-jwt-"
)

// FormatterRuntimeFlag is the runtime feature that lets header_value_match actions format their
// descriptor_value (%REQ(...)%, %DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT(24)%). The identity
// waterfall's entries need it: their values are "<tier>:<value>".
const FormatterRuntimeFlag = "envoy.reloadable_features.enable_formatter_for_ratelimit_action_descriptor_value"

// domainActions is a domain's rate_limits and what producing them needs from the rest of the
// Envoy configuration.
type domainActions struct {
	rateLimits []*routev3.RateLimit
	// needs says which of the rlctl_identity filter's headers and features the actions read.
	remoteAddress bool            // HeaderRemoteAddress
	claims        map[string]bool // claim → header, for the jwt_subject tier
	formatter     bool            // FormatterRuntimeFlag
	// guarded are the request headers that fail-closed rules' header matches read: the
	// identity filter collapses each to its first value (identityFilter).
	guarded map[string]bool
	// jwtNamespace and jwtPayload locate the verified JWT payload in dynamic metadata: the
	// domain's jwt_claim sources', else jwt_authn's filter name and rlctl's default
	// payload_in_metadata.
	jwtNamespace, jwtPayload string
	modes                    map[policy.FailureMode]bool
}

// guardedHeaders are the names in guarded, sorted.
func (da *domainActions) guardedHeaders() []string {
	hs := make([]string, 0, len(da.guarded))
	for h := range da.guarded {
		hs = append(hs, h)
	}
	slices.Sort(hs)
	return hs
}

// claimHeader is the request header that carries a verified JWT claim for the identity waterfall:
// the prefix and the claim, when its name is lower case and of the bytes a header name may hold,
// else the claim's bytes that may be there, lower-cased, and a hash of the claim, so that
// "https://acme.com/uid" gets a valid name and "UID" and "uid" get two headers.
func claimHeader(claim string) string {
	plain := true
	var b strings.Builder
	for i := 0; i < len(claim); i++ {
		c := claim[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_', c == '.':
			b.WriteByte(c)
		case 'A' <= c && c <= 'Z':
			b.WriteByte(c + 'a' - 'A')
			plain = false
		default:
			b.WriteByte('-')
			plain = false
		}
	}
	if plain {
		return headerClaimPrefix + claim
	}
	h := fnv.New32a()
	h.Write([]byte(claim))
	return fmt.Sprintf("%s%s-%08x", headerClaimPrefix, b.String(), h.Sum32())
}

// actionsFor renders the rate_limits entries of d: for each request they produce exactly the
// descriptors that the model's sources and rule shapes produce (simulate.Matcher's), each on the
// stage of the failure mode of the rule it selects, except that a guarded shape leaves out the
// descriptors no rule selects. See the package tests' fidelity check.
func actionsFor(d *policy.Domain, findings *[]Finding) (*domainActions, error) {
	da := &domainActions{claims: map[string]bool{}, guarded: map[string]bool{}, modes: map[policy.FailureMode]bool{},
		jwtNamespace: schema.DefaultJWTNamespace, jwtPayload: schema.DefaultJWTMetadataKey}
	for _, s := range d.Sources {
		if s.Kind == policy.SourceJWTClaim {
			da.jwtNamespace, da.jwtPayload = s.MetadataNamespace, s.MetadataKey
			break
		}
	}
	type shape struct {
		keys  []string
		rules []*policy.Rule
	}
	var shapes []*shape
	byKeys := map[string]*shape{}
	for _, mode := range []policy.FailureMode{policy.FailClosed, policy.FailOpen} {
		for _, r := range d.Rules {
			if r.FailureMode != mode {
				continue
			}
			da.modes[mode] = true
			keys := r.DescriptorKeys()
			sig := string(mode) + "\x00" + strings.Join(keys, "\x00")
			s := byKeys[sig]
			if s == nil {
				s = &shape{keys: keys}
				byKeys[sig] = s
				shapes = append(shapes, s)
			}
			s.rules = append(s.rules, r)
		}
	}
	openShapes := map[string][]*policy.Rule{}
	for _, r := range d.Rules {
		if r.FailureMode != policy.FailClosed {
			sig := strings.Join(r.DescriptorKeys(), "\x00")
			openShapes[sig] = append(openShapes[sig], r)
		}
	}
	for _, s := range shapes {
		mode := s.rules[0].FailureMode
		stage := StageOpen
		if mode == policy.FailClosed {
			stage = StageClosed
		}
		// A fail-closed shape is guarded when it can be: each rule's entries become header
		// matches of its exact values, so that while the sidecar is unreachable Envoy denies only
		// the requests that a fail-closed rule covers.
		var levelSets [][][]*routev3.RateLimit_Action
		guarded := mode == policy.FailClosed && allGuardable(d, s.rules)
		if guarded {
			for _, r := range s.rules {
				levels, err := da.levels(d, s.keys, r)
				if err != nil {
					return nil, err
				}
				levelSets = append(levelSets, levels)
			}
		} else {
			levels, err := da.levels(d, s.keys, nil)
			if err != nil {
				return nil, err
			}
			levelSets = append(levelSets, levels)
			others := openShapes[strings.Join(s.keys, "\x00")]
			switch {
			case mode != policy.FailClosed:
			case len(others) > 0:
				*findings = append(*findings, Finding{Severity: Approximation, Domain: d.Name, Rule: s.rules[0].Name, Pos: s.rules[0].Pos,
					Message: fmt.Sprintf("fail-closed rules %s share the descriptor shape [%s] with fail-open rules %s and cannot be told apart by header matches (a level is not an exact header value): while the sidecar is unreachable, Envoy denies those fail-open rules' requests too",
						ruleNames(s.rules), strings.Join(s.keys, ", "), ruleNames(others))})
			case !coversShape(s.rules):
				// The unguarded actions produce the shape's descriptor for every value of its
				// levels, and the fail-closed filter is called for each: no rule matching every
				// value, the filter denies requests that no fail-closed rule covers.
				*findings = append(*findings, Finding{Severity: Approximation, Domain: d.Name, Rule: s.rules[0].Name, Pos: s.rules[0].Pos,
					Message: fmt.Sprintf("fail-closed rules %s cannot be guarded by header matches (a level is a wildcard, or not an exact header value): Envoy's fail-closed filter calls the sidecar for every request with [%s], so while the sidecar is unreachable it denies requests that no fail-closed rule covers",
						ruleNames(s.rules), strings.Join(s.keys, ", "))})
			}
		}
		for _, levels := range levelSets {
			for _, actions := range product(levels) {
				da.rateLimits = append(da.rateLimits, &routev3.RateLimit{Stage: wrapperspb.UInt32(stage), Actions: actions})
			}
		}
	}
	return da, nil
}

// checkLiterals reports literal descriptor values that contain '%': with FormatterRuntimeFlag set
// for the identity waterfall, Envoy parses every header_value_match and generic_key value as a
// format string, so such a value would not reach the enforcer as written. The flag is the whole
// Envoy's: every domain is checked when any domain needs it (renderEnvoy).
func (da *domainActions) checkLiterals(d *policy.Domain, findings *[]Finding) {
	for _, s := range d.Sources {
		if (s.Kind == policy.SourceGenericKey || s.Kind == policy.SourcePathMatch) && strings.Contains(s.Value, "%") {
			*findings = append(*findings, Finding{Severity: Approximation, Domain: d.Name, Pos: s.Pos,
				Message: fmt.Sprintf("source %s: value %q contains '%%', which Envoy's descriptor formatter (enabled for the identity waterfall) would parse", s.Key, s.Value)})
		}
	}
	for _, r := range d.Rules {
		for _, m := range r.Match {
			if src := d.Source(m.Key); src != nil && src.Kind == policy.SourceHeader && r.FailureMode == policy.FailClosed && strings.Contains(m.Value, "%") {
				*findings = append(*findings, Finding{Severity: Approximation, Domain: d.Name, Rule: r.Name, Pos: m.Pos,
					Message: fmt.Sprintf("match value %q contains '%%', which Envoy's descriptor formatter (enabled for the identity waterfall) would parse", m.Value)})
			}
		}
	}
}

func ruleNames(rs []*policy.Rule) string {
	names := make([]string, len(rs))
	for i, r := range rs {
		names[i] = r.Name
	}
	return strings.Join(names, ", ")
}

// allGuardable reports whether every level of every rule has an exact value that a header match
// can check, or a source whose action is already exact (generic_key, path_match). Such rules'
// guarded entries are disjoint: two rules of one shape differ in some exact value.
func allGuardable(d *policy.Domain, rules []*policy.Rule) bool {
	for _, r := range rules {
		for _, m := range r.Match {
			src := d.Source(m.Key)
			switch {
			case src == nil:
				return false
			case src.Kind == policy.SourceGenericKey || src.Kind == policy.SourcePathMatch:
			case src.Kind == policy.SourceHeader && m.Kind == policy.MatchExact:
			default:
				return false
			}
		}
	}
	return true
}

// coversShape reports whether one of rules matches every value of each of its levels (no
// match entry but key-only ones), so that it covers every descriptor of its shape.
func coversShape(rules []*policy.Rule) bool {
	for _, r := range rules {
		if !slices.ContainsFunc(r.Match, func(m policy.Match) bool { return m.Kind != policy.MatchAny }) {
			return true
		}
	}
	return false
}

// levels returns, for each descriptor key, the alternative actions that produce its entry. Every
// request is produced by at most one alternative of a level (they are mutually exclusive), so the
// product of the levels' alternatives produces each descriptor at most once. With rule r, exact
// header levels are guarded by r's values.
func (da *domainActions) levels(d *policy.Domain, keys []string, r *policy.Rule) ([][]*routev3.RateLimit_Action, error) {
	out := make([][]*routev3.RateLimit_Action, len(keys))
	for i, k := range keys {
		src := d.Source(k)
		if src == nil {
			return nil, fmt.Errorf("domain %s: no source for descriptor key %q", d.Name, k)
		}
		if r != nil && i < len(r.Match) && src.Kind == policy.SourceHeader {
			m := r.Match[i]
			if h := strings.ToLower(src.Header); !strings.HasPrefix(h, ":") {
				da.guarded[h] = true // a pseudo-header (:path, :method) is never sent twice
			}
			out[i] = []*routev3.RateLimit_Action{headerMatch(k, m.Value, []*routev3.HeaderMatcher{exactHeader(src.Header, m.Value)})}
			continue
		}
		alts, err := da.sourceActions(src)
		if err != nil {
			return nil, fmt.Errorf("domain %s: source %s: %w", d.Name, k, err)
		}
		out[i] = alts
	}
	return out, nil
}

// sourceActions are the alternative actions that produce src's entry.
func (da *domainActions) sourceActions(src *policy.Source) ([]*routev3.RateLimit_Action, error) {
	k := src.Key
	switch src.Kind {
	case policy.SourceHeader:
		return one(&routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_RequestHeaders_{
			RequestHeaders: &routev3.RateLimit_Action_RequestHeaders{HeaderName: strings.ToLower(src.Header), DescriptorKey: k}}}), nil
	case policy.SourceJWTClaim:
		return one(&routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_Metadata{Metadata: &routev3.RateLimit_Action_MetaData{
			DescriptorKey: k,
			MetadataKey: &metadatav3.MetadataKey{Key: src.MetadataNamespace, Path: []*metadatav3.MetadataKey_PathSegment{
				{Segment: &metadatav3.MetadataKey_PathSegment_Key{Key: src.MetadataKey}},
				{Segment: &metadatav3.MetadataKey_PathSegment_Key{Key: src.Claim}},
			}},
			Source: routev3.RateLimit_Action_MetaData_DYNAMIC,
		}}}), nil
	case policy.SourceGenericKey:
		return one(&routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_GenericKey_{
			GenericKey: &routev3.RateLimit_Action_GenericKey{DescriptorKey: k, DescriptorValue: src.Value}}}), nil
	case policy.SourcePathMatch:
		m := &routev3.HeaderMatcher{Name: ":path"}
		if src.PathExact != "" {
			// :path holds the query string: the path alone, or followed by '?' and anything.
			m.HeaderMatchSpecifier = stringMatch(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{
				SafeRegex: &matcherv3.RegexMatcher{Regex: regexp.QuoteMeta(src.PathExact) + `(\?.*)?`}}})
		} else {
			m.HeaderMatchSpecifier = stringMatch(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: src.PathPrefix}})
		}
		return one(headerMatch(k, src.Value, []*routev3.HeaderMatcher{m})), nil
	case policy.SourceRemoteAddress:
		return remoteAddressActions(k, src.Mask), nil
	case policy.SourceIdentity:
		return da.identityActions(src)
	}
	return nil, fmt.Errorf("unknown source kind %q", src.Kind)
}

// remoteAddressActions produce the client address Envoy trusts, whole or as its /24 or /64. Envoy's
// remote_address and masked_remote_address actions write fixed descriptor keys, so a source named
// after them uses them; any other key takes remote_address_match, whose value is a formatter, with
// one alternative per address family for a mask.
func remoteAddressActions(key string, mask policy.Mask) []*routev3.RateLimit_Action {
	switch {
	case mask != policy.MaskSubnet && key == "remote_address":
		return one(&routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_RemoteAddress_{RemoteAddress: &routev3.RateLimit_Action_RemoteAddress{}}})
	case mask == policy.MaskSubnet && key == "masked_remote_address":
		return one(&routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_MaskedRemoteAddress_{MaskedRemoteAddress: &routev3.RateLimit_Action_MaskedRemoteAddress{
			V4PrefixMaskLen: wrapperspb.UInt32(24), V6PrefixMaskLen: wrapperspb.UInt32(64)}}})
	case mask != policy.MaskSubnet:
		return one(addressMatch(key, "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%", allIPv4, allIPv6))
	}
	return []*routev3.RateLimit_Action{
		addressMatch(key, "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT(24)%", allIPv4),
		addressMatch(key, "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT(64)%", allIPv6),
	}
}

// The address families, as the ranges of remote_address_match.
var (
	allIPv4 = netip.MustParsePrefix("0.0.0.0/0")
	allIPv6 = netip.MustParsePrefix("::/0")
)

// addressMatch is a remote_address_match action for the given ranges.
func addressMatch(key, value string, ranges ...netip.Prefix) *routev3.RateLimit_Action {
	am := &matcherv3.AddressMatcher{}
	for _, r := range ranges {
		am.Ranges = append(am.Ranges, &xdscorev3.CidrRange{AddressPrefix: r.Addr().String(), PrefixLen: wrapperspb.UInt32(uint32(r.Bits()))})
	}
	return &routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_RemoteAddressMatch_{RemoteAddressMatch: &routev3.RateLimit_Action_RemoteAddressMatch{
		DescriptorKey: key, DescriptorValue: value, AddressMatcher: am}}}
}

// identityActions render the waterfall as mutually exclusive header_value_match actions: tier i's
// action requires every earlier tier's header to be absent or empty and its own to be non-empty,
// and formats "<tier>:<value>". The jwt_subject tier reads the claim from the header the
// rlctl_identity filter copies it into; the subnet tier tells the families apart by the trusted
// address that filter copies into HeaderRemoteAddress (an IPv6 address has a ':').
func (da *domainActions) identityActions(src *policy.Source) ([]*routev3.RateLimit_Action, error) {
	da.formatter = true
	var earlier []*routev3.HeaderMatcher
	var out []*routev3.RateLimit_Action
	for _, st := range src.Waterfall {
		var header string
		switch st.Tier {
		case policy.TierJWTSubject:
			header = claimHeader(st.Claim)
			da.claims[st.Claim] = true
		case policy.TierAPIKey, policy.TierTLSFingerprint:
			header = strings.ToLower(st.Header)
		case policy.TierSubnet:
			da.remoteAddress = true
			v4 := append(slices.Clone(earlier), regexHeader(HeaderRemoteAddress, "[^:]+", false))
			v6 := append(slices.Clone(earlier), regexHeader(HeaderRemoteAddress, ".*:.*", false))
			out = append(out,
				headerMatch(src.Key, "subnet:%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT(24)%", v4),
				headerMatch(src.Key, "subnet:%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT(64)%", v6))
			// The model never looks past the subnet tier: every request has an address.
			return out, nil
		default:
			return nil, fmt.Errorf("unknown identity tier %q", st.Tier)
		}
		guards := append(slices.Clone(earlier), regexHeader(header, ".+", false))
		out = append(out, headerMatch(src.Key, string(st.Tier)+":%REQ("+header+")%", guards))
		earlier = append(earlier, regexHeader(header, ".+", true))
	}
	return out, nil
}

func one(a *routev3.RateLimit_Action) []*routev3.RateLimit_Action {
	return []*routev3.RateLimit_Action{a}
}

// headerMatch is a header_value_match action that produces (key, value) when every matcher
// matches.
func headerMatch(key, value string, ms []*routev3.HeaderMatcher) *routev3.RateLimit_Action {
	return &routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_HeaderValueMatch_{HeaderValueMatch: &routev3.RateLimit_Action_HeaderValueMatch{
		DescriptorKey: key, DescriptorValue: value, ExpectMatch: wrapperspb.Bool(true), Headers: ms}}}
}

func stringMatch(m *matcherv3.StringMatcher) *routev3.HeaderMatcher_StringMatch {
	return &routev3.HeaderMatcher_StringMatch{StringMatch: m}
}

// exactHeader matches a header whose value is v; ":path" is the path with its query, as the
// model's header source reads it.
func exactHeader(name, v string) *routev3.HeaderMatcher {
	return &routev3.HeaderMatcher{Name: strings.ToLower(name), HeaderMatchSpecifier: stringMatch(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: v}})}
}

// regexHeader matches a header whose whole value matches re. Inverted, it matches a header that
// is absent (a missing header is treated as empty) or whose value does not match.
func regexHeader(name, re string, invert bool) *routev3.HeaderMatcher {
	return &routev3.HeaderMatcher{
		Name:                      name,
		HeaderMatchSpecifier:      stringMatch(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: re}}}),
		InvertMatch:               invert,
		TreatMissingHeaderAsEmpty: invert,
	}
}

// product returns every combination of one action per level, the first level varying slowest.
func product(levels [][]*routev3.RateLimit_Action) [][]*routev3.RateLimit_Action {
	out := [][]*routev3.RateLimit_Action{nil}
	for _, alts := range levels {
		var next [][]*routev3.RateLimit_Action
		for _, prefix := range out {
			for _, a := range alts {
				combo := append(slices.Clone(prefix), proto.Clone(a).(*routev3.RateLimit_Action))
				next = append(next, combo)
			}
		}
		out = next
	}
	return out
}
