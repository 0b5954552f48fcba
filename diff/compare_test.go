package diff

import (
	"fmt"
	"math/big"
	"strings"
	"testing"

	"github.com/rlctl/rlctl/internal/policyfixture"
	"github.com/rlctl/rlctl/policy"
)

// model returns a fresh small model: one domain with two rules, every field set.
func model() *policy.Model {
	pos := func(line int) policy.Pos { return policy.Pos{File: "p.cue", Line: line} }
	rule := func(name string, line int, match []policy.Match, requests int64) *policy.Rule {
		return &policy.Rule{
			Name: name, Pos: pos(line), Match: match,
			Limits:      []policy.Limit{{Requests: requests, WindowMs: 1000, Burst: requests, Algorithm: policy.TokenBucket, Cost: 1, Pos: pos(line + 1)}},
			Stage:       policy.Stage{Name: policy.StageShadow, Since: "2025-01-01", Pos: pos(line + 2)},
			FailureMode: policy.FailOpen, StoreTimeoutMs: 5,
			Lease:            policyfixture.Lease(),
			Regions:          []policy.RegionShare{{Region: "us-east", Percent: 60}, {Region: "eu-central", Percent: 40}},
			Owner:            "team-edge",
			DriftToleranceBP: 200,
		}
	}
	return &policy.Model{Domains: []*policy.Domain{{
		Name:    "edge",
		Pos:     pos(1),
		Gateway: policy.Gateway{RLSTimeoutMs: 20, PerKeyQPSBudget: 10000},
		Sources: []*policy.Source{
			{Key: "tenant", Kind: policy.SourceHeader, Header: "x-tenant-id", Pos: pos(2)},
			{Key: "path", Kind: policy.SourceHeader, Header: ":path", Pos: pos(3)},
			{Key: "ip", Kind: policy.SourceRemoteAddress, Mask: policy.MaskNone, Pos: pos(4)},
		},
		CriticalPaths: []string{"/pay/*"},
		Rules: []*policy.Rule{
			rule("pay", 10, []policy.Match{{Key: "tenant", Value: "shop", Kind: policy.MatchExact, Pos: pos(11)},
				{Key: "path", Value: "/pay", Kind: policy.MatchExact}}, 200),
			rule("browse", 20, []policy.Match{{Key: "tenant", Kind: policy.MatchAny, Pos: pos(21)}}, 100),
		},
	}}}
}

// change is what a test checks of a Change.
type change struct {
	rule    string
	kind    Kind
	summary string
}

