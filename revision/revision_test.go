package revision

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlctl/rlctl/policy"
)

// repo makes a Git repository with the example policies committed on main under p/, then
// tightens shopify_payments in the working tree.
func repo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	run("init", "-q", "-b", "main")
	if err := os.MkdirAll(filepath.Join(dir, "p", "tests"), 0o755); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("../policies/*.cue")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "p", filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run("add", ".")
	run("commit", "-q", "-m", "policies")
	run("checkout", "-q", "-b", "change")
	tenants := filepath.Join(dir, "p", "tenants.cue")
	b, _ := os.ReadFile(tenants)
	b = []byte(strings.Replace(string(b), `requests: 200, window: "1s"`, `requests: 150, window: "1s"`, 1))
	if err := os.WriteFile(tenants, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestLoad(t *testing.T) {
	dir := repo(t)
	t.Chdir(dir)
	for _, tc := range []struct {
		rev  string
		want int64
	}{{WorkingTree, 150}, {"HEAD", 200}, {"main", 200}} {
		m, err := Load(tc.rev, "p")
		if err != nil {
			t.Fatalf("Load(%q): %v", tc.rev, err)
		}
		r := m.Domains[0].Rules
		var found bool
		for _, x := range r {
			if x.Name != "shopify_payments" {
				continue
			}
			found = true
			if got := x.Limits[0].Requests; got != tc.want {
				t.Errorf("Load(%q): requests: got %d, want %d", tc.rev, got, tc.want)
			}
			if got, want := x.Pos.File, filepath.Join("p", "tenants.cue"); got != want {
				t.Errorf("Load(%q): position: got %s, want %s", tc.rev, got, want)
			}
		}
		if !found {
			t.Errorf("Load(%q): no shopify_payments", tc.rev)
		}
	}
	if _, err := Load("no-such-branch", "p"); err == nil || !strings.Contains(err.Error(), "no-such-branch") {
		t.Errorf("unknown revision: got %v, want an error naming it", err)
	}
	// A path in neither the working tree nor the revision is no policy there, as one added
	// since is (diff says when a path is nowhere at all).
	if m, err := Load("HEAD", "missing"); err != nil || len(m.Domains) != 0 {
		t.Errorf("missing directory at HEAD: got %v, %v; want an empty policy", m, err)
	}
}

// TestLoadThroughSymlink: a base revision loads when the working directory is reached through
// a symbolic link, whose path Git's top of the work tree does not share.
func TestLoadThroughSymlink(t *testing.T) {
	dir := repo(t)
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Skip(err)
	}
	t.Chdir(link)
	for _, path := range []string{"p", filepath.Join(link, "p")} {
		if _, err := Load("main", path); err != nil {
			t.Errorf("Load(main, %s) through %s: %v", path, link, err)
		}
	}
}

// TestLoadAddedSince: a policy directory that does not exist at the base revision (the pull
// request that adds it) loads as an empty policy there, so that everything in it is added; a
// revision that does not exist is still an error.
func TestLoadAddedSince(t *testing.T) {
	dir := repo(t)
	t.Chdir(dir)
	if err := os.MkdirAll("q", 0o755); err != nil {
		t.Fatal(err)
	}
	m, err := Load("main", "q")
	if err != nil || len(m.Domains) != 0 {
		t.Errorf("Load(main, q), q added since main: got %v, %v; want an empty policy", m, err)
	}
	if _, err := Load("no-such-branch", "p"); err == nil {
		t.Error("Load(no-such-branch, p): no error")
	}
}

func TestDefaultBase(t *testing.T) {
	dir := repo(t)
	base, err := DefaultBase(filepath.Join(dir, "p"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("git", "-C", dir, "rev-parse", "main").Output()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := base, strings.TrimSpace(string(out)); got != want {
		t.Errorf("DefaultBase: got %s, want main's head %s", got, want)
	}
	if _, err := DefaultBase(t.TempDir()); !errors.Is(err, ErrNotARepository) {
		t.Errorf("outside a repository: got %v, want ErrNotARepository", err)
	}
}

// TestLoadMissingInWorkingTree: the base of a change that deletes the policy directory loads
// from the repository around it (Git ran in the missing directory, and the error said "not
// inside a Git repository"), and so does the default base; a directory that holds no policy
// file at the revision is no policy there, as a missing one is.
func TestLoadMissingInWorkingTree(t *testing.T) {
	dir := repo(t)
	t.Chdir(dir)
	if err := os.RemoveAll("p"); err != nil {
		t.Fatal(err)
	}
	m, err := Load("main", "p")
	if err != nil || len(m.Domains) == 0 {
		t.Fatalf("Load(main, p) with p deleted: %v, %v; want main's policy", m, err)
	}
	if _, err := DefaultBase("p"); err != nil {
		t.Errorf("DefaultBase(p) with p deleted: %v", err)
	}
	if err := os.MkdirAll("q", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("q", "README.md"), []byte("later\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"add", "q"}, {"-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "q"}} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	if m, err := Load("HEAD", "q"); err != nil || len(m.Domains) != 0 {
		t.Errorf("Load(HEAD, q) of a directory without policy files: %v, %v; want an empty policy", m, err)
	}
}

// TestPositionsReachSettings: every position of a model is rewritten, those of a rule's settings
// too (Rule.SettingPos); a base revision's were left naming the deleted temporary checkout.
func TestPositionsReachSettings(t *testing.T) {
	tmp := policy.Pos{File: "/tmp/rlctl-rev-1/0/p.cue", Line: 9, Col: 3}
	r := &policy.Rule{Name: "r", Pos: tmp, SettingPos: map[string]policy.Pos{policy.SettingStoreTimeout: tmp}}
	m := &policy.Model{Domains: []*policy.Domain{{Name: "d", Pos: tmp, Rules: []*policy.Rule{r}}}}
	Positions(m, func(p policy.Pos) policy.Pos { p.File = "p/p.cue"; return p })
	if got := r.PosOf(policy.SettingStoreTimeout).File; got != "p/p.cue" {
		t.Errorf("store_timeout's position names %q, want p/p.cue", got)
	}
}

// TestLoadRefusesOptionLikeRevisions: a revision that starts with '-' is refused before git
// runs, which would read it as an option: --base=--output=FILE made git archive write FILE.
func TestLoadRefusesOptionLikeRevisions(t *testing.T) {
	out := filepath.Join(t.TempDir(), "pwn.tar")
	_, err := Load("--output="+out, ".")
	if err == nil || !strings.Contains(err.Error(), "does not start with '-'") {
		t.Errorf("Load(--output=...): got %v, want the revision refused", err)
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("git wrote %s", out)
	}
}
