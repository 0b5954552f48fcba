package rollout

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-github/v60/github"

	"github.com/rlctl/rlctl/rollout/githubtest"
)

const tiersBefore = "package p\n\nstage: {name: \"shadow\", since: \"2025-06-02\"}\n"

func newFake(t *testing.T) *githubtest.Server {
	t.Helper()
	s := githubtest.New("acme", "policies", "tok-1", map[string]string{
		"policies/tiers.cue": tiersBefore,
		"README.md":          "# policies\n",
	})
	t.Cleanup(s.Close)
	return s
}

func newClient(t *testing.T, s *githubtest.Server, token string) *GitHub {
	t.Helper()
	g, err := NewGitHub(GitHubConfig{Token: token, URL: s.Server.URL, Owner: "acme", Repo: "policies"})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func change(after, comment string) Change {
	return Change{
		Branch:  "rlctl/rollout/edge/developer_pro",
		Title:   "rollout: developer_pro shadow → soft",
		Body:    "body for " + after,
		Message: "rollout: promote developer_pro to soft\n\nEdited by rlctl rollout promote on 2025-06-12.",
		Verb:    "promote",
		Files:   map[string]File{"policies/tiers.cue": {Before: []byte(tiersBefore), After: []byte(after)}},
		Comment: comment,
	}
}

func TestProposeOpensThenUpdates(t *testing.T) {
	s := newFake(t)
	g := newClient(t, s, "tok-1")
	ctx := context.Background()
	after1 := strings.Replace(tiersBefore, "shadow", "soft", 1)
	pr, err := g.Propose(ctx, change(after1, "evidence 1"))
	if err != nil {
		t.Fatal(err)
	}
	if !pr.Created || !pr.Pushed || pr.Number != 1 || pr.Base != "main" {
		t.Fatalf("first run: got %+v, want a new pull request #1 on main, pushed", pr)
	}
	for _, r := range s.Requests() {
		if r.Auth != "Bearer tok-1" {
			t.Errorf("%s %s: Authorization %q, want the token as a bearer token", r.Method, r.Path, r.Auth)
		}
	}
	if got, _ := s.File(pr.Branch, "policies/tiers.cue"); got != after1 {
		t.Errorf("branch content: got %q, want %q", got, after1)
	}
	if got, _ := s.File(pr.Branch, "README.md"); got != "# policies\n" {
		t.Errorf("an untouched file on the branch: got %q", got)
	}
	mainHead, _, _ := s.Head("main")
	if _, parents, msg := s.Head(pr.Branch); len(parents) != 1 || parents[0] != mainHead || !strings.HasPrefix(msg, "rollout: promote developer_pro to soft\n") {
		t.Errorf("branch commit: parents %v message %q, want one parent, main's head %s", parents, msg, mainHead)
	}
	prs := s.PullRequests()
	if len(prs) != 1 || prs[0].Title != "rollout: developer_pro shadow → soft" || prs[0].Head != pr.Branch || prs[0].Body != "body for "+after1 {
		t.Fatalf("pull requests: got %+v", prs)
	}

	// The same change again: nothing moves, nothing is added.
	n := len(s.Requests())
	pr2, err := g.Propose(ctx, change(after1, "evidence 1"))
	if err != nil {
		t.Fatal(err)
	}
	if pr2.Created || pr2.Pushed || pr2.Number != 1 {
		t.Errorf("same change again: got %+v, want #1, neither created nor pushed", pr2)
	}
	for _, r := range s.Requests()[n:] {
		if r.Method != "GET" && !(r.Method == "POST" && strings.HasSuffix(r.Path, "/git/trees")) {
			t.Errorf("same change again wrote: %s %s", r.Method, r.Path)
		}
	}

	// A different edit: the branch is force-updated, the same pull request and comment edited.
	after2 := strings.Replace(after1, "2025-06-02", "2025-06-12", 1)
	pr3, err := g.Propose(ctx, change(after2, "evidence 2"))
	if err != nil {
		t.Fatal(err)
	}
	if pr3.Created || !pr3.Pushed || pr3.Number != 1 {
		t.Errorf("new edit: got %+v, want #1 updated and pushed", pr3)
	}
	if got, _ := s.File(pr.Branch, "policies/tiers.cue"); got != after2 {
		t.Errorf("branch content after update: got %q, want %q", got, after2)
	}
	if prs := s.PullRequests(); len(prs) != 1 || prs[0].Body != "body for "+after2 {
		t.Errorf("pull requests after update: got %+v, want one, body updated", prs)
	}
	cs := s.Comments(1)
	if len(cs) != 1 || cs[0].Body != Marker+"\nevidence 2" {
		t.Errorf("comments: got %+v, want the one marker comment, edited", cs)
	}
	var edits int
	for _, r := range s.Requests() {
		if r.Method == "PATCH" && strings.Contains(r.Path, "/issues/comments/") {
			edits++
		}
	}
	if edits != 1 {
		t.Errorf("comment edits: got %d, want 1", edits)
	}
}

// TestProposeKeepsOthersCommits: a commit that someone else pushed to the rule's branch (a
// reviewer's fix) is not force-pushed away by the next run; it was, and it hid a pending pause
// from the verb check.
func TestProposeKeepsOthersCommits(t *testing.T) {
	s := newFake(t)
	g := newClient(t, s, "tok-1")
	ctx := context.Background()
	after := strings.Replace(tiersBefore, "shadow", "soft", 1)
	pr, err := g.Propose(ctx, change(after, "evidence"))
	if err != nil {
		t.Fatal(err)
	}
	fixed := after + "// a reviewer's fix\n"
	s.SetFile(pr.Branch, "policies/tiers.cue", fixed)
	head, _, _ := s.Head(pr.Branch)
	_, err = g.Propose(ctx, change(strings.Replace(after, "2025-06-02", "2025-06-12", 1), "evidence"))
	if !errors.Is(err, ErrPending) || !strings.Contains(err.Error(), "did not make") {
		t.Errorf("run over someone else's commit: got %v, want ErrPending naming the commit", err)
	}
	if now, _, _ := s.Head(pr.Branch); now != head {
		t.Errorf("the branch moved from %s to %s", head, now)
	}
	// Once its pull request is merged or closed, the branch is rlctl's again, whatever its head
	// (GitHub's "Update branch" merge, say): every later rollout of the rule was refused.
	if _, _, err := g.c.PullRequests.Edit(ctx, "acme", "policies", pr.Number, &github.PullRequest{State: github.String("closed")}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Propose(ctx, change(strings.Replace(after, "2025-06-02", "2025-06-13", 1), "evidence")); err != nil {
		t.Errorf("with the pull request closed: %v, want the branch rewritten", err)
	}
}

// TestProposeVerbRanks: an open abort is replaced by neither a pause nor a promotion (a pause
// replaced it, and the rule stayed enforcing in canary), an open pause not by a promotion; a
// pause is replaced by an abort, and a change by one of its own verb.
func TestProposeVerbRanks(t *testing.T) {
	as := func(verb, after string) Change {
		c := change(after, "evidence")
		c.Verb, c.Message = verb, "rollout: "+verb+"\n\nEdited by rlctl rollout "+verb+" on 2025-06-12."
		return c
	}
	steps := []struct {
		verb    string
		replace bool // whether it replaces the open pull request's change
	}{
		{"pause", true}, // over nothing
		{"promote", false},
		{"resume", false},
		{"pause", true},
		{"abort", true},
		{"pause", false},
		{"promote", false},
		{"abort", true},
	}
	s := newFake(t)
	g := newClient(t, s, "tok-1")
	ctx := context.Background()
	for i, st := range steps {
		after := tiersBefore + fmt.Sprintf("// step %d\n", i)
		_, err := g.Propose(ctx, as(st.verb, after))
		got, _ := s.File("rlctl/rollout/edge/developer_pro", "policies/tiers.cue")
		switch {
		case st.replace && (err != nil || got != after):
			t.Errorf("step %d, %s: %v; want it to replace the branch's change", i, st.verb, err)
		case !st.replace && (!errors.Is(err, ErrPending) || got == after):
			t.Errorf("step %d, %s: %v; want ErrPending, the branch left alone", i, st.verb, err)
		}
	}
}

// TestWithdraw: an abort of a rule in shadow closes its open promotion with a comment, and
// leaves an open pause (which holds the rule in shadow too) with ErrPending; with nothing open,
// nothing happens.
func TestWithdraw(t *testing.T) {
	s := newFake(t)
	g := newClient(t, s, "tok-1")
	ctx := context.Background()
	const branch = "rlctl/rollout/edge/developer_pro"
	if pr, err := g.Withdraw(ctx, branch, "gone"); pr != nil || err != nil {
		t.Fatalf("nothing open: %+v, %v; want nil, nil", pr, err)
	}
	if _, err := g.Propose(ctx, change(strings.Replace(tiersBefore, "shadow", "soft", 1), "evidence")); err != nil {
		t.Fatal(err)
	}
	pr, err := g.Withdraw(ctx, branch, "aborted")
	if err != nil || pr == nil || pr.Number != 1 {
		t.Fatalf("open promotion: %+v, %v; want #1 closed", pr, err)
	}
	if prs := s.PullRequests(); prs[0].State != "closed" {
		t.Errorf("the promotion is %s, want closed", prs[0].State)
	}
	if cs := s.Comments(1); len(cs) != 2 || cs[1].Body != "aborted" {
		t.Errorf("comments: %+v, want the evidence, then the abort's", cs)
	}
	pause := change(tiersBefore+"// held\n", "evidence")
	pause.Verb, pause.Message = "pause", "rollout: pause\n\nEdited by rlctl rollout pause on 2025-06-12."
	if _, err := g.Propose(ctx, pause); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Withdraw(ctx, branch, "aborted"); !errors.Is(err, ErrPending) || !strings.Contains(err.Error(), "holds a pause") {
		t.Errorf("open pause: %v, want ErrPending saying it holds a pause", err)
	}
	if prs := s.PullRequests(); prs[len(prs)-1].State != "open" {
		t.Errorf("the pause is %s, want open", prs[len(prs)-1].State)
	}
}

func TestProposeRefusesStaleBase(t *testing.T) {
	s := newFake(t)
	s.SetFile("main", "policies/tiers.cue", tiersBefore+"// someone else's change\n")
	_, err := newClient(t, s, "tok-1").Propose(context.Background(), change("x", ""))
	if !errors.Is(err, ErrStaleBase) {
		t.Fatalf("got %v, want ErrStaleBase", err)
	}
	if len(s.PullRequests()) != 0 {
		t.Error("a pull request was opened from a stale base")
	}
}

// TestProposeRefusesStaleReadFile: the gates are judged on every policy file, so each must be
// the base branch's, edited or not: a local edit of another file (a shorter dwell, say) would
// have promoted the branch's policy on evidence the pull request does not hold. A policy file
// on the base branch that the checkout lacks is refused too; files the loader skips are not.
func TestProposeRefusesStaleReadFile(t *testing.T) {
	const domain = "package p\n\ngovernance: dwell: shadow: \"7d\"\n"
	ch := func(domainLocal string) Change {
		c := change(strings.Replace(tiersBefore, "shadow", "soft", 1), "")
		c.Files["policies/domain.cue"] = File{Before: []byte(domainLocal), After: []byte(domainLocal)}
		c.PolicyDir = "policies"
		return c
	}
	s := newFake(t)
	s.SetFile("main", "policies/domain.cue", domain)
	g := newClient(t, s, "tok-1")
	_, err := g.Propose(context.Background(), ch(strings.Replace(domain, "7d", "1d", 1)))
	if !errors.Is(err, ErrStaleBase) || !strings.Contains(err.Error(), "policies/domain.cue") {
		t.Fatalf("a read file edited locally: got %v, want ErrStaleBase naming policies/domain.cue", err)
	}
	s.SetFile("main", "policies/limits.cue", "package p\n")
	if _, err := g.Propose(context.Background(), ch(domain)); !errors.Is(err, ErrStaleBase) || !strings.Contains(err.Error(), "policies/limits.cue") {
		t.Fatalf("a base policy file missing locally: got %v, want ErrStaleBase naming policies/limits.cue", err)
	}
	if len(s.PullRequests()) != 0 {
		t.Fatal("a pull request was opened from a stale checkout")
	}
	s = newFake(t)
	s.SetFile("main", "policies/domain.cue", domain)
	for _, p := range []string{"policies/_old.cue", "policies/.hidden.cue", "policies/sub/x.cue", "policies/notes.txt", "other/y.cue"} {
		s.SetFile("main", p, "package p\n")
	}
	pr, err := newClient(t, s, "tok-1").Propose(context.Background(), ch(domain))
	if err != nil {
		t.Fatalf("files the loader skips on the base branch: %v", err)
	}
	if got, _ := s.File(pr.Branch, "policies/domain.cue"); got != domain {
		t.Errorf("a file read and not edited: got %q on the branch, want it as it was", got)
	}
}

// TestProposeInLargeRepository: GitHub cuts a recursive listing of a large repository short, so
// Propose lists only the directories it needs, each on its own. In a repository whose recursive
// listing holds 2 of its entries, a policy directory two levels down is still read whole: its
// file on the base is checked and edited, and a base policy file that the checkout lacks is still
// found.
func TestProposeInLargeRepository(t *testing.T) {
	const dir = "platform/edge/policies"
	files := map[string]string{dir + "/tiers.cue": tiersBefore, "README.md": "# monorepo\n"}
	for i := range 50 {
		files[fmt.Sprintf("services/s%02d/main.go", i)] = "package main\n"
	}
	s := githubtest.New("acme", "policies", "tok-1", files)
	t.Cleanup(s.Close)
	s.SetTreeLimit(2)
	after := strings.Replace(tiersBefore, "shadow", "soft", 1)
	ch := Change{
		Branch: "rlctl/rollout/edge/developer_pro", Title: "t", Body: "b", PolicyDir: dir,
		Message: "m\n\nEdited by rlctl rollout promote on 2025-06-12.", Verb: "promote",
		Files: map[string]File{
			dir + "/tiers.cue": {Before: []byte(tiersBefore), After: []byte(after)},
		},
	}
	g := newClient(t, s, "tok-1")
	pr, err := g.Propose(context.Background(), ch)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := s.File(pr.Branch, dir+"/tiers.cue"); got != after {
		t.Errorf("edited file on the branch: got %q, want %q", got, after)
	}
	if got, _ := s.File(pr.Branch, "services/s49/main.go"); got != "package main\n" {
		t.Errorf("an untouched file outside the policies: got %q", got)
	}

	s.SetFile("main", dir+"/limits.cue", "package p\n")
	if _, err := g.Propose(context.Background(), ch); !errors.Is(err, ErrStaleBase) || !strings.Contains(err.Error(), dir+"/limits.cue") {
		t.Fatalf("a base policy file missing locally: got %v, want ErrStaleBase naming %s/limits.cue", err, dir)
	}
	s.SetFile("main", dir+"/tiers.cue", tiersBefore+"// someone else's change\n")
	ch.PolicyDir = ""
	if _, err := g.Propose(context.Background(), ch); !errors.Is(err, ErrStaleBase) || !strings.Contains(err.Error(), dir+"/tiers.cue") {
		t.Fatalf("an edited file changed on the base: got %v, want ErrStaleBase naming %s/tiers.cue", err, dir)
	}
}

// TestProposeOwnerInAnyCase: --repo ACME/Policies names acme/policies (GitHub matches names in
// any case), and the second run still finds the pull request the first opened, whose head
// GitHub files under the owner's login as it spells it.
func TestProposeOwnerInAnyCase(t *testing.T) {
	s := newFake(t)
	g, err := NewGitHub(GitHubConfig{Token: "tok-1", URL: s.Server.URL, Owner: "ACME", Repo: "Policies"})
	if err != nil {
		t.Fatal(err)
	}
	after := strings.Replace(tiersBefore, "shadow", "soft", 1)
	first, err := g.Propose(context.Background(), change(after, ""))
	if err != nil {
		t.Fatal(err)
	}
	second, err := g.Propose(context.Background(), change(after+"// again\n", ""))
	if err != nil {
		t.Fatalf("second run: %v", err)
	}
	if second.Created || second.Number != first.Number || len(s.PullRequests()) != 1 {
		t.Fatalf("second run: got %+v and %d pull requests, want #%d updated", second, len(s.PullRequests()), first.Number)
	}
}

func TestProposeErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		token string
		repo  string
		fail  *githubtest.Failure
		want  error
		msg   string
	}{
		{name: "bad token", token: "wrong", want: ErrBadToken, msg: "GITHUB_TOKEN"},
		{name: "missing repository", token: "tok-1", repo: "nope", want: ErrNoRepository, msg: "acme/nope does not exist"},
		{name: "rate limit 403", token: "tok-1", want: ErrRateLimited, msg: "resets at 2030-01-01T00:00:00Z",
			fail: &githubtest.Failure{Status: 403, Message: "API rate limit exceeded", Header: map[string]string{
				"X-RateLimit-Limit": "5000", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1893456000"}}},
		{name: "secondary rate limit", token: "tok-1", want: ErrRateLimited, msg: "run again in 1m0s",
			fail: &githubtest.Failure{Status: 403, Message: "You have exceeded a secondary rate limit",
				DocURL: "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits",
				Header: map[string]string{"Retry-After": "60"}}},
		{name: "rate limit 429", token: "tok-1", want: ErrRateLimited, msg: "run again in 30s",
			fail: &githubtest.Failure{Status: 429, Message: "Too Many Requests", Header: map[string]string{"Retry-After": "30"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newFake(t)
			s.FailNext(tc.fail)
			repo := cmpOr(tc.repo, "policies")
			g, err := NewGitHub(GitHubConfig{Token: tc.token, URL: s.Server.URL, Owner: "acme", Repo: repo})
			if err != nil {
				t.Fatal(err)
			}
			_, err = g.Propose(context.Background(), change("x", ""))
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %v, want %v saying %q", err, tc.want, tc.msg)
			}
		})
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func TestCommentSplitsAndShrinks(t *testing.T) {
	s := newFake(t)
	g := newClient(t, s, "tok-1")
	ctx := context.Background()
	if _, err := g.Propose(ctx, change("y", "small")); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for i, runes := 0, 0; runes < 150000; i++ {
		line := fmt.Sprintf("| row %d | %s |\n", i, strings.Repeat("é", 40))
		b.WriteString(line)
		runes += len([]rune(line))
	}
	if err := g.Comment(ctx, 1, b.String()); err != nil {
		t.Fatal(err)
	}
	cs := s.Comments(1)
	if len(cs) != 3 {
		t.Fatalf("a body of 150,000 characters: got %d comments, want 3", len(cs))
	}
	var joined string
	for i, c := range cs {
		if n := len([]rune(c.Body)); n > MaxComment {
			t.Errorf("part %d: %d characters, over %d", i+1, n, MaxComment)
		}
		if i > 0 && !strings.HasPrefix(c.Body, PartMarker(i+1)+"\n<details>") {
			t.Errorf("part %d does not open with its marker and a folded block: %.60q", i+1, c.Body)
		}
		body := c.Body[strings.IndexByte(c.Body, '\n')+1:]
		if i > 0 {
			body = strings.TrimPrefix(body, fmt.Sprintf("<details><summary>Continued (part %d)</summary>\n\n", i+1))
			body = body[:strings.LastIndex(body, "\n\n</details>")]
		}
		joined += strings.TrimSuffix(body, "\n\n_Continued in the next comment._\n")
	}
	if joined != b.String() {
		t.Error("the parts do not join up to the body")
	}
	if err := g.Comment(ctx, 1, "short again"); err != nil {
		t.Fatal(err)
	}
	if cs2 := s.Comments(1); len(cs2) != 1 || cs2[0].ID != cs[0].ID || cs2[0].Body != Marker+"\nshort again" {
		t.Errorf("shrunk: got %+v, want the first comment edited and the parts deleted", cs2)
	}
}

func TestRepoFromRemote(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"https://example.com/acme/policies.git", "acme/policies"},
		{"https://example.com/acme/policies", "acme/policies"},
		{"https://user:pw@ghe.example.com/scm/acme/policies.git\n", "acme/policies"},
		{"git@example.com:acme/policies.git", "acme/policies"},
		{"ssh://git@example.com:2222/acme/policies.git", "acme/policies"},
		{"/srv/git/policies.git", "error"},
		{"https://example.com/policies", "error"},
	} {
		o, n, err := RepoFromRemote(tc.in)
		got := o + "/" + n
		if err != nil {
			got = "error"
		}
		if got != tc.want {
			t.Errorf("RepoFromRemote(%q): got %s, want %s", tc.in, got, tc.want)
		}
	}
}

// TestRepoFromRemoteHidesCredentials: a remote URL that does not name a repository is quoted in
// the error without the token a CI checkout puts in it.
func TestRepoFromRemoteHidesCredentials(t *testing.T) {
	for _, remote := range []string{"https://x-access-token:ghs_SECRET@github.example/", "https://ghp_SECRET@github.example/",
		"https://x-access-token:ghs_SECRET@github.com:abc/", "https://ghs_SECRET@github.example/%zz"} {
		_, _, err := RepoFromRemote(remote)
		if err == nil || strings.Contains(err.Error(), "SECRET") {
			t.Errorf("RepoFromRemote(%q): got %v, want an error without the token", remote, err)
		}
	}
}
