package lint

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rlctl/rlctl/finding"
	"github.com/rlctl/rlctl/internal/golden"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/schema"
)

// govToday is the day the governance tests run on.
var govToday = time.Date(2025, 6, 20, 15, 4, 5, 0, time.UTC)

// TestGovernanceRepos lints each head/ under testdata/governance against its base/, on
// govToday, and compares the text output with its want.txt (go test -update rewrites them). A
// directory named after a rule wants that rule's findings only; "good" wants none.
func TestGovernanceRepos(t *testing.T) {
	dirs, err := os.ReadDir("testdata/governance")
	if err != nil {
		t.Fatal(err)
	}
	covered := map[string]bool{}
	for _, d := range dirs {
		t.Run(d.Name(), func(t *testing.T) {
			dir := filepath.Join("testdata", "governance", d.Name())
			base, err := schema.Load(filepath.Join(dir, "base"))
			if err != nil {
				t.Fatal(err)
			}
			fs, err := RunWith(Options{Base: base, Today: govToday}, filepath.Join(dir, "head"))
			if err != nil {
				t.Fatal(err)
			}
			if d.Name() == "good" {
				if len(fs) != 0 {
					t.Fatalf("got %d findings, want none:\n%s", len(fs), lines(fs))
				}
				return
			}
			want, _, _ := strings.Cut(d.Name(), "-")
			covered[want] = true
			if len(fs) == 0 {
				t.Errorf("got no findings, want %s", want)
			}
			for _, f := range fs {
				if f.ID != want {
					t.Errorf("got %s, want only %s findings", f, want)
				}
				if f.Pos.File == "" || f.Pos.Line == 0 || f.Pos.Col == 0 || f.Domain == "" || f.Rule == "" {
					t.Errorf("got finding without file:line:col, domain or rule: %s", f)
				}
			}
			var buf bytes.Buffer
			if err := (finding.Text{}).Write(&buf, &finding.Report{Findings: fs}); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join(dir, "want.txt"), buf.Bytes())
		})
	}
	for _, c := range governanceChecks {
		if !covered[c.ID] {
			t.Errorf("no directory in testdata/governance for %s", c.ID)
		}
	}
}

// govModel is the base of the governance cases: goodModel with acme in shadow since
// 2025-06-02 and the default dwells.
func govModel() *policy.Model {
	m := goodModel()
	m.Domains[0].Governance = policy.Governance{ShadowDwellMs: 7 * 86_400_000, SoftDwellMs: 7 * 86_400_000,
		NewRulesAtShadow: true, Pos: at(8)}
	rule(m, "acme").Stage = policy.Stage{Name: policy.StageShadow, Since: "2025-06-02", Pos: at(12)}
	return m
}

