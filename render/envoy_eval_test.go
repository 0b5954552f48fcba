package render

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/rlctl/rlctl/policy"
)

// This file is an evaluator of Envoy's rate-limit actions, written from Envoy's documentation
// (the rate-limit filter's "composing actions", config.route.v3.RateLimit.Action, HeaderMatcher,
// the header_mutation filter and the substitution formatter), not from render's code: the
// fidelity test runs the protos that render wrote through it and compares the descriptors with
// the model's. It supports what render emits and fails on anything else.

// envoyRequest is a request as Envoy's filters see it.
type envoyRequest struct {
	headers map[string]string // lower-case names; ":path" is the path with its query
	remote  netip.Addr        // the client address Envoy trusts
	// metadata is the dynamic metadata: namespace → its struct (jwt_authn's verified payload).
	metadata map[string]*structpb.Struct
}

func (r *envoyRequest) clone() *envoyRequest {
	c := *r
	c.headers = make(map[string]string, len(r.headers))
	for k, v := range r.headers {
		c.headers[k] = v
	}
	return &c
}

// rlFilter is one rate-limit filter: its stage and the failure mode its calls ask for.
type rlFilter struct {
	stage uint32
	mode  policy.FailureMode
	deny  bool
}

// runFilters applies the HTTP filters before the rate-limit filters (header_mutation) to req and
// returns the rate-limit filters in order.
func runFilters(filters []*hcmv3.HttpFilter, req *envoyRequest) ([]rlFilter, error) {
	var out []rlFilter
	for _, f := range filters {
		msg, err := f.GetTypedConfig().UnmarshalNew()
		if err != nil {
			return nil, err
		}
		switch c := msg.(type) {
		case *headermutationv3.HeaderMutation:
			for _, m := range c.GetMutations().GetRequestMutations() {
				switch {
				case m.GetRemove() != "":
					delete(req.headers, strings.ToLower(m.GetRemove()))
				case m.GetAppend() != nil:
					h := m.GetAppend().GetHeader()
					v, err := format(h.GetValue(), req)
					if err != nil {
						return nil, err
					}
					// keep_empty_value false: a header whose value formats empty is not added.
					if v == "" && !m.GetAppend().GetKeepEmptyValue() {
						continue
					}
					req.headers[strings.ToLower(h.GetKey())] = v
				default:
					return nil, fmt.Errorf("header_mutation: unsupported mutation %v", m)
				}
			}
		case *ratelimitv3.RateLimit:
			md := c.GetRateLimitService().GetGrpcService().GetInitialMetadata()
			var mode policy.FailureMode
			for _, h := range md {
				if h.GetKey() == policy.FailureModeHeader {
					mode = policy.FailureMode(h.GetValue())
				}
			}
			out = append(out, rlFilter{stage: c.GetStage(), mode: mode, deny: c.GetFailureModeDeny()})
		default:
			return nil, fmt.Errorf("filter %s: unsupported type %T", f.GetName(), msg)
		}
	}
	return out, nil
}

// descriptors returns the descriptors the rate_limits of stage produce for req, in order.
func descriptors(rls []*routev3.RateLimit, stage uint32, req *envoyRequest) ([][]policy.Entry, error) {
	var out [][]policy.Entry
	for _, rl := range rls {
		if rl.GetStage().GetValue() != stage {
			continue
		}
		var d []policy.Entry
		ok := true
		for _, a := range rl.GetActions() {
			e, produced, skip, err := evalAction(a, req)
			if err != nil {
				return nil, err
			}
			if skip {
				continue
			}
			if !produced {
				ok = false
				break
			}
			d = append(d, e)
		}
		if ok && len(d) > 0 {
			out = append(out, d)
		}
	}
	return out, nil
}

