package erlconfig

import (
	"math"
	"reflect"
	"strings"
	"testing"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	yamlv2 "go.yaml.in/yaml/v2"
	"google.golang.org/protobuf/proto"

	"github.com/rlctl/rlctl/policy"
)

func limit(requests, windowMs int64, algo policy.Algorithm) policy.Limit {
	return policy.Limit{Requests: requests, WindowMs: windowMs, Burst: requests, Algorithm: algo, Cost: 1}
}

func oneRule(r *policy.Rule) *policy.Model {
	if r.Stage.Name == "" {
		r.Stage.Name = policy.StageEnforce
	}
	if r.Match == nil {
		r.Match = []policy.Match{{Key: "tenant", Kind: policy.MatchAny}}
	}
	return &policy.Model{Domains: []*policy.Domain{{Name: "d", Rules: []*policy.Rule{r}}}}
}

// TestFromModelRule is the conversion table: each row a rule, the rate limit it becomes, and the
// approximations said about it (substrings, in order; none means exact).
func TestFromModelRule(t *testing.T) {
	const s, m, h, d = 1000, 60000, 3600000, 86400000
	fw, tb, sw := policy.FixedWindow, policy.TokenBucket, policy.SlidingWindow
	for _, tc := range []struct {
		name         string
		rule         policy.Rule
		want         RateLimit
		shadow, quot bool
		notes        []string
	}{
		{"second", policy.Rule{Limits: []policy.Limit{limit(10, s, fw)}}, RateLimit{Unit: Second, RequestsPerUnit: 10}, false, false, nil},
		{"minute", policy.Rule{Limits: []policy.Limit{limit(10, m, fw)}}, RateLimit{Unit: Minute, RequestsPerUnit: 10}, false, false, nil},
		{"hour", policy.Rule{Limits: []policy.Limit{limit(10, h, fw)}}, RateLimit{Unit: Hour, RequestsPerUnit: 10}, false, false, nil},
		{"day", policy.Rule{Limits: []policy.Limit{limit(10, d, fw)}}, RateLimit{Unit: Day, RequestsPerUnit: 10}, false, false, nil},
		{"week", policy.Rule{Limits: []policy.Limit{limit(10, 7*d, fw)}}, RateLimit{Unit: Week, RequestsPerUnit: 10}, false, false, nil},
		{"month", policy.Rule{Limits: []policy.Limit{limit(10, 30*d, fw)}}, RateLimit{Unit: Month, RequestsPerUnit: 10}, false, false, nil},
		{"year", policy.Rule{Limits: []policy.Limit{limit(10, 365*d, fw)}}, RateLimit{Unit: Year, RequestsPerUnit: 10}, false, false, nil},
		{"shadow is exact", policy.Rule{Limits: []policy.Limit{limit(10, s, fw)}, Stage: policy.Stage{Name: policy.StageShadow}},
			RateLimit{Unit: Second, RequestsPerUnit: 10}, true, false, nil},
		{"token bucket", policy.Rule{Limits: []policy.Limit{limit(10, s, tb)}}, RateLimit{Unit: Second, RequestsPerUnit: 10}, false, false,
			[]string{"token_bucket rendered as fixed_window"}},
		{"sliding window", policy.Rule{Limits: []policy.Limit{limit(10, s, sw)}}, RateLimit{Unit: Second, RequestsPerUnit: 10}, false, false,
			[]string{"sliding_window rendered as fixed_window"}},
		{"burst", policy.Rule{Limits: []policy.Limit{{Requests: 5, WindowMs: s, Burst: 25, Algorithm: tb, Cost: 1}}},
			RateLimit{Unit: Second, RequestsPerUnit: 5}, false, false, []string{"token_bucket", "burst 25 dropped"}},
		{"cost", policy.Rule{Limits: []policy.Limit{{Requests: 5, WindowMs: s, Burst: 5, Algorithm: fw, Cost: 2}}},
			RateLimit{Unit: Second, RequestsPerUnit: 5}, false, false, []string{"cost 2 dropped"}},
		{"2m scales to the minute", policy.Rule{Limits: []policy.Limit{limit(100, 2*m, fw)}}, RateLimit{Unit: Minute, RequestsPerUnit: 50}, false, false,
			[]string{"window 2m is not an ERL unit: 100 per 2m rendered as 50 per minute (the same rate)"}},
		{"30s rounds down", policy.Rule{Limits: []policy.Limit{limit(100, 30*s, fw)}}, RateLimit{Unit: Second, RequestsPerUnit: 3}, false, false,
			[]string{"100 per 30s rendered as 3 per second (the rate rounded down)"}},
		{"30s of 1 goes up a unit", policy.Rule{Limits: []policy.Limit{limit(1, 30*s, fw)}}, RateLimit{Unit: Minute, RequestsPerUnit: 2}, false, false,
			[]string{"1 per 30s rendered as 2 per minute (the same rate)"}},
		{"90s", policy.Rule{Limits: []policy.Limit{limit(100, 90*s, fw)}}, RateLimit{Unit: Minute, RequestsPerUnit: 66}, false, false,
			[]string{"66 per minute (the rate rounded down)"}},
		{"over uint32", policy.Rule{Limits: []policy.Limit{limit(1<<40, s, fw)}}, RateLimit{Unit: Second, RequestsPerUnit: math.MaxUint32}, false, false,
			[]string{"capped at 4294967295"}},
		{"several limits keep the lowest rate", policy.Rule{Limits: []policy.Limit{limit(60, m, tb), limit(10000, d, fw)}},
			RateLimit{Unit: Day, RequestsPerUnit: 10000}, false, false,
			[]string{"2 limits: ERL has one per descriptor, so 10000 per 1d (the lowest rate) is kept and 60 per 1m dropped"}},
		{"soft", policy.Rule{Limits: []policy.Limit{limit(10, s, fw)}, Stage: policy.Stage{Name: policy.StageSoft}},
			RateLimit{Unit: Second, RequestsPerUnit: 10}, false, true, []string{"stage soft rendered as quota_mode"}},
		{"canary", policy.Rule{Limits: []policy.Limit{limit(10, s, fw)}, Stage: policy.Stage{Name: policy.StageCanary, CanaryPercent: 5}},
			RateLimit{Unit: Second, RequestsPerUnit: 10}, false, true, []string{"stage canary (5% of enforcers enforce) rendered as quota_mode"}},
		{"sub-shards", policy.Rule{Limits: []policy.Limit{limit(10, s, fw)}, SubShards: &policy.SubShards{Count: 4, Attribute: "ip"}},
			RateLimit{Unit: Second, RequestsPerUnit: 10}, false, false, []string{"sub_shards (4 by ip) dropped"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.rule
			r.Name = "r"
			cfgs, notes := FromModel(oneRule(&r))
			if len(cfgs) != 1 || len(cfgs[0].Descriptors) != 1 {
				t.Fatalf("got %+v, want one config of one descriptor", cfgs)
			}
			got := cfgs[0].Descriptors[0]
			tc.want.Name = "r"
			if !reflect.DeepEqual(*got.RateLimit, tc.want) || got.ShadowMode != tc.shadow || got.QuotaMode != tc.quot {
				t.Errorf("got %+v shadow=%v quota=%v, want %+v shadow=%v quota=%v", *got.RateLimit, got.ShadowMode, got.QuotaMode, tc.want, tc.shadow, tc.quot)
			}
			if len(notes) != len(tc.notes) {
				t.Fatalf("got notes %+v, want %d", notes, len(tc.notes))
			}
			for i, n := range notes {
				if n.Severity != Approximation || n.Rule != "r" || !strings.Contains(n.Message, tc.notes[i]) {
					t.Errorf("note %d: got %+v, want an approximation of rule r containing %q", i, n, tc.notes[i])
				}
			}
		})
	}
}