// TestGovernance changes govModel and checks the governance findings: each case wants exactly
// the findings listed (ID and a substring of the message), in order.
func TestGovernance(t *testing.T) {
	type want struct{ id, msg string }
	stage := func(m *policy.Model, name string, st policy.StageName, since string) {
		r := rule(m, name)
		r.Stage.Name, r.Stage.Since = st, since
	}
	tests := []struct {
		name string
		base func(m *policy.Model) // nil: govModel as it is
		head func(m *policy.Model)
		want []want
	}{
		{"no change", nil, func(m *policy.Model) {}, nil},

		{"new rule at shadow", nil, func(m *policy.Model) {
			addRule(m, "beta", match("tenant", "beta")).Stage = policy.Stage{Name: policy.StageShadow, Since: "2025-06-20"}
		}, nil},
		{"new rule at enforce", nil, func(m *policy.Model) {
			addRule(m, "beta", match("tenant", "beta")).Stage = policy.Stage{Name: policy.StageEnforce}
		},
			[]want{{"RL020", `rule "beta": is new and enters at "enforce", want "shadow"`}}},
		// The opt-out must be the base's too: one added with a tightening let it through.
		{"an opt-out added with the rule", nil, func(m *policy.Model) {
			g := &m.Domains[0].Governance
			g.NewRulesAtShadow, g.OptOutReason = false, "internal API"
			addRule(m, "beta", match("tenant", "beta")).Stage = policy.Stage{Name: policy.StageEnforce}
		}, []want{{"RL020", `rule "beta": is new and enters at "enforce"`}}},
		{"new rule with an opt-out", func(m *policy.Model) {
			g := &m.Domains[0].Governance
			g.NewRulesAtShadow, g.OptOutReason = false, "internal API"
		}, func(m *policy.Model) {
			g := &m.Domains[0].Governance
			g.NewRulesAtShadow, g.OptOutReason = false, "internal API"
			addRule(m, "beta", match("tenant", "beta")).Stage = policy.Stage{Name: policy.StageEnforce}
		}, nil},
		{"an opt-out needs its reason", nil, func(m *policy.Model) {
			m.Domains[0].Governance.NewRulesAtShadow = false
			addRule(m, "beta", match("tenant", "beta")).Stage = policy.Stage{Name: policy.StageEnforce}
		}, []want{{"RL020", "is new"}}},
		{"new domain", func(m *policy.Model) { m.Domains = nil }, func(m *policy.Model) { *m = *govModel() },
			[]want{{"RL020", `rule "enterprise"`}, {"RL020", `rule "tenants"`},
				{"RL020", `rule "anon"`}, {"RL020", `rule "gold"`}, {"RL020", `rule "payments"`}}},
		{"rate tightened", nil, func(m *policy.Model) { rule(m, "tenants").Limits[0].Requests = 37500 },
			[]want{{"RL020", `rule "tenants": limit tightened from 50000/1m to 37500/1m (−25%) (base p.cue:25:3) and is at "enforce"`}}},
		{"rate tightened through the window", nil, func(m *policy.Model) { rule(m, "tenants").Limits[0].WindowMs = 120_000 },
			[]want{{"RL020", "limit tightened from 50000/1m to 50000/2m (−50%)"}}},
		{"rate loosened", nil, func(m *policy.Model) { rule(m, "tenants").Limits[0].Requests = 60000 }, nil},
		{"burst tightened", nil, func(m *policy.Model) { rule(m, "tenants").Limits[0].Burst = 100 },
			[]want{{"RL020", "limit burst tightened from 50000 to 100"}}},
		{"limit added", nil, func(m *policy.Model) {
			r := rule(m, "tenants")
			r.Limits = append(r.Limits, policy.Limit{Requests: 1000000, WindowMs: 86_400_000, Burst: 1000000, Algorithm: policy.TokenBucket, Cost: 1})
		}, []want{{"RL020", "has a new limit 2 1000000/1d"}}},
		{"tightened in shadow", nil, func(m *policy.Model) { rule(m, "acme").Limits[0].Requests = 100 }, nil},
		// A rule that selects more requests, costs more or is split into more shards limits some
		// requests harder than before: each went to enforce with no finding.
		{"match widened", nil, func(m *policy.Model) { rule(m, "enterprise").Match[0].Value = "e*" },
			[]want{{"RL020", `rule "enterprise": matches [tenant="e*"], which selects requests the base's [tenant="ent-*"] did not (base p.cue:20:3) and is at "enforce"`}}},
		{"match widened to any value", nil, func(m *policy.Model) {
			r := rule(m, "gold")
			r.Match[0].Value, r.Match[0].Kind = "", policy.MatchAny
		}, []want{{"RL020", `rule "gold": matches [plan, ip], which selects requests the base's [plan="gold", ip] did not`}}},
		// Lookup gives the values two competing wildcards both match to the rule declared first:
		// put ahead of "enterprise" (ent-*), "tenants" (*) takes its values at its own lower limit.
		{"ahead of a competing wildcard", func(m *policy.Model) { rule(m, "enterprise").Limits[0].Requests = 100000 }, func(m *policy.Model) {
			rule(m, "enterprise").Limits[0].Requests = 100000
			rs := m.Domains[0].Rules
			i, j := slices.Index(rs, rule(m, "enterprise")), slices.Index(rs, rule(m, "tenants"))
			rs[i], rs[j] = rs[j], rs[i]
		}, []want{{"RL020", `rule "tenants": now comes before rule "enterprise" (base p.cue:20:3), so it takes the values both match, which had "enterprise"'s limits: limit tightened from 100000/1m to 50000/1m (−50%); it is at "enforce"`}}},
		{"a competing wildcard ahead removed", func(m *policy.Model) { rule(m, "enterprise").Limits[0].Requests = 100000 }, func(m *policy.Model) {
			removeRule(m, "enterprise")
		}, []want{{"RL020", `rule "tenants": takes over from removed rule "enterprise" (base p.cue:20:3), so it takes the values both match, which had "enterprise"'s limits: limit tightened from 100000/1m to 50000/1m (−50%)`}}},
		// Narrowed from ent-* to ent-gold-*, "enterprise" leaves ent-silver to "tenants" (*):
		// from 100,000 to 50,000 a minute at enforce.
		{"a competing wildcard ahead narrowed", func(m *policy.Model) { rule(m, "enterprise").Limits[0].Requests = 100000 }, func(m *policy.Model) {
			r := rule(m, "enterprise")
			r.Match[0].Value = "ent-gold-*"
		}, []want{{"RL020", `rule "tenants": takes values no longer matched by rule "enterprise" (base p.cue:20:3), so it takes the values both match, which had "enterprise"'s limits: limit tightened from 100000/1m to 50000/1m (−50%)`}}},
		{"ahead of a competing wildcard, looser", nil, func(m *policy.Model) {
			rs := m.Domains[0].Rules
			i, j := slices.Index(rs, rule(m, "enterprise")), slices.Index(rs, rule(m, "tenants"))
			rs[i], rs[j] = rs[j], rs[i]
		}, nil},
		// A source that produces its values otherwise changes what the rule's buckets hold: the
		// path_match now takes every /v1/ request into the payments bucket. The same source under
		// another key is a rename, no change.
		{"source widened", nil, func(m *policy.Model) { m.Domains[0].Source("payments").PathPrefix = "/v1/" },
			[]want{{"RL020", `rule "payments": matches key "payments", whose source changed from path prefix /v1/payments → payments to path prefix /v1/ → payments`}}},
		{"source's key renamed", nil, func(m *policy.Model) {
			m.Domains[0].Source("plan").Key = "tier"
			rule(m, "gold").Match[0].Key = "tier"
		}, []want{{"RL031", `rule "gold": matches the descriptor keys tier, ip where it matched plan, ip (base p.cue:35:3)`}}},
		{"match of every value written otherwise", nil, func(m *policy.Model) {
			r := rule(m, "tenants") // "*" becomes key-only: the same values
			r.Match[0].Value, r.Match[0].Kind = "", policy.MatchAny
		}, nil},
		{"match narrowed", nil, func(m *policy.Model) { rule(m, "enterprise").Match[0].Value = "ent-gold-*" }, nil},
		{"cost raised", nil, func(m *policy.Model) { rule(m, "tenants").Limits[0].Cost = 5 },
			[]want{{"RL020", `rule "tenants": limit tightened from 50000/1m at cost 1 to 50000/1m at cost 5 (−80%)`}}},
		// What a key gets, in requests and per shard, is compared: more requests at a higher cost,
		// or over more shards, can be no tighter (and diff calls them loosened).
		{"cost and requests raised together", nil, func(m *policy.Model) {
			l := &rule(m, "tenants").Limits[0]
			l.Requests, l.Burst, l.Cost = 250000, 250000, 5
		}, nil},
		{"sub-shards and requests raised together", nil, func(m *policy.Model) {
			r := rule(m, "tenants")
			r.Limits[0].Requests, r.Limits[0].Burst = 200000, 200000
			r.SubShards = &policy.SubShards{Count: 4, Attribute: "ip"}
		}, []want{{"RL031", `rule "tenants": has 4 sub-shards where it had 1`}}},
		// Limits pair by window, as diff pairs them: the same limits in another order are no
		// change, and a limit removed is looser.
		{"limits reordered", func(m *policy.Model) {
			r := rule(m, "tenants")
			r.Limits = append(r.Limits, policy.Limit{Requests: 1000000, WindowMs: 86_400_000, Burst: 1000000, Algorithm: policy.TokenBucket, Cost: 1})
		}, func(m *policy.Model) {
			ls := rule(m, "tenants").Limits
			ls[0], ls[1] = ls[1], ls[0]
		}, nil},
		{"a limit removed", func(m *policy.Model) {
			r := rule(m, "tenants")
			r.Limits = append([]policy.Limit{{Requests: 100, WindowMs: 1000, Burst: 100, Algorithm: policy.TokenBucket, Cost: 1}}, r.Limits...)
		}, func(m *policy.Model) {
			r := rule(m, "tenants")
			r.Limits = r.Limits[1:]
		}, nil},
		{"sub-shards added", nil, func(m *policy.Model) { rule(m, "tenants").SubShards = &policy.SubShards{Count: 4, Attribute: "ip"} },
			[]want{{"RL031", `rule "tenants": has 4 sub-shards where it had 1`}, {"RL020", `rule "tenants": limit tightened from 50000/1m unsharded to 50000/1m over 4 sub-shards (−75%)`}}},

		{"one step", nil, func(m *policy.Model) { stage(m, "acme", policy.StageSoft, "2025-06-20") }, nil},
		{"two steps", nil, func(m *policy.Model) {
			stage(m, "acme", policy.StageCanary, "2025-06-20")
			rule(m, "acme").Stage.CanaryPercent = 5
		}, []want{{"RL021", `rule "acme": advanced from "shadow" to "canary", skipping "soft": stages advance one at a time, next is "soft" (base p.cue:12:3)`}}},
		{"three steps", nil, func(m *policy.Model) { stage(m, "acme", policy.StageEnforce, "2025-06-20") },
			[]want{{"RL021", `skipping "soft" and "canary"`}}},
		{"rollback to shadow", func(m *policy.Model) { stage(m, "tenants", policy.StageCanary, "2025-06-01") },
			func(m *policy.Model) { stage(m, "tenants", policy.StageShadow, "2025-06-20") }, nil},

		{"dwell not met", nil, func(m *policy.Model) { stage(m, "acme", policy.StageSoft, "2025-06-20") }, nil},
		{"dwell of 18 days, want 30", func(m *policy.Model) { m.Domains[0].Governance.ShadowDwellMs = 30 * 86_400_000 },
			func(m *policy.Model) { stage(m, "acme", policy.StageSoft, "2025-06-20") },
			[]want{{"RL022", `advanced from "shadow" to "soft" after 18 days in "shadow" (since 2025-06-02, base p.cue:12:3), want at least 30d (governance dwell shadow)`}}},
		{"head cannot shorten the dwell", func(m *policy.Model) { m.Domains[0].Governance.ShadowDwellMs = 30 * 86_400_000 },
			func(m *policy.Model) {
				m.Domains[0].Governance.ShadowDwellMs = 0
				stage(m, "acme", policy.StageSoft, "2025-06-20")
			}, []want{{"RL022", "want at least 30d"}}},
		{"soft dwell of 36h", func(m *policy.Model) {
			m.Domains[0].Governance.SoftDwellMs = 36 * 3_600_000
			stage(m, "acme", policy.StageSoft, "2025-06-19")
		}, func(m *policy.Model) {
			stage(m, "acme", policy.StageCanary, "2025-06-20")
			rule(m, "acme").Stage.CanaryPercent = 5
		}, []want{{"RL022", `after 1 day in "soft" (since 2025-06-19, base p.cue:12:3), want at least 36h`}}},
		{"no base since", func(m *policy.Model) { stage(m, "acme", policy.StageSoft, "") },
			func(m *policy.Model) {
				stage(m, "acme", policy.StageCanary, "2025-06-20")
				rule(m, "acme").Stage.CanaryPercent = 5
			}, []want{{"RL022", `but its base stage has no since (base p.cue:12:3): the 7d dwell in "soft" cannot be counted`}}},
		{"zero dwell", func(m *policy.Model) {
			m.Domains[0].Governance.ShadowDwellMs = 0
			stage(m, "acme", policy.StageShadow, "2025-06-20")
		}, func(m *policy.Model) { stage(m, "acme", policy.StageSoft, "2025-06-21") },
			[]want{{"RL024", `stage "soft" since 2025-06-21 is in the future (today is 2025-06-20)`}}},

		{"since unchanged", nil, func(m *policy.Model) { stage(m, "acme", policy.StageSoft, "2025-06-02") },
			[]want{{"RL023", `stage changed from "shadow" to "soft" but since 2025-06-02 is not after the base's 2025-06-02`}}},
		// A stage left on the day it began keeps its since: both began today (2025-06-20).
		{"since unchanged, today", func(m *policy.Model) {
			m.Domains[0].Governance.ShadowDwellMs = 0
			stage(m, "acme", policy.StageShadow, "2025-06-20")
		}, func(m *policy.Model) { stage(m, "acme", policy.StageSoft, "2025-06-20") }, nil},
		{"since moved back", nil, func(m *policy.Model) { stage(m, "acme", policy.StageShadow, "2025-05-01") },
			[]want{{"RL023", `since moved back from 2025-06-02 to 2025-05-01 while the stage stayed "shadow"`}}},
		{"since moved forward", nil, func(m *policy.Model) { stage(m, "acme", policy.StageShadow, "2025-06-10") }, nil},
		{"since tomorrow", nil, func(m *policy.Model) { stage(m, "acme", policy.StageShadow, "2025-06-21") },
			[]want{{"RL024", "is in the future"}}},
		{"since today", nil, func(m *policy.Model) { stage(m, "acme", policy.StageShadow, "2025-06-20") }, nil},

		{"critical fail-open with a reason", nil, func(m *policy.Model) {
			r := rule(m, "payments")
			r.FailureMode, r.Reason = policy.FailOpen, "the ledger limits it now"
			m.Domains[0].CriticalPaths = []string{"/v1/refund"}
		}, nil},
		{"critical fail-open without a reason", nil, func(m *policy.Model) {
			rule(m, "payments").FailureMode = policy.FailOpen
			m.Domains[0].CriticalPaths = []string{"/v1/refund"}
		}, []want{{"RL025", `rule "payments": goes from fail-closed (base p.cue:40:3) to fail-open on critical path "/v1/payments*" without a reason`}}},
		{"fail-open off the critical paths", nil, func(m *policy.Model) {
			rule(m, "gold").FailureMode = policy.FailOpen
		}, nil},
		{"critical rule removed with a reason", nil, func(m *policy.Model) {
			removeRule(m, "payments")
			m.Domains[0].Governance.Removed = map[string]string{"payments": "moved to the ledger"}
		}, nil},
		{"critical rule removed", nil, func(m *policy.Model) { removeRule(m, "payments") },
			[]want{{"RL026", `rule "payments": on critical path "/v1/payments*" is removed (base p.cue:40:3) without a reason: add governance: removed: payments: "..."`}}},
		{"a limit's family changed", nil, func(m *policy.Model) { rule(m, "gold").Limits[0].Algorithm = policy.FixedWindow },
			[]want{{"RL031", `rule "gold": limit is a fixed_window where it was a token_bucket`}}},
		// The store keeps a limit's state by family and window: two limits of a window, of two
		// families, swapped in the list keep their states.
		{"limits of two families reordered", func(m *policy.Model) {
			r := rule(m, "tenants")
			r.Limits = append(r.Limits, policy.Limit{Requests: 10, WindowMs: 60_000, Algorithm: policy.FixedWindow, Cost: 1})
		}, func(m *policy.Model) {
			ls := rule(m, "tenants").Limits
			ls[0], ls[1] = ls[1], ls[0]
		}, nil},
		{"critical rule renamed", nil, func(m *policy.Model) { rule(m, "payments").Name = "pay" },
			[]want{{"RL031", `rule "pay": is renamed from "payments" (base p.cue:40:3): the store keeps its keys' counts`}}},
		{"other rule removed", nil, func(m *policy.Model) { removeRule(m, "gold") }, nil},
		{"domain removed", nil, func(m *policy.Model) { m.Domains = nil },
			[]want{{"RL026", "is removed with its domain"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base, head := govModel(), govModel()
			if tt.base != nil {
				tt.base(base)
				tt.base(head) // the head starts as the base
			}
			tt.head(head)
			got := Governance(base, head, govToday)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d findings, want %d:\n%s", len(got), len(tt.want), lines(got))
			}
			for i, w := range tt.want {
				if got[i].ID != w.id || !strings.Contains(got[i].Message, w.msg) {
					t.Errorf("finding %d: got %s, want %s containing %q", i, got[i], w.id, w.msg)
				}
				if got[i].Pos.File == "" || got[i].Domain != "edge" || got[i].Rule == "" {
					t.Errorf("finding %d: got pos %q domain %q rule %q, want all set", i, got[i].Pos, got[i].Domain, got[i].Rule)
				}
			}
		})
	}
}

func removeRule(m *policy.Model, name string) {
	d := m.Domains[0]
	for i, r := range d.Rules {
		if r.Name == name {
			d.Rules = append(d.Rules[:i], d.Rules[i+1:]...)
			return
		}
	}
}
