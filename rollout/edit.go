package rollout

import (
	"bytes"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/literal"
	"cuelang.org/go/cue/parser"

	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/schema"
)

// Edit changes one rule's stage block. The rule keeps everything else, and the files keep their
// comments and formatting: an edit replaces, inserts or removes the bytes of single fields of
// the stage block (or adds a stage block to a rule that inherits its stage from the domain's
// defaults), found through CUE's parser.
type Edit struct {
	Domain, Rule string
	// To is the stage to write, with Since (YYYY-MM-DD) and, for canary, Percent; an empty To
	// leaves name, since and percent as they are.
	To      policy.StageName
	Since   string
	Percent int
	// Hold, when not nil, is written as the stage's hold; an empty one removes it.
	Hold *string
}

// Files are the .cue files of a policy directory, by path.
type Files map[string][]byte

// ReadFiles reads the .cue files of dir that schema.Load reads (schema.PolicyFiles): not those
// of its subdirectories, nor those whose name starts with '.' or '_', which an edit must not
// touch, as they are no part of the policy.
func ReadFiles(dir string) (Files, error) {
	names, err := schema.PolicyFiles(dir)
	if err != nil {
		return nil, err
	}
	fs := Files{}
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			return nil, err
		}
		fs[n] = b
	}
	return fs, nil
}

// Apply applies edits to files, which hold model m, and returns the files that changed with
// their new content. m supplies the stage a rule inherits, for a hold on a rule without a stage
// block of its own.
func Apply(m *policy.Model, files Files, edits []Edit) (Files, error) {
	cur := Files{}
	for p, b := range files {
		cur[p] = b
	}
	changed := Files{}
	for _, e := range edits {
		d := m.Domain(e.Domain)
		var r *policy.Rule
		if d != nil {
			for _, x := range d.Rules {
				if x.Name == e.Rule {
					r = x
				}
			}
		}
		if r == nil {
			return nil, fmt.Errorf("no rule %s/%s", e.Domain, e.Rule)
		}
		path, out, err := applyOne(cur, r, e)
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", e.Domain, e.Rule, err)
		}
		cur[path], changed[path] = out, out
	}
	for p, b := range changed {
		if bytes.Equal(b, files[p]) {
			delete(changed, p)
		}
	}
	return changed, nil
}

// ruleDecl is one declaration of a rule's struct in one file.
type ruleDecl struct {
	path  string
	st    *ast.StructLit
	stage *ast.Field
}

func applyOne(files Files, r *policy.Rule, e Edit) (string, []byte, error) {
	var decls []ruleDecl
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		f, err := parser.ParseFile(p, files[p], parser.ParseComments)
		if err != nil {
			return "", nil, err
		}
		for _, st := range findStructs(f.Decls, []string{"domains", e.Domain, "rules", e.Rule}) {
			if fs := fields(st, "stage"); len(fs) > 1 {
				// stage: name: "shadow" beside stage: since: "...": CUE unifies them, and an
				// edit of one would leave the other to conflict with it.
				return "", nil, fmt.Errorf("%s: the stage of rule %s is written in %d fields (lines %d and %d): write it as one, stage: {name: ..., since: ...}, to change it",
					p, e.Rule, len(fs), fs[0].Pos().Line(), fs[1].Pos().Line())
			}
			decls = append(decls, ruleDecl{path: p, st: st, stage: field(st, "stage")})
		}
	}
	var withStage []ruleDecl
	for _, d := range decls {
		if d.stage != nil {
			withStage = append(withStage, d)
		}
	}
	var d ruleDecl
	switch {
	case len(withStage) > 1:
		return "", nil, fmt.Errorf("the stage of rule %s is set at %s:%d and at %s:%d: write it once, stage: {name: ..., since: ...}, to change it",
			e.Rule, withStage[0].path, withStage[0].stage.Pos().Line(), withStage[1].path, withStage[1].stage.Pos().Line())
	case len(withStage) == 1:
		d = withStage[0]
	case len(decls) == 0:
		return "", nil, fmt.Errorf("no declaration found in the policy files")
	default:
		d = decls[0]
		for _, x := range decls {
			if x.path == r.Pos.File {
				d = x
				break
			}
		}
	}
	want := r.Stage
	if e.To != "" {
		want.Name, want.Since, want.CanaryPercent = e.To, e.Since, e.Percent
	}
	if e.Hold != nil {
		want.Hold = *e.Hold
	}
	src := files[d.path]
	var sp splices
	if d.stage == nil && !d.st.Lbrace.IsValid() {
		// The rule is written in CUE's dotted form (rules: r: match: [...]), whose struct has
		// no braces to hold another field: a field added after its last one would be a field
		// of the file. The stage gets a declaration of its own, which CUE unifies with the rule.
		decl := fmt.Sprintf("\ndomains: %s: rules: %s: stage: %s\n", labelText(e.Domain), labelText(e.Rule), stageLiteral(want))
		if len(src) > 0 && src[len(src)-1] != '\n' {
			decl = "\n" + decl
		}
		return d.path, append(append([]byte(nil), src...), decl...), nil
	}
	if d.stage == nil {
		sp.insertField(src, d.st, "stage: "+stageLiteral(want))
		return d.path, sp.apply(src), nil
	}
	st, ok := d.stage.Value.(*ast.StructLit)
	if !ok || !st.Lbrace.IsValid() {
		// A shorthand (stage: name: "soft") or an expression: the whole value is rewritten.
		sp.add(off(d.stage.Value.Pos()), off(d.stage.Value.End()), stageLiteral(want))
		return d.path, sp.apply(src), nil
	}
	values := stageFields(want)
	var anchor ast.Decl
	for _, k := range []string{"name", "percent", "since", "hold"} {
		v, set := values[k]
		f := field(st, k)
		switch {
		case f != nil && set:
			sp.add(off(f.Value.Pos()), off(f.Value.End()), v)
			anchor = f
		case f != nil:
			sp.deleteElt(src, st, f)
		case set:
			sp.insertAfter(src, st, anchor, k+": "+v)
		}
	}
	return d.path, sp.apply(src), nil
}

