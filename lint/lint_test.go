package lint

import (
	"fmt"
	"strings"
	"testing"

	"github.com/rlctl/rlctl/finding"
	"github.com/rlctl/rlctl/internal/policyfixture"
	"github.com/rlctl/rlctl/policy"
)

func at(line int) policy.Pos { return policy.Pos{File: "p.cue", Line: line, Col: 3} }

// goodModel returns a model that passes every check; each test case breaks (or bends) one thing.
func goodModel() *policy.Model {
	lim := func(line int, req, win int64) []policy.Limit {
		return []policy.Limit{{Requests: req, WindowMs: win, Burst: req, Algorithm: policy.TokenBucket, Cost: 1, Pos: at(line)}}
	}
	rule := func(line int, name string, match ...policy.Match) *policy.Rule {
		return &policy.Rule{
			Name: name, Pos: at(line), Match: match, Limits: lim(line+1, 50000, 60000),
			Stage:       policy.Stage{Name: policy.StageEnforce, Since: "2025-01-01", Pos: at(line + 2)},
			FailureMode: policy.FailOpen, Fallback: &policy.Rate{Requests: 1000, WindowMs: 1000},
			StoreTimeoutMs: 5, Lease: policyfixture.Lease(policyfixture.Bounds(5, 20), policyfixture.UnsetWatermark()),
			Gateways: 10, DriftToleranceBP: 200,
		}
	}
	m := func(line int, key, value string) policy.Match {
		kind := policy.MatchExact
		switch {
		case value == "":
			kind = policy.MatchAny
		case strings.HasSuffix(value, "*"):
			kind = policy.MatchWildcard
		}
		return policy.Match{Key: key, Value: value, Kind: kind, Pos: at(line)}
	}
	pay := rule(40, "payments", m(40, "payments", ""))
	pay.FailureMode, pay.FailureReason, pay.Fallback = policy.FailClosed, "card testing", nil
	return &policy.Model{Domains: []*policy.Domain{{
		Name:    "edge",
		Pos:     at(1),
		Gateway: policy.Gateway{RLSTimeoutMs: 20, PerKeyQPSBudget: 10000},
		Sources: []*policy.Source{
			{Key: "tenant", Kind: policy.SourceHeader, Header: "x-tenant-id", Pos: at(2)},
			{Key: "ip", Kind: policy.SourceRemoteAddress, Mask: policy.MaskSubnet, Pos: at(3)},
			{Key: "id", Kind: policy.SourceIdentity, Mask: policy.MaskSubnet, Pos: at(4), Waterfall: []policy.IdentityStep{
				{Tier: policy.TierJWTSubject, Claim: "sub"}, {Tier: policy.TierAPIKey, Header: "x-api-key"},
				{Tier: policy.TierTLSFingerprint, Header: "x-ja4"}, {Tier: policy.TierSubnet},
			}},
			{Key: "payments", Kind: policy.SourcePathMatch, Value: "payments", PathPrefix: "/v1/payments", Pos: at(5)},
			{Key: "plan", Kind: policy.SourceGenericKey, Value: "gold", Pos: at(6)},
			{Key: "path", Kind: policy.SourceHeader, Header: ":path", Pos: at(7)},
		},
		CriticalPaths: []string{"/v1/payments*", "/v1/refund"},
		Rules: []*policy.Rule{
			rule(10, "acme", m(10, "tenant", "acme")),
			rule(20, "enterprise", m(20, "tenant", "ent-*")),
			rule(25, "tenants", m(25, "tenant", "*")),
			rule(30, "anon", m(30, "id", "subnet:*")),
			rule(35, "gold", m(35, "plan", "gold"), m(36, "ip", "")),
			pay,
		},
	}}}
}

// rule returns the rule of the good model's domain named name.
func rule(m *policy.Model, name string) *policy.Rule {
	for _, r := range m.Domains[0].Rules {
		if r.Name == name {
			return r
		}
	}
	panic("no rule " + name)
}

func TestGoodModelIsClean(t *testing.T) {
	if got := Lint(goodModel()); len(got) != 0 {
		t.Fatalf("got %d findings, want none:\n%s", len(got), lines(got))
	}
}

func lines(fs []finding.Finding) string {
	var b strings.Builder
	for _, f := range fs {
		b.WriteString(f.String() + "\n")
	}
	return b.String()
}

func match(key, value string) policy.Match {
	kind := policy.MatchExact
	switch {
	case value == "":
		kind = policy.MatchAny
	case strings.HasSuffix(value, "*"):
		kind = policy.MatchWildcard
	}
	return policy.Match{Key: key, Value: value, Kind: kind, Pos: at(90)}
}

