package schema

import (
	"fmt"

	"cuelang.org/go/cue"
)

// The schema marks the fields a policy must write as required (`header!:`). CUE reports one left
// out in two ways: "field is required but not present" at the field's path, or "required field
// missing: F" at the path of the struct that lacks it. Both are rewritten here to name the field
// and, where a field is required only for some kinds of value, the kind: the struct's path and
// "header is required for kind header".

// requiredField recognises CUE's message for a missing required field (format and args as
// cue/errors.Error.Msg returns them, at path) and returns the path of the struct that lacks it
// and the field's name.
func requiredField(format string, args []any, path []string) (parent []string, field string, ok bool) {
	switch {
	case format == "field is required but not present" && len(path) > 0:
		return path[:len(path)-1], path[len(path)-1], true
	case format == "required field missing: %s" && len(args) == 1:
		return path, fmt.Sprint(args[0]), true
	}
	return nil, "", false
}

// requiredMessage says that field of the struct at parent is required, naming what makes it so
// when that is the struct's kind: a source's kind, a canary stage.
func requiredMessage(user cue.Value, parent []string, field string) string {
	msg := field + " is required"
	n := len(parent)
	switch {
	case n >= 2 && parent[n-2] == "sources" && field != "kind":
		if kind, err := user.LookupPath(selectorPath(append(parent[:n:n], "kind"))).String(); err == nil {
			msg += " for kind " + kind
		}
	case n >= 1 && parent[n-1] == "stage" && field == "percent":
		msg += " for a canary stage: write stage: " + stageForm
	}
	return msg
}
