package render

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	metadatav3 "github.com/envoyproxy/go-control-plane/envoy/type/metadata/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"sigs.k8s.io/yaml"

	"github.com/rlctl/rlctl/internal/golden"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/schema"
	"github.com/rlctl/rlctl/simulate"
)

type metadataPathSegment = metadatav3.MetadataKey_PathSegment

// envoyPolicies are the policies the envoy tests render: the example repository, and one with
// every source kind.
var envoyPolicies = map[string]string{"policies": "../policies", "kinds": "testdata/envoy/kinds"}

func loadModel(t testing.TB, dir string) *policy.Model {
	t.Helper()
	m, err := schema.Load(dir)
	if err != nil {
		t.Fatalf("load %s: %v", dir, err)
	}
	return m
}

func renderFiles(t testing.TB, m *policy.Model, o Options) map[string][]byte {
	t.Helper()
	res, err := envoyTarget.Render(m, o)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, f := range res.Files {
		files[f.Name] = f.Data
	}
	return files
}

// unmarshalStrict reads YAML or JSON into m as Envoy would: protojson, unknown fields rejected,
// typed_config Anys resolved, then every protoc-gen-validate rule (ValidateAll).
func unmarshalStrict(t testing.TB, name string, data []byte, m proto.Message) {
	t.Helper()
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if err := protojson.Unmarshal(j, m); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	validate(t, name, m)
}

// validate runs ValidateAll on m and on every message inside its Anys.
func validate(t testing.TB, name string, m proto.Message) {
	t.Helper()
	type validator interface{ ValidateAll() error }
	v, ok := m.(validator)
	if !ok {
		t.Fatalf("%s: %T has no ValidateAll", name, m)
	}
	if err := v.ValidateAll(); err != nil {
		t.Errorf("%s: %v", name, err)
	}
}

func unmarshalFilters(t testing.TB, name string, data []byte) []*hcmv3.HttpFilter {
	t.Helper()
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(j, &raw); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var out []*hcmv3.HttpFilter
	for i, r := range raw {
		f := &hcmv3.HttpFilter{}
		if err := protojson.Unmarshal(r, f); err != nil {
			t.Fatalf("%s[%d]: %v", name, i, err)
		}
		validate(t, fmt.Sprintf("%s[%d]", name, i), f)
		inner, err := f.GetTypedConfig().UnmarshalNew()
		if err != nil {
			t.Fatalf("%s[%d]: typed_config: %v", name, i, err)
		}
		validate(t, fmt.Sprintf("%s[%d] typed_config", name, i), inner)
		out = append(out, f)
	}
	return out
}

// TestEnvoyValid renders every envoy file in both formats, checks each against its golden file
// and reads it back as its go-control-plane type, strictly and validated.
func TestEnvoyValid(t *testing.T) {
	for name, dir := range envoyPolicies {
		m := loadModel(t, dir)
		for _, format := range []string{"yaml", "json"} {
			for _, boot := range []bool{false, true} {
				files := renderFiles(t, m, Options{Format: format, Envoy: EnvoyOptions{Bootstrap: boot}})
				for fname, data := range files {
					golden.Check(t, filepath.Join("testdata", "envoy", name+"."+fname), data)
					switch {
					case strings.Contains(fname, ".http_filters."):
						unmarshalFilters(t, fname, data)
					case strings.Contains(fname, ".virtual_host."):
						unmarshalStrict(t, fname, data, &routev3.VirtualHost{})
					case strings.HasPrefix(fname, "rls_cluster."):
						unmarshalStrict(t, fname, data, &clusterv3.Cluster{})
					case strings.HasPrefix(fname, "bootstrap."):
						b := &bootstrapv3.Bootstrap{}
						unmarshalStrict(t, fname, data, b)
						for _, l := range b.GetStaticResources().GetListeners() {
							hcm := &hcmv3.HttpConnectionManager{}
							if err := l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
								t.Fatal(err)
							}
							validate(t, fname+" hcm", hcm)
							for _, f := range hcm.GetHttpFilters() {
								inner, err := f.GetTypedConfig().UnmarshalNew()
								if err != nil {
									t.Fatalf("%s: %s: %v", fname, f.GetName(), err)
								}
								validate(t, fname+" "+f.GetName(), inner)
							}
						}
					default:
						t.Errorf("unexpected file %s", fname)
					}
				}
			}
		}
	}
}

