package lint

import (
	"strings"
	"time"

	"github.com/rlctl/rlctl/finding"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/schema"
)

// Run loads the policy repository made of paths (see schema.Load) and lints it. A policy that
// decodes is linted in full, the checks the loader refuses included (see Lint). A policy that
// does not decode (CUE syntax, schema violations, conflicts, bad values) gives its problems as
// findings (see ProblemFindings) and no others: the other checks need the model. The error is a
// tool error only, such as a path that does not exist (wrapping fs.ErrNotExist) or a directory
// without policy files (wrapping schema.ErrNoPolicies).
func Run(paths ...string) ([]finding.Finding, error) {
	return RunWith(Options{}, paths...)
}

// Options are what a lint run compares against.
type Options struct {
	// Base is the policy a change is made to; when it is not nil, the governance checks run
	// (see Governance).
	Base *policy.Model
	// Today is the day of the check, for the governance checks' dwell and dates.
	Today time.Time
}

// RunWith is Run, with the governance checks of the change from opts.Base when it is set. A
// policy that does not decode gets its load problems only, as with Run.
func RunWith(opts Options, paths ...string) ([]finding.Finding, error) {
	m, probs, err := schema.LoadWithProblems(paths...)
	if err != nil {
		return nil, err
	}
	if m == nil {
		return ProblemFindings(probs), nil
	}
	// Lint reports the model's own problems (policy.Model.Validate), which are all of probs.
	out := Lint(m)
	if opts.Base != nil {
		out = append(out, Governance(opts.Base, m, opts.Today)...)
		finding.Sort(out)
	}
	return out, nil
}

// ProblemFindings turns the loader's or the model's problems into findings, sorted by position. A
// problem that is one of lint's checks (Problem.Check, such as "duplicate-match") takes that
// check's ID and severity; the rest are RL000. The message keeps the CUE path and names the problem's related
// positions.
func ProblemFindings(probs schema.Problems) []finding.Finding {
	out := make([]finding.Finding, 0, len(probs))
	for _, p := range probs {
		f := finding.Finding{ID: LoadID, Severity: finding.Error, Pos: p.Pos, Message: p.Message}
		if r, ok := Explain(p.Check); ok && p.Check != "" {
			f.ID, f.Severity = r.ID, r.Severity
		}
		if p.Path != "" {
			f.Message = p.Path + ": " + p.Message
		}
		var related []string
		for _, q := range p.Related {
			if q != (policy.Pos{}) {
				related = append(related, q.String())
			}
		}
		if len(related) > 0 {
			f.Message += " (see " + strings.Join(related, ", ") + ")"
		}
		f.Domain, f.Rule = pathNames(p.Path)
		out = append(out, f)
	}
	finding.Sort(out)
	return out
}

// pathNames extracts the domain and rule names from a CUE path such as
// domains.edge.rules.tenant.limits.0.window.
func pathNames(path string) (domain, rule string) {
	parts := splitPath(path)
	if len(parts) >= 2 && parts[0] == "domains" {
		domain = parts[1]
		if len(parts) >= 4 && parts[2] == "rules" {
			rule = parts[3]
		}
	}
	return domain, rule
}

// splitPath splits a CUE path into its labels, unquoting quoted ones ("a.b"). List indexes are
// labels too (limits.0).
func splitPath(path string) []string {
	var parts []string
	var cur strings.Builder
	quoted := false
	for i := 0; i < len(path); i++ {
		c := path[i]
		switch {
		case c == '"':
			quoted = !quoted
		case c == '\\' && quoted && i+1 < len(path):
			i++
			cur.WriteByte(path[i])
		case c == '.' && !quoted:
			if cur.Len() > 0 {
				parts = append(parts, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteByte(c)
		}
	}
	if cur.Len() > 0 {
		parts = append(parts, cur.String())
	}
	return parts
}
