package schema

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/ast/astutil"
	"cuelang.org/go/cue/build"
	"cuelang.org/go/cue/cuecontext"
	cueerrors "cuelang.org/go/cue/errors"
	"cuelang.org/go/cue/format"
	"cuelang.org/go/cue/parser"
	"cuelang.org/go/cue/token"

	"github.com/rlctl/rlctl/policy"
)

// Load loads the policy repository made of paths, each a directory (its .cue files, not its
// subdirectories) or a .cue file, and returns the compiled model.
//
// A policy that is wrong gives a Problems error, every problem positioned in the user's files.
// Any other error is a tool error: a path that does not exist (wrapping fs.ErrNotExist), a
// directory with no .cue files (wrapping ErrNoPolicies) or an unreadable file.
func Load(paths ...string) (*policy.Model, error) {
	m, probs, err := LoadWithProblems(paths...)
	if err != nil {
		return nil, err
	}
	if len(probs) > 0 {
		return nil, probs
	}
	return m, nil
}

// LoadWithProblems loads like Load, but returns a model that decoded along with the problems
// of the model as a whole (policy.Model.Validate's, such as duplicate matches), so that lint can
// report those and its other checks in one run. The model is nil when the policy does not decode
// (CUE syntax, schema violations, conflicts, values no model may hold, no domain at all): its
// problems are then all there is to say until they are fixed. err is a tool error, as Load's.
func LoadWithProblems(paths ...string) (*policy.Model, Problems, error) {
	names, err := policyFiles(paths)
	if err != nil {
		return nil, nil, err
	}
	files, values, probs, err := parseFiles(names)
	if err != nil {
		return nil, nil, err
	}
	if len(probs) > 0 {
		return nil, probs, nil
	}
	m, probs := evaluate(files, names, values)
	return m, probs, nil
}

// evalTimeout bounds CUE evaluation. CUE cannot be interrupted, and a few lines of nested
// comprehensions can ask it for a list of 2^32 elements, so a policy that takes this long is
// reported as a problem rather than left to hang CI. Tests shorten it.
var evalTimeout = 60 * time.Second

// evaluate unifies the parsed files with the schema and decodes the model (see decode), giving up
// after evalTimeout. On timeout the evaluation goroutine runs on until CUE returns; a command
// exits long before that matters.
func evaluate(files []*ast.File, names []string, values valueIndex) (*policy.Model, Problems) {
	type result struct {
		m     *policy.Model
		probs Problems
	}
	if n := overdue.Load(); n >= maxOverdue {
		// A long-running process (serve-xds) reloads the same policy every 30 s: each timed
		// out evaluation of it would leave one more goroutine spinning, without end. One may
		// run on, so that a policy fixed since loads.
		return nil, Problems{{
			Pos:     policy.Pos{File: names[0], Line: 1, Col: 1},
			Message: fmt.Sprintf("%d earlier evaluations that did not finish within %s are still running: no other starts until one ends", n, evalTimeout),
		}}
	}
	// settled is set by whichever comes first, the evaluation's end or the timeout.
	var settled atomic.Bool
	done := make(chan result, 1)
	go func() {
		defer func() {
			if !settled.CompareAndSwap(false, true) {
				overdue.Add(-1) // the evaluation the caller gave up on has ended
			}
		}()
		user, probs := build1(files, values)
		if len(probs) > 0 {
			done <- result{nil, probs}
			return
		}
		m, probs := decode(user, values)
		done <- result{m, probs}
	}()
	timer := time.NewTimer(evalTimeout)
	defer timer.Stop()
	select {
	case r := <-done:
		if r.m != nil && len(r.m.Domains) == 0 {
			return nil, Problems{{
				Pos:     policy.Pos{File: names[0], Line: 1, Col: 1},
				Message: "no domains: a policy repository declares at least one, as domains: <name>: {...}",
			}}
		}
		return r.m, r.probs
	case <-timer.C:
		if settled.CompareAndSwap(false, true) {
			overdue.Add(1)
		}
		return nil, Problems{{
			Pos:     policy.Pos{File: names[0], Line: 1, Col: 1},
			Message: fmt.Sprintf("evaluation did not finish within %s: the policy builds a huge value (for example comprehensions over comprehensions)", evalTimeout),
		}}
	}
}

