package render

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	mutationv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	ratelimitconfv3 "github.com/envoyproxy/go-control-plane/envoy/config/ratelimit/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rlctl/rlctl/policy"
)

func init() { register(envoyTarget) }

var envoyTarget = Target{
	Name:      "envoy",
	Formats:   []string{"yaml", "json"},
	MultiFile: true,
	Doc: "Envoy configuration: per domain the HTTP filters (DOMAIN.http_filters) and a virtual host " +
		"whose rate_limits build the policy's descriptors (DOMAIN.virtual_host), and the sidecar's " +
		"cluster (rls_cluster); with --bootstrap one complete static bootstrap (bootstrap) to try locally",
	render: renderEnvoy,
	// A domain's two files; rls_cluster is written every time, and a bootstrap is not a domain's.
	owns: func(name string, _ []byte, format string) bool {
		return strings.HasSuffix(name, ".http_filters."+format) || strings.HasSuffix(name, ".virtual_host."+format)
	},
}

// Defaults of EnvoyOptions.
const (
	DefaultRLSCluster = "rlctl_enforcer"
	DefaultRLSAddress = "127.0.0.1:8081"
)

// The names of the filters rlctl renders. Each filter's typed_config names its type; these names
// are what Envoy's logs and per-route configuration refer to.
const (
	FilterIdentity        = "rlctl.identity"
	FilterRateLimitClosed = "rlctl.ratelimit.fail_closed"
	FilterRateLimitOpen   = "rlctl.ratelimit.fail_open"
)

func renderEnvoy(m *policy.Model, o Options) (Result, error) {
	eo := o.Envoy
	if eo.ClusterName == "" {
		eo.ClusterName = DefaultRLSCluster
	}
	if eo.ClusterAddress == "" {
		eo.ClusterAddress = DefaultRLSAddress
	}
	cluster, err := rlsCluster(eo.ClusterName, eo.ClusterAddress)
	if err != nil {
		return Result{}, err
	}
	var res Result
	var doms []*envoyDomain
	for _, d := range m.Domains {
		ed, err := newEnvoyDomain(d, eo.ClusterName, &res.Findings)
		if err != nil {
			return Result{}, err
		}
		doms = append(doms, ed)
	}
	// The descriptor formatter's runtime flag is the whole Envoy's, not one domain's.
	if slices.ContainsFunc(doms, func(ed *envoyDomain) bool { return ed.actions.formatter }) {
		for _, ed := range doms {
			ed.actions.checkLiterals(ed.d, &res.Findings)
		}
	}
	for _, ed := range doms {
		res.Findings = append(res.Findings, ed.assumptions(eo.Bootstrap)...)
	}
	if eo.Bootstrap {
		b, err := bootstrap(doms, cluster)
		if err != nil {
			return Result{}, err
		}
		data, err := marshal(b, o.Format)
		if err != nil {
			return Result{}, err
		}
		res.Files = append(res.Files, File{Name: "bootstrap." + o.Format, Data: data})
		return res, nil
	}
	for _, ed := range doms {
		filters, err := marshalList(ed.filters, o.Format)
		if err != nil {
			return Result{}, err
		}
		vh, err := marshal(ed.virtualHost(), o.Format)
		if err != nil {
			return Result{}, err
		}
		res.Files = append(res.Files,
			File{Name: ed.d.Name + ".http_filters." + o.Format, Data: filters},
			File{Name: ed.d.Name + ".virtual_host." + o.Format, Data: vh})
	}
	data, err := marshal(cluster, o.Format)
	if err != nil {
		return Result{}, err
	}
	res.Files = append(res.Files, File{Name: "rls_cluster." + o.Format, Data: data})
	return res, nil
}

// envoyDomain is one domain's Envoy configuration.
type envoyDomain struct {
	d       *policy.Domain
	actions *domainActions
	// filters are the HTTP filters that go before the router, in order: the identity filter when
	// the actions read its headers, then one rate-limit filter per failure mode in use.
	filters []*hcmv3.HttpFilter
}

func newEnvoyDomain(d *policy.Domain, cluster string, findings *[]Finding) (*envoyDomain, error) {
	da, err := actionsFor(d, findings)
	if err != nil {
		return nil, err
	}
	ed := &envoyDomain{d: d, actions: da}
	f, err := da.identityFilter()
	if err != nil {
		return nil, err
	}
	if f != nil {
		ed.filters = append(ed.filters, f)
	}
	for _, mode := range []policy.FailureMode{policy.FailClosed, policy.FailOpen} {
		if !da.modes[mode] {
			continue
		}
		f, err := rateLimitFilter(d, mode, cluster)
		if err != nil {
			return nil, err
		}
		ed.filters = append(ed.filters, f)
	}
	return ed, nil
}

