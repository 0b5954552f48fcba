package rollout

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/rlctl/rlctl/diff"
	"github.com/rlctl/rlctl/internal/english"
)

// Step is what the plan does with one rule that has a stage to go to.
type Step struct {
	Domain  string `json:"domain"`
	Rule    string `json:"rule"`
	From    string `json:"from"`
	To      string `json:"to"`
	Promote bool   `json:"promote"`
	// Why lists the gates that passed when the rule is promoted, else those that block it.
	Why []string `json:"why"`
}

// Plan is what would be promoted on one date, and why, or why not.
type Plan struct {
	Schema string `json:"schema"` // "rlctl.rollout-plan/v1"
	Today  string `json:"today"`
	Steps  []Step `json:"steps"`
	// Enforced counts the rules already at the last stage, which the plan leaves out.
	Enforced int `json:"enforced"`
}

// PlanOf returns the plan for st: every rule with a next stage, promoted when it is ready.
// Held rules are never promoted.
func PlanOf(st *Status) *Plan {
	p := &Plan{Schema: "rlctl.rollout-plan/v1", Today: st.Today, Steps: []Step{}}
	for _, rs := range st.Rules {
		if rs.Next == "" {
			p.Enforced++
			continue
		}
		s := Step{Domain: rs.Domain, Rule: rs.Rule, From: rs.Stage, To: rs.Next, Promote: rs.Ready, Why: []string{}}
		for _, g := range rs.Gates {
			if (rs.Ready && g.State == GatePass) || (!rs.Ready && g.State == GateBlocked) {
				s.Why = append(s.Why, g.Name+": "+g.Reason)
			}
		}
		p.Steps = append(p.Steps, s)
	}
	return p
}

// Promotions returns the rules the plan promotes, as DOMAIN/RULE.
func (p *Plan) Promotions() []string {
	var out []string
	for _, s := range p.Steps {
		if s.Promote {
			out = append(out, s.Domain+"/"+s.Rule)
		}
	}
	return out
}

// WriteStatusText writes st as a table, one row per rule, then the gates of each rule that has
// a stage to go to.
//
//	RULE                               STAGE   SINCE       DAYS  NEXT  READY
//	edge_gateway_limits/developer_pro  shadow  2025-06-02  10    soft  yes
//
//	edge_gateway_limits/developer_pro: shadow → soft
//	  hold        pass           not paused
//	  dwell       pass           10 days in shadow, at least 7 days
func WriteStatusText(w io.Writer, st *Status) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "Rollout status on %s\n\n", st.Today)
	tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tSTAGE\tSINCE\tDAYS\tNEXT\tREADY")
	for _, rs := range st.Rules {
		stage := rs.Stage
		if rs.CanaryPercent > 0 {
			stage = fmt.Sprintf("%s %d%%", stage, rs.CanaryPercent)
		}
		days, since, next, ready := "-", "-", "-", "-"
		if rs.DaysInStage != nil {
			days = fmt.Sprint(*rs.DaysInStage)
		}
		if rs.Since != "" {
			since = rs.Since
		}
		if rs.Next != "" {
			next, ready = rs.Next, "no"
			if rs.Ready {
				ready = "yes"
			}
		}
		fmt.Fprintf(tw, "%s/%s\t%s\t%s\t%s\t%s\t%s\n", rs.Domain, rs.Rule, stage, since, days, next, ready)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, rs := range st.Rules {
		if rs.Next == "" {
			continue
		}
		fmt.Fprintf(bw, "\n%s/%s: %s → %s\n", rs.Domain, rs.Rule, rs.Stage, rs.Next)
		tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', 0)
		for _, g := range rs.Gates {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", g.Name, strings.ReplaceAll(string(g.State), "_", " "), g.Reason)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// WritePlanText writes p: one line per rule with a stage to go to, promoted or waiting, with
// the reasons below it.
func WritePlanText(w io.Writer, p *Plan) error {
	bw := bufio.NewWriter(w)
	n := len(p.Promotions())
	fmt.Fprintf(bw, "Rollout plan for %s: %s to promote, %d waiting, %d enforced.\n",
		p.Today, english.Plural(n, "rule"), len(p.Steps)-n, p.Enforced)
	for _, s := range p.Steps {
		verb := "wait   "
		if s.Promote {
			verb = "promote"
		}
		fmt.Fprintf(bw, "\n  %s %s/%s: %s → %s\n", verb, s.Domain, s.Rule, s.From, s.To)
		for _, why := range s.Why {
			fmt.Fprintf(bw, "          %s\n", why)
		}
	}
	return bw.Flush()
}

// WriteJSON writes v (a *Status or a *Plan) as indented JSON.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// EvidenceMarkdown writes the gates of the rules st names (DOMAIN/RULE) as a markdown table,
// for a pull request.
func EvidenceMarkdown(st *Status, rules ...string) string {
	var b strings.Builder
	want := map[string]bool{}
	for _, r := range rules {
		want[r] = true
	}
	for _, rs := range st.Rules {
		if !want[rs.Domain+"/"+rs.Rule] {
			continue
		}
		since := rs.Since
		if rs.DaysInStage != nil {
			since = fmt.Sprintf("%s (%s ago)", rs.Since, english.Plural(*rs.DaysInStage, "day"))
		}
		fmt.Fprintf(&b, "**%s/%s**: %s since %s, evaluated on %s\n\n", rs.Domain, rs.Rule, rs.Stage, since, st.Today)
		b.WriteString("| gate | state | evidence |\n|---|---|---|\n")
		for _, g := range rs.Gates {
			mark := map[GateState]string{GatePass: "✅ pass", GateBlocked: "⛔ blocked", GateNotEvaluated: "➖ not evaluated"}[g.State]
			fmt.Fprintf(&b, "| %s | %s | %s |\n", g.Name, mark, cellText(g.Reason))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// cellText is a gate's evidence in a table cell of the pull request's body: a hold's reason is
// the policy author's text.
func cellText(s string) string { return diff.MarkdownCell(s) }