// stageFields are the stage block's fields for s, as CUE literals; fields that s leaves unset
// are absent.
func stageFields(s policy.Stage) map[string]string {
	m := map[string]string{"name": literal.String.Quote(string(s.Name))}
	if s.Name == policy.StageCanary {
		m["percent"] = strconv.Itoa(s.CanaryPercent)
	}
	if s.Since != "" {
		m["since"] = literal.String.Quote(s.Since)
	}
	if s.Hold != "" {
		m["hold"] = literal.String.Quote(s.Hold)
	}
	return m
}

func stageLiteral(s policy.Stage) string {
	f := stageFields(s)
	var parts []string
	for _, k := range []string{"name", "percent", "since", "hold"} {
		if v, ok := f[k]; ok {
			parts = append(parts, k+": "+v)
		}
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// findStructs returns the struct values at path under decls, following both nested structs
// (a: {b: {...}}) and the shorthand (a: b: {...}).
func findStructs(decls []ast.Decl, path []string) []*ast.StructLit {
	var out []*ast.StructLit
	for _, d := range decls {
		f, ok := d.(*ast.Field)
		if !ok {
			if em, ok := d.(*ast.EmbedDecl); ok {
				if st, ok := em.Expr.(*ast.StructLit); ok {
					out = append(out, findStructs(st.Elts, path)...)
				}
			}
			continue
		}
		name, _, err := ast.LabelName(f.Label)
		if err != nil || name != path[0] {
			continue
		}
		st, ok := f.Value.(*ast.StructLit)
		if !ok {
			continue
		}
		if len(path) == 1 {
			out = append(out, st)
			continue
		}
		out = append(out, findStructs(st.Elts, path[1:])...)
	}
	return out
}

// field returns st's field named name, or nil.
func field(st *ast.StructLit, name string) *ast.Field {
	if fs := fields(st, name); len(fs) > 0 {
		return fs[0]
	}
	return nil
}

// fields returns st's fields labelled name, in order.
func fields(st *ast.StructLit, name string) []*ast.Field {
	var out []*ast.Field
	for _, d := range st.Elts {
		if f, ok := d.(*ast.Field); ok {
			if n, _, err := ast.LabelName(f.Label); err == nil && n == name {
				out = append(out, f)
			}
		}
	}
	return out
}

func off(p interface{ Offset() int }) int { return p.Offset() }

// splice replaces src[from:to] with text.
type splice struct {
	from, to int
	text     string
}

type splices []splice

func (sp *splices) add(from, to int, text string) { *sp = append(*sp, splice{from, to, text}) }

// apply applies the splices, which must not overlap, to src.
func (sp splices) apply(src []byte) []byte {
	sort.SliceStable(sp, func(i, j int) bool { return sp[i].from > sp[j].from })
	out := append([]byte(nil), src...)
	for _, s := range sp {
		out = append(out[:s.from], append([]byte(s.text), out[s.to:]...)...)
	}
	return out
}

func multiline(st *ast.StructLit) bool { return st.Lbrace.Line() != st.Rbrace.Line() }

// labelText writes name as a CUE field label: as it is, or quoted where it must be.
func labelText(name string) string {
	if ast.StringLabelNeedsQuoting(name) {
		return literal.String.Quote(name)
	}
	return name
}

// lineStart is the offset of the start of the line holding offset i.
func lineStart(src []byte, i int) int { return bytes.LastIndexByte(src[:i], '\n') + 1 }

// lineEnd is the offset just past the newline ending the line holding offset i.
func lineEnd(src []byte, i int) int {
	if n := bytes.IndexByte(src[i:], '\n'); n >= 0 {
		return i + n + 1
	}
	return len(src)
}

func indentAt(src []byte, i int) string {
	s := lineStart(src, i)
	e := s
	for e < len(src) && (src[e] == ' ' || src[e] == '\t') {
		e++
	}
	return string(src[s:e])
}

// insertAfter inserts the field text into st after anchor (at the start when anchor is nil):
// on a line of its own in a struct written over several lines, after a comma otherwise.
func (sp *splices) insertAfter(src []byte, st *ast.StructLit, anchor ast.Decl, text string) {
	if !multiline(st) {
		if anchor == nil {
			sp.add(off(st.Lbrace)+1, off(st.Lbrace)+1, text+", ")
			return
		}
		sp.add(off(anchor.End()), off(anchor.End()), ", "+text)
		return
	}
	ind := fieldIndent(src, st)
	if anchor == nil {
		at := lineEnd(src, off(st.Lbrace))
		sp.add(at, at, ind+text+"\n")
		return
	}
	if end := off(anchor.End()); lineStart(src, end) == lineStart(src, off(st.Rbrace)) {
		// The closing brace follows the anchor on its line: past the line's end is past the
		// brace, outside the struct.
		sp.add(end, end, "\n"+ind+text)
		return
	}
	at := lineEnd(src, off(anchor.End()))
	sp.add(at, at, ind+text+"\n")
}

// fieldIndent is the indentation of a field on a line of its own in st, a struct written over
// several lines: that of its first field that does not share the opening brace's line, else
// one tab more than the brace's line.
func fieldIndent(src []byte, st *ast.StructLit) string {
	for _, d := range st.Elts {
		if p := off(d.Pos()); lineStart(src, p) != lineStart(src, off(st.Lbrace)) {
			return indentAt(src, p)
		}
	}
	return indentAt(src, off(st.Lbrace)) + "\t"
}

// insertField adds the field text as st's last field.
func (sp *splices) insertField(src []byte, st *ast.StructLit, text string) {
	if len(st.Elts) == 0 || !multiline(st) {
		var last ast.Decl
		if len(st.Elts) > 0 {
			last = st.Elts[len(st.Elts)-1]
		}
		sp.insertAfter(src, st, last, text)
		return
	}
	last := st.Elts[len(st.Elts)-1]
	ind := fieldIndent(src, st)
	if end := off(last.End()); lineStart(src, end) == lineStart(src, off(st.Rbrace)) {
		// The closing brace follows the last field on its line.
		sp.add(end, end, "\n"+ind+text)
		return
	}
	at := lineStart(src, off(st.Rbrace))
	sp.add(at, at, ind+text+"\n")
}

// deleteElt removes the field f from st: its whole line, with the comment that ends it, in a
// struct written over several lines (when f has the line to itself), else the field and one
// comma beside it.
func (sp *splices) deleteElt(src []byte, st *ast.StructLit, f *ast.Field) {
	i := 0
	for j, d := range st.Elts {
		if d == ast.Decl(f) {
			i = j
		}
	}
	from, to := off(f.Pos()), off(f.End())
	rest := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(src[to:lineEnd(src, to)])), ","))
	alone := strings.TrimSpace(string(src[lineStart(src, from):from])) == "" && (rest == "" || strings.HasPrefix(rest, "//"))
	switch {
	case multiline(st) && alone:
		sp.add(lineStart(src, from), lineEnd(src, to), "")
	case i > 0:
		sp.add(off(st.Elts[i-1].End()), to, "")
	case len(st.Elts) > 1:
		sp.add(from, off(st.Elts[1].Pos()), "")
	default:
		sp.add(from, to, "")
	}
}
