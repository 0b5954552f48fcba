package rollout

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os/exec"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-github/v60/github"
)

// The errors of the pull-request flow that users must act on. Every error GitHub returns is
// wrapped in one of these when it is one of them, with a message that says what to do.
var (
	// ErrBadToken means GitHub refused the token (401).
	ErrBadToken = errors.New("GitHub refused the token")
	// ErrNoRepository means the repository does not exist or the token cannot see it (404).
	ErrNoRepository = errors.New("repository not found")
	// ErrRateLimited means GitHub's primary or secondary rate limit stopped the flow (403 or
	// 429 with rate-limit headers).
	ErrRateLimited = errors.New("GitHub rate limit")
	// ErrStaleBase means the local policy files are not those of the base branch's head.
	ErrStaleBase = errors.New("local files differ from the base branch")
	// ErrPending means the rule's branch holds what the change must not replace: an open pull
	// request of a verb that outranks the change's (verbRank: an abort is not replaced by a
	// pause, nor either by a promotion or a resume), or a commit rlctl rollout did not make.
	ErrPending = errors.New("a pending change on the rule's rollout branch")
)

// GitHubConfig says which repository the pull-request flow works on, and how to reach it.
type GitHubConfig struct {
	// Token is sent as a bearer token (GITHUB_TOKEN).
	Token string
	// URL is a GitHub Enterprise Server's address (its /api/v3/ is added when missing); empty
	// means github's public API.
	URL string
	// Owner and Repo name the repository.
	Owner, Repo string
	// HTTPClient, when set, carries the requests (tests).
	HTTPClient *http.Client
}

// GitHub runs the pull-request flow on one repository. It is safe for sequential use only.
type GitHub struct {
	c           *github.Client
	owner, repo string
}

// NewGitHub returns a client for cfg's repository.
func NewGitHub(cfg GitHubConfig) (*GitHub, error) {
	if cfg.Owner == "" || cfg.Repo == "" {
		return nil, errors.New("no repository: give --repo OWNER/NAME")
	}
	if cfg.Token == "" {
		return nil, errors.New("no token: set GITHUB_TOKEN")
	}
	c := github.NewClient(cfg.HTTPClient).WithAuthToken(cfg.Token)
	if cfg.URL != "" {
		var err error
		if c, err = c.WithEnterpriseURLs(cfg.URL, cfg.URL); err != nil {
			return nil, fmt.Errorf("--github-url %s: %w", cfg.URL, err)
		}
	}
	return &GitHub{c: c, owner: cfg.Owner, repo: cfg.Repo}, nil
}

// ParseRepo parses OWNER/NAME.
func ParseRepo(s string) (owner, name string, err error) {
	owner, name, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok || owner == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("repository %q: want OWNER/NAME", s)
	}
	return owner, strings.TrimSuffix(name, ".git"), nil
}

// RepoFromRemote returns OWNER/NAME from a Git remote URL in the https form
// (https://HOST/OWNER/NAME.git), the ssh URL form (ssh://git@HOST[:PORT]/OWNER/NAME.git) or the scp
// form (git@HOST:OWNER/NAME.git). Enterprise hosts that serve repositories under a path prefix
// keep their last two segments.
func RepoFromRemote(remote string) (owner, name string, err error) {
	r := strings.TrimSpace(remote)
	remote = redactRemote(r) // errors quote it: without the credentials a URL may carry
	var path string
	if strings.Contains(r, "://") {
		u, err := url.Parse(r)
		if err != nil {
			// Not url.Parse's error, which quotes the URL whole, credentials and all.
			return "", "", fmt.Errorf("remote URL %q: not a URL", remote)
		}
		path = u.Path
	} else if _, p, ok := strings.Cut(r, ":"); ok && !strings.HasPrefix(r, "/") {
		path = p
	} else {
		return "", "", fmt.Errorf("remote URL %q: not an https or ssh URL", remote)
	}
	segs := strings.Split(strings.Trim(path, "/"), "/")
	if len(segs) < 2 || segs[len(segs)-2] == "" || segs[len(segs)-1] == "" {
		return "", "", fmt.Errorf("remote URL %q: no OWNER/NAME in it", remote)
	}
	return segs[len(segs)-2], strings.TrimSuffix(segs[len(segs)-1], ".git"), nil
}