// overdue counts the evaluations still running that evaluate gave up on; while maxOverdue of
// them run, no other starts.
var overdue atomic.Int32

const maxOverdue = 2

// PolicyFiles lists the .cue files that paths name, as Load reads them: a directory's .cue files
// but those whose name starts with '.' or '_', and a .cue file given by name. Tools that edit a
// policy (rollout) edit these files and no others.
func PolicyFiles(paths ...string) ([]string, error) { return policyFiles(paths) }

// policyFiles lists the .cue files that paths name. Like CUE's loader it skips files whose name
// starts with '.' or '_' in a directory, and everything that is not a .cue file.
func policyFiles(paths []string) ([]string, error) {
	if len(paths) == 0 {
		paths = []string{"."}
	}
	var names []string
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("load: %w", err)
		}
		if !fi.IsDir() {
			if filepath.Ext(p) != ".cue" {
				return nil, fmt.Errorf("load: %s: %w (want a .cue file or a directory)", p, ErrNoPolicies)
			}
			if err := regular(p, fi); err != nil {
				return nil, err
			}
			if lfi, err := os.Lstat(p); err == nil && lfi.Mode()&os.ModeSymlink != 0 {
				// A test file's policies path is a pull request's to choose, as a
				// directory's files are.
				if err := within(filepath.Dir(p), filepath.Base(p)); err != nil {
					return nil, err
				}
			}
			names = append(names, p)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			return nil, fmt.Errorf("load: %w", err)
		}
		n := len(names)
		var skipped []string
		for _, e := range entries {
			name := e.Name()
			if e.IsDir() || filepath.Ext(name) != ".cue" {
				continue
			}
			if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				skipped = append(skipped, name)
				continue
			}
			if !e.Type().IsRegular() {
				fi, err := os.Stat(filepath.Join(p, name)) // a symbolic link: what it leads to
				if err != nil {
					return nil, fmt.Errorf("load: %w", err)
				}
				if err := regular(filepath.Join(p, name), fi); err != nil {
					return nil, err
				}
				if err := within(p, name); err != nil {
					return nil, err
				}
			}
			names = append(names, filepath.Join(p, name))
		}
		if len(names) == n && len(skipped) > 0 {
			return nil, fmt.Errorf("load: %s: %w (skipped %s: files whose name starts with '_' or '.' are not loaded)",
				p, ErrNoPolicies, strings.Join(skipped, ", "))
		}
		if len(names) == n {
			return nil, fmt.Errorf("load: %s: %w (no .cue files in the directory)", p, ErrNoPolicies)
		}
	}
	return names, nil
}

// within refuses a policy file of directory dir, name, that is a symbolic link to a file
// outside dir, whether found in dir or named as a PATH. The policies CI lints come from pull requests: a link to a credentials file of
// the machine that runs the checks had its values printed in the findings of a CUE error.
func within(dir, name string) error {
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	target, err := filepath.EvalSymlinks(filepath.Join(dir, name))
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	if rel, err := filepath.Rel(root, target); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return fmt.Errorf("load: %s is a symbolic link to %s, outside %s: a policy file must be in the directory of its link (give the file it leads to as a PATH to load it)",
			filepath.Join(dir, name), target, dir)
	}
	return nil
}

// regular refuses a policy file that is not a regular file: reading a named pipe waits for a
// writer, so lint in CI hung on one.
func regular(path string, fi os.FileInfo) error {
	if fi.Mode().IsRegular() {
		return nil
	}
	kind := "a " + fi.Mode().Type().String() + " file"
	switch t := fi.Mode().Type(); {
	case t&os.ModeNamedPipe != 0:
		kind = "a named pipe"
	case t&os.ModeSocket != 0:
		kind = "a socket"
	case t&os.ModeDevice != 0:
		kind = "a device"
	}
	return fmt.Errorf("load: %s is not a regular file (it is %s): a policy file must be one", path, kind)
}