// TestFromModelTree: rules sharing a prefix share descriptors, siblings follow the domain's
// precedence order, a colliding composite key is left out with a note, and identity keys give
// one assumption.
func TestFromModelTree(t *testing.T) {
	fw := limit(1, 1000, policy.FixedWindow)
	rule := func(name string, ms ...policy.Match) *policy.Rule {
		return &policy.Rule{Name: name, Match: ms, Limits: []policy.Limit{fw}, Stage: policy.Stage{Name: policy.StageEnforce}}
	}
	ex := func(k, v string) policy.Match { return policy.Match{Key: k, Value: v, Kind: policy.MatchExact} }
	wc := func(k, v string) policy.Match { return policy.Match{Key: k, Value: v, Kind: policy.MatchWildcard} }
	keyOnly := func(k string) policy.Match { return policy.Match{Key: k, Kind: policy.MatchAny} }
	rules := []*policy.Rule{
		rule("a", ex("tenant", "acme"), ex("path", "/x")),
		rule("b", ex("tenant", "acme"), wc("path", "/y*")),
		rule("c", ex("tenant", "acme")),
		rule("d", keyOnly("client")),
		rule("e", ex("a", "b_c")),
		rule("f", ex("a_b", "c")),
	}
	policy.SortRules(rules)
	m := &policy.Model{Domains: []*policy.Domain{{
		Name:    "dom",
		Sources: []*policy.Source{{Key: "client", Kind: policy.SourceIdentity, Pos: policy.Pos{File: "p.cue", Line: 3}}},
		Rules:   rules,
	}}}
	cfgs, notes := FromModel(m)
	got, err := cfgs[0].Marshal(YAML)
	if err != nil {
		t.Fatal(err)
	}
	want := `# envoyproxy/ratelimit configuration of domain dom, rendered by rlctl from its policy.
# Do not edit: change the policy and render again.
domain: dom
descriptors:
  - key: tenant
    value: acme
    rate_limit:
      unit: second
      requests_per_unit: 1
      name: c
    descriptors:
      - key: path
        value: /x
        rate_limit:
          unit: second
          requests_per_unit: 1
          name: a
      - key: path
        value: /y*
        rate_limit:
          unit: second
          requests_per_unit: 1
          name: b
  - key: a
    value: b_c
    rate_limit:
      unit: second
      requests_per_unit: 1
      name: e
  - key: client
    rate_limit:
      unit: second
      requests_per_unit: 1
      name: d
`
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	var msgs []string
	for _, n := range notes {
		msgs = append(msgs, string(n.Severity)+" "+n.Rule+": "+n.Message)
	}
	wantNotes := []string{
		`approximation f: left out: ERL reads its descriptor a_b="c" as rule e's (it joins key and value with '_')`,
		// f's descriptor is left out, but Envoy still sends its entries.
		`approximation e: descriptor a="b_c": ERL also matches the entry a_b="c" to it, since it looks an entry up by its key and value joined with '_'; rlctl does not`,
		`assumption : descriptor key client is the identity waterfall: ERL matches values such as "api_key:*" only if Envoy sends "<tier>:<identity>" values, as the envoy target's actions do`,
	}
	if strings.Join(msgs, "\n") != strings.Join(wantNotes, "\n") {
		t.Errorf("got notes\n%s\nwant\n%s", strings.Join(msgs, "\n"), strings.Join(wantNotes, "\n"))
	}
}