// virtualHost is a virtual host that carries the domain's rate_limits; routes without rate_limits
// of their own apply them.
func (ed *envoyDomain) virtualHost() *routev3.VirtualHost {
	return &routev3.VirtualHost{Name: ed.d.Name, Domains: []string{"*"}, RateLimits: ed.actions.rateLimits}
}

// assumptions are what the fragments take for granted of the rest of the user's Envoy
// configuration. The bootstrap satisfies only the runtime flag, which its static layer sets, so
// forBootstrap leaves that one out. The rest it does not provide: its jwt_authn provider is a
// placeholder that verifies no token, nothing sets or strips the fingerprint header, and
// use_remote_address trusts the peer, which is the client only when Envoy is the edge.
func (ed *envoyDomain) assumptions(forBootstrap bool) []Finding {
	var out []Finding
	add := func(format string, args ...any) {
		out = append(out, Finding{Severity: Assumption, Domain: ed.d.Name, Pos: ed.d.Pos, Message: fmt.Sprintf(format, args...)})
	}
	if ed.actions.formatter && !forBootstrap {
		add("the identity waterfall's entries format their values: set the runtime flag %s to true", FormatterRuntimeFlag)
	}
	for _, s := range ed.d.Sources {
		if s.Kind == policy.SourceJWTClaim {
			add("source %s reads claim %q from dynamic metadata %s/%s: a jwt_authn filter before the rate-limit filters must verify the token with payload_in_metadata: %s; the claim must be a string: Envoy's metadata action reads string values only, and a number or a boolean gives the rule no descriptor (simulate models this)", s.Key, s.Claim, s.MetadataNamespace, s.MetadataKey, s.MetadataKey)
		}
		if s.Kind == policy.SourceIdentity {
			for _, st := range s.Waterfall {
				switch st.Tier {
				case policy.TierJWTSubject:
					add("identity %s: the jwt_subject tier reads claim %q, which the %s filter copies from jwt_authn's payload (payload_in_metadata: %s): jwt_authn must run before it", s.Key, st.Claim, FilterIdentity, ed.actions.jwtPayload)
				case policy.TierTLSFingerprint:
					add("identity %s: the tls_fingerprint tier reads header %s: something in front of the rate-limit filters must set it (a TLS-terminating proxy, or Envoy's tls_inspector JA4 fingerprint copied into the header by a filter that runs first) and drop a value the client sent", s.Key, st.Header)
				}
			}
		}
	}
	if hs := ed.actions.guardedHeaders(); len(hs) > 0 {
		add("the %s filter keeps only the first value of %s, which fail-closed rules' header matches read, so that a header sent twice cannot skip them: the upstream sees that value alone",
			FilterIdentity, strings.Join(hs, ", "))
	}
	if len(ed.filters) > 0 && ed.filters[0].Name == FilterIdentity {
		add("the %s filter must come first among these filters and after jwt_authn, and the HTTP connection manager must trust the client address as the model does (use_remote_address, xff_num_trusted_hops)", FilterIdentity)
	}
	// The filter of a rule is its failure mode's whatever its stage, so that a promotion needs
	// only a new snapshot: the Envoy side never moves with a stage. So Envoy denies the requests
	// of a fail-closed rule that only watches, while the sidecar is unreachable.
	for _, r := range ed.d.Rules {
		if r.FailureMode == policy.FailClosed && (r.Stage.Name == policy.StageShadow || r.Stage.Name == policy.StageSoft) {
			out = append(out, Finding{Severity: Assumption, Domain: ed.d.Name, Rule: r.Name, Pos: r.PosOf(policy.SettingFailure),
				Message: fmt.Sprintf("rule %s fails closed and is at %s: it is on the fail-closed filter, as at enforce (a promotion then needs only a new snapshot), so while the sidecar is unreachable Envoy denies its requests, though the rule only watches; fail it open until it enforces if that is not wanted", r.Name, r.Stage.Name)})
		}
	}
	return out
}

