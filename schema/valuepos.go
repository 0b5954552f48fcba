package schema

import (
	"cuelang.org/go/cue/ast"

	"github.com/rlctl/rlctl/policy"
)

// CUE positions a field's value at the field's label: an error about `window: "0s"` would point
// at window, while CUE's own conflicts and the schema's custom messages point at "0s". So that
// every error about a value points at the value, the loader keeps, from the parsed files, where
// each field's value begins (valueIndex) and moves problems about values there. Problems whose
// subject is the name itself (a field not allowed, a name that is not one) stay at the name.

// valueIndex maps the position of each field's label in the user's files to the position of its
// value.
type valueIndex map[policy.Pos]policy.Pos

// add indexes the fields of f. It is called before expandStages, so a stage written as its name
// maps to the name, as the user wrote it.
func (ix valueIndex) add(f *ast.File) {
	ast.Walk(f, func(n ast.Node) bool {
		if fl, ok := n.(*ast.Field); ok && fl.Value != nil {
			if l, v := toPos(fl.Label.Pos()), toPos(fl.Value.Pos()); l.File != "" && v.File != "" {
				ix[l] = v
			}
		}
		return true
	}, nil)
}

// value returns the position of the value of the field labelled at p, or p when no field's label
// is there (a list element, a value already).
func (ix valueIndex) value(p policy.Pos) policy.Pos {
	if v, ok := ix[p]; ok {
		return v
	}
	return p
}
