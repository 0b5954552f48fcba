// Package revision loads a policy repository as it is at a Git revision, so that diff, lint
// --base and rollout compare two versions of the same policy. It runs the git command; the
// working tree is revision "".
package revision

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/schema"
)

// WorkingTree is the revision of the files as they are on disk.
const WorkingTree = ""

// ErrNotARepository means a path is not inside a Git working tree.
var ErrNotARepository = errors.New("not inside a Git repository")

// ErrNotAtRevision means a path does not exist at a revision that does: Load reads such a path
// as holding no policy.
var ErrNotAtRevision = errors.New("not in that revision")

// Load loads the policy made of paths (as schema.Load takes them) as it is at Git revision rev:
// the working tree for WorkingTree, a commit, branch or tag otherwise. Positions in the model and
// in problems name the files as paths do, so a diff can show both sides' file:line.
func Load(rev string, paths ...string) (*policy.Model, error) {
	if rev == WorkingTree {
		return schema.Load(paths...)
	}
	if strings.HasPrefix(rev, "-") {
		// git would read it as an option: --base=--output=FILE wrote FILE.
		return nil, fmt.Errorf("revision %q: a revision does not start with '-'", rev)
	}
	if len(paths) == 0 {
		paths = []string{"."}
	}
	tmp, err := os.MkdirTemp("", "rlctl-rev-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	var at []string
	for _, p := range paths {
		dst, err := extract(rev, p, tmp)
		if errors.Is(err, ErrNotAtRevision) {
			continue // added since: no policy there at rev
		}
		if err != nil {
			return nil, err
		}
		at = append(at, dst)
	}
	if len(at) == 0 {
		// The policy is new since rev, as in the pull request that adds it: everything in it
		// is added.
		return &policy.Model{}, nil
	}
	m, err := schema.Load(at...)
	rename := func(pos policy.Pos) policy.Pos {
		if rel, ok := strings.CutPrefix(pos.File, tmp+string(filepath.Separator)); ok {
			pos.File = filepath.Join(originOf(rel, paths), filepath.Base(rel))
		}
		return pos
	}
	var probs schema.Problems
	if errors.As(err, &probs) {
		for i := range probs {
			probs[i].Pos = rename(probs[i].Pos)
			for j := range probs[i].Related {
				probs[i].Related[j] = rename(probs[i].Related[j])
			}
		}
		return nil, probs
	}
	if err != nil {
		return nil, err
	}
	Positions(m, rename)
	return m, nil
}

// originOf returns the directory a file extracted under rel came from: its path as the caller
// wrote it.
func originOf(rel string, paths []string) string {
	i, _, _ := strings.Cut(rel, string(filepath.Separator))
	var n int
	if _, err := fmt.Sscanf(i, "%d", &n); err == nil && n < len(paths) {
		p := paths[n]
		if strings.HasSuffix(p, ".cue") {
			return filepath.Dir(p)
		}
		return p
	}
	return filepath.Dir(rel)
}

// extract writes path as it is at rev into dir/<n>/, n being a fresh number, and returns what to
// load there: the directory, or the one file.
func extract(rev, path, dir string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	// Git runs in the nearest directory of path that exists: the path itself may not, in the
	// working tree (a change that deletes it), or at the revision.
	probe := existingDir(abs)
	// Git names the top of the work tree by its real path, and the working directory may be
	// reached through a symbolic link (macOS's /tmp is one): the path relative to the top is
	// worked out from the real path too.
	if real, err := filepath.EvalSymlinks(probe); err == nil {
		rest, _ := filepath.Rel(probe, abs)
		abs, probe = filepath.Join(real, rest), real
	}
	top, err := git(probe, "rev-parse", "--show-toplevel")
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, ErrNotARepository)
	}
	top = strings.TrimSpace(top)
	rel, err := filepath.Rel(top, abs)
	if err != nil {
		return "", err
	}
	entries, _ := os.ReadDir(dir)
	out := filepath.Join(dir, fmt.Sprint(len(entries)))
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", err
	}
	spec := filepath.ToSlash(rel)
	if spec == "." {
		spec = ""
	}
	if spec != "" {
		// One process when the path is there; a second only to tell a missing path from a
		// missing revision, which stays an error.
		if _, err := git(top, "cat-file", "-e", rev+":"+spec); err != nil {
			if _, err := git(top, "rev-parse", "--verify", "--quiet", rev+"^{commit}"); err == nil {
				return "", fmt.Errorf("%s at %s: %w", path, rev, ErrNotAtRevision)
			}
		}
	}
	cmd := exec.Command("git", "-C", top, "archive", "--format=tar", rev, "--", spec)
	if spec == "" {
		cmd = exec.Command("git", "-C", top, "archive", "--format=tar", rev)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	data, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s at %s: %s", path, rev, strings.TrimSpace(stderr.String()))
	}
	found := false
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", err
		}
		if h.Typeflag != tar.TypeReg || !strings.HasSuffix(h.Name, ".cue") {
			continue
		}
		// Only the directory's own files (not its subdirectories), as schema.Load reads them.
		name := filepath.FromSlash(h.Name)
		if strings.HasSuffix(abs, ".cue") {
			if name != rel {
				continue
			}
		} else if filepath.Dir(name) != filepath.Clean(rel) && !(rel == "." && !strings.Contains(name, string(filepath.Separator))) {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(out, filepath.Base(name)), b, 0o644); err != nil {
			return "", err
		}
		found = true
	}
	if !found {
		// The path is there, without a policy file: no policy, as when it is missing.
		return "", fmt.Errorf("%s at %s holds no .cue file: %w", path, rev, ErrNotAtRevision)
	}
	if strings.HasSuffix(abs, ".cue") {
		return filepath.Join(out, filepath.Base(rel)), nil
	}
	return out, nil
}