// parseFiles parses every file, indexes where their fields' values are and checks that the
// files form one package.
func parseFiles(names []string) ([]*ast.File, valueIndex, Problems, error) {
	var files []*ast.File
	values := valueIndex{}
	var probs Problems
	for _, name := range names {
		src, err := os.ReadFile(name)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("load: %w", err)
		}
		f, err := parser.ParseFile(name, src, parser.ParseComments)
		if err != nil {
			ps := cueProblems(err, cue.Value{}, nil)
			// CUE reports a missing '}' at the end of the file; name the brace left open too.
			for i := range ps {
				if strings.Contains(ps[i].Message, "expected '}'") {
					if at, ok := unclosedBrace(name, src); ok {
						ps[i].Message += fmt.Sprintf(" (the '{' at line %d is not closed)", at.Line)
						ps[i].Related = append(ps[i].Related, at)
					}
				}
			}
			probs = append(probs, ps...)
			continue
		}
		values.add(f)
		expandStages(f)
		files = append(files, f)
	}
	if len(probs) > 0 {
		return nil, nil, probs, nil
	}
	// CUE itself reports mixed packages without a position; name both package clauses instead.
	var first *ast.File
	for _, f := range files {
		if first == nil {
			first = f
			continue
		}
		if f.PackageName() != first.PackageName() {
			probs = append(probs, Problem{
				Pos:     packagePos(f),
				Related: []policy.Pos{packagePos(first)},
				Message: fmt.Sprintf("found packages %q and %q: all policy files must be in one package",
					first.PackageName(), f.PackageName()),
			})
		}
	}
	return files, values, probs, nil
}

func packagePos(f *ast.File) policy.Pos {
	for _, d := range f.Decls {
		if p, ok := d.(*ast.Package); ok {
			return toPos(p.Pos())
		}
	}
	return policy.Pos{File: f.Filename}
}

// build1 evaluates the files as one instance and validates them against #Policy. It returns the
// user's value alone, whose positions are all in the user's files.
//
// It validates against the schema without its custom messages first (see quickSource), and
// against the full schema only when that fails, to explain why.
func build1(files []*ast.File, values valueIndex) (cue.Value, Problems) {
	ctx := cuecontext.New()
	quick, err := quickSource()
	if err != nil {
		return cue.Value{}, Problems{{Message: "internal error: bad embedded schema: " + err.Error()}}
	}
	schema := ctx.CompileString(quick, cue.Filename(schemaFile))
	if err := schema.Err(); err != nil {
		// The embedded schema is compiled in tests; this only fires on a broken build.
		return cue.Value{}, Problems{{Message: "internal error: bad embedded schema: " + err.Error()}}
	}
	// Errors in building the instance (references, imports) are about names: they keep their
	// positions. Errors in evaluating it are about values (see valueIndex).
	inst := build.NewContext().NewInstance("", nil)
	for _, f := range files {
		if err := inst.AddSyntax(f); err != nil {
			return cue.Value{}, cueProblems(err, cue.Value{}, nil)
		}
	}
	if inst.Err != nil {
		return cue.Value{}, cueProblems(inst.Err, cue.Value{}, nil)
	}
	user := ctx.BuildInstance(inst)
	if err := user.Err(); err != nil {
		return cue.Value{}, cueProblems(err, user, values)
	}
	if err := user.Validate(); err != nil {
		return cue.Value{}, cueProblems(err, user, values)
	}
	if validate(schema, user) == nil {
		return user, nil
	}
	schema = ctx.CompileString(Source, cue.Filename(schemaFile))
	if err := schema.Err(); err != nil {
		return cue.Value{}, Problems{{Message: "internal error: bad embedded schema: " + err.Error()}}
	}
	if err := validate(schema, user); err != nil {
		probs := cueProblems(err, user, values)
		suggestFields(probs, schema.LookupPath(cue.MakePath(cue.Def("#Policy"))).Unify(user))
		return cue.Value{}, probs
	}
	return user, nil
}

// validate unifies user with the schema's #Policy and checks that the result is valid and
// concrete.
func validate(schema, user cue.Value) error {
	return schema.LookupPath(cue.MakePath(cue.Def("#Policy"))).Unify(user).Validate(cue.Concrete(true))
}

