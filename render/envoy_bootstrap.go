package render

import (
	"cmp"
	"slices"
	"strings"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	jwtauthnv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/jwt_authn/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/rlctl/rlctl/policy"
)

// The bootstrap's fixed parts: where Envoy listens (one port per domain, from ListenerBasePort),
// its admin interface, the backend it proxies to, and the placeholder JWT provider.
const (
	ListenerBasePort = 10000
	AdminPort        = 9901
	BackendCluster   = "backend"
	BackendPort      = 8080
	JWTProvider      = "rlctl_placeholder"
	jwtAuthnFilter   = "envoy.filters.http.jwt_authn"
)

// bootstrap is a complete static Envoy configuration to try the policy locally: per domain a
// listener whose HTTP connection manager runs jwt_authn (a placeholder provider, which lets
// requests without a valid token through), the rlctl_identity filter, the rate-limit filters and
// the router; a virtual host with the domain's rate_limits and one route per path a rule names;
// the sidecar's cluster and a backend cluster. The runtime layer sets the formatter flag the
// identity waterfall needs.
func bootstrap(doms []*envoyDomain, rls *clusterv3.Cluster) (*bootstrapv3.Bootstrap, error) {
	b := &bootstrapv3.Bootstrap{
		Admin: &bootstrapv3.Admin{Address: socketAddress("127.0.0.1", AdminPort)},
		StaticResources: &bootstrapv3.Bootstrap_StaticResources{
			Clusters: []*clusterv3.Cluster{rls, {
				Name:                 BackendCluster,
				ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
				ConnectTimeout:       rls.ConnectTimeout,
				LoadAssignment:       singleEndpoint(BackendCluster, "127.0.0.1", BackendPort),
			}},
		},
	}
	formatter := false
	for i, ed := range doms {
		formatter = formatter || ed.actions.formatter
		l, err := ed.listener(uint32(ListenerBasePort + i))
		if err != nil {
			return nil, err
		}
		b.StaticResources.Listeners = append(b.StaticResources.Listeners, l)
	}
	if formatter {
		layer, err := structpb.NewStruct(map[string]any{FormatterRuntimeFlag: true})
		if err != nil {
			return nil, err
		}
		b.LayeredRuntime = &bootstrapv3.LayeredRuntime{Layers: []*bootstrapv3.RuntimeLayer{{
			Name: "rlctl", LayerSpecifier: &bootstrapv3.RuntimeLayer_StaticLayer{StaticLayer: layer}}}}
	}
	return b, nil
}

func (ed *envoyDomain) listener(port uint32) (*listenerv3.Listener, error) {
	vh := ed.virtualHost()
	vh.Routes = ed.routes()
	var filters []*hcmv3.HttpFilter
	if ed.needsJWT() {
		jwt, err := httpFilter(jwtAuthnFilter, &jwtauthnv3.JwtAuthentication{
			Providers: map[string]*jwtauthnv3.JwtProvider{JWTProvider: {
				Issuer: "https://issuer.invalid",
				JwksSourceSpecifier: &jwtauthnv3.JwtProvider_LocalJwks{LocalJwks: &corev3.DataSource{
					Specifier: &corev3.DataSource_InlineString{InlineString: `{"keys":[]}`}}},
				PayloadInMetadata: ed.actions.jwtPayload,
				Forward:           true,
			}},
			Rules: []*jwtauthnv3.RequirementRule{{
				Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
				RequirementType: &jwtauthnv3.RequirementRule_Requires{Requires: &jwtauthnv3.JwtRequirement{
					RequiresType: &jwtauthnv3.JwtRequirement_RequiresAny{RequiresAny: &jwtauthnv3.JwtRequirementOrList{
						Requirements: []*jwtauthnv3.JwtRequirement{
							{RequiresType: &jwtauthnv3.JwtRequirement_ProviderName{ProviderName: JWTProvider}},
							{RequiresType: &jwtauthnv3.JwtRequirement_AllowMissingOrFailed{AllowMissingOrFailed: &emptypb.Empty{}}},
						}}}}},
			}},
		})
		if err != nil {
			return nil, err
		}
		filters = append(filters, jwt)
	}
	router, err := httpFilter("envoy.filters.http.router", &routerv3.Router{})
	if err != nil {
		return nil, err
	}
	filters = append(filters, ed.filters...)
	filters = append(filters, router)
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix:       ed.d.Name,
		CodecType:        hcmv3.HttpConnectionManager_AUTO,
		UseRemoteAddress: boolValue(true),
		RouteSpecifier:   &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{Name: ed.d.Name, VirtualHosts: []*routev3.VirtualHost{vh}}},
		HttpFilters:      filters,
	}
	a, err := anypb.New(hcm)
	if err != nil {
		return nil, err
	}
	return &listenerv3.Listener{
		Name:    ed.d.Name,
		Address: socketAddress("0.0.0.0", port),
		FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
			Name: "envoy.filters.network.http_connection_manager", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: a}}}}},
	}, nil
}