// evalAction returns the entry an action appends. produced false drops the whole descriptor;
// skip (skip_if_absent) leaves this action's entry out but keeps the descriptor.
func evalAction(a *routev3.RateLimit_Action, req *envoyRequest) (e policy.Entry, produced, skip bool, err error) {
	switch {
	case a.GetRequestHeaders() != nil:
		h := a.GetRequestHeaders()
		v, ok := req.headers[strings.ToLower(h.GetHeaderName())]
		if !ok {
			return e, false, h.GetSkipIfAbsent(), nil
		}
		return policy.Entry{Key: h.GetDescriptorKey(), Value: v}, true, false, nil
	case a.GetGenericKey() != nil:
		g := a.GetGenericKey()
		v, err := format(g.GetDescriptorValue(), req)
		if err != nil {
			return e, false, false, err
		}
		return policy.Entry{Key: or(g.GetDescriptorKey(), "generic_key"), Value: v}, true, false, nil
	case a.GetHeaderValueMatch() != nil:
		h := a.GetHeaderValueMatch()
		expect := h.GetExpectMatch() == nil || h.GetExpectMatch().GetValue()
		all := true
		for _, m := range h.GetHeaders() {
			ok, err := headerMatches(m, req.headers)
			if err != nil {
				return e, false, false, err
			}
			all = all && ok
		}
		if all != expect {
			return e, false, false, nil
		}
		v, err := format(h.GetDescriptorValue(), req)
		if err != nil || v == "" {
			return e, false, false, err
		}
		return policy.Entry{Key: or(h.GetDescriptorKey(), "header_match"), Value: v}, true, false, nil
	case a.GetMetadata() != nil:
		m := a.GetMetadata()
		if m.GetSource() != routev3.RateLimit_Action_MetaData_DYNAMIC {
			return e, false, false, fmt.Errorf("metadata action: unsupported source %v", m.GetSource())
		}
		v := metadataString(req, m.GetMetadataKey().GetKey(), m.GetMetadataKey().GetPath())
		if v == "" {
			v = m.GetDefaultValue()
		}
		if v == "" {
			return e, false, m.GetSkipIfAbsent(), nil
		}
		return policy.Entry{Key: m.GetDescriptorKey(), Value: v}, true, false, nil
	case a.GetRemoteAddress() != nil:
		return policy.Entry{Key: "remote_address", Value: req.remote.String()}, true, false, nil
	case a.GetMaskedRemoteAddress() != nil:
		m := a.GetMaskedRemoteAddress()
		bits := uint32(32)
		if m.GetV4PrefixMaskLen() != nil {
			bits = m.GetV4PrefixMaskLen().GetValue()
		}
		if req.remote.Is6() {
			bits = 128
			if m.GetV6PrefixMaskLen() != nil {
				bits = m.GetV6PrefixMaskLen().GetValue()
			}
		}
		p, err := req.remote.Prefix(int(bits))
		if err != nil {
			return e, false, false, err
		}
		return policy.Entry{Key: "masked_remote_address", Value: p.String()}, true, false, nil
	case a.GetRemoteAddressMatch() != nil:
		m := a.GetRemoteAddressMatch()
		in := false
		for _, r := range m.GetAddressMatcher().GetRanges() {
			p, err := netip.ParsePrefix(r.GetAddressPrefix() + "/" + strconv.Itoa(int(r.GetPrefixLen().GetValue())))
			if err != nil {
				return e, false, false, err
			}
			in = in || p.Contains(req.remote)
		}
		if in == m.GetAddressMatcher().GetInvertMatch() {
			return e, false, false, nil
		}
		v, err := format(m.GetDescriptorValue(), req)
		if err != nil {
			return e, false, false, err
		}
		if v == "" {
			v = m.GetDefaultValue()
		}
		if v == "" {
			return e, false, false, nil
		}
		return policy.Entry{Key: or(m.GetDescriptorKey(), "remote_address_match"), Value: v}, true, false, nil
	}
	return e, false, false, fmt.Errorf("unsupported action %v", a)
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// headerMatches is HeaderMatcher's semantics: a missing header matches only present_match: false,
// or is treated as empty with treat_missing_header_as_empty; the result of a present header is
// inverted by invert_match.
func headerMatches(m *routev3.HeaderMatcher, headers map[string]string) (bool, error) {
	v, present := headers[strings.ToLower(m.GetName())]
	if pm, ok := m.GetHeaderMatchSpecifier().(*routev3.HeaderMatcher_PresentMatch); ok {
		return pm.PresentMatch == present != m.GetInvertMatch(), nil
	}
	if !present {
		if !m.GetTreatMissingHeaderAsEmpty() {
			return false, nil
		}
		v = ""
	}
	sm := m.GetStringMatch()
	if sm == nil {
		return false, fmt.Errorf("header matcher %s: unsupported specifier %T", m.GetName(), m.GetHeaderMatchSpecifier())
	}
	ok, err := stringMatches(sm, v)
	if err != nil {
		return false, err
	}
	return ok != m.GetInvertMatch(), nil
}

var regexps = map[string]*regexp.Regexp{}

func stringMatches(sm *matcherv3.StringMatcher, v string) (bool, error) {
	if sm.GetIgnoreCase() {
		return false, fmt.Errorf("string matcher: ignore_case is not supported")
	}
	switch p := sm.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		return v == p.Exact, nil
	case *matcherv3.StringMatcher_Prefix:
		return strings.HasPrefix(v, p.Prefix), nil
	case *matcherv3.StringMatcher_SafeRegex:
		re := regexps[p.SafeRegex.GetRegex()]
		if re == nil {
			var err error
			// RE2, matched against the whole value, as Envoy's safe_regex is.
			if re, err = regexp.Compile(`^(?:` + p.SafeRegex.GetRegex() + `)$`); err != nil {
				return false, err
			}
			regexps[p.SafeRegex.GetRegex()] = re
		}
		return re.MatchString(v), nil
	}
	return false, fmt.Errorf("string matcher: unsupported pattern %T", sm.GetMatchPattern())
}