// DefaultBase returns the revision a change is compared against by default: the merge base of
// HEAD with the default branch (origin's HEAD, else main, else master), for the repository around
// path.
func DefaultBase(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	dir := existingDir(abs)
	if _, err := git(dir, "rev-parse", "--show-toplevel"); err != nil {
		return "", fmt.Errorf("%s: %w", path, ErrNotARepository)
	}
	var branch string
	if ref, err := git(dir, "symbolic-ref", "--quiet", "refs/remotes/origin/HEAD"); err == nil {
		branch = strings.TrimSpace(ref)
	} else {
		for _, b := range []string{"main", "master"} {
			if _, err := git(dir, "rev-parse", "--verify", "--quiet", "refs/heads/"+b); err == nil {
				branch = b
				break
			}
		}
	}
	if branch == "" {
		return "", fmt.Errorf("%s: no default branch (origin/HEAD, main or master): give --base", path)
	}
	base, err := git(dir, "merge-base", "HEAD", branch)
	if err != nil {
		return "", fmt.Errorf("merge base of HEAD and %s: %w", branch, err)
	}
	return strings.TrimSpace(base), nil
}

func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return "", errors.New(msg)
		}
		return "", err
	}
	return string(out), nil
}

// Positions rewrites every position in m with f.
func Positions(m *policy.Model, f func(policy.Pos) policy.Pos) {
	for _, d := range m.Domains {
		d.Pos = f(d.Pos)
		d.Governance.Pos = f(d.Governance.Pos)
		for _, s := range d.Sources {
			s.Pos = f(s.Pos)
		}
		for _, r := range d.Rules {
			r.Pos = f(r.Pos)
			r.Stage.Pos = f(r.Stage.Pos)
			for i := range r.Match {
				r.Match[i].Pos = f(r.Match[i].Pos)
			}
			for i := range r.Limits {
				r.Limits[i].Pos = f(r.Limits[i].Pos)
			}
			for k, p := range r.SettingPos {
				r.SettingPos[k] = f(p)
			}
		}
	}
}

// existingDir returns abs, an absolute path, if it is a directory, else its nearest ancestor
// that is one.
func existingDir(abs string) string {
	for d := abs; ; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			return d
		}
		if filepath.Dir(d) == d {
			return d
		}
	}
}