// quickSource is Source without its custom error messages: every disjunct `| error("...")` is
// dropped. A value that fails a constraint fails it either way, so both accept the same
// policies, but each message makes the constraint a disjunction, which nearly doubles the cost
// of validating a large repository. The messages only matter once validation fails.
var quickSource = sync.OnceValues(func() (string, error) {
	f, err := parser.ParseFile(schemaFile, Source)
	if err != nil {
		return "", err
	}
	n := astutil.Apply(f, nil, func(c astutil.Cursor) bool {
		if x, ok := c.Node().(*ast.BinaryExpr); ok && x.Op == token.OR && isErrorCall(x.Y) {
			c.Replace(x.X)
		}
		return true
	})
	b, err := format.Node(n)
	return string(b), err
})

// isErrorCall reports whether x calls the builtin error.
func isErrorCall(x ast.Expr) bool {
	call, ok := x.(*ast.CallExpr)
	if !ok {
		return false
	}
	fn, ok := call.Fun.(*ast.Ident)
	return ok && fn.Name == "error"
}

// cueProblems turns a CUE error into problems, keeping only positions in the user's files. When
// an error has none (a required field the user left out is positioned in the schema), it takes
// the position of the nearest enclosing value the user wrote. Positions move from a field's label
// to its value (see valueIndex), but for a field not allowed, whose subject is its name.
func cueProblems(err error, user cue.Value, values valueIndex) Problems {
	var probs Problems
	seen := map[string]bool{}
	for _, e := range cueerrors.Errors(err) {
		var ps []policy.Pos
		for _, p := range cueerrors.Positions(e) {
			if pp := toPos(p); pp.File != "" {
				ps = append(ps, pp)
			}
		}
		path := e.Path()
		if len(path) > 0 && path[0] == "#Policy" {
			path = path[1:]
		}
		if len(ps) == 0 && user.Exists() {
			if pp := nearestPos(user, path); pp.File != "" {
				ps = append(ps, pp)
			}
		}
		format, args := e.Msg()
		if format != notAllowed {
			ps = valuePositions(ps, values)
		}
		pr := Problem{Path: cuePath(path), Message: fmt.Sprintf(format, args...), Check: schemaCheck(path)}
		if parent, field, ok := requiredField(format, args, path); ok {
			pr.Path, pr.Message = cuePath(parent), requiredMessage(user, parent, field)
		}
		if msg, ok := emptyListMessage(format, args, path); ok {
			pr.Message = msg
		}
		if msg, ok := typeMessage(format, args, path); ok && len(ps) <= 1 {
			// One position in the user's files: their value against the schema's kind. With
			// two, two of their own values conflict, and the kinds are theirs: CUE's words.
			pr.Message = msg
		}
		if msg, canary, ok := stageMessage(user, path); ok {
			pr.Message = msg
			if canary {
				pr.Check = "canary-percent"
			}
		}
		if len(ps) > 0 {
			pr.Pos, pr.Related = ps[0], ps[1:]
		}
		key := pr.String()
		if seen[key] {
			continue
		}
		seen[key] = true
		probs = append(probs, pr)
	}
	if len(probs) == 0 {
		probs = Problems{{Message: err.Error()}}
	}
	probs.Sort()
	return probs
}

// shapes show what a field of the schema holds, for typeMessage. Durations and dates are not
// here: the schema's own error() says what they take.
var shapes = map[string]string{
	"failure":        `failure: {mode: "closed", reason: "..."}`,
	"match":          `match: [{key: "tenant"}, {key: "path", value: "/v1/orders"}]`,
	"limits":         `limits: [{requests: 1000, window: "1m"}]`,
	"critical_paths": `critical_paths: ["/v1/payments/*"]`,
	"legit":          `legit: ["bigco"]`,
	"waterfall":      `waterfall: [{tier: "api_key", header: "x-api-key"}, {tier: "subnet"}]`,
	"sub_shards":     `sub_shards: {count: 8, attribute: "client_ip"}`,
	"lease":          `lease: {max: 100}`,
	"fallback":       `fallback: {requests: 50, window: "1s"}`,
	"regions":        `regions: {"us-east": 60, "eu-central": 40}`,
	"sources":        `sources: tenant: {kind: "header", header: "x-tenant-id"}`,
	"rules":          `rules: per_tenant: {match: [{key: "tenant"}], limits: [{requests: 1000, window: "1m"}]}`,
}