// commandRe finds the substitution formatter's command operators.
var commandRe = regexp.MustCompile(`%([A-Z_]+)(?:\(([^)]*)\))?%`)

// format evaluates a substitution format string. Unknown values format as the empty string, as
// in rate-limit descriptor values.
func format(s string, req *envoyRequest) (string, error) {
	var err error
	out := commandRe.ReplaceAllStringFunc(s, func(op string) string {
		m := commandRe.FindStringSubmatch(op)
		switch m[1] {
		case "REQ", "REQUEST_HEADER":
			return req.headers[strings.ToLower(m[2])]
		case "DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT":
			if m[2] == "" {
				return req.remote.String()
			}
			bits, perr := strconv.Atoi(m[2])
			if perr != nil {
				err = perr
				return ""
			}
			p, perr := req.remote.Prefix(bits)
			if perr != nil {
				err = perr
				return ""
			}
			return p.String()
		case "DYNAMIC_METADATA":
			parts := strings.Split(m[2], ":")
			var path []string
			if len(parts) > 1 {
				path = parts[1:]
			}
			return metadataStringPath(req, parts[0], path)
		}
		err = fmt.Errorf("formatter: unsupported command %s", op)
		return ""
	})
	return out, err
}

func metadataString(req *envoyRequest, ns string, path []*metadataPathSegment) string {
	keys := make([]string, len(path))
	for i, p := range path {
		keys[i] = p.GetKey()
	}
	return metadataStringPath(req, ns, keys)
}

// metadataStringPath is the string at path in namespace ns, or "" when there is none or it is not
// a string.
func metadataStringPath(req *envoyRequest, ns string, path []string) string {
	st := req.metadata[ns]
	if st == nil || len(path) == 0 {
		return ""
	}
	v := structpb.NewStructValue(st)
	for _, k := range path {
		s := v.GetStructValue()
		if s == nil {
			return ""
		}
		v = s.GetFields()[k]
		if v == nil {
			return ""
		}
	}
	return v.GetStringValue()
}