// identityFilter is a header_mutation filter that copies what header matchers cannot see into
// request headers: the trusted client address (for the identity waterfall's address families)
// and verified JWT claims (for its jwt_subject tier). It first removes those headers, so that a
// client cannot send them; an empty value (no verified claim) adds no header.
//
// It also collapses each header that a fail-closed rule's guard reads to its first value. Envoy's
// header matchers see a header sent twice as its values joined with ',', while request_headers
// (and %REQ()%, and so the access log) take the first: "x-tenant-id: acme" sent twice failed the
// guard's exact match, the fail-closed stage sent no descriptor, and the rule was never checked.
// Overwritten with %REQ(name)%, the header holds its first value alone, which the guard, the
// descriptor and the log all see. (An empty first value adds nothing, and leaves the header as
// it came: then the guard fails as the descriptor's empty value would.)
func (da *domainActions) identityFilter() (*hcmv3.HttpFilter, error) {
	if !da.remoteAddress && len(da.claims) == 0 && len(da.guarded) == 0 {
		return nil, nil
	}
	var muts []*mutationv3.HeaderMutation
	for _, h := range da.guardedHeaders() {
		muts = append(muts, &mutationv3.HeaderMutation{Action: &mutationv3.HeaderMutation_Append{Append: &corev3.HeaderValueOption{
			Header:       &corev3.HeaderValue{Key: h, Value: "%REQ(" + h + ")%"},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		}}})
	}
	set := func(name, value string) {
		muts = append(muts,
			&mutationv3.HeaderMutation{Action: &mutationv3.HeaderMutation_Remove{Remove: name}},
			&mutationv3.HeaderMutation{Action: &mutationv3.HeaderMutation_Append{Append: &corev3.HeaderValueOption{
				Header:       &corev3.HeaderValue{Key: name, Value: value},
				AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
			}}})
	}
	if da.remoteAddress {
		set(HeaderRemoteAddress, "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%")
	}
	claims := make([]string, 0, len(da.claims))
	for c := range da.claims {
		claims = append(claims, c)
	}
	slices.Sort(claims)
	for _, c := range claims {
		set(claimHeader(c), "%DYNAMIC_METADATA("+da.jwtNamespace+":"+da.jwtPayload+":"+c+")%")
	}
	return httpFilter(FilterIdentity, &headermutationv3.HeaderMutation{Mutations: &headermutationv3.Mutations{RequestMutations: muts}})
}

// rateLimitFilter is the rate-limit filter of one failure mode: its stage, its failure_mode_deny,
// and the gRPC metadata that tells the enforcer to answer only that mode's rules.
func rateLimitFilter(d *policy.Domain, mode policy.FailureMode, cluster string) (*hcmv3.HttpFilter, error) {
	name, stage := FilterRateLimitOpen, StageOpen
	if mode == policy.FailClosed {
		name, stage = FilterRateLimitClosed, StageClosed
	}
	timeout := d.Gateway.RLSTimeoutMs
	if timeout <= 0 {
		return nil, fmt.Errorf("domain %s: gateway.rls_timeout must be set", d.Name)
	}
	cfg := &ratelimitv3.RateLimit{
		Domain:          d.Name,
		Stage:           stage,
		Timeout:         durationpb.New(msDuration(timeout)),
		FailureModeDeny: mode == policy.FailClosed,
		RateLimitService: &ratelimitconfv3.RateLimitServiceConfig{
			GrpcService: &corev3.GrpcService{
				TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: cluster}},
				InitialMetadata: []*corev3.HeaderValue{{Key: policy.FailureModeHeader, Value: string(mode)}},
			},
			TransportApiVersion: corev3.ApiVersion_V3,
		},
	}
	return httpFilter(name, cfg)
}

// httpFilter is an HTTP filter whose typed_config is cfg.
func httpFilter(name string, cfg proto.Message) (*hcmv3.HttpFilter, error) {
	a, err := anypb.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("render: filter %s: %w", name, err)
	}
	return &hcmv3.HttpFilter{Name: name, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: a}}, nil
}

// rlsCluster is the cluster of the rate limit service: HTTP/2 (gRPC) to addr, static when addr is
// an IP address, resolved by DNS otherwise.
func rlsCluster(name, addr string) (*clusterv3.Cluster, error) {
	host, portStr, err := net.SplitHostPort(addr)
	port, perr := strconv.ParseUint(portStr, 10, 16)
	if err != nil || perr != nil || host == "" || port == 0 {
		return nil, fmt.Errorf("envoy: the rate limit service address %q is not HOST:PORT", addr)
	}
	kind := clusterv3.Cluster_STRICT_DNS
	if _, err := netip.ParseAddr(host); err == nil {
		kind = clusterv3.Cluster_STATIC
	}
	opts, err := anypb.New(&httpv3.HttpProtocolOptions{UpstreamProtocolOptions: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{
		ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{
			Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}}}}})
	if err != nil {
		return nil, err
	}
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: kind},
		ConnectTimeout:       durationpb.New(msDuration(250)),
		LoadAssignment:       singleEndpoint(name, host, uint32(port)),
		TypedExtensionProtocolOptions: map[string]*anypb.Any{
			"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": opts,
		},
	}, nil
}

func singleEndpoint(cluster, host string, port uint32) *endpointv3.ClusterLoadAssignment {
	return &endpointv3.ClusterLoadAssignment{
		ClusterName: cluster,
		Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: socketAddress(host, port)}},
		}}}},
	}
}

func socketAddress(host string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}}}}
}

func msDuration(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