// TestProto: the xDS resource carries the same tree, named after the domain, with quota_mode
// also as shadow_mode, which ERL's xDS loader keeps (it drops quota_mode), and a note for it.
func TestProto(t *testing.T) {
	c := Config{Domain: "d", Descriptors: []Descriptor{{
		Key: "k", Value: "v", ShadowMode: true,
		Descriptors: []Descriptor{{Key: "n", QuotaMode: true, RateLimit: &RateLimit{Unit: Week, RequestsPerUnit: 7, Name: "r"}}},
	}}}
	want := &rlsconfv3.RateLimitConfig{Name: "d", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key: "k", Value: "v", ShadowMode: true,
		Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "n", QuotaMode: true, ShadowMode: true, RateLimit: &rlsconfv3.RateLimitPolicy{
			Unit: rlsconfv3.RateLimitUnit_WEEK, RequestsPerUnit: 7, Name: "r",
		}}},
	}}}
	got, notes := c.Proto()
	if !proto.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if len(notes) != 1 || notes[0].Rule != "r" || notes[0].Domain != "d" || !strings.HasPrefix(notes[0].Message, "quota_mode served over xDS as shadow_mode") {
		t.Errorf("notes: got %+v, want one for rule r's quota_mode", notes)
	}
}

// TestMarshalJSONReadsBackAsYAML: ERL reads the JSON encoding with a YAML parser (yaml.v2), which
// takes U+0085 for a line break and refuses DEL, the C1 controls and U+FEFF: Marshal escapes
// them, and every value reads back as written.
func TestMarshalJSONReadsBackAsYAML(t *testing.T) {
	values := []string{"\u0085nel", "del\x7f", "c1\u0090", "bom\ufeff", "\uffff", "plain", "é, ü, 日本", "tab\tnl\n"}
	c := Config{Domain: "d"}
	for i, v := range values {
		c.Descriptors = append(c.Descriptors, Descriptor{Key: "k", Value: v, RateLimit: &RateLimit{Unit: Second, RequestsPerUnit: uint32(i + 1)}})
	}
	b, err := c.Marshal(JSON)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Descriptors []struct{ Value string }
	}
	if err := yamlv2.Unmarshal(b, &doc); err != nil {
		t.Fatalf("yaml.v2 cannot read the JSON: %v\n%s", err, b)
	}
	if len(doc.Descriptors) != len(values) {
		t.Fatalf("read back %d descriptors, want %d", len(doc.Descriptors), len(values))
	}
	for i, d := range doc.Descriptors {
		if d.Value != values[i] {
			t.Errorf("descriptor %d: read back %q, want %q", i, d.Value, values[i])
		}
	}
}