func addRule(m *policy.Model, name string, ms ...policy.Match) *policy.Rule {
	r := *rule(m, "acme")
	r.Name, r.Match, r.Pos = name, ms, at(90)
	m.Domains[0].Rules = append(m.Domains[0].Rules, &r)
	return &r
}

// TestRules runs one good and one bad case (at least) per check. A bad case wants exactly one
// finding with the check's ID, whose message contains want; a good case wants none.
func TestRules(t *testing.T) {
	tests := []struct {
		id, name string
		edit     func(m *policy.Model)
		want     string // "" for a good case
	}{
		{"RL001", "distinct matches", func(m *policy.Model) { addRule(m, "beta", match("tenant", "beta")) }, ""},
		{"RL001", "same match", func(m *policy.Model) { addRule(m, "acme2", match("tenant", "acme")) },
			`domains.edge.rules.acme2: rule acme2 has the same match as rule acme (tenant="acme"): only one of their limits can apply (see p.cue:10:3)`},

		{"RL002", "narrower wildcard first", func(m *policy.Model) {}, ""},
		{"RL002", "narrower wildcard after broader", func(m *policy.Model) { addRule(m, "entx", match("tenant", "ent-x*")) },
			`match tenant="ent-x*" at level 1 is shadowed by the earlier wildcard tenant="ent-*" of rule "enterprise"`},
		{"RL002", "key-only after catch-all", func(m *policy.Model) { addRule(m, "anytenant", match("tenant", "")) },
			`match tenant at level 1 is shadowed by the catch-all wildcard tenant="*" of rule "tenants"`},
		{"RL002", "deeper level shadowed", func(m *policy.Model) {
			addRule(m, "gold-a", match("plan", "gold"), match("ip", "10.*"))
			addRule(m, "gold-b", match("plan", "gold"), match("ip", "10.1*"))
		}, `match ip="10.1*" at level 2 is shadowed by the earlier wildcard ip="10.*" of rule "gold-a"`},
		{"RL002", "exact under a wildcard stays reachable", func(m *policy.Model) { addRule(m, "entx", match("tenant", "ent-x")) }, ""},

		{"RL003", "known keys and values", func(m *policy.Model) { addRule(m, "key", match("id", "api_key:*")) }, ""},
		{"RL003", "unknown key", func(m *policy.Model) { addRule(m, "typo", match("tennant", "acme")) },
			`match key "tennant" at level 1: no source produces it (sources: tenant, ip, id, payments, plan, path)`},
		{"RL003", "value a generic key never produces", func(m *policy.Model) { addRule(m, "silver", match("plan", "silver")) },
			`match plan="silver" at level 1: source "plan" (generic_key) only produces "gold"`},
		{"RL003", "identity value without a tier", func(m *policy.Model) { addRule(m, "user", match("id", "user:*")) },
			`source "id" (identity) only produces "jwt_subject:...", "api_key:..."`},
		{"RL003", "unknown sub-shard attribute", func(m *policy.Model) {
			rule(m, "acme").SubShards = &policy.SubShards{Count: 4, Attribute: "client"}
		}, `sub_shards attribute "client": no source produces it`},

		{"RL004", "large but exact", func(m *policy.Model) {
			// 2 × 10^9 × 3600000 / 1000 + ... stays below 2^53 thanks to the common divisor.
			rule(m, "acme").Limits[0] = policy.Limit{Requests: 1_000_000_000, WindowMs: 3_600_000, Burst: 1_000_000_000, Pos: at(11)}
		}, ""},
		{"RL004", "token bucket past 2^53", func(m *policy.Model) {
			rule(m, "acme").Limits[0] = policy.Limit{Requests: 7, WindowMs: 31_536_000_000, Burst: 100_000_000, Pos: at(11)}
		}, "2 × burst 100000000 × window_ms 31536000000 / g + requests 7 / g = 6307200000000000007 (g = 1) exceeds 2^53−1 = 9007199254740991"},
		{"RL004", "fixed window past 2^53", func(m *policy.Model) {
			rule(m, "acme").Limits[0] = policy.Limit{Requests: 1 << 30, WindowMs: 1 << 24, Algorithm: policy.FixedWindow, Pos: at(11)}
		}, "(requests 1073741824 + 1) × window_ms 16777216 = 18014398526259200 exceeds 2^53−1"},
		// The limit is named once ("limit: limit: ..." was a bug).
		{"RL004", "zero requests", func(m *policy.Model) { rule(m, "acme").Limits[0].Requests = 0 }, `rule "acme": limit: requests 0: must be at least 1`},

		{"RL005", "min equals max", func(m *policy.Model) { rule(m, "acme").Lease.Min = 20 }, ""},
		{"RL005", "min above max", func(m *policy.Model) { rule(m, "acme").Lease.Min = 50 }, "domains.edge.rules.acme.lease: lease min 50 is above lease max 20"},

		{"RL006", "leases fit the capacity", func(m *policy.Model) { rule(m, "acme").Gateways = 2500 }, ""},
		{"RL006", "leases exceed the capacity", func(m *policy.Model) {
			r := rule(m, "acme")
			r.Gateways, r.DriftToleranceBP = 2501, 10000
		}, "2501 gateways × lease max 20 = 50020 tokens can be stranded, more than the capacity 50000"},

		{"RL007", "drift exactly at tolerance", func(m *policy.Model) {
			r := rule(m, "acme")
			r.Gateways, r.Lease.Max = 50, 20 // 50 × 20 / 50000 = 2.00%
		}, ""},
		{"RL007", "drift over tolerance", func(m *policy.Model) {
			r := rule(m, "acme")
			r.Gateways, r.Lease.Max = 50, 24
		}, "drift 2.40% over tolerance 2.00%: 50 gateways × lease max 24 / 50000 requests"},
		{"RL007", "drift just over rounds up", func(m *policy.Model) {
			r := rule(m, "acme")
			r.Gateways, r.Lease.Max, r.Limits[0].Requests, r.Limits[0].Burst = 1, 1001, 50000, 50000
		}, "drift 2.01% over tolerance 2.00%: 1 gateways × lease max 1001 / 50000 requests"},

		{"RL008", "fail-closed on the critical path", func(m *policy.Model) {}, ""},
		{"RL008", "fail-open off the critical path", func(m *policy.Model) { addRule(m, "home", match("path", "/v1/home")) }, ""},
		{"RL008", "fail-open path_match on a critical prefix", func(m *policy.Model) {
			r := rule(m, "payments")
			r.FailureMode = policy.FailOpen
		}, `fails open on critical path "/v1/payments*" (match key "payments" selects prefix "/v1/payments")`},
		{"RL008", "fail-open :path header on an exact critical path", func(m *policy.Model) { addRule(m, "refund", match("path", "/v1/ref*")) },
			`fails open on critical path "/v1/refund" (match key "path" selects prefix "/v1/ref")`},

		{"RL009", "fail-closed with a reason", func(m *policy.Model) {}, ""},
		{"RL009", "fail-closed without a reason", func(m *policy.Model) { rule(m, "payments").FailureReason = " " },
			"fails closed without a reason"},

		{"RL010", "one named address", func(m *policy.Model) {
			m.Domains[0].Sources[1].Mask = policy.MaskNone
			rule(m, "gold").Match[1] = match("ip", "192.0.2.1")
		}, ""},
		{"RL010", "remote address without a mask", func(m *policy.Model) { m.Domains[0].Sources[1].Mask = policy.MaskNone },
			`per-IP limit: source "ip" (remote_address) has mask "none", so everyone behind one NAT shares 50000 requests per 1m`},
		{"RL010", "identity subnet tier without a mask", func(m *policy.Model) { m.Domains[0].Sources[2].Mask = policy.MaskNone },
			`source "id" (identity) has mask "none"`},

		{"RL011", "hot key with enough shards", func(m *policy.Model) {
			r := rule(m, "acme")
			r.ExpectedPeakQPS, r.SubShards = 80000, &policy.SubShards{Count: 8, Attribute: "ip"}
		}, ""},
		{"RL011", "hot key without shards", func(m *policy.Model) { rule(m, "acme").ExpectedPeakQPS = 80000 },
			"hot key: expected peak 80000 QPS is over the per-key budget 10000 QPS and the rule has no sub_shards (want count ≥ 8)"},
		{"RL011", "hot key with too few shards", func(m *policy.Model) {
			r := rule(m, "acme")
			r.ExpectedPeakQPS, r.SubShards = 80000, &policy.SubShards{Count: 4, Attribute: "ip"}
		}, "expected peak 80000 QPS over 4 sub_shards is 20000 QPS per shard"},

		{"RL012", "store timeout below the RLS timeout", func(m *policy.Model) { rule(m, "acme").StoreTimeoutMs = 19 }, ""},
		{"RL012", "store timeout equal to the RLS timeout", func(m *policy.Model) { rule(m, "acme").StoreTimeoutMs = 20 },
			"store timeout 20ms is not below the gateway's RLS timeout 20ms"},

		{"RL013", "canary with a percentage", func(m *policy.Model) {
			rule(m, "acme").Stage = policy.Stage{Name: policy.StageCanary, CanaryPercent: 5, Since: "2025-01-01"}
		}, ""},
		{"RL013", "canary without a percentage", func(m *policy.Model) {
			rule(m, "acme").Stage = policy.Stage{Name: policy.StageCanary, Since: "2025-01-01"}
		}, "canary stage has percent 0, want 1 to 100"},

		{"RL014", "enforce without a date", func(m *policy.Model) { rule(m, "acme").Stage.Since = "" }, ""},
		{"RL014", "shadow without a date", func(m *policy.Model) { rule(m, "acme").Stage = policy.Stage{Name: policy.StageShadow} },
			`stage "shadow" has no start date (since)`},
		{"RL014", "soft with a bad date", func(m *policy.Model) {
			rule(m, "acme").Stage = policy.Stage{Name: policy.StageSoft, Since: "2025-02-30"}
		}, `stage "soft" since "2025-02-30" is not a date YYYY-MM-DD`},

		{"RL015", "regions sum to 100", func(m *policy.Model) {
			rule(m, "acme").Regions = []policy.RegionShare{{Region: "us-east", Percent: 60}, {Region: "eu-central", Percent: 30}, {Region: "us-west", Percent: 10}}
		}, ""},
		{"RL015", "regions sum to 90", func(m *policy.Model) {
			rule(m, "acme").Regions = []policy.RegionShare{{Region: "us-east", Percent: 60}, {Region: "eu-central", Percent: 30}}
		}, "region shares sum to 90%, want 100%: us-east 60% + eu-central 30%"},

		{"RL016", "cost equal to the burst", func(m *policy.Model) {
			l := &rule(m, "acme").Limits[0]
			l.Burst, l.Cost = 10, 10
		}, ""},
		{"RL016", "cost above the burst", func(m *policy.Model) {
			l := &rule(m, "acme").Limits[0]
			l.Burst, l.Cost = 10, 100
		}, "limit: cost 100 is above the capacity 10 (burst), so every request is rejected"},
		{"RL016", "cost above a window's requests", func(m *policy.Model) {
			l := &rule(m, "acme").Limits[0]
			l.Algorithm, l.Requests, l.Burst, l.Cost = policy.SlidingWindow, 5, 5, 6
		}, "cost 6 is above the capacity 5 (requests per window)"},
		{"RL016", "cost above one sub-shard's share", func(m *policy.Model) {
			r := rule(m, "acme")
			r.SubShards = &policy.SubShards{Count: 1000, Attribute: "ip"}
			r.Limits[0].Cost = 51 // 50000 / 1000 = 50 per shard
		}, "cost 51 is above the capacity 50 (burst / 1000 sub_shards)"},

		{"RL017", "low watermark at the max lease", func(m *policy.Model) { rule(m, "acme").Lease.LowWatermark = 20 }, ""},
		{"RL017", "low watermark above the max lease", func(m *policy.Model) { rule(m, "acme").Lease.LowWatermark = 21 },
			"lease low_watermark 21 tokens is above lease max 20"},

		{"RL018", "keys that share a prefix without '_'", func(m *policy.Model) {
			m.Domains[0].Sources = append(m.Domains[0].Sources, &policy.Source{Key: "tenants", Kind: policy.SourceHeader, Header: "x-t"})
			addRule(m, "ts", match("tenants", ""))
		}, ""},
		{"RL018", "key plus '_' at the same level", func(m *policy.Model) {
			m.Domains[0].Sources = append(m.Domains[0].Sources, &policy.Source{Key: "tenant_id", Kind: policy.SourceHeader, Header: "x-t"})
			addRule(m, "tid", match("tenant_id", ""))
		}, `match key "tenant_id" at level 1 and key "tenant" of rule "acme" at p.cue:10:3 collide on envoyproxy/ratelimit`},
		{"RL018", "the same keys below different parents", func(m *policy.Model) {
			m.Domains[0].Sources = append(m.Domains[0].Sources, &policy.Source{Key: "ip_v6", Kind: policy.SourceHeader, Header: "x-t"})
			addRule(m, "pay6", match("payments", ""), match("ip_v6", ""))
		}, ""},

		{"RL019", "expensive with a fallback", func(m *policy.Model) { rule(m, "acme").Limits[0].Cost = 10 }, ""},
		{"RL019", "cheap without a fallback", func(m *policy.Model) { rule(m, "acme").Fallback = nil }, ""},
		{"RL019", "expensive without a fallback", func(m *policy.Model) {
			r := rule(m, "acme")
			r.Fallback, r.Limits[0].Cost = nil, 10
		}, "fails open without a fallback, and its requests are expensive (limit: cost 10): while the store is unavailable only the default bucket caps it (twice a key's recently admitted rate, else 1/10 of its limit per gateway); set failure.fallback"},
		{"RL019", "expensive second limit, one gateway", func(m *policy.Model) {
			r := rule(m, "acme")
			r.Fallback, r.Gateways = nil, 1
			r.Limits = append(r.Limits, policy.Limit{Requests: 1000, WindowMs: 86_400_000, Burst: 1000, Algorithm: policy.FixedWindow, Cost: 2, Pos: at(12)})
		}, "(limit 2: cost 2): while the store is unavailable only the default bucket caps it (twice a key's recently admitted rate, else its whole limit)"},
		{"RL019", "expensive without gateways", func(m *policy.Model) {
			r := rule(m, "acme")
			r.Fallback, r.Gateways, r.Limits[0].Cost = nil, 0, 10
		}, "else its whole limit on every gateway, as gateways is not set)"},
		{"RL019", "expensive and fail-closed", func(m *policy.Model) { rule(m, "payments").Limits[0].Cost = 10 }, ""},
		// RL008 reports it as an error; failing closed fixes both.
		{"RL019", "expensive fail-open on a critical path", func(m *policy.Model) {
			r := rule(m, "payments")
			r.FailureMode, r.Limits[0].Cost = policy.FailOpen, 10
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.id+"/"+tt.name, func(t *testing.T) {
			m := goodModel()
			tt.edit(m)
			var got []finding.Finding
			for _, f := range Lint(m) {
				if f.ID == tt.id {
					got = append(got, f)
				}
			}
			if tt.want == "" {
				if len(got) != 0 {
					t.Fatalf("got %d %s findings, want none:\n%s", len(got), tt.id, lines(got))
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("got %d %s findings, want 1:\n%s", len(got), tt.id, lines(got))
			}
			if !strings.Contains(got[0].Message, tt.want) {
				t.Errorf("got message %q, want it to contain %q", got[0].Message, tt.want)
			}
			if r, ok := Explain(tt.id); !ok || got[0].Severity != r.Severity {
				t.Errorf("got severity %q, want the rule's %q", got[0].Severity, r.Severity)
			}
			if got[0].Pos.File == "" || got[0].Domain != "edge" || got[0].Rule == "" {
				t.Errorf("got pos %q domain %q rule %q, want all set", got[0].Pos, got[0].Domain, got[0].Rule)
			}
		})
	}
}

func TestRulesAreDescribed(t *testing.T) {
	seen := map[string]bool{}
	for i, r := range Rules() {
		if want := fmt.Sprintf("RL%03d", i); r.ID != want {
			t.Errorf("rule %d: got ID %s, want %s", i, r.ID, want)
		}
		if r.Name == "" || r.Summary == "" || r.Help == "" || seen[r.Name] {
			t.Errorf("%s: got name %q summary %q help %d bytes, want a unique name, a summary and help", r.ID, r.Name, r.Summary, len(r.Help))
		}
		if r.Severity != finding.Error && r.Severity != finding.Warning {
			t.Errorf("%s: got severity %q, want error or warning", r.ID, r.Severity)
		}
		seen[r.Name] = true
		if got, ok := Explain(r.Name); !ok || got.ID != r.ID {
			t.Errorf("Explain(%q): got %q, %v, want %s", r.Name, got.ID, ok, r.ID)
		}
	}
	if _, ok := Explain("RL999"); ok {
		t.Errorf("Explain(RL999): got ok, want unknown")
	}
}

func TestPathNames(t *testing.T) {
	tests := []struct{ path, domain, rule string }{
		{"domains.edge.rules.tenant.limits.0.window", "edge", "tenant"},
		{`domains."a.b".rules."r.1"`, "a.b", "r.1"},
		{"domains.edge.sources.ip", "edge", ""},
		{"", "", ""},
	}
	for _, tt := range tests {
		d, r := pathNames(tt.path)
		if d != tt.domain || r != tt.rule {
			t.Errorf("pathNames(%q): got %q, %q, want %q, %q", tt.path, d, r, tt.domain, tt.rule)
		}
	}
}
