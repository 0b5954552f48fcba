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
