package policy

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// A Problem is one thing wrong with a policy or a model.
type Problem struct {
	// Pos is where the problem is, in the user's files.
	Pos Pos `json:"pos"`
	// Related are further positions, such as the other side of a conflict.
	Related []Pos `json:"related,omitempty"`
	// Path is the CUE path of the offending value, such as domains.edge.rules.r.limits.0.window.
	Path    string `json:"path,omitempty"`
	Message string `json:"message"`
	// Check names the lint check this problem is, such as "duplicate-match", when it is one that
	// the loader refuses because no consumer could use the model; lint reports it under that
	// check's ID. Empty for CUE syntax, schema and conflict problems and for values no model may
	// hold.
	Check string `json:"check,omitempty"`
}

// Positions returns Pos and Related, leaving out unknown positions.
func (p Problem) Positions() []Pos {
	var ps []Pos
	for _, q := range append([]Pos{p.Pos}, p.Related...) {
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

// Problems are the problems of a policy repository or a model. schema.Load returns them as its
// error when a policy is wrong, as opposed to a tool error such as a missing path.
type Problems []Problem

// Error formats every problem, one after the other.
func (ps Problems) Error() string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, "\n")
}

// Sort orders problems by position, keeping the order of problems at the same place.
func (ps Problems) Sort() {
	slices.SortStableFunc(ps, func(a, b Problem) int { return a.Pos.Compare(b.Pos) })
}

// Compare orders positions by file, line and column.
func (p Pos) Compare(q Pos) int {
	return cmp.Or(cmp.Compare(p.File, q.File), cmp.Compare(p.Line, q.Line), cmp.Compare(p.Col, q.Col))
}

// problemf returns a problem at the first known position of ps.
func problemf(check, path string, ps []Pos, format string, args ...any) Problem {
	p := Problem{Path: path, Message: fmt.Sprintf(format, args...), Check: check}
	for _, q := range ps {
		if q.File != "" {
			p.Pos = q
			break
		}
	}
	return p
}
