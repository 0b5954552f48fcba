package rollout

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rlctl/rlctl/internal/golden"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/schema"
	"github.com/rlctl/rlctl/simulate/report"
)

const day = int64(24 * time.Hour / time.Millisecond)

// fakeProm answers WouldDeny from a table keyed by rule.
type fakeProm map[string][2]float64

func (f fakeProm) WouldDeny(_ context.Context, _, rule string, _ policy.StageName, _ time.Duration) (float64, float64, error) {
	if rule == "broken" {
		return 0, 0, errors.New("connection refused")
	}
	v := f[rule]
	return v[0], v[1], nil
}

func date(s string) time.Time {
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestGates(t *testing.T) {
	d := &policy.Domain{Name: "edge", Governance: policy.Governance{ShadowDwellMs: 7 * day, SoftDwellMs: 7 * day}}
	sim := &report.Report{Rules: []*report.Rule{
		{Domain: "edge", Rule: "r", Counts: report.Counts{Requests: 1000, WouldDeny: 200, FalsePositives: 1}},
		{Domain: "edge", Rule: "noisy", Counts: report.Counts{Requests: 1000, WouldDeny: 100, FalsePositives: 5}},
		{Domain: "edge", Rule: "quiet", Counts: report.Counts{Requests: 10}},
	}}
	prom := fakeProm{"r": {4, 1000}, "noisy": {50, 1000}, "quiet": {0, 10}}
	tests := []struct {
		name    string
		rule    string
		stage   policy.Stage
		today   string
		cfg     Config
		next    string
		gates   string // NAME=STATE for each gate, in order
		ready   bool
		reasons string // a substring of the joined reasons
	}{
		{name: "shadow dwell met", rule: "r", stage: policy.Stage{Name: "shadow", Since: "2025-06-02"}, today: "2025-06-09",
			next: "soft", gates: "hold=pass dwell=pass simulate=not_evaluated prometheus=not_evaluated", ready: true,
			reasons: "7 days in shadow, at least 7 days"},
		{name: "shadow dwell not met", rule: "r", stage: policy.Stage{Name: "shadow", Since: "2025-06-03"}, today: "2025-06-09",
			next: "soft", gates: "hold=pass dwell=blocked simulate=not_evaluated prometheus=not_evaluated",
			reasons: "6 days in shadow, needs 7 days"},
		{name: "since in the future", rule: "r", stage: policy.Stage{Name: "soft", Since: "2025-06-10"}, today: "2025-06-09",
			next: "canary", gates: "hold=pass dwell=blocked simulate=not_evaluated prometheus=not_evaluated",
			reasons: "in the future"},
		{name: "no since with a dwell", rule: "r", stage: policy.Stage{Name: "soft"}, today: "2025-06-09",
			next: "canary", gates: "hold=pass dwell=blocked simulate=not_evaluated prometheus=not_evaluated",
			reasons: "set the stage's since"},
		{name: "canary has no dwell", rule: "r", stage: policy.Stage{Name: "canary", CanaryPercent: 5}, today: "2025-06-09",
			cfg:  Config{Prometheus: prom, MaxFalsePositive: 0.005},
			next: "enforce", gates: "hold=pass dwell=pass simulate=not_evaluated prometheus=pass", ready: true},
		{name: "canary needs evidence", rule: "r", stage: policy.Stage{Name: "canary", CanaryPercent: 5, Since: "2025-01-01"}, today: "2025-06-09",
			next: "enforce", gates: "hold=pass dwell=blocked simulate=not_evaluated prometheus=not_evaluated",
			reasons: "advances on evidence alone"},
		{name: "held", rule: "r", stage: policy.Stage{Name: "shadow", Since: "2025-01-01", Hold: "partner fix"}, today: "2025-06-09",
			next: "soft", gates: "hold=blocked dwell=pass simulate=not_evaluated prometheus=not_evaluated", reasons: "paused: partner fix"},
		{name: "enforced", rule: "r", stage: policy.Stage{Name: "enforce", Since: "2025-01-01"}, today: "2025-06-09",
			gates: "hold=not_evaluated dwell=not_evaluated simulate=not_evaluated prometheus=not_evaluated", reasons: "last stage"},
		{name: "evidence passes", rule: "r", stage: policy.Stage{Name: "shadow", Since: "2025-06-01"}, today: "2025-06-09",
			cfg:  Config{Simulation: sim, Prometheus: prom, MaxFalsePositive: 0.005},
			next: "soft", gates: "hold=pass dwell=pass simulate=pass prometheus=pass", ready: true,
			reasons: "false positives 0.5% (1 of 200 would-deny decisions, 1000 requests matched), at most 0.5%; prometheus: would deny 0.4% (4 of 1000 decisions over the last 7 days)"},
		{name: "evidence over the threshold", rule: "noisy", stage: policy.Stage{Name: "shadow", Since: "2025-06-01"}, today: "2025-06-09",
			cfg:  Config{Simulation: sim, Prometheus: prom, MaxFalsePositive: 0.005},
			next: "soft", gates: "hold=pass dwell=pass simulate=blocked prometheus=blocked",
			reasons: "false positives 5% (5 of 100 would-deny decisions, 1000 requests matched), over 0.5%"},
		{name: "no evidence blocks", rule: "absent", stage: policy.Stage{Name: "shadow", Since: "2025-06-01"}, today: "2025-06-09",
			cfg:  Config{Simulation: sim, Prometheus: prom, MaxFalsePositive: 0.005},
			next: "soft", gates: "hold=pass dwell=pass simulate=blocked prometheus=blocked",
			reasons: "no request this rule matched"},
		{name: "a rule that never denies passes", rule: "quiet", stage: policy.Stage{Name: "shadow", Since: "2025-06-01"}, today: "2025-06-09",
			cfg:  Config{Simulation: sim, Prometheus: prom, MaxFalsePositive: 0},
			next: "soft", gates: "hold=pass dwell=pass simulate=pass prometheus=pass", ready: true},
		{name: "unreadable metrics block", rule: "broken", stage: policy.Stage{Name: "soft", Since: "2025-06-01"}, today: "2025-06-09",
			cfg:  Config{Prometheus: prom},
			next: "canary", gates: "hold=pass dwell=pass simulate=not_evaluated prometheus=blocked",
			reasons: "cannot read the metrics: connection refused"},
		{name: "a required gate without evidence blocks", rule: "r", stage: policy.Stage{Name: "shadow", Since: "2025-06-01"}, today: "2025-06-09",
			cfg:  Config{Require: []string{GateSimulate}},
			next: "soft", gates: "hold=pass dwell=pass simulate=blocked prometheus=not_evaluated",
			reasons: "no --log to replay, and the gate is required"},
	}
	for i, tt := range tests {
		r := &policy.Rule{Name: tt.rule, Stage: tt.stage}
		m := &policy.Model{Domains: []*policy.Domain{{Name: d.Name, Governance: d.Governance, Rules: []*policy.Rule{r}}}}
		tt.cfg.Today = date(tt.today)
		st := Evaluate(context.Background(), m, tt.cfg)
		rs := st.Rules[0]
		var gates, reasons []string
		for _, g := range rs.Gates {
			gates = append(gates, g.Name+"="+string(g.State))
			reasons = append(reasons, g.Name+": "+g.Reason)
		}
		if got := strings.Join(gates, " "); got != tt.gates {
			t.Errorf("step %d (%s): gates %s, want %s", i, tt.name, got, tt.gates)
		}
		if rs.Next != tt.next || rs.Ready != tt.ready {
			t.Errorf("step %d (%s): next %q ready %v, want %q %v", i, tt.name, rs.Next, rs.Ready, tt.next, tt.ready)
		}
		if got := strings.Join(reasons, "; "); !strings.Contains(got, tt.reasons) {
			t.Errorf("step %d (%s): reasons %q, want them to hold %q", i, tt.name, got, tt.reasons)
		}
	}
}

// TestGateSettings: a domain's rollout settings set each evidence gate's threshold, the
// prometheus gate's window and which gates are required; flags given on the command line
// (Config.ForceMaxFalsePositive, Config.ForceRequire) override them.
func TestGateSettings(t *testing.T) {
	bp := func(n int64) *int64 { return &n }
	sim := &report.Report{Rules: []*report.Rule{
		{Domain: "edge", Rule: "r", Counts: report.Counts{Requests: 1000, WouldDeny: 100, FalsePositives: 2}}, // 2%
	}}
	prom := &windowProm{over: 30, total: 1000} // 3%
	tests := []struct {
		name     string
		settings policy.RolloutSettings
		cfg      Config
		gates    string // NAME=STATE of the simulate and prometheus gates
		limits   string // the simulate and prometheus gates' limits, "-" when none
		window   time.Duration
		reasons  string // a substring of the joined reasons
	}{
		{name: "no settings: the command line's threshold", cfg: Config{Simulation: sim, Prometheus: prom, MaxFalsePositive: 0.005},
			gates: "simulate=blocked prometheus=blocked", limits: "0.5% 0.5%", window: 7 * 24 * time.Hour,
			reasons: "false positives 2% (2 of 100 would-deny decisions, 1000 requests matched), over 0.5%; "},
		{name: "the domain's thresholds apply", settings: policy.RolloutSettings{
			Simulate: policy.GateSettings{MaxShareBP: bp(250)}, Prometheus: policy.GateSettings{MaxShareBP: bp(300), WindowMs: 3600000}},
			cfg:   Config{Simulation: sim, Prometheus: prom, MaxFalsePositive: 0.005},
			gates: "simulate=pass prometheus=pass", limits: "2.5% 3%", window: time.Hour,
			reasons: "at most 2.5% (the domain's max_false_positive); prometheus: would deny 3% (30 of 1000 decisions over the last 1h), at most 3% (the domain's max_would_deny)"},
		{name: "one gate set, the other from the command line", settings: policy.RolloutSettings{
			Prometheus: policy.GateSettings{MaxShareBP: bp(500)}},
			cfg:   Config{Simulation: sim, Prometheus: prom, MaxFalsePositive: 0.01},
			gates: "simulate=blocked prometheus=pass", limits: "1% 5%", window: 7 * 24 * time.Hour},
		{name: "a threshold of 0 is set", settings: policy.RolloutSettings{Prometheus: policy.GateSettings{MaxShareBP: bp(0)}},
			cfg:   Config{Prometheus: prom, MaxFalsePositive: 0.5},
			gates: "simulate=not_evaluated prometheus=blocked", limits: "- 0%", window: 7 * 24 * time.Hour,
			reasons: "over 0% (the domain's max_would_deny)"},
		{name: "--max-false-positive overrides the domain", settings: policy.RolloutSettings{
			Simulate: policy.GateSettings{MaxShareBP: bp(250)}, Prometheus: policy.GateSettings{MaxShareBP: bp(300)}},
			cfg:   Config{Simulation: sim, Prometheus: prom, MaxFalsePositive: 0.025, ForceMaxFalsePositive: true},
			gates: "simulate=pass prometheus=blocked", limits: "2.5% 2.5%", window: 7 * 24 * time.Hour,
			reasons: "would deny 3% (30 of 1000 decisions over the last 7 days), over 2.5%"},
		{name: "the domain requires the prometheus gate", settings: policy.RolloutSettings{
			Prometheus: policy.GateSettings{Required: true}},
			gates: "simulate=not_evaluated prometheus=blocked", limits: "- -",
			reasons: "no --prometheus-url, and the gate is required"},
		{name: "--require adds to the domain's", settings: policy.RolloutSettings{
			Prometheus: policy.GateSettings{Required: true}},
			cfg:   Config{Require: []string{GateSimulate}},
			gates: "simulate=blocked prometheus=blocked", limits: "- -"},
		{name: "--require given overrides the domain's", settings: policy.RolloutSettings{
			Prometheus: policy.GateSettings{Required: true}},
			cfg:   Config{Require: []string{GateSimulate}, ForceRequire: true},
			gates: "simulate=blocked prometheus=not_evaluated", limits: "- -"},
		{name: "--require= requires none", settings: policy.RolloutSettings{
			Simulate: policy.GateSettings{Required: true}, Prometheus: policy.GateSettings{Required: true}},
			cfg:   Config{Require: []string{}, ForceRequire: true},
			gates: "simulate=not_evaluated prometheus=not_evaluated", limits: "- -"},
	}
	for i, tt := range tests {
		prom.window = 0
		r := &policy.Rule{Name: "r", Stage: policy.Stage{Name: policy.StageShadow, Since: "2025-06-01"}}
		m := &policy.Model{Domains: []*policy.Domain{{Name: "edge", Rules: []*policy.Rule{r}, Rollout: tt.settings,
			Governance: policy.Governance{ShadowDwellMs: 7 * day, SoftDwellMs: 7 * day}}}}
		tt.cfg.Today = date("2025-06-09")
		rs := Evaluate(context.Background(), m, tt.cfg).Rules[0]
		var gates, limits, reasons []string
		for _, g := range rs.Gates {
			reasons = append(reasons, g.Name+": "+g.Reason)
			if g.Name != GateSimulate && g.Name != GatePrometheus {
				continue
			}
			gates = append(gates, g.Name+"="+string(g.State))
			if g.Limit == nil {
				limits = append(limits, "-")
			} else {
				limits = append(limits, Percent(*g.Limit))
			}
		}
		if got := strings.Join(gates, " "); got != tt.gates {
			t.Errorf("step %d (%s): gates %s, want %s", i, tt.name, got, tt.gates)
		}
		if got := strings.Join(limits, " "); got != tt.limits {
			t.Errorf("step %d (%s): limits %s, want %s", i, tt.name, got, tt.limits)
		}
		if prom.window != tt.window {
			t.Errorf("step %d (%s): prometheus window %s, want %s", i, tt.name, prom.window, tt.window)
		}
		if got := strings.Join(reasons, "; "); !strings.Contains(got, tt.reasons) {
			t.Errorf("step %d (%s): reasons %q, want them to hold %q", i, tt.name, got, tt.reasons)
		}
	}
}

// windowProm answers every rule with the same counts and records the window it was asked for.
type windowProm struct {
	over, total float64
	window      time.Duration
}

func (p *windowProm) WouldDeny(_ context.Context, _, _ string, _ policy.StageName, window time.Duration) (float64, float64, error) {
	p.window = window
	return p.over, p.total, nil
}

// TestStatusAndPlanOfExample evaluates the example policies on a fixed date and compares the
// text and JSON forms with golden files.
func TestStatusAndPlanOfExample(t *testing.T) {
	m, err := schema.Load("../policies")
	if err != nil {
		t.Fatal(err)
	}
	st := Evaluate(context.Background(), m, Config{Today: date("2025-06-12"), MaxFalsePositive: 0.005})
	p := PlanOf(st)
	if got := strings.Join(p.Promotions(), " "); got != "edge_gateway_limits/developer_pro" {
		t.Errorf("promotions: got %s", got)
	}
	for _, f := range []struct {
		name  string
		write func(*bytes.Buffer) error
	}{
		{"status.txt", func(b *bytes.Buffer) error { return WriteStatusText(b, st) }},
		{"status.json", func(b *bytes.Buffer) error { return WriteJSON(b, st) }},
		{"plan.txt", func(b *bytes.Buffer) error { return WritePlanText(b, p) }},
		{"plan.json", func(b *bytes.Buffer) error { return WriteJSON(b, p) }},
	} {
		var b bytes.Buffer
		if err := f.write(&b); err != nil {
			t.Fatal(err)
		}
		golden.Check(t, "testdata/example/"+f.name, b.Bytes())
	}
}

func TestPercent(t *testing.T) {
	for _, tt := range []struct {
		in   float64
		want string
	}{{0, "0%"}, {0.005, "0.5%"}, {0.0047, "0.47%"}, {1, "100%"}, {0.123456, "12.35%"}} {
		if got := Percent(tt.in); got != tt.want {
			t.Errorf("Percent(%v): got %s, want %s", tt.in, got, tt.want)
		}
	}
}

// TestCellTextHoldsItsCell: a hold's reason, the policy author's text, stays in its cell of the
// pull request's body: one line, no HTML, no mention.
func TestCellTextHoldsItsCell(t *testing.T) {
	got := cellText("INC-1\n\n<!-- hidden\n@octocat | x")
	if strings.ContainsAny(got, "\r\n<") || strings.Contains(got, "@octocat") || strings.Contains(got, " | ") {
		t.Errorf("cellText = %q: want one line, no HTML, no live mention, the separator escaped", got)
	}
}

// TestHoldStaysOnItsLine: a hold's text with a line break is quoted in the gate's evidence, so
// that no line of the text output starts with a runner's workflow command.
func TestHoldStaysOnItsLine(t *testing.T) {
	r := &policy.Rule{Stage: policy.Stage{Name: policy.StageShadow, Hold: "x\n::add-mask::token"}}
	if g := holdGate(r); strings.Contains(g.Reason, "\n") {
		t.Errorf("hold gate reason %q: want it on one line", g.Reason)
	}
}
