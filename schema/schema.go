// Package schema owns the CUE schema of rlctl policies and the loader that turns a policy
// repository into the compiled model (policy.Model).
//
// Load is the only place in rlctl that evaluates CUE. It parses the user's files, unifies them
// with the embedded schema, checks what CUE cannot say on its own (duration ranges, the identity
// waterfall's order, duplicate matches), applies defaults (rule setting, then the domain's
// defaults, then the built-in default) and orders rules by precedence. Every problem it reports
// carries a position in the user's files, never in the embedded schema.
package schema

import (
	_ "embed"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/rlctl/rlctl/policy"
)

// Source is the CUE text of the schema. Its definition #Policy is what policy files must satisfy.
//
//go:embed policy.cue
var Source string

// schemaFile names the embedded schema in CUE positions; Load drops positions in it.
const schemaFile = "rlctl:schema/policy.cue"

// ErrNoPolicies means a path held no policy (.cue) files. It is a tool error, not a finding.
var ErrNoPolicies = errors.New("no policy files")

// A Problem is one thing wrong with a policy.
type Problem struct {
	// Pos is where the problem is, in the user's files.
	Pos policy.Pos `json:"pos"`
	// Related are further positions, such as the other side of a conflict.
	Related []policy.Pos `json:"related,omitempty"`
	// Path is the CUE path of the offending value, such as domains.edge.rules.r.limits[0].window.
	Path    string `json:"path,omitempty"`
	Message string `json:"message"`
	// Check names the lint check this problem is, when it is one the loader must refuse because
	// no consumer could use the model (such as "duplicate-match"); lint reports it under that
	// check's ID. Empty for CUE syntax, schema and conflict problems.
	Check string `json:"check,omitempty"`
}

// Positions returns Pos and Related, leaving out unknown positions.
func (p Problem) Positions() []policy.Pos {
	var ps []policy.Pos
	for _, q := range append([]policy.Pos{p.Pos}, p.Related...) {
		if q.File != "" {
			ps = append(ps, q)
		}
	}
	return ps
}

// String formats p the way CUE's command does: "path: message:" and then its positions, one an
// indented line.
func (p Problem) String() string {
	var b strings.Builder
	if p.Path != "" {
		b.WriteString(p.Path)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	ps := p.Positions()
	if len(ps) > 0 {
		b.WriteString(":")
	}
	for _, q := range ps {
		b.WriteString("\n    ")
		b.WriteString(q.String())
	}
	return b.String()
}

// Problems are the problems of a policy repository. Load returns them as its error when the
// policy is wrong, as opposed to a tool error such as a missing path.
type Problems []Problem

// Error formats every problem, one after the other.
func (ps Problems) Error() string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, "\n")
}

// sort orders problems by position, keeping the order of problems at the same place.
func (ps Problems) sort() {
	sort.SliceStable(ps, func(i, j int) bool { return posLess(ps[i].Pos, ps[j].Pos) })
}

// problemf returns a problem at pos.
func problemf(pos policy.Pos, path, format string, args ...any) Problem {
	return Problem{Pos: pos, Path: path, Message: fmt.Sprintf(format, args...)}
}
