package rollout

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rlctl/rlctl/internal/english"
	"github.com/rlctl/rlctl/internal/printable"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/simulate/report"
)

// GateState is the outcome of one gate.
type GateState string

// The gate states. A gate that is configured but cannot be evaluated (no evidence, an error
// reading it) is GateBlocked, with the reason. GateNotEvaluated is for a gate that does not
// apply: not configured and not required, or a rule with no stage to go to.
const (
	GatePass         GateState = "pass"
	GateBlocked      GateState = "blocked"
	GateNotEvaluated GateState = "not_evaluated"
)

// The gates, in the order they are evaluated and shown.
const (
	GateHold       = "hold"       // the rule has no hold (rollout pause)
	GateDwell      = "dwell"      // the stage's minimum dwell (the domain's governance) is over
	GateSimulate   = "simulate"   // false-positive rate of a log replay (--log)
	GatePrometheus = "prometheus" // the enforcers' would-deny share of the rule's traffic
)

// GateNames lists the gates in order.
var GateNames = []string{GateHold, GateDwell, GateSimulate, GatePrometheus}

// Gate is one gate's outcome for one rule.
type Gate struct {
	Name  string    `json:"name"`
	State GateState `json:"state"`
	// Reason says why, with the figures: "12 days in shadow, at least 7".
	Reason string `json:"reason"`
	// Value and Limit are the measured share and its threshold for the simulate and
	// prometheus gates, when measured.
	Value *float64 `json:"value,omitempty"`
	Limit *float64 `json:"limit,omitempty"`
}

// RuleStatus is where one rule is in its rollout.
type RuleStatus struct {
	Domain string `json:"domain"`
	Rule   string `json:"rule"`
	Pos    string `json:"pos,omitempty"`
	Stage  string `json:"stage"`
	// CanaryPercent is the canary stage's share of enforcers.
	CanaryPercent int    `json:"canary_percent,omitempty"`
	Since         string `json:"since,omitempty"`
	// DaysInStage counts whole days from Since to the status's date; nil without a Since.
	DaysInStage *int   `json:"days_in_stage"`
	Next        string `json:"next,omitempty"`
	Hold        string `json:"hold,omitempty"`
	Gates       []Gate `json:"gates"`
	// Ready says the rule has a next stage and every gate passes or does not apply.
	Ready bool `json:"ready"`
}

// Status is every rule's rollout status on one date.
type Status struct {
	Schema string       `json:"schema"` // "rlctl.rollout-status/v1"
	Today  string       `json:"today"`
	Rules  []RuleStatus `json:"rules"`
}

// WouldDenySource reads the share of a rule's real traffic that it was over its limit for.
type WouldDenySource interface {
	// WouldDeny returns the over-limit decisions of rule domain/rule in stage over the window
	// ending now, and all its decisions there.
	WouldDeny(ctx context.Context, domain, rule string, stage policy.StageName, window time.Duration) (over, total float64, err error)
}

// Config says how Evaluate judges the gates.
type Config struct {
	// Today is the date that dwell is counted to (its UTC date).
	Today time.Time
	// MaxFalsePositive is the threshold of the simulate and prometheus gates, as a share
	// (0.005 is 0.5%), in a domain whose rollout settings set none for the gate; a measured
	// share at most this passes.
	MaxFalsePositive float64
	// ForceMaxFalsePositive makes MaxFalsePositive the threshold in every domain, over the
	// domains' settings (rlctl rollout --max-false-positive, given on the command line).
	ForceMaxFalsePositive bool
	// Simulation is a log replay of the policy (rlctl simulate's report); nil leaves the
	// simulate gate not evaluated.
	Simulation *report.Report
	// Prometheus reads the enforcers' metrics; nil leaves the prometheus gate not evaluated.
	Prometheus WouldDenySource
	// Require names gates that must be evaluated: without their evidence they block. They add
	// to the gates a domain's settings require, or with ForceRequire replace them (--require,
	// given on the command line; --require= requires none).
	Require      []string
	ForceRequire bool
}

// Evaluate returns the status of every rule of m on cfg.Today.
func Evaluate(ctx context.Context, m *policy.Model, cfg Config) *Status {
	today := cfg.Today.UTC().Format(time.DateOnly)
	st := &Status{Schema: "rlctl.rollout-status/v1", Today: today, Rules: []RuleStatus{}}
	for _, d := range m.Domains {
		for _, r := range d.Rules {
			st.Rules = append(st.Rules, evaluateRule(ctx, d, r, today, cfg))
		}
	}
	return st
}