// TestEnvoyDeterministic renders twice and expects the same bytes.
func TestEnvoyDeterministic(t *testing.T) {
	m := loadModel(t, "../policies")
	for _, boot := range []bool{false, true} {
		a := renderFiles(t, m, Options{Envoy: EnvoyOptions{Bootstrap: boot}})
		b := renderFiles(t, loadModel(t, "../policies"), Options{Envoy: EnvoyOptions{Bootstrap: boot}})
		for name := range a {
			if string(a[name]) != string(b[name]) {
				t.Errorf("%s differs between two renders", name)
			}
		}
	}
}

// TestEnvoyActionsMatchModel is the fidelity test: for generated requests it evaluates the
// rendered filters and rate_limits, read back from YAML, with Envoy's documented semantics
// (envoy_eval_test.go) and compares the descriptors with the model's (policy.Source.Entry over
// each rule's descriptor keys, and simulate.Matcher for the rules they select):
//   - every descriptor the filters send is one the model sends, and the other way round;
//   - each filter's call, which the enforcer answers for its failure mode only
//     (policy.FailureModeHeader), selects exactly the model's rules of that mode, each once;
//   - when no approximation was reported, the fail-closed filter calls the sidecar only for
//     requests that a fail-closed rule covers (what it denies when the sidecar is unreachable).
func TestEnvoyActionsMatchModel(t *testing.T) {
	const perPolicy = 60_000
	total, bad := 0, 0
	for _, name := range []string{"policies", "kinds"} {
		m := loadModel(t, envoyPolicies[name])
		res, err := envoyTarget.Render(m, Options{})
		if err != nil {
			t.Fatal(err)
		}
		approximate := false
		for _, f := range res.Findings {
			approximate = approximate || f.Severity == Approximation
		}
		files := map[string][]byte{}
		for _, f := range res.Files {
			files[f.Name] = f.Data
		}
		for _, d := range m.Domains {
			filters := unmarshalFilters(t, d.Name, files[d.Name+".http_filters.yaml"])
			vh := &routev3.VirtualHost{}
			unmarshalStrict(t, d.Name, files[d.Name+".virtual_host.yaml"], vh)
			matcher, err := simulate.NewMatcher(d)
			if err != nil {
				t.Fatal(err)
			}
			gen := newRequestGen(d, uint64(len(name)))
			shown := 0
			selected := map[string]int{}
			for range perPolicy {
				mreq, ereq := gen.next()
				for _, mt := range matcher.Match(mreq) {
					selected[mt.Rule.Name]++
				}
				problems := compareRequest(d, matcher, filters, vh.GetRateLimits(), mreq, ereq, approximate)
				total++
				if len(problems) > 0 {
					bad++
					if shown < 5 {
						shown++
						t.Errorf("%s: request %+v:\n  %s", name, mreq, strings.Join(problems, "\n  "))
					}
				}
			}
			// The requests must reach every rule, or the comparison proves little.
			for _, r := range d.Rules {
				if selected[r.Name] == 0 {
					t.Errorf("%s: no generated request selects rule %s", name, r.Name)
				}
			}
			t.Logf("%s: requests selecting each rule: %v", name, selected)
		}
	}
	fmt.Printf("envoy-actions: requests=%d mismatches=%d\n", total, bad)
	if bad > 0 {
		t.Fatalf("envoy-actions: %d of %d requests differ", bad, total)
	}
}

