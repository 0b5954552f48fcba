package rollout

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/rlctl/rlctl/diff"
	"github.com/rlctl/rlctl/internal/atomicfile"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/revision"
	"github.com/rlctl/rlctl/schema"
)

// Resolve finds the rule arg names: DOMAIN/RULE, or RULE when exactly one domain has it.
func Resolve(m *policy.Model, arg string) (*policy.Domain, *policy.Rule, error) {
	dom, name, qualified := strings.Cut(arg, "/")
	if !qualified {
		name, dom = dom, ""
	}
	var found []string
	var fd *policy.Domain
	var fr *policy.Rule
	for _, d := range m.Domains {
		if dom != "" && d.Name != dom {
			continue
		}
		for _, r := range d.Rules {
			if r.Name == name {
				found = append(found, d.Name+"/"+r.Name)
				fd, fr = d, r
			}
		}
	}
	switch len(found) {
	case 0:
		return nil, nil, fmt.Errorf("no rule %q in the policies", arg)
	case 1:
		return fd, fr, nil
	}
	return nil, nil, fmt.Errorf("rule %q is in several domains (%s): write DOMAIN/RULE", arg, strings.Join(found, ", "))
}

// Branch is the pull-request branch of one rule: the same on every run, so that a re-run
// updates its pull request.
func Branch(domain, rule string) string {
	return "rlctl/rollout/" + refComponent(domain) + "/" + refComponent(rule)
}

// refComponent makes a domain or rule name a valid component of a Git ref name. Names hold
// letters, digits, "_", "." and "-", and start with a letter or "_", so what Git refuses of them
// is "..", and a component ending in "." or ".lock": "a..b" becomes "a.-.b", "x.lock" "x.lock-",
// each followed by a hash of the name ("-h" and 8 hex digits), so that no other name can give
// the same branch ("a.-.b" is a valid name too). Every other name stays as it is, and so do the
// branches of pull requests already open.
func refComponent(name string) string {
	out := name
	for strings.Contains(out, "..") {
		out = strings.ReplaceAll(out, "..", ".-.")
	}
	if strings.HasSuffix(out, ".") || strings.HasSuffix(out, ".lock") {
		out += "-"
	}
	if out == name {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return out + "-h" + hex.EncodeToString(sum[:4])
}

// Edited is a policy after edits: the files that changed and the model they load as.
type Edited struct {
	Base, Head *policy.Model
	// Files maps each changed file's path to its content before and after.
	Files map[string]File
	// Changes are the semantic changes from Base to Head.
	Changes []diff.Change
}

// Prepare applies edits to files (the policy directory's, holding m) and loads the result, so
// that an edit that would not load is never written. Positions in Head name the files as files
// does.
func Prepare(m *policy.Model, files Files, edits []Edit) (*Edited, error) {
	changed, err := Apply(m, files, edits)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "rlctl-rollout-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	origin := map[string]string{}
	for p, b := range files {
		if c, ok := changed[p]; ok {
			b = c
		}
		at := filepath.Join(tmp, filepath.Base(p))
		origin[at] = p
		if err := os.WriteFile(at, b, 0o644); err != nil {
			return nil, err
		}
	}
	head, err := schema.Load(tmp)
	if err != nil {
		// The problems name the temporary copies: name the policy's files instead. The
		// likeliest cause is a stage set in two places, one that Apply does not edit.
		msg := err.Error()
		for at, p := range origin {
			msg = strings.ReplaceAll(msg, at, p)
		}
		return nil, fmt.Errorf("the edited policy does not load: %s\n(is a stage set somewhere else too, by a pattern such as rules: [_]: stage or by an embedding? rollout edits a stage written in the rule, or in its domain's defaults, only)", msg)
	}
	revision.Positions(head, func(p policy.Pos) policy.Pos {
		if o, ok := origin[p.File]; ok {
			p.File = o
		}
		return p
	})
	e := &Edited{Base: m, Head: head, Files: map[string]File{}, Changes: diff.Compare(m, head)}
	for p, b := range changed {
		e.Files[p] = File{Before: files[p], After: b}
	}
	return e, nil
}

// Write replaces the edited files, each keeping its mode: all of them or, when one cannot be
// written (a full disk), none, so that a failed promotion leaves no rule promoted in one file and
// not in another, and no file cut off (atomicfile.WriteFiles).
func (e *Edited) Write() error {
	paths := e.Paths()
	contents := make([][]byte, len(paths))
	for i, p := range paths {
		contents[i] = e.Files[p].After
	}
	return atomicfile.WriteFiles(paths, contents)
}

// Paths are the changed files' paths, sorted.
func (e *Edited) Paths() []string {
	var ps []string
	for p := range e.Files {
		ps = append(ps, p)
	}
	sort.Strings(ps)
	return ps
}

// RepoPaths returns e's files keyed by their slash paths relative to the top of the Git
// repository that holds them.
func (e *Edited) RepoPaths() (map[string]File, error) { return RepoPaths(e.Files) }

// RepoPaths returns files keyed by their slash paths relative to the top of the Git repository
// that holds them, asking Git once per directory (the files of a policy share one).
func RepoPaths(files map[string]File) (map[string]File, error) {
	out := map[string]File{}
	tops := map[string]string{}
	for p, f := range files {
		rel, err := repoPath(p, tops)
		if err != nil {
			return nil, err
		}
		out[rel] = f
	}
	return out, nil
}

// RepoPath returns the slash path of p, a file or a directory, relative to the top of the Git
// repository that holds it ("." for the top itself).
func RepoPath(p string) (string, error) { return repoPath(p, map[string]string{}) }

// repoPath is RepoPath with tops, the tops of the repositories of directories already asked.
func repoPath(p string, tops map[string]string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	dir := abs
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		dir = filepath.Dir(abs)
	}
	top, ok := tops[dir]
	if !ok {
		out, err := exec.Command("git", "-C", dir, "rev-parse", "--show-toplevel").Output()
		if err != nil {
			return "", fmt.Errorf("%s: %w", p, revision.ErrNotARepository)
		}
		top = strings.TrimSpace(string(out))
		tops[dir] = top
	}
	// The top as git prints it may differ from abs by symbolic links.
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(top, real)
	if err != nil || strings.HasPrefix(rel, "..") {
		return "", fmt.Errorf("%s: outside its repository %s", p, top)
	}
	return filepath.ToSlash(rel), nil
}

// PullRequestText returns a pull request's title and body for e, one rule's change: the change
// as `rlctl diff -o markdown` shows it, then evidence, the gates' table.
func PullRequestText(domain, rule, what, evidence string, e *Edited) (title, body string, err error) {
	title = fmt.Sprintf("rollout: %s/%s %s", domain, rule, what)
	var b bytes.Buffer
	fmt.Fprintf(&b, "`rlctl rollout`: **%s/%s** %s.\n\n", domain, rule, what)
	if err := diff.WriteMarkdown(&b, e.Changes, diff.WithSection(diff.Section{Title: "Gates", Markdown: evidence})); err != nil {
		return "", "", err
	}
	b.WriteString("\n<sub>Opened by `rlctl rollout`; running it again updates this pull request.</sub>\n")
	body = b.String()
	if n := len([]rune(body)); n > MaxComment {
		return "", "", errors.New("the pull request body is over GitHub's limit")
	}
	return title, body, nil
}