// needsJWT reports whether the domain reads JWT claims.
func (ed *envoyDomain) needsJWT() bool {
	if len(ed.actions.claims) > 0 {
		return true
	}
	for _, s := range ed.d.Sources {
		if s.Kind == policy.SourceJWTClaim {
			return true
		}
	}
	return false
}

// routes are one route per path a rule matches (an exact path, or a prefix for a trailing-'*'
// value), exact paths first and longer prefixes before shorter ones as Envoy takes the first route
// that matches, then a catch-all. They all proxy to the backend; the virtual host's rate_limits
// apply to each.
func (ed *envoyDomain) routes() []*routev3.Route {
	type path struct {
		value  string
		prefix bool
		rules  []string
	}
	var paths []*path
	seen := map[string]*path{}
	add := func(value string, prefix bool, rule string) {
		k := value
		if prefix {
			k += "*"
		}
		if p := seen[k]; p != nil {
			p.rules = append(p.rules, rule)
			return
		}
		p := &path{value: value, prefix: prefix, rules: []string{rule}}
		seen[k] = p
		paths = append(paths, p)
	}
	for _, r := range ed.d.Rules {
		for _, m := range r.Match {
			src := ed.d.Source(m.Key)
			switch {
			case src == nil:
			case src.Kind == policy.SourceHeader && src.Header == ":path" && m.Kind == policy.MatchExact:
				add(m.Value, false, r.Name)
			case src.Kind == policy.SourceHeader && src.Header == ":path" && m.Kind == policy.MatchWildcard:
				if v := strings.TrimSuffix(m.Value, "*"); v != "" {
					add(v, true, r.Name)
				}
			case src.Kind == policy.SourcePathMatch && src.PathExact != "":
				add(src.PathExact, false, r.Name)
			case src.Kind == policy.SourcePathMatch:
				add(src.PathPrefix, true, r.Name)
			}
		}
	}
	slices.SortStableFunc(paths, func(a, b *path) int {
		if a.prefix != b.prefix {
			if a.prefix {
				return 1
			}
			return -1
		}
		if c := cmp.Compare(len(b.value), len(a.value)); c != 0 {
			return c
		}
		return strings.Compare(a.value, b.value)
	})
	var out []*routev3.Route
	for _, p := range paths {
		m := &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Path{Path: p.value}}
		if p.prefix {
			m.PathSpecifier = &routev3.RouteMatch_Prefix{Prefix: p.value}
		}
		out = append(out, backendRoute(strings.Join(p.rules, ","), m))
	}
	return append(out, backendRoute("default", &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}))
}

func backendRoute(name string, m *routev3.RouteMatch) *routev3.Route {
	return &routev3.Route{Name: name, Match: m, Action: &routev3.Route_Route{Route: &routev3.RouteAction{
		ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: BackendCluster}}}}
}