// compareRequest returns what differs between the rendered configuration and the model for one
// request.
func compareRequest(d *policy.Domain, matcher *simulate.Matcher, filters []*hcmv3.HttpFilter, rls []*routev3.RateLimit,
	mreq policy.Request, ereq *envoyRequest, approximate bool) []string {
	var problems []string
	ereq = ereq.clone()
	rlfs, err := runFilters(filters, ereq)
	if err != nil {
		return []string{err.Error()}
	}
	// The model's descriptors: one per descriptor shape whose sources all have an entry.
	want := map[string]bool{}
	wantByMode := map[policy.FailureMode][]string{}
	seenShape := map[string]bool{}
	for _, r := range d.Rules {
		keys := ruleKeysOf(r)
		sig := strings.Join(keys, "\x00")
		if seenShape[sig] {
			continue
		}
		seenShape[sig] = true
		var entries []policy.Entry
		ok := true
		for _, k := range keys {
			e, has := d.Source(k).Entry(mreq)
			if !has {
				ok = false
				break
			}
			entries = append(entries, e)
		}
		if !ok {
			continue
		}
		rule, found := d.Lookup(entries)
		want[descString(entries)] = found
		if found {
			wantByMode[rule.FailureMode] = append(wantByMode[rule.FailureMode], descString(entries))
		}
	}
	// The same, as simulate selects rules.
	fromSim := map[policy.FailureMode][]string{}
	for _, mt := range matcher.Match(mreq) {
		fromSim[mt.Rule.FailureMode] = append(fromSim[mt.Rule.FailureMode], descString(mt.Entries))
	}
	got := map[string]bool{}
	for _, f := range rlfs {
		descs, err := descriptors(rls, f.stage, ereq)
		if err != nil {
			return []string{err.Error()}
		}
		var answered []string
		for _, dd := range descs {
			got[descString(dd)] = true
			if rule, found := d.Lookup(dd); found && rule.FailureMode == f.mode {
				answered = append(answered, descString(dd))
			}
		}
		if !sameMultiset(answered, wantByMode[f.mode]) {
			problems = append(problems, fmt.Sprintf("%s filter: answered %v, want %v", f.mode, answered, wantByMode[f.mode]))
		}
		if !sameMultiset(wantByMode[f.mode], fromSim[f.mode]) {
			problems = append(problems, fmt.Sprintf("%s: model %v, simulate %v", f.mode, wantByMode[f.mode], fromSim[f.mode]))
		}
		if f.mode == policy.FailClosed && f.deny && !approximate && len(descs) > 0 && len(wantByMode[policy.FailClosed]) == 0 {
			problems = append(problems, fmt.Sprintf("fail-closed filter calls the sidecar (%v) for a request no fail-closed rule covers", descs))
		}
	}
	// Envoy sends what the model produces, except that a guarded shape (header matches of its
	// fail-closed rules' values) leaves out the descriptors no rule selects.
	missing := false
	for k, selected := range want {
		missing = missing || selected && !got[k]
	}
	for k := range got {
		_, produced := want[k]
		missing = missing || !produced
	}
	if missing {
		problems = append(problems, fmt.Sprintf("descriptors: got %v, want %v", keys(got), keys(want)))
	}
	return problems
}

func ruleKeysOf(r *policy.Rule) []string {
	var keys []string
	for _, m := range r.Match {
		keys = append(keys, m.Key)
	}
	if r.SubShards != nil && r.SubShards.Count > 1 {
		keys = append(keys, r.SubShards.Attribute)
	}
	return keys
}