func TestCompare(t *testing.T) {
	tests := []struct {
		name string
		edit func(m *policy.Model)
		want []change
	}{
		{"unchanged", func(m *policy.Model) {}, nil},
		{"moved to another file", func(m *policy.Model) { m.Domains[0].Rules[0].Pos.File = "q.cue" }, nil},
		{"rule added", func(m *policy.Model) {
			r := *m.Domains[0].Rules[1]
			r.Name, r.Match = "by_ip", []policy.Match{{Key: "ip", Kind: policy.MatchAny}}
			m.Domains[0].Rules = append(m.Domains[0].Rules, &r)
		}, []change{{"by_ip", KindAdded, "by_ip: added, 100/s, shadow since 2025-01-01"}}},
		{"rule removed", func(m *policy.Model) { m.Domains[0].Rules = m.Domains[0].Rules[:1] },
			[]change{{"browse", KindRemoved, "browse: removed, was 100/s, shadow since 2025-01-01"}}},
		{"renamed", func(m *policy.Model) { m.Domains[0].Rules[1].Name = "catalog" },
			[]change{{"catalog", KindRenamed, "catalog: renamed from browse"}}},
		{"renamed and tightened", func(m *policy.Model) {
			m.Domains[0].Rules[1].Name = "catalog"
			m.Domains[0].Rules[1].Limits[0].Requests = 50
			m.Domains[0].Rules[1].Limits[0].Burst = 50
		}, []change{{"catalog", KindRenamed, "catalog: renamed from browse"},
			{"catalog", KindLimitTightened, "catalog: 100/s → 50/s (−50%)"}}},
		{"a new name and a new match is another rule", func(m *policy.Model) {
			m.Domains[0].Rules[1].Name = "catalog"
			m.Domains[0].Rules[1].Match[0].Key = "ip"
		}, []change{{"catalog", KindAdded, "catalog: added, 100/s, shadow since 2025-01-01"},
			{"browse", KindRemoved, "browse: removed, was 100/s, shadow since 2025-01-01"}}},
		{"match", func(m *policy.Model) {
			m.Domains[0].Rules[0].Match[1].Value = "/pay/*"
			m.Domains[0].Rules[0].Match[1].Kind = policy.MatchWildcard
		},
			[]change{{"pay", KindMatch, "pay: match tenant=shop, path=/pay → tenant=shop, path=/pay/*"}}},
		{"tightened", func(m *policy.Model) { l := &m.Domains[0].Rules[0].Limits[0]; l.Requests, l.Burst = 150, 150 },
			[]change{{"pay", KindLimitTightened, "pay: 200/s → 150/s (−25%)"}}},
		{"loosened by a third", func(m *policy.Model) {
			l := &m.Domains[0].Rules[1].Limits[0]
			l.Requests, l.Burst = 400, 400
			l.WindowMs = 3000
		},
			[]change{{"browse", KindLimitLoosened, "browse: 100/s → 400/3s (+33.33%)"},
				{"browse", KindWindow, "browse: window 1s → 3s"},
				{"browse", KindBurst, "browse: burst 100 → 400 (+300%)"}}},
		// The same rate in another window: what a key may spend at once grows 60-fold (the
		// burst was not shown when neither side set one).
		{"same rate, another window", func(m *policy.Model) {
			l := &m.Domains[0].Rules[1].Limits[0]
			l.Requests, l.Burst, l.WindowMs = 6000, 6000, 60_000
		},
			[]change{{"browse", KindWindow, "browse: window 1s → 1m"},
				{"browse", KindBurst, "browse: burst 100 → 6000 (+5900%)"}}},
		{"burst", func(m *policy.Model) { m.Domains[0].Rules[0].Limits[0].Burst = 300 },
			[]change{{"pay", KindBurst, "pay: burst 200 → 300 (+50%)"}}},
		{"algorithm", func(m *policy.Model) { m.Domains[0].Rules[0].Limits[0].Algorithm = policy.FixedWindow },
			[]change{{"pay", KindAlgorithm, "pay: algorithm token_bucket → fixed_window"}}},
		{"cost", func(m *policy.Model) { m.Domains[0].Rules[0].Limits[0].Cost = 2 },
			[]change{{"pay", KindCost, "pay: cost 1 → 2"}}},
		{"limit added", func(m *policy.Model) {
			r := m.Domains[0].Rules[0]
			r.Limits = append(r.Limits, policy.Limit{Requests: 1000, WindowMs: 60_000, Burst: 1000, Algorithm: policy.TokenBucket, Cost: 1})
		}, []change{{"pay", KindLimitTightened, "pay: limit 1000/m added"}}},
		{"limits paired by window", func(m *policy.Model) {
			r := m.Domains[0].Rules[0]
			r.Limits = append([]policy.Limit{{Requests: 900, WindowMs: 60_000, Burst: 900, Algorithm: policy.TokenBucket, Cost: 1}}, r.Limits...)
			r.Limits[1].Requests, r.Limits[1].Burst = 100, 100
		}, []change{{"pay", KindLimitTightened, "pay: limit 900/m added"},
			{"pay", KindLimitTightened, "pay: limit 2 200/s → 100/s (−50%)"}}},
		{"stage advanced", func(m *policy.Model) {
			m.Domains[0].Rules[0].Stage = policy.Stage{Name: policy.StageSoft, Since: "2025-02-01"}
		}, []change{{"pay", KindStageAdvanced, "pay: stage shadow since 2025-01-01 → soft since 2025-02-01"}}},
		{"stage skipped", func(m *policy.Model) { m.Domains[0].Rules[0].Stage.Name = policy.StageEnforce },
			[]change{{"pay", KindStageSkipped, "pay: stage shadow since 2025-01-01 → enforce since 2025-01-01"}}},
		{"empty stage enforces", func(m *policy.Model) { m.Domains[0].Rules[0].Stage.Name = "" },
			[]change{{"pay", KindStageSkipped, "pay: stage shadow since 2025-01-01 → enforce since 2025-01-01"}}},
		{"canary percent up", func(m *policy.Model) {
			m.Domains[0].Rules[0].Stage = policy.Stage{Name: policy.StageCanary, CanaryPercent: 10}
		}, []change{{"pay", KindStageSkipped, "pay: stage shadow since 2025-01-01 → canary 10%"}}},
		{"stage since", func(m *policy.Model) { m.Domains[0].Rules[0].Stage.Since = "2025-03-01" },
			[]change{{"pay", KindStageSince, "pay: shadow since 2025-01-01 → 2025-03-01"}}},
		{"hold set (rollout pause)", func(m *policy.Model) { m.Domains[0].Rules[0].Stage.Hold = "incident 42" },
			[]change{{"pay", KindStageHold, `pay: hold none → "incident 42"`}}},
		{"failure mode and reason", func(m *policy.Model) {
			m.Domains[0].Rules[0].FailureMode, m.Domains[0].Rules[0].FailureReason = policy.FailClosed, "ledger"
		}, []change{{"pay", KindFailureMode, "pay: failure mode open → closed"},
			{"pay", KindFailureReason, `pay: failure reason "" → "ledger"`}}},
		{"fallback", func(m *policy.Model) { m.Domains[0].Rules[1].Fallback = &policy.Rate{Requests: 50, WindowMs: 1000} },
			[]change{{"browse", KindFallback, "browse: fallback default → 50/s"}}},
		{"store timeout", func(m *policy.Model) { m.Domains[0].Rules[1].StoreTimeoutMs = 10 },
			[]change{{"browse", KindStoreTimeout, "browse: store timeout 5ms → 10ms"}}},
		{"lease", func(m *policy.Model) {
			m.Domains[0].Rules[1].Lease.Max, m.Domains[0].Rules[1].Lease.LookaheadMs = 300, 100
		},
			[]change{{"browse", KindLease, "browse: lease max 500 → 300, lookahead 250ms → 100ms"}}},
		{"sub-shards", func(m *policy.Model) { m.Domains[0].Rules[0].SubShards = &policy.SubShards{Count: 4, Attribute: "ip"} },
			[]change{{"pay", KindSubShards, "pay: sub-shards none → 4 by ip"}}},
		{"regions", func(m *policy.Model) { m.Domains[0].Rules[0].Regions[0].Percent = 50 },
			[]change{{"pay", KindRegions, "pay: regions eu-central 40%, us-east 60% → eu-central 40%, us-east 50%"}}},
		{"regions reordered", func(m *policy.Model) {
			rs := m.Domains[0].Rules[0].Regions
			rs[0], rs[1] = rs[1], rs[0]
		}, nil},
		{"owner", func(m *policy.Model) { m.Domains[0].Rules[0].Owner = "team-pay" },
			[]change{{"pay", KindOwner, "pay: owner team-edge → team-pay"}}},
		{"capacity", func(m *policy.Model) { m.Domains[0].Rules[0].ExpectedPeakQPS = 150 },
			[]change{{"pay", KindCapacity, "pay: expected peak QPS none → 150"}}},
		{"drift tolerance", func(m *policy.Model) { m.Domains[0].Rules[0].DriftToleranceBP = 250 },
			[]change{{"pay", KindDriftTolerance, "pay: drift tolerance 2% → 2.5%"}}},
		{"legit", func(m *policy.Model) { m.Domains[0].Rules[0].Legit = []string{"acme"} },
			[]change{{"pay", KindLegit, "pay: legit +acme"}}},
		{"descriptor on every rule using the key", func(m *policy.Model) { m.Domains[0].Sources[0].Header = "x-org-id" },
			[]change{{"pay", KindDescriptor, "pay: descriptor tenant: header x-tenant-id → header x-org-id"},
				{"browse", KindDescriptor, "browse: descriptor tenant: header x-tenant-id → header x-org-id"}}},
		{"unused source", func(m *policy.Model) { m.Domains[0].Sources[2].Mask = policy.MaskSubnet },
			[]change{{"", KindDomainSetting, "edge: source ip (no rule uses it) remote address, mask none → remote address, mask subnet"}}},
		{"source added", func(m *policy.Model) {
			m.Domains[0].Sources = append(m.Domains[0].Sources, &policy.Source{Key: "plan", Kind: policy.SourceJWTClaim, Claim: "plan",
				MetadataNamespace: "jwt", MetadataKey: "payload"})
		}, []change{{"", KindDomainSetting, "edge: source plan none → jwt claim plan (jwt/payload)"}}},
		{"gateway and critical paths", func(m *policy.Model) {
			m.Domains[0].Gateway.RLSTimeoutMs = 50
			m.Domains[0].CriticalPaths = nil
		}, []change{{"", KindDomainSetting, "edge: gateway rls_timeout 20ms → 50ms"},
			{"", KindDomainSetting, "edge: critical_paths /pay/* → none"}}},
		{"governance and rollout settings", func(m *policy.Model) {
			m.Domains[0].Governance.ShadowDwellMs = 14 * 86_400_000
			m.Domains[0].Rollout.CanaryPercent = 20
		}, []change{{"", KindDomainSetting, "edge: governance none → dwell shadow 14d, soft 0ms, new rules at shadow false"},
			{"", KindDomainSetting, `edge: rollout none → {"canary_percent":20}`}}},
		{"domain added", func(m *policy.Model) {
			d := model().Domains[0]
			d.Name, d.Rules = "internal", d.Rules[:1]
			m.Domains = append(m.Domains, d)
		}, []change{{"", KindAdded, "domain internal added (1 rule)"}, {"pay", KindAdded, "pay: added, 200/s, shadow since 2025-01-01"}}},
		{"domain removed", func(m *policy.Model) { m.Domains = nil },
			[]change{{"", KindRemoved, "domain edge removed (2 rules)"},
				{"pay", KindRemoved, "pay: removed, was 200/s, shadow since 2025-01-01"},
				{"browse", KindRemoved, "browse: removed, was 100/s, shadow since 2025-01-01"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base, head := model(), model()
			tt.edit(head)
			if tt.name == "stage rolled back" {
				base = model()
				base.Domains[0].Rules[0].Stage.Name = policy.StageEnforce
				tt.want = []change{{"pay", KindStageRolledBack, "pay: stage enforce since 2025-01-01 → soft since 2025-01-01"}}
			}
			got := summarize(Compare(base, head))
			if want := fmt.Sprint(tt.want); got != want {
				t.Errorf("got %s\nwant %s", got, want)
			}
		})
	}
}

func summarize(cs []Change) string {
	var out []change
	for _, c := range cs {
		out = append(out, change{c.Rule, c.Kind, c.Summary})
	}
	return fmt.Sprint(out)
}

// Stage moves are told apart by how far they go, and the canary percent moves within canary.
func TestCompareStages(t *testing.T) {
	shadow, soft, canary10, canary50, enforce := policy.Stage{Name: policy.StageShadow}, policy.Stage{Name: policy.StageSoft},
		policy.Stage{Name: policy.StageCanary, CanaryPercent: 10}, policy.Stage{Name: policy.StageCanary, CanaryPercent: 50},
		policy.Stage{Name: policy.StageEnforce}
	tests := []struct {
		from, to policy.Stage
		want     Kind
	}{
		{shadow, soft, KindStageAdvanced},
		{soft, canary10, KindStageAdvanced},
		{canary10, canary50, KindStageAdvanced},
		{canary50, enforce, KindStageAdvanced},
		{shadow, canary10, KindStageSkipped},
		{soft, enforce, KindStageSkipped},
		{canary50, canary10, KindStageRolledBack},
		{enforce, shadow, KindStageRolledBack},
		{soft, shadow, KindStageRolledBack},
		{enforce, policy.Stage{}, ""},
	}
	for _, tt := range tests {
		base, head := model(), model()
		base.Domains[0].Rules[0].Stage, head.Domains[0].Rules[0].Stage = tt.from, tt.to
		var got Kind
		if cs := Compare(base, head); len(cs) > 0 {
			got = cs[0].Kind
		}
		if got != tt.want {
			t.Errorf("%s → %s: got %q, want %q", stageName(tt.from), stageName(tt.to), got, tt.want)
		}
	}
}

// Every change carries the positions of its value on both sides, and only on the sides where
// it exists.
func TestComparePositions(t *testing.T) {
	base, head := model(), model()
	head.Domains[0].Rules[0].Limits[0].Requests = 100
	head.Domains[0].Rules[0].Limits[0].Pos = policy.Pos{File: "q.cue", Line: 7}
	head.Domains[0].Rules = head.Domains[0].Rules[:1]
	cs := Compare(base, head)
	if len(cs) != 2 {
		t.Fatalf("got %d changes, want 2: %v", len(cs), summarize(cs))
	}
	if got, want := position(cs[0].Base)+" "+position(cs[0].Head), "p.cue:11 q.cue:7"; got != want {
		t.Errorf("limit: got positions %q, want %q", got, want)
	}
	if got, want := position(cs[1].Base)+"|"+position(cs[1].Head), "p.cue:20|"; got != want {
		t.Errorf("removed: got positions %q, want %q", got, want)
	}
	if cs[0].Percent == nil || *cs[0].Percent != -50 {
		t.Errorf("limit: got percent %v, want -50", cs[0].Percent)
	}
}

func TestPercent(t *testing.T) {
	tests := []struct {
		after, before int64
		want          string
	}{
		{150, 200, "\u221225%"},
		{400, 300, "+33.33%"},
		{200, 300, "\u221233.33%"},
		{100, 100, "0%"},
		{100001, 100000000, "\u221299.9%"},
		{1000001, 1000000, "+<0.01%"},
		{999999, 1000000, "\u2212<0.01%"},
		{2, 3, "\u221233.33%"},
	}
	for _, tt := range tests {
		_, got := percent(ratOf(tt.after), ratOf(tt.before))
		if got != tt.want {
			t.Errorf("percent(%d, %d): got %q, want %q", tt.after, tt.before, got, tt.want)
		}
	}
}

func TestRate(t *testing.T) {
	tests := []struct {
		requests, windowMs int64
		want               string
	}{
		{200, 1000, "200/s"}, {5, 10_000, "5/10s"}, {1000, 60_000, "1000/m"}, {7, 3_600_000, "7/h"},
		{1, 86_400_000, "1/d"}, {3, 250, "3/250ms"}, {9, 120_000, "9/2m"},
	}
	for _, tt := range tests {
		if got := rate(tt.requests, tt.windowMs); got != tt.want {
			t.Errorf("rate(%d, %d): got %q, want %q", tt.requests, tt.windowMs, got, tt.want)
		}
	}
}

// Compare's order is the package doc's: the domain's own changes, head rules in precedence
// order, removed rules, and a rule's changes in Kind order.
func TestCompareOrder(t *testing.T) {
	base, head := model(), model()
	h := head.Domains[0]
	h.Rules[0].Owner = "x"                          // owner comes after...
	h.Rules[0].Limits[0].Cost = 3                   // ...cost
	h.Rules[1].Name = "catalog"                     // renamed
	h.Rules[0], h.Rules[1] = h.Rules[1], h.Rules[0] // catalog now first
	h.Gateway.PerKeyQPSBudget = 1
	var kinds []string
	for _, c := range Compare(base, head) {
		kinds = append(kinds, c.Rule+":"+string(c.Kind))
	}
	if got, want := strings.Join(kinds, " "), ":domain_setting catalog:renamed pay:cost pay:owner"; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestSummarize(t *testing.T) {
	cs := []Change{
		{Domain: "d", Rule: "a", Kind: KindAdded},
		{Domain: "d", Rule: "b", Kind: KindRenamed}, {Domain: "d", Rule: "b", Kind: KindCost},
		{Domain: "d", Rule: "c", Kind: KindRemoved},
		{Domain: "d", Kind: KindDomainSetting},
		{Domain: "e", Kind: KindAdded}, {Domain: "e", Rule: "x", Kind: KindAdded},
	}
	got := Summarize(cs)
	if want := (Summary{Added: 3, Changed: 2, Removed: 1, Changes: 7}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if got, want := got.String(), "Plan: 3 added, 2 changed, 1 removed."; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got, want := Summarize(nil).String(), "No changes."; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func ratOf(n int64) *big.Rat { return big.NewRat(n, 1) }

// TestComparePrecedence: swapping two rules whose wildcards of one key overlap changes which one
// a descriptor both match goes to (the first in declared order, never back), and diff says so
// on the rule now ahead; it said "No changes". Rules whose wildcards cannot meet, or that differ
// before they compete, move freely.
func TestComparePrecedence(t *testing.T) {
	paths := func(m *policy.Model, a, b string) {
		rs := m.Domains[0].Rules
		rs[0].Match = []policy.Match{{Key: "path", Value: a, Kind: policy.MatchWildcard}}
		rs[1].Match = []policy.Match{{Key: "path", Value: b, Kind: policy.MatchWildcard}}
	}
	swap := func(m *policy.Model) { rs := m.Domains[0].Rules; rs[0], rs[1] = rs[1], rs[0] }
	for _, tc := range []struct {
		a, b string
		want []change
	}{
		{"/v1/*", "/v1/orders*", []change{{"browse", KindPrecedence,
			`browse: now before pay, so it takes the path values both match (path="/v1/orders*", path="/v1/*": wildcards in declared order)`}}},
		{"/v1/*", "/v2/*", nil},
	} {
		base, head := model(), model()
		paths(base, tc.a, tc.b)
		paths(head, tc.a, tc.b)
		swap(head)
		var got []change
		for _, c := range Compare(base, head) {
			got = append(got, change{c.Rule, c.Kind, c.Summary})
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s and %s swapped:\n got %v\nwant %v", tc.a, tc.b, got, tc.want)
		}
	}
}
