// Package schema owns the CUE schema of rlctl policies and the loader that turns a policy
// repository into the compiled model (policy.Model).
//
// Load is the only place in rlctl that evaluates CUE. It parses the user's files, unifies them
// with the embedded schema, checks what CUE cannot say on its own (duration ranges, the identity
// waterfall's order, names, calendar dates), applies defaults (rule setting, then the domain's
// defaults, then the built-in default), orders rules by precedence and runs the model's own
// checks (policy.Model.Validate: duplicate matches, unknown keys, lease bounds, ...). Every
// problem it reports carries a position in the user's files, never in the embedded schema.
package schema

import (
	_ "embed"
	"errors"
	"fmt"

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

// A Problem is one thing wrong with a policy, positioned in the user's files. It is
// policy.Problem, which Model.Validate reports too, so the loader's own problems and the model's
// read the same.
type Problem = policy.Problem

// Problems are the problems of a policy repository. Load returns them as its error when the
// policy is wrong, as opposed to a tool error such as a missing path; test for them with
// errors.As.
type Problems = policy.Problems

// problemf returns a problem at pos.
func problemf(pos policy.Pos, path, format string, args ...any) Problem {
	return Problem{Pos: pos, Path: path, Message: fmt.Sprintf(format, args...)}
}