func descString(es []policy.Entry) string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Key + "=" + e.Value
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func sameMultiset(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// requestGen generates requests over the values a domain's rules and sources care about: each
// header present with a value a rule names, another value, empty, or absent; a JWT or none, with
// the claims the sources read; IPv4 and IPv6 clients, some with a port; and headers a client
// forges under the names the rlctl_identity filter sets.
type requestGen struct {
	rng     *rand.Rand
	headers map[string][]string // header → interesting values
	claims  map[string][]string // claim → interesting values
	// textClaims are the claims an identity waterfall reads, whose values the test keeps
	// strings: Envoy formats a number for the tier's header as JSON writes it, which the model
	// does not follow for every number (1e3 is 1000 there).
	textClaims map[string]bool
	paths      []string
	jwtNS      map[string]string // namespace → payload key, for the claims
}

func newRequestGen(d *policy.Domain, seed uint64) *requestGen {
	g := &requestGen{rng: rand.New(rand.NewPCG(seed, 0x5eed)), headers: map[string][]string{}, claims: map[string][]string{},
		jwtNS: map[string]string{}, textClaims: map[string]bool{}}
	add := func(m map[string][]string, k string, vs ...string) { m[k] = append(m[k], vs...) }
	g.paths = []string{"/", "/other", "/login", "/login?x=1", "/upload/a", "/upload", "/api/v1", "/catalog/x"}
	for _, s := range d.Sources {
		switch s.Kind {
		case policy.SourceHeader:
			if s.Header != ":path" {
				add(g.headers, s.Header, "v1", "v2")
			}
		case policy.SourcePathMatch:
			// With and without a query string, and paths that only start like an exact one.
			for _, p := range []string{s.PathExact, s.PathPrefix} {
				if p != "" {
					g.paths = append(g.paths, p, p+"?q=1", p+"x", p+"x?q=1")
				}
			}
		case policy.SourceJWTClaim:
			add(g.claims, s.Claim, "c1")
			g.jwtNS[s.MetadataNamespace] = s.MetadataKey
		case policy.SourceIdentity:
			for _, st := range s.Waterfall {
				switch st.Tier {
				case policy.TierJWTSubject:
					add(g.claims, st.Claim, "user-1", "user-2")
					g.textClaims[st.Claim] = true
					if len(g.jwtNS) == 0 {
						g.jwtNS[schema.DefaultJWTNamespace] = schema.DefaultJWTMetadataKey
					}
				case policy.TierAPIKey, policy.TierTLSFingerprint:
					add(g.headers, st.Header, "k1", "k2")
				}
			}
		}
	}
	for _, r := range d.Rules {
		for _, m := range r.Match {
			s := d.Source(m.Key)
			if s == nil || m.Value == "" {
				continue
			}
			v := strings.TrimSuffix(m.Value, "*")
			if m.Kind == policy.MatchWildcard {
				v += "x"
			}
			switch s.Kind {
			case policy.SourceHeader:
				if s.Header == ":path" {
					g.paths = append(g.paths, v, v+"?q=1")
				} else {
					add(g.headers, s.Header, v)
				}
			case policy.SourceJWTClaim:
				add(g.claims, s.Claim, v)
			}
		}
	}
	return g
}

func (g *requestGen) pick(vs []string) string { return vs[g.rng.IntN(len(vs))] }

// next returns one request in the model's form and in Envoy's.
func (g *requestGen) next() (policy.Request, *envoyRequest) {
	mreq := policy.Request{Headers: map[string]string{}}
	ereq := &envoyRequest{headers: map[string]string{}, metadata: map[string]*structpb.Struct{}}
	for _, h := range sortedKeys(g.headers) {
		switch g.rng.IntN(4) {
		case 0: // absent
		case 1:
			mreq.Headers[strings.ToLower(h)], ereq.headers[strings.ToLower(h)] = "", ""
		default:
			v := g.pick(g.headers[h])
			mreq.Headers[strings.ToLower(h)], ereq.headers[strings.ToLower(h)] = v, v
		}
	}
	mreq.Path = g.pick(g.paths)
	ereq.headers[":path"] = mreq.Path
	if g.rng.IntN(3) > 0 {
		mreq.ClaimList = []policy.Claim{}
		fields := map[string]any{}
		for _, c := range sortedKeys(g.claims) {
			switch n := g.rng.IntN(6); {
			case n == 0:
			case n == 1:
				mreq.ClaimList, fields[c] = append(mreq.ClaimList, policy.Claim{Name: c}), ""
			case n == 2 && !g.textClaims[c]:
				// A number or a boolean: Envoy's metadata action reads string values only.
				var v any = float64(7)
				if g.rng.IntN(2) == 0 {
					v = true
				}
				mreq.ClaimList = append(mreq.ClaimList, policy.Claim{Name: c, Value: fmt.Sprint(v), NotString: true})
				fields[c] = v
			default:
				v := g.pick(g.claims[c])
				mreq.ClaimList, fields[c] = append(mreq.ClaimList, policy.Claim{Name: c, Value: v}), v
			}
		}
		for ns, key := range g.jwtNS {
			st, err := structpb.NewStruct(map[string]any{key: fields})
			if err != nil {
				panic(err)
			}
			ereq.metadata[ns] = st
		}
	}
	var ip netip.Addr
	if g.rng.IntN(2) == 0 {
		var b [4]byte
		b[0] = byte(g.pick([]string{"\x0a", "\xcb", "\x01"})[0])
		b[1], b[2], b[3] = byte(g.rng.IntN(4)), byte(g.rng.IntN(256)), byte(g.rng.IntN(256))
		ip = netip.AddrFrom4(b)
	} else {
		var b [16]byte
		b[0], b[1], b[2], b[3] = 0x20, 0x01, 0x0d, 0xb8
		b[7] = byte(g.rng.IntN(4))
		for i := 8; i < 16; i++ {
			b[i] = byte(g.rng.IntN(256))
		}
		ip = netip.AddrFrom16(b)
	}
	ereq.remote = ip
	mreq.RemoteAddr = ip.String()
	if g.rng.IntN(3) == 0 {
		mreq.RemoteAddr = netip.AddrPortFrom(ip, 40000).String()
	}
	// A client forging the headers the identity filter owns changes nothing.
	if g.rng.IntN(5) == 0 {
		ereq.headers[HeaderRemoteAddress] = "::1"
		ereq.headers[headerClaimPrefix+"sub"] = "forged"
		ereq.headers[headerClaimPrefix+"uid"] = "forged"
	}
	return mreq, ereq
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestGuardedHeadersCollapsed: a header that a fail-closed rule's guard reads is collapsed to its
// first value by the identity filter, before the rate-limit filters. Envoy's header matchers see
// a header sent twice as "acme,acme" and request_headers sees "acme": without the collapse the
// guard failed, the fail-closed stage sent nothing, and shopify_payments was never checked.
func TestGuardedHeadersCollapsed(t *testing.T) {
	m := loadModel(t, "../policies")
	var findings []Finding
	ed, err := newEnvoyDomain(m.Domains[0], "rls", &findings)
	if err != nil {
		t.Fatal(err)
	}
	if len(ed.filters) == 0 || ed.filters[0].Name != FilterIdentity {
		t.Fatalf("filters: the first is not %s", FilterIdentity)
	}
	b, err := protojson.Marshal(ed.filters[0])
	if err != nil {
		t.Fatal(err)
	}
	want := `{"append":{"header":{"key":"x-tenant-id","value":"%REQ(x-tenant-id)%"},"appendAction":"OVERWRITE_IF_EXISTS_OR_ADD"}}`
	var compact strings.Builder
	for _, r := range string(b) {
		if r != ' ' && r != '\n' {
			compact.WriteRune(r)
		}
	}
	if !strings.Contains(compact.String(), want) {
		t.Errorf("identity filter: no mutation %s in\n%s", want, b)
	}
	if strings.Contains(compact.String(), `"key":":path"`) {
		t.Errorf("identity filter rewrites the pseudo-header :path, which is never sent twice:\n%s", b)
	}
	found := false
	for _, f := range ed.assumptions(false) {
		found = found || strings.Contains(f.Message, "keeps only the first value of x-tenant-id")
	}
	if !found {
		t.Error("no assumption says that the upstream sees the first value only")
	}
}

// TestFormatterLiteralsEveryDomain: the descriptor formatter's runtime flag, which one domain's
// identity waterfall needs, is the whole Envoy's: a literal with '%' in another domain is
// reported too (it was checked in the waterfall's domain only, and render --strict passed).
func TestFormatterLiteralsEveryDomain(t *testing.T) {
	m := loadModel(t, "testdata/envoy/formatter")
	res, err := envoyTarget.Render(m, Options{Format: "yaml"})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range res.Findings {
		found = found || f.Domain == "b" && strings.Contains(f.Message, `value "50%" contains '%'`)
	}
	if !found {
		t.Errorf("no finding of domain b's literal \"50%%\" among %+v", res.Findings)
	}
}

// TestUnguardedFailClosed: a fail-closed rule that header matches cannot guard (a wildcard, or
// an exact value of a source other than a header) has its filter called for every request with
// its keys, which Envoy denies while the sidecar is unreachable: an approximation, so --strict
// refuses it. It was reported only when a fail-open rule shared the rule's keys: a payments
// wildcard on :path made every request depend on the sidecar, without a word. A fail-closed rule
// that matches every value of its keys covers whatever its filter is called for.
func TestUnguardedFailClosed(t *testing.T) {
	res, err := envoyTarget.Render(loadModel(t, "testdata/envoy/unguarded"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range res.Findings {
		if f.Severity == Approximation && strings.Contains(f.Message, "cannot be guarded by header matches") {
			got = append(got, f.Domain+"/"+f.Rule)
		}
	}
	if fmt.Sprint(got) != "[a/payments b/office]" {
		t.Errorf("unguarded fail-closed rules reported: %v, want [a/payments b/office]", got)
	}
}

// TestShadowFailClosedSaid: a fail-closed rule at shadow or soft stays on the fail-closed filter
// (a promotion needs only a new snapshot), and render says that Envoy then denies its requests
// while the sidecar is unreachable, though the rule only watches.
func TestShadowFailClosedSaid(t *testing.T) {
	res, err := envoyTarget.Render(loadModel(t, "testdata/envoy/shadow-closed"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range res.Findings {
		if f.Severity == Assumption && strings.Contains(f.Message, "though the rule only watches") {
			got = append(got, f.Rule)
		}
	}
	if fmt.Sprint(got) != "[charge refund]" {
		t.Errorf("fail-closed rules at shadow or soft reported: %v, want [charge refund]", got)
	}
}