func evaluateRule(ctx context.Context, d *policy.Domain, r *policy.Rule, today string, cfg Config) RuleStatus {
	rs := RuleStatus{Domain: d.Name, Rule: r.Name, Pos: r.Pos.String(), Stage: string(r.Stage.Name),
		CanaryPercent: r.Stage.CanaryPercent, Since: r.Stage.Since, Hold: r.Stage.Hold, Gates: []Gate{}}
	if rs.Stage == "" {
		rs.Stage = string(policy.StageEnforce)
	}
	days, daysErr := daysBetween(r.Stage.Since, today)
	if daysErr == nil {
		rs.DaysInStage = &days
	}
	next, ok := policy.StageName(rs.Stage).Next()
	if !ok {
		for _, g := range GateNames {
			rs.Gates = append(rs.Gates, Gate{Name: g, State: GateNotEvaluated, Reason: rs.Stage + " is the last stage"})
		}
		return rs
	}
	rs.Next = string(next)
	stage := policy.StageName(rs.Stage)
	rs.Gates = append(rs.Gates,
		holdGate(r),
		dwellGate(d, r, stage, days, daysErr, cfg.Simulation != nil || cfg.Prometheus != nil),
		cfg.simulateGate(d, r),
		cfg.prometheusGate(ctx, d, r, stage))
	rs.Ready = true
	for _, g := range rs.Gates {
		if g.State == GateBlocked {
			rs.Ready = false
		}
	}
	return rs
}

// daysBetween counts whole days from since to today, both YYYY-MM-DD.
func daysBetween(since, today string) (int, error) {
	if since == "" {
		return 0, fmt.Errorf("no since date")
	}
	s, err := time.Parse(time.DateOnly, since)
	if err != nil {
		return 0, fmt.Errorf("since %q: %w", since, err)
	}
	t, err := time.Parse(time.DateOnly, today)
	if err != nil {
		return 0, err
	}
	return int(t.Sub(s) / (24 * time.Hour)), nil
}

func holdGate(r *policy.Rule) Gate {
	if r.Stage.Hold != "" {
		return Gate{Name: GateHold, State: GateBlocked, Reason: "paused: " + printable.String(r.Stage.Hold)}
	}
	return Gate{Name: GateHold, State: GatePass, Reason: "not paused"}
}

// dwellGate passes once the stage's dwell is over. A stage without a dwell (canary) has only
// evidence to go on: it passes when an evidence gate is configured, and blocks otherwise.
func dwellGate(d *policy.Domain, r *policy.Rule, stage policy.StageName, days int, daysErr error, evidence bool) Gate {
	g := Gate{Name: GateDwell}
	dwell := d.Dwell(stage)
	switch {
	case dwell == 0 && !evidence:
		g.State, g.Reason = GateBlocked, fmt.Sprintf("%s has no minimum dwell, so it advances on evidence alone: give --log or --prometheus-url", stage)
	case dwell == 0:
		g.State, g.Reason = GatePass, fmt.Sprintf("%s has no minimum dwell", stage)
	case daysErr != nil:
		g.State, g.Reason = GateBlocked, fmt.Sprintf("%s: the %s dwell of %s cannot be counted; set the stage's since", daysErr, stage, humanDuration(dwell))
	case days < 0:
		g.State, g.Reason = GateBlocked, fmt.Sprintf("since %s is in the future", r.Stage.Since)
	case int64(days)*int64(24*time.Hour/time.Millisecond) >= dwell:
		g.State, g.Reason = GatePass, fmt.Sprintf("%s in %s, at least %s", english.Plural(days, "day"), stage, humanDuration(dwell))
	default:
		g.State, g.Reason = GateBlocked, fmt.Sprintf("%s in %s, needs %s", english.Plural(days, "day"), stage, humanDuration(dwell))
	}
	return g
}

// gateSettings returns d's rollout settings of the simulate or prometheus gate.
func gateSettings(d *policy.Domain, gate string) policy.GateSettings {
	if gate == GateSimulate {
		return d.Rollout.Simulate
	}
	return d.Rollout.Prometheus
}

// required says whether gate must be evaluated in d: named by cfg.Require, or required by the
// domain's settings unless cfg.ForceRequire.
func (cfg Config) required(d *policy.Domain, gate string) bool {
	if !cfg.ForceRequire && gateSettings(d, gate).Required {
		return true
	}
	for _, g := range cfg.Require {
		if g == gate {
			return true
		}
	}
	return false
}