// kindNames name CUE's kinds as a policy's author knows them.
var kindNames = map[string]string{"struct": "a block {...}", "list": "a list [...]", "string": "a string", "int": "a number",
	"number": "a number", "float": "a number", "bool": "true or false", "null": "null"}

// typeMessage rewrites CUE's "conflicting values X and {schema...} (mismatched types string
// and struct)", which prints the schema's own definition, as what the field holds and an example
// of it: "failure is a block {...}, not a string: write failure: {mode: "closed", ...}".
func typeMessage(format string, args []any, path []string) (string, bool) {
	if !strings.Contains(format, "mismatched types") || len(args) < 4 || len(path) == 0 {
		return "", false
	}
	got, want := kindNames[fmt.Sprint(args[2])], kindNames[fmt.Sprint(args[3])]
	if got == "" || want == "" {
		return "", false
	}
	field, entry, at := path[len(path)-1], "", len(path)-1
	if _, err := strconv.Atoi(field); err == nil && len(path) > 1 {
		field, entry, at = path[len(path)-2], "each entry of ", len(path)-2
	}
	msg := fmt.Sprintf("%s%s is %s, not %s", entry, field, want, got)
	// A label under rules, sources, domains or regions is a name the user chose (a rule named
	// limits, say), not the schema's field of that name.
	named := at > 0 && slices.Contains([]string{"rules", "sources", "domains", "regions"}, path[at-1])
	if ex, ok := shapes[field]; ok && !named {
		msg += ": write " + ex
	}
	return msg, true
}

// emptyListMessage says what an empty list means where the schema wants at least one element
// (a rule's match and limits: [#X, ...#X]), for which CUE says "incompatible list lengths (0 and
// 1)".
func emptyListMessage(format string, args []any, path []string) (string, bool) {
	if format != "incompatible list lengths (%d and %d)" || len(args) != 2 || fmt.Sprint(args[0]) != "0" || len(path) == 0 {
		return "", false
	}
	switch path[len(path)-1] {
	case "match":
		return "a rule needs at least one match entry: an empty match would select no descriptor", true
	case "limits":
		return "a rule needs at least one limit", true
	}
	return "", false
}

// valuePositions moves each of ps that is a field's label to the field's value, dropping any
// that then repeats one before it (CUE may give both a field's label and its value).
func valuePositions(ps []policy.Pos, values valueIndex) []policy.Pos {
	out := ps[:0]
	for _, p := range ps {
		if p = values.value(p); !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// schemaCheck names the lint check that a schema problem at path is, or returns "". The schema
// requires a canary's percent (so that no snapshot enforces a canary on no instance), which is
// lint's canary-percent check.
func schemaCheck(path []string) string {
	if n := len(path); n >= 2 && path[n-2] == "stage" && path[n-1] == "percent" {
		return "canary-percent"
	}
	return ""
}

// nearestPos returns the position of the deepest value on path that the user wrote.
func nearestPos(user cue.Value, path []string) policy.Pos {
	for n := len(path); n > 0; n-- {
		v := user.LookupPath(selectorPath(path[:n]))
		if !v.Exists() {
			continue
		}
		if p := toPos(v.Pos()); p.File != "" {
			return p
		}
	}
	return policy.Pos{}
}

func selectorPath(labels []string) cue.Path {
	sels := make([]cue.Selector, 0, len(labels))
	for _, l := range labels {
		switch {
		case strings.HasPrefix(l, "#"):
			sels = append(sels, cue.Def(l))
		case isIndex(l):
			n, _ := strconv.Atoi(l)
			sels = append(sels, cue.Index(n))
		default:
			if u, err := strconv.Unquote(l); err == nil {
				l = u
			}
			sels = append(sels, cue.Str(l))
		}
	}
	return cue.MakePath(sels...)
}

func isIndex(s string) bool {
	if s == "" || len(s) > 9 {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

func cuePath(labels []string) string { return strings.Join(labels, ".") }

// toPos converts a CUE position, dropping positions in the embedded schema.
func toPos(p token.Pos) policy.Pos {
	if !p.IsValid() || p.Filename() == "" || p.Filename() == schemaFile {
		return policy.Pos{}
	}
	return policy.Pos{File: p.Filename(), Line: p.Line(), Col: p.Column()}
}