// redactRemote is a remote URL without the password or token of its user part
// (https://x-access-token:TOKEN@HOST/...), which CI checkouts put there.
func redactRemote(r string) string {
	u, err := url.Parse(r)
	if err != nil {
		return userPart.ReplaceAllString(r, "${1}xxxxx@")
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		} else if strings.Contains(u.Scheme, "http") {
			u.User = url.User("xxxxx") // a token alone, as the user
		}
		return u.String()
	}
	return r
}

// userPart is the user part of a URL that url.Parse refuses.
var userPart = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@`)

// OriginRepo returns OWNER/NAME of the origin remote of the Git repository around dir.
func OriginRepo(dir string) (owner, name string, err error) {
	out, err := exec.Command("git", "-C", dir, "remote", "get-url", "origin").Output()
	if err != nil {
		return "", "", fmt.Errorf("no --repo, no GITHUB_REPOSITORY and no origin remote in %s", dir)
	}
	return RepoFromRemote(string(out))
}

// Change is one pull request's content.
type Change struct {
	// Branch is the head branch, created from the base branch's head and force-updated on a
	// re-run.
	Branch string
	// Title and Body are the pull request's.
	Title, Body string
	// Message is the commit message. Verb is the rollout command that made the change
	// (promote, abort, pause or resume): it ends the message ("Edited by rlctl rollout VERB"),
	// and a change does not replace an open pull request whose commit a verb of a higher rank
	// made (verbRank, ErrPending).
	Message string
	Verb    string
	// Files are the policy files the change was judged on, by repository-relative slash path:
	// the edited ones, and those read but left as they were (Before equal to After). Every one
	// must be the base branch's (ErrStaleBase otherwise): gates judged on a local edit that
	// the pull request does not hold would promote the branch's policy on other evidence.
	Files map[string]File
	// PolicyDir is the policy directory, a repository-relative slash path ("." for the top),
	// when the policy is a directory: a policy file the base branch has there that Files lacks
	// is ErrStaleBase too. Empty for a policy given as files.
	PolicyDir string
	// Comment is the marker comment's body, kept as one comment per pull request (split when
	// longer than GitHub allows); empty leaves comments alone.
	Comment string
}

// File is one policy file: its content before the edit (which must be the base branch's) and
// after, the same for a file the change reads and does not edit.
type File struct {
	Before, After []byte
}

// PullRequest is what Propose did.
type PullRequest struct {
	Number  int    `json:"number"`
	URL     string `json:"url"`
	Branch  string `json:"branch"`
	Base    string `json:"base"`
	Commit  string `json:"commit"`
	Created bool   `json:"created"` // a new pull request, not an update of the open one
	Pushed  bool   `json:"pushed"`  // the branch moved (its content changed)
}

// Propose commits ch.Files on ch.Branch, from the head of the repository's default branch,
// through the Git Data API (blobs, trees, commits, refs: no push credentials), and opens the pull
// request, or updates the open one whose head is ch.Branch. A branch whose content is already
// ch.Files on the current base is left as it is. Each file's Before must be the base branch's
// content (ErrStaleBase otherwise), so a stale checkout never reverts someone's change.
func (g *GitHub) Propose(ctx context.Context, ch Change) (*PullRequest, error) {
	if v := verbOf(ch.Message); v == "" || v != ch.Verb {
		// How later runs tell rlctl's commits, and their verbs, from others'.
		return nil, fmt.Errorf("rollout: the commit message must end \"Edited by rlctl rollout %s\", got %q", ch.Verb, ch.Message)
	}
	base, owner, err := g.repository(ctx)
	if err != nil {
		return nil, err
	}
	baseRef, _, err := g.c.Git.GetRef(ctx, g.owner, g.repo, "heads/"+base)
	if err != nil {
		return nil, g.explain(fmt.Errorf("base branch %s: %w", base, err))
	}
	baseSHA := baseRef.GetObject().GetSHA()
	baseCommit, _, err := g.c.Git.GetCommit(ctx, g.owner, g.repo, baseSHA)
	if err != nil {
		return nil, g.explain(err)
	}
	rootTree := baseCommit.GetTree().GetSHA()
	dirs := make([]string, 0, len(ch.Files)+1)
	paths := make([]string, 0, len(ch.Files))
	for p := range ch.Files {
		paths = append(paths, p)
		dirs = append(dirs, path.Dir(p))
	}
	sort.Strings(paths)
	if ch.PolicyDir != "" {
		dirs = append(dirs, ch.PolicyDir)
	}
	baseFiles, err := g.filesIn(ctx, rootTree, dirs)
	if err != nil {
		return nil, g.explain(err)
	}
	if ch.PolicyDir != "" {
		for _, p := range slices.Sorted(maps.Keys(baseFiles)) {
			if _, read := ch.Files[p]; !read && isPolicyFile(ch.PolicyDir, p) {
				return nil, fmt.Errorf("%s: %w %s at %.12s, which has this policy file: check it out, then run again", p, ErrStaleBase, base, baseSHA)
			}
		}
	}
	var entries []*github.TreeEntry
	for _, p := range paths {
		f := ch.Files[p]
		if got, want := baseFiles[p].GetSHA(), BlobSHA(f.Before); got != want {
			return nil, fmt.Errorf("%s: %w %s at %.12s: check it out, then run again", p, ErrStaleBase, base, baseSHA)
		}
		if bytes.Equal(f.Before, f.After) {
			continue // read, not edited
		}
		mode := baseFiles[p].GetMode()
		if mode == "" {
			mode = "100644"
		}
		entries = append(entries, &github.TreeEntry{Path: github.String(p), Mode: github.String(mode),
			Type: github.String("blob"), Content: github.String(string(f.After))})
	}
	tree, _, err := g.c.Git.CreateTree(ctx, g.owner, g.repo, rootTree, entries)
	if err != nil {
		return nil, g.explain(err)
	}

	pr := &PullRequest{Branch: ch.Branch, Base: base}
	ref := "heads/" + ch.Branch
	head, _, err := g.c.Git.GetRef(ctx, g.owner, g.repo, ref)
	exists := err == nil
	if err != nil && !isStatus(err, http.StatusNotFound) {
		return nil, g.explain(err)
	}
	upToDate := false
	if exists {
		c, _, err := g.c.Git.GetCommit(ctx, g.owner, g.repo, head.GetObject().GetSHA())
		if err != nil {
			return nil, g.explain(err)
		}
		// The branch is rlctl's to rewrite only while every commit on it is rlctl's own: a
		// reviewer's fix pushed there was force-pushed away, and it hid a pending pause from
		// the check below.
		// While its pull request is open, the branch is rlctl's to rewrite only when every
		// commit on it is rlctl's own: a reviewer's fix pushed there was force-pushed away, and
		// it hid a pending pause from the rank check. A branch whose pull request was merged
		// or closed is rlctl's again, whatever its head (an "Update branch" merge, say).
		v := verbOf(c.GetMessage())
		if v == "" || verbRank(v) > verbRank(ch.Verb) {
			open, _, err := g.c.PullRequests.List(ctx, g.owner, g.repo, &github.PullRequestListOptions{
				State: "open", Head: owner + ":" + ch.Branch, Base: base,
			})
			if err != nil {
				return nil, g.explain(err)
			}
			switch {
			case len(open) == 0:
			case v == "":
				return nil, fmt.Errorf("%w: branch %s of the open #%d has a commit that rlctl rollout did not make (%.12s %q): merge or close the pull request, then run again",
					ErrPending, ch.Branch, open[0].GetNumber(), c.GetSHA(), firstLine(c.GetMessage()))
			default:
				return nil, fmt.Errorf("%w: #%d (%s, on branch %s) is an open %s, which a %s does not replace: merge or close it first",
					ErrPending, open[0].GetNumber(), open[0].GetTitle(), ch.Branch, v, ch.Verb)
			}
		}
		upToDate = c.GetTree().GetSHA() == tree.GetSHA() && len(c.Parents) == 1 && c.Parents[0].GetSHA() == baseSHA
		pr.Commit = c.GetSHA()
	}
	if !upToDate {
		c, _, err := g.c.Git.CreateCommit(ctx, g.owner, g.repo, &github.Commit{
			Message: github.String(ch.Message),
			Tree:    &github.Tree{SHA: tree.SHA},
			Parents: []*github.Commit{{SHA: github.String(baseSHA)}},
		}, nil)
		if err != nil {
			return nil, g.explain(err)
		}
		newRef := &github.Reference{Ref: github.String("refs/" + ref), Object: &github.GitObject{SHA: c.SHA}}
		if exists {
			_, _, err = g.c.Git.UpdateRef(ctx, g.owner, g.repo, newRef, true)
		} else {
			_, _, err = g.c.Git.CreateRef(ctx, g.owner, g.repo, newRef)
		}
		if err != nil {
			return nil, g.explain(fmt.Errorf("branch %s: %w", ch.Branch, err))
		}
		pr.Commit, pr.Pushed = c.GetSHA(), true
	}

	open, _, err := g.c.PullRequests.List(ctx, g.owner, g.repo, &github.PullRequestListOptions{
		State: "open", Head: owner + ":" + ch.Branch, Base: base,
	})
	if err != nil {
		return nil, g.explain(err)
	}
	var p *github.PullRequest
	if len(open) > 0 {
		p = open[0]
		if p.GetTitle() != ch.Title || p.GetBody() != ch.Body {
			if p, _, err = g.c.PullRequests.Edit(ctx, g.owner, g.repo, p.GetNumber(),
				&github.PullRequest{Title: github.String(ch.Title), Body: github.String(ch.Body)}); err != nil {
				return nil, g.explain(err)
			}
		}
	} else {
		if p, _, err = g.c.PullRequests.Create(ctx, g.owner, g.repo, &github.NewPullRequest{
			Title: github.String(ch.Title), Head: github.String(ch.Branch), Base: github.String(base),
			Body: github.String(ch.Body), MaintainerCanModify: github.Bool(true),
		}); err != nil {
			return nil, g.explain(err)
		}
		pr.Created = true
	}
	pr.Number, pr.URL = p.GetNumber(), p.GetHTMLURL()
	if ch.Comment != "" {
		if err := g.Comment(ctx, pr.Number, ch.Comment); err != nil {
			return pr, err
		}
	}
	return pr, nil
}

// BlobSHA is the Git object ID of a blob holding b, as GitHub's trees list it.
func BlobSHA(b []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

func isStatus(err error, code int) bool {
	var er *github.ErrorResponse
	return errors.As(err, &er) && er.Response != nil && er.Response.StatusCode == code
}

// explain wraps err in ErrBadToken, ErrNoRepository or ErrRateLimited, with a message that says
// what to do, when it is one of those.
func (g *GitHub) explain(err error) error {
	var rl *github.RateLimitError
	var abuse *github.AbuseRateLimitError
	var er *github.ErrorResponse
	switch {
	case errors.As(err, &rl):
		return fmt.Errorf("%w: %d of %d requests an hour used; it resets at %s: run again then (%v)",
			ErrRateLimited, rl.Rate.Limit-rl.Rate.Remaining, rl.Rate.Limit, rl.Rate.Reset.UTC().Format(time.RFC3339), err)
	case errors.As(err, &abuse):
		wait := "later"
		if abuse.RetryAfter != nil {
			wait = "in " + abuse.RetryAfter.String()
		}
		return fmt.Errorf("%w: secondary rate limit (%s): run again %s", ErrRateLimited, abuse.Message, wait)
	case errors.As(err, &er) && er.Response != nil:
		switch er.Response.StatusCode {
		case http.StatusUnauthorized:
			return fmt.Errorf("%w (401 %s): set GITHUB_TOKEN to a valid token with contents and pull-requests write access",
				ErrBadToken, er.Message)
		case http.StatusNotFound:
			if strings.HasSuffix(strings.TrimSuffix(er.Response.Request.URL.Path, "/"), "/repos/"+g.owner+"/"+g.repo) {
				return fmt.Errorf("%w: %s/%s does not exist, or the token cannot see it (404)", ErrNoRepository, g.owner, g.repo)
			}
		case http.StatusTooManyRequests:
			wait := "later"
			if s := er.Response.Header.Get("Retry-After"); s != "" {
				wait = "in " + s + "s"
			} else if s := er.Response.Header.Get("X-RateLimit-Reset"); s != "" {
				if sec, perr := strconv.ParseInt(s, 10, 64); perr == nil {
					wait = "after " + time.Unix(sec, 0).UTC().Format(time.RFC3339)
				}
			}
			return fmt.Errorf("%w (429 %s): run again %s", ErrRateLimited, er.Message, wait)
		case http.StatusForbidden:
			return fmt.Errorf("GitHub refused the request (403 %s): the token needs contents and pull-requests write access", er.Message)
		}
	}
	return fmt.Errorf("github: %w", err)
}

// isPolicyFile reports whether p, a repository path, is a file of the policy directory dir that
// schema.Load reads: a .cue file directly in dir whose name does not start with '.' or '_'.
// filesIn returns the files (blobs, by path) directly in each of dirs in the tree root. It lists
// each directory on its own, walking down from root, because GitHub cuts a recursive listing of a
// large repository short (at 100,000 entries or 7 MB) and a file missed there would read as
// absent. A directory that does not exist has no files.
func (g *GitHub) filesIn(ctx context.Context, root string, dirs []string) (map[string]*github.TreeEntry, error) {
	listed := map[string][]*github.TreeEntry{} // tree SHA -> its entries
	list := func(sha, dir string) ([]*github.TreeEntry, error) {
		if es, ok := listed[sha]; ok {
			return es, nil
		}
		t, _, err := g.c.Git.GetTree(ctx, g.owner, g.repo, sha, false)
		if err != nil {
			return nil, err
		}
		if t.GetTruncated() {
			return nil, fmt.Errorf("directory %s: GitHub listed it only in part (truncated)", dir)
		}
		listed[sha] = t.Entries
		return t.Entries, nil
	}
	files := map[string]*github.TreeEntry{}
	done := map[string]bool{}
	for _, dir := range dirs {
		dir = path.Clean(dir)
		if done[dir] {
			continue
		}
		done[dir] = true
		sha, at := root, "."
		if dir != "." {
			for _, name := range strings.Split(dir, "/") {
				entries, err := list(sha, at)
				if err != nil {
					return nil, err
				}
				sha = ""
				for _, e := range entries {
					if e.GetPath() == name && e.GetType() == "tree" {
						sha = e.GetSHA()
					}
				}
				if sha == "" {
					break
				}
				at = path.Join(at, name)
			}
		}
		if sha == "" {
			continue
		}
		entries, err := list(sha, dir)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if e.GetType() == "blob" {
				files[path.Join(dir, e.GetPath())] = e
			}
		}
	}
	return files, nil
}

func isPolicyFile(dir, p string) bool {
	if dir != "." {
		rest, ok := strings.CutPrefix(p, dir+"/")
		if !ok {
			return false
		}
		p = rest
	}
	return !strings.Contains(p, "/") && path.Ext(p) == ".cue" && !strings.HasPrefix(p, ".") && !strings.HasPrefix(p, "_")
}

// Withdraw closes the open pull request on the rule's branch (rlctl rollout abort of a rule
// that is in shadow already, whose promotion is still open: merged, it would have advanced the
// rule), with a comment that says why. It closes only a promotion or a resume that rlctl made:
// another change (a pause, or a branch holding someone else's commit) is ErrPending, and left.
// It returns the pull request closed, or nil when none was open. The branch is left as it is.
func (g *GitHub) Withdraw(ctx context.Context, branch, comment string) (*PullRequest, error) {
	base, owner, err := g.repository(ctx)
	if err != nil {
		return nil, err
	}
	open, _, err := g.c.PullRequests.List(ctx, g.owner, g.repo, &github.PullRequestListOptions{
		State: "open", Head: owner + ":" + branch, Base: base,
	})
	if err != nil {
		return nil, g.explain(err)
	}
	if len(open) == 0 {
		return nil, nil
	}
	p := open[0]
	head, _, err := g.c.Git.GetRef(ctx, g.owner, g.repo, "heads/"+branch)
	if err != nil {
		return nil, g.explain(err)
	}
	c, _, err := g.c.Git.GetCommit(ctx, g.owner, g.repo, head.GetObject().GetSHA())
	if err != nil {
		return nil, g.explain(err)
	}
	if v := verbOf(c.GetMessage()); v == "" || verbRank(v) > 1 {
		what := "a commit rlctl rollout did not make"
		if v != "" {
			what = "a " + v
		}
		return nil, fmt.Errorf("%w: #%d (%s) holds %s, which an abort of a rule in shadow leaves as it is", ErrPending, p.GetNumber(), p.GetTitle(), what)
	}
	if _, _, err := g.c.Issues.CreateComment(ctx, g.owner, g.repo, p.GetNumber(), &github.IssueComment{Body: github.String(comment)}); err != nil {
		return nil, g.explain(err)
	}
	if p, _, err = g.c.PullRequests.Edit(ctx, g.owner, g.repo, p.GetNumber(), &github.PullRequest{State: github.String("closed")}); err != nil {
		return nil, g.explain(err)
	}
	return &PullRequest{Number: p.GetNumber(), URL: p.GetHTMLURL(), Branch: branch, Base: base}, nil
}

// repository returns the repository's default branch, and its owner's login as GitHub spells
// it, by which a pull request's head is filtered (--repo is matched in any case).
func (g *GitHub) repository(ctx context.Context) (base, owner string, err error) {
	repo, _, err := g.c.Repositories.Get(ctx, g.owner, g.repo)
	if err != nil {
		return "", "", g.explain(err)
	}
	owner = repo.GetOwner().GetLogin()
	if owner == "" {
		owner = g.owner
	}
	return repo.GetDefaultBranch(), owner, nil
}

// verbRank orders the rollout verbs by what an open pull request of one must not lose to
// another: an abort (back to shadow) over a pause, a pause over a promotion or a resume. A
// change replaces an open pull request of its own rank or a lower one.
func verbRank(verb string) int {
	switch verb {
	case "abort":
		return 3
	case "pause":
		return 2
	default:
		return 1
	}
}

// firstLine is msg's first line.
func firstLine(msg string) string {
	line, _, _ := strings.Cut(msg, "\n")
	return line
}

// verbOf returns the rollout command named by a commit message that Propose wrote ("Edited by
// rlctl rollout VERB ..."), or "".
func verbOf(msg string) string {
	_, rest, ok := strings.Cut(msg, "Edited by rlctl rollout ")
	if !ok {
		return ""
	}
	verb, _, _ := strings.Cut(rest, " ")
	return verb
}