// threshold returns gate's threshold in d, and where it comes from when that is the domain's
// settings ("" otherwise).
func (cfg Config) threshold(d *policy.Domain, gate string) (float64, string) {
	if bp := gateSettings(d, gate).MaxShareBP; bp != nil && !cfg.ForceMaxFalsePositive {
		field := "max_would_deny"
		if gate == GateSimulate {
			field = "max_false_positive"
		}
		return float64(*bp) / 10000, "the domain's " + field
	}
	return cfg.MaxFalsePositive, ""
}

// notConfigured is the outcome of a gate without its evidence: blocked when required.
func (cfg Config) notConfigured(d *policy.Domain, gate, why string) Gate {
	if cfg.required(d, gate) {
		return Gate{Name: gate, State: GateBlocked, Reason: why + ", and the gate is required"}
	}
	return Gate{Name: gate, State: GateNotEvaluated, Reason: why}
}

// shareGate judges a measured share against the gate's threshold in d; what names the share
// and detail gives its counts.
func (cfg Config) shareGate(d *policy.Domain, name string, share float64, what, detail string) Gate {
	limit, from := cfg.threshold(d, name)
	g := Gate{Name: name, Value: &share, Limit: &limit}
	bound := Percent(limit)
	if from != "" {
		bound += " (" + from + ")"
	}
	if share <= limit {
		g.State, g.Reason = GatePass, fmt.Sprintf("%s %s (%s), at most %s", what, Percent(share), detail, bound)
	} else {
		g.State, g.Reason = GateBlocked, fmt.Sprintf("%s %s (%s), over %s", what, Percent(share), detail, bound)
	}
	return g
}

func (cfg Config) simulateGate(d *policy.Domain, r *policy.Rule) Gate {
	if cfg.Simulation == nil {
		return cfg.notConfigured(d, GateSimulate, "no --log to replay")
	}
	for _, rr := range cfg.Simulation.Rules {
		if rr.Domain != d.Name || rr.Rule != r.Name {
			continue
		}
		if rr.Requests == 0 {
			break
		}
		var share float64
		if rr.WouldDeny > 0 {
			share = float64(rr.FalsePositives) / float64(rr.WouldDeny)
		}
		return cfg.shareGate(d, GateSimulate, share, "false positives",
			fmt.Sprintf("%d of %d would-deny decisions, %d requests matched", rr.FalsePositives, rr.WouldDeny, rr.Requests))
	}
	return Gate{Name: GateSimulate, State: GateBlocked, Reason: "the log holds no request this rule matched: no evidence"}
}

func (cfg Config) prometheusGate(ctx context.Context, d *policy.Domain, r *policy.Rule, stage policy.StageName) Gate {
	if cfg.Prometheus == nil {
		return cfg.notConfigured(d, GatePrometheus, "no --prometheus-url")
	}
	window := PrometheusWindow(d, stage)
	over, total, err := cfg.Prometheus.WouldDeny(ctx, d.Name, r.Name, stage, window)
	if err != nil {
		return Gate{Name: GatePrometheus, State: GateBlocked, Reason: "cannot read the metrics: " + err.Error()}
	}
	if total <= 0 {
		return Gate{Name: GatePrometheus, State: GateBlocked,
			Reason: fmt.Sprintf("no traffic for this rule in the last %s: no evidence", humanDuration(window.Milliseconds()))}
	}
	return cfg.shareGate(d, GatePrometheus, over/total, "would deny",
		fmt.Sprintf("%.0f of %.0f decisions over the last %s", over, total, humanDuration(window.Milliseconds())))
}

// PrometheusWindow is the period the prometheus gate reads: the domain's window setting, else
// the stage's dwell, or a day for a stage without one.
func PrometheusWindow(d *policy.Domain, stage policy.StageName) time.Duration {
	if ms := d.Rollout.Prometheus.WindowMs; ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	if ms := d.Dwell(stage); ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return 24 * time.Hour
}

// Percent formats a share as a percentage with up to two decimals: 0.0047 is "0.47%".
func Percent(share float64) string {
	s := fmt.Sprintf("%.2f", share*100)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s + "%"
}

// humanDuration writes ms in the largest whole unit: "7 days", "36h", "90m".
func humanDuration(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	switch {
	case d == 0:
		return "0"
	case d%(24*time.Hour) == 0:
		return english.Plural(int(d/(24*time.Hour)), "day")
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.String()
}
