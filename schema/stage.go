package schema

import (
	"fmt"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/literal"
	"cuelang.org/go/cue/token"
)

// A stage that needs nothing else may be written as its name alone: stage: "shadow" is
// stage: {name: "shadow"}. The schema's #Stage is a block only, since a disjunction of a block
// and names would turn every mistake inside a block into a list of failed alternatives; the
// loader expands the shorthand in the parsed files instead (expandStages), before CUE sees
// them, and explains any other value that is not a block (stageMessage).

// stageShorthand are the stages a name alone can say: a canary also needs its percent.
var stageShorthand = map[string]bool{"shadow": true, "soft": true, "enforce": true}

// stageNames are every stage, in rollout order, for suggestions.
var stageNames = []string{"shadow", "soft", "canary", "enforce"}

// stageForm is how a stage block is written, for messages.
const stageForm = `{name: "canary", percent: 5, since: "YYYY-MM-DD"}`

// expandStages rewrites, in f, each stage of a rule or of a domain's defaults that is written
// as a shorthand name into the block {name: NAME}. The name keeps its position, so anything
// said about it points at the user's file.
func expandStages(f *ast.File) {
	walkStages(f.Decls, nil)
}

func walkStages(decls []ast.Decl, path []string) {
	for _, d := range decls {
		switch x := d.(type) {
		case *ast.Field:
			label, _, err := ast.LabelName(x.Label)
			if err != nil {
				label = "*" // a pattern such as [string]: applies to every name
			}
			p := append(path[:len(path):len(path)], label)
			if isStagePath(p) {
				if lit, ok := x.Value.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, err := literal.Unquote(lit.Value); err == nil && stageShorthand[s] {
						x.Value = &ast.StructLit{Elts: []ast.Decl{&ast.Field{Label: ast.NewIdent("name"), Value: lit}}}
					}
				}
				continue
			}
			if len(p) < 5 {
				walkStageValue(x.Value, p)
			}
		case *ast.EmbedDecl:
			walkStageValue(x.Expr, path)
		case *ast.Comprehension:
			walkStageValue(x.Value, path)
		}
	}
}

func walkStageValue(e ast.Expr, path []string) {
	switch x := e.(type) {
	case *ast.StructLit:
		walkStages(x.Elts, path)
	case *ast.BinaryExpr:
		if x.Op == token.AND {
			walkStageValue(x.X, path)
			walkStageValue(x.Y, path)
		}
	case *ast.ParenExpr:
		walkStageValue(x.X, path)
	}
}

// isStagePath reports whether path (labels, "*" for a pattern) is a rule's stage or a domain's
// default stage.
func isStagePath(path []string) bool {
	match := func(want ...string) bool {
		if len(path) != len(want) {
			return false
		}
		for i, w := range want {
			if w != "" && path[i] != "*" && path[i] != w {
				return false
			}
		}
		return true
	}
	return match("domains", "", "rules", "", "stage") || match("domains", "", "defaults", "stage")
}

// stageMessage explains a stage at path that is not a block, from the user's value there, and
// shows the form to write; ok is false when path is not a stage or its value is a block.
func stageMessage(user cue.Value, path []string) (msg string, canary, ok bool) {
	if !user.Exists() || !isStagePath(path) {
		return "", false, false
	}
	v := user.LookupPath(selectorPath(path))
	if !v.Exists() || v.IncompleteKind() == cue.StructKind {
		return "", false, false
	}
	s, err := v.String()
	switch {
	case err != nil:
		return fmt.Sprintf(`stage must be a stage name ("shadow", "soft" or "enforce") or a block such as stage: %s`, stageForm), false, true
	case s == "canary":
		return fmt.Sprintf(`a canary stage needs its share of enforcers and the day it began: write stage: %s`, stageForm), true, true
	}
	hint := ""
	if near := nearest(s, stageNames); len(near) > 0 {
		hint = fmt.Sprintf(" (did you mean %q?)", near[0])
	}
	return fmt.Sprintf(`%q is not a stage%s: write stage: "shadow", "soft" or "enforce", or a block such as stage: %s`, s, hint, stageForm), false, true
}
