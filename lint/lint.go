// Package lint owns rlctl's policy checks: the semantic rules that CUE cannot express (duplicate
// and unreachable matches, descriptor keys no source produces, numbers outside the engine's exact
// range, leasing drift and stranding, failure modes, hot keys, rollout stages and region shares),
// and the governance checks of a change against its base (Governance: new rules at shadow, one
// stage at a time, minimum dwell, stage dates, reasons for weakening a critical path). Each check has an ID (RL001, RL002, ...), a severity and an explanation; see Rules.
//
// Lint reads the compiled model (policy.Model) and reports findings (finding.Finding). A few checks
// are the model's own (policy.Model.Validate: duplicate matches RL001, unknown descriptor keys
// RL003, lease bounds RL005, canary percent RL013), since no consumer could use a model that fails
// them; schema.Load refuses such a policy and lint reports the loader's problem under the check's
// ID, together with every other finding. Run loads a policy repository first and reports every
// other problem that stops it loading (CUE syntax, schema, conflicts, values out of range) under
// the ID RL000; those come alone, since the other checks need the model.
package lint

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rlctl/rlctl/finding"
	"github.com/rlctl/rlctl/policy"
)

// check is one lint rule: its description, and the function that inspects one domain. run is nil
// for the model's own checks, which policy.Model.Validate makes.
type check struct {
	finding.Rule
	run func(d *policy.Domain, e *emitter)
}

// emitter collects the findings of one check on one domain.
type emitter struct {
	rule   *finding.Rule
	domain *policy.Domain
	out    []finding.Finding
}

// at reports a finding about rule r (nil for the whole domain) at pos, falling back to the rule's
// and then the domain's position when pos is unknown. The message names the rule.
func (e *emitter) at(pos policy.Pos, r *policy.Rule, format string, args ...any) {
	f := finding.Finding{
		ID:       e.rule.ID,
		Severity: e.rule.Severity,
		Pos:      pos,
		Domain:   e.domain.Name,
		Message:  fmt.Sprintf(format, args...),
	}
	if r != nil {
		f.Rule = r.Name
		f.Message = fmt.Sprintf("rule %q: %s", r.Name, f.Message)
		if f.Pos.File == "" {
			f.Pos = r.Pos
		}
	} else {
		f.Message = fmt.Sprintf("domain %q: %s", e.domain.Name, f.Message)
	}
	if f.Pos.File == "" {
		f.Pos = e.domain.Pos
	}
	e.out = append(e.out, f)
}

// perRule adapts a check of one rule into a check of a domain.
func perRule(fn func(d *policy.Domain, r *policy.Rule, e *emitter)) func(*policy.Domain, *emitter) {
	return func(d *policy.Domain, e *emitter) {
		for _, r := range d.Rules {
			fn(d, r, e)
		}
	}
}

// Lint runs every check on m, the model's own (policy.Model.Validate) included, and returns the
// findings sorted by file, line and column. A nil model has no findings.
func Lint(m *policy.Model) []finding.Finding {
	if m == nil {
		return nil
	}
	out := ProblemFindings(m.Validate())
	for _, d := range m.Domains {
		for i := range checks {
			c := &checks[i]
			if c.run == nil {
				continue
			}
			e := emitter{rule: &c.Rule, domain: d}
			c.run(d, &e)
			out = append(out, e.out...)
		}
	}
	finding.Sort(out)
	return out
}

// Rules describes every check, sorted by ID, starting with RL000 (the policy does not load).
func Rules() []finding.Rule {
	rules := []finding.Rule{loadRule}
	for _, c := range checks {
		rules = append(rules, c.Rule)
	}
	for _, c := range governanceChecks {
		rules = append(rules, c.Rule)
	}
	// Checks added after the governance rules (RL027 on) follow them in ID order.
	slices.SortFunc(rules, func(a, b finding.Rule) int { return strings.Compare(a.ID, b.ID) })
	return rules
}

// Explain returns the description of the check with the given ID (such as "RL007") or name (such
// as "drift-over-tolerance").
func Explain(idOrName string) (finding.Rule, bool) {
	for _, r := range Rules() {
		if r.ID == idOrName || r.Name == idOrName {
			return r, true
		}
	}
	return finding.Rule{}, false
}
