// Package githubtest is an in-process GitHub REST API for tests of the pull-request flow: one
// repository held in memory (blobs, trees, commits, refs, pull requests and issue comments),
// answering the endpoints rollout uses with the response bodies GitHub documents, under the
// Enterprise prefix /api/v3/. It records every request so tests can check what was sent.
package githubtest

import (
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Request is one request the server received.
type Request struct {
	Method, Path, Auth string
	Body               string
}

// PullRequest is a pull request as the server holds it.
type PullRequest struct {
	Number      int
	Title, Body string
	Head, Base  string
	State       string
}

// Comment is an issue comment as the server holds it.
type Comment struct {
	ID     int64
	Number int
	Body   string
}

type treeEntry struct {
	Path string `json:"path"`
	Mode string `json:"mode"`
	Type string `json:"type"`
	SHA  string `json:"sha"`
	Size int    `json:"size,omitempty"`
}

type commit struct {
	tree    string
	parents []string
	message string
}

// Failure is an error the server answers with instead of serving a request.
type Failure struct {
	Status  int
	Header  map[string]string
	Message string
	DocURL  string
}

// Server is the fake GitHub. Its methods are safe for concurrent use.
type Server struct {
	*httptest.Server
	Owner, Repo, DefaultBranch, Token string

	mu       sync.Mutex
	blobs    map[string][]byte
	trees    map[string][]treeEntry // flat: full paths
	commits  map[string]commit
	refs     map[string]string // "heads/main" -> commit
	pulls    []*PullRequest
	comments []*Comment
	nextID   int64
	requests []Request
	fail     *Failure
	// treeLimit cuts a recursive tree listing at this many entries, marked truncated, as GitHub
	// does past 100,000 entries or 7 MB (0: no limit).
	treeLimit int
}

// New starts a server for OWNER/REPO whose default branch main holds files (path -> content)
// in one commit, accepting token. Close it when done.
func New(owner, repo, token string, files map[string]string) *Server {
	s := &Server{Owner: owner, Repo: repo, DefaultBranch: "main", Token: token,
		blobs: map[string][]byte{}, trees: map[string][]treeEntry{}, commits: map[string]commit{},
		refs: map[string]string{}, nextID: 1000}
	var entries []treeEntry
	for p, c := range files {
		entries = append(entries, treeEntry{Path: p, Mode: "100644", Type: "blob", SHA: s.putBlob([]byte(c)), Size: len(c)})
	}
	t := s.putTree(entries)
	s.refs["heads/main"] = s.putCommit(commit{tree: t, message: "initial"})
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// SetTreeLimit makes a recursive tree listing stop after n entries and say it was truncated, as
// GitHub's does in a large repository (0: no limit).
func (s *Server) SetTreeLimit(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.treeLimit = n
}

// APIURL is the address to give rollout (--github-url).
func (s *Server) APIURL() string { return s.Server.URL + "/api/v3/" }

// FailNext makes the server answer every request with f until FailNext(nil).
func (s *Server) FailNext(f *Failure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = f
}

// Requests returns the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// PullRequests returns the pull requests, by number.
func (s *Server) PullRequests() []PullRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []PullRequest
	for _, p := range s.pulls {
		out = append(out, *p)
	}
	return out
}

// Comments returns the comments on pull request number, oldest first.
func (s *Server) Comments(number int) []Comment {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Comment
	for _, c := range s.comments {
		if c.Number == number {
			out = append(out, *c)
		}
	}
	return out
}

// File returns the content of path at the head of branch, and whether it exists.
func (s *Server) File(branch, p string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.commits[s.refs["heads/"+branch]]
	if !ok {
		return "", false
	}
	for _, e := range s.trees[c.tree] {
		if e.Path == p {
			return string(s.blobs[e.SHA]), true
		}
	}
	return "", false
}

// Head returns the commit at the head of branch, its parents and message ("" when none).
func (s *Server) Head(branch string) (sha string, parents []string, message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sha = s.refs["heads/"+branch]
	c := s.commits[sha]
	return sha, c.parents, c.message
}

// SetFile commits content at path on branch (a push by someone else).
func (s *Server) SetFile(branch, p, content string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	head := s.refs["heads/"+branch]
	entries := s.withFile(s.trees[s.commits[head].tree], p, s.putBlob([]byte(content)), "100644")
	s.refs["heads/"+branch] = s.putCommit(commit{tree: s.putTree(entries), parents: []string{head}, message: "edit " + p})
}

// children lists a flat tree as GitHub lists a tree without recursion: the files at its top, and
// one entry of type tree for each directory, whose SHA names the directory's own flat tree.
func (s *Server) children(entries []treeEntry) []treeEntry {
	var out []treeEntry
	dirs := map[string][]treeEntry{}
	for _, e := range entries {
		dir, rest, nested := strings.Cut(e.Path, "/")
		if !nested {
			out = append(out, e)
			continue
		}
		sub := e
		sub.Path = rest
		dirs[dir] = append(dirs[dir], sub)
	}
	for dir, sub := range dirs {
		out = append(out, treeEntry{Path: dir, Mode: "040000", Type: "tree", SHA: s.putTree(sub)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// recursive lists a flat tree as GitHub lists a tree with recursion: every file, and an entry of
// type tree for every directory, in path order.
func (s *Server) recursive(entries []treeEntry) []treeEntry {
	var out []treeEntry
	var walk func(prefix string, entries []treeEntry)
	walk = func(prefix string, entries []treeEntry) {
		for _, e := range s.children(entries) {
			full := e
			full.Path = prefix + e.Path
			out = append(out, full)
			if e.Type == "tree" {
				walk(full.Path+"/", s.trees[e.SHA])
			}
		}
	}
	walk("", entries)
	return out
}

func (s *Server) withFile(entries []treeEntry, p, sha, mode string) []treeEntry {
	out := append([]treeEntry(nil), entries...)
	for i := range out {
		if out[i].Path == p {
			out[i].SHA, out[i].Size = sha, len(s.blobs[sha])
			return out
		}
	}
	return append(out, treeEntry{Path: p, Mode: mode, Type: "blob", SHA: sha, Size: len(s.blobs[sha])})
}

func sum(kind string, b []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "%s %d\x00", kind, len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

func (s *Server) putBlob(b []byte) string {
	sha := sum("blob", b)
	s.blobs[sha] = b
	return sha
}

func (s *Server) putTree(entries []treeEntry) string {
	sort.Slice(entries, func(i, j int) bool { return entries[i].Path < entries[j].Path })
	b, _ := json.Marshal(entries)
	sha := sum("tree", b)
	s.trees[sha] = entries
	return sha
}

func (s *Server) putCommit(c commit) string {
	b, _ := json.Marshal([]any{c.tree, c.parents, c.message, len(s.commits)})
	sha := sum("commit", b)
	s.commits[sha] = c
	return sha
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.RequestURI(), Auth: r.Header.Get("Authorization"), Body: string(body)})
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	if f := s.fail; f != nil {
		for k, v := range f.Header {
			w.Header().Set(k, v)
		}
		writeJSON(w, f.Status, map[string]string{"message": f.Message, "documentation_url": f.DocURL})
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+s.Token {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest"})
		return
	}
	// Owner and repository names match in any case, as GitHub's do; the head filter of a pull
	// request listing takes the owner as GitHub spells it (Server.Owner).
	prefix := "/api/v3/repos/" + s.Owner + "/" + s.Repo
	if len(r.URL.Path) < len(prefix) || !strings.EqualFold(r.URL.Path[:len(prefix)], prefix) {
		notFound(w)
		return
	}
	p := r.URL.Path[len(prefix):]
	if p != "" && p[0] != '/' {
		notFound(w)
		return
	}
	route := r.Method + " " + p
	switch {
	case route == "GET ":
		writeJSON(w, 200, map[string]any{"id": 1, "name": s.Repo, "full_name": s.Owner + "/" + s.Repo, "owner": map[string]any{"login": s.Owner},
			"default_branch": s.DefaultBranch, "html_url": s.base() + "/" + s.Owner + "/" + s.Repo})
	case r.Method == "GET" && strings.HasPrefix(p, "/git/ref/"):
		ref := strings.TrimPrefix(p, "/git/ref/")
		sha, ok := s.refs[ref]
		if !ok {
			notFound(w)
			return
		}
		writeJSON(w, 200, s.refJSON(ref, sha))
	case r.Method == "GET" && strings.HasPrefix(p, "/git/commits/"):
		sha := path.Base(p)
		c, ok := s.commits[sha]
		if !ok {
			notFound(w)
			return
		}
		writeJSON(w, 200, s.commitJSON(sha, c))
	case r.Method == "GET" && strings.HasPrefix(p, "/git/trees/"):
		sha := path.Base(p)
		t, ok := s.trees[sha]
		if !ok {
			notFound(w)
			return
		}
		truncated := false
		if r.URL.Query().Get("recursive") != "" {
			t = s.recursive(t)
			if s.treeLimit > 0 && len(t) > s.treeLimit {
				t, truncated = t[:s.treeLimit], true
			}
		} else {
			t = s.children(t)
		}
		writeJSON(w, 200, map[string]any{"sha": sha, "url": s.api(p), "tree": t, "truncated": truncated})
	case route == "POST /git/trees":
		var req struct {
			BaseTree string `json:"base_tree"`
			Tree     []struct {
				Path    string  `json:"path"`
				Mode    string  `json:"mode"`
				Type    string  `json:"type"`
				SHA     *string `json:"sha"`
				Content *string `json:"content"`
			} `json:"tree"`
		}
		if json.Unmarshal(body, &req) != nil {
			unprocessable(w, "Problems parsing JSON")
			return
		}
		entries, ok := s.trees[req.BaseTree]
		if !ok && req.BaseTree != "" {
			unprocessable(w, "base_tree is not a valid tree")
			return
		}
		for _, e := range req.Tree {
			var sha string
			switch {
			case e.Content != nil:
				sha = s.putBlob([]byte(*e.Content))
			case e.SHA != nil:
				sha = *e.SHA
			default:
				unprocessable(w, "tree entry needs sha or content")
				return
			}
			entries = s.withFile(entries, e.Path, sha, e.Mode)
		}
		sha := s.putTree(entries)
		writeJSON(w, 201, map[string]any{"sha": sha, "url": s.api(prefix + "/git/trees/" + sha), "tree": s.trees[sha], "truncated": false})
	case route == "POST /git/blobs":
		var req struct{ Content, Encoding string }
		_ = json.Unmarshal(body, &req)
		sha := s.putBlob([]byte(req.Content))
		writeJSON(w, 201, map[string]string{"sha": sha, "url": s.api(prefix + "/git/blobs/" + sha)})
	case route == "POST /git/commits":
		var req struct {
			Message string   `json:"message"`
			Tree    string   `json:"tree"`
			Parents []string `json:"parents"`
		}
		if json.Unmarshal(body, &req) != nil || s.trees[req.Tree] == nil {
			unprocessable(w, "tree is not a valid tree")
			return
		}
		sha := s.putCommit(commit{tree: req.Tree, parents: req.Parents, message: req.Message})
		writeJSON(w, 201, s.commitJSON(sha, s.commits[sha]))
	case route == "POST /git/refs":
		var req struct{ Ref, SHA string }
		_ = json.Unmarshal(body, &req)
		ref := strings.TrimPrefix(req.Ref, "refs/")
		if _, ok := s.refs[ref]; ok {
			unprocessable(w, "Reference already exists")
			return
		}
		if _, ok := s.commits[req.SHA]; !ok || !strings.HasPrefix(req.Ref, "refs/") {
			unprocessable(w, "Object does not exist")
			return
		}
		s.refs[ref] = req.SHA
		writeJSON(w, 201, s.refJSON(ref, req.SHA))
	case r.Method == "PATCH" && strings.HasPrefix(p, "/git/refs/"):
		ref := strings.TrimPrefix(p, "/git/refs/")
		var req struct {
			SHA   string `json:"sha"`
			Force bool   `json:"force"`
		}
		_ = json.Unmarshal(body, &req)
		old, ok := s.refs[ref]
		if !ok {
			unprocessable(w, "Reference does not exist")
			return
		}
		if !req.Force && !s.descends(req.SHA, old) {
			unprocessable(w, "Update is not a fast forward")
			return
		}
		s.refs[ref] = req.SHA
		writeJSON(w, 200, s.refJSON(ref, req.SHA))
	case route == "GET /pulls":
		q := r.URL.Query()
		out := []any{}
		for _, pr := range s.pulls {
			if (q.Get("state") == "" || q.Get("state") == "all" || q.Get("state") == pr.State) &&
				(q.Get("head") == "" || q.Get("head") == s.Owner+":"+pr.Head) &&
				(q.Get("base") == "" || q.Get("base") == pr.Base) {
				out = append(out, s.pullJSON(pr))
			}
		}
		writeJSON(w, 200, out)
	case route == "POST /pulls":
		var req struct{ Title, Head, Base, Body string }
		_ = json.Unmarshal(body, &req)
		if _, ok := s.refs["heads/"+req.Head]; !ok {
			unprocessable(w, "Validation Failed: head does not exist")
			return
		}
		for _, pr := range s.pulls {
			if pr.Head == req.Head && pr.State == "open" {
				unprocessable(w, "A pull request already exists for "+s.Owner+":"+req.Head+".")
				return
			}
		}
		pr := &PullRequest{Number: len(s.pulls) + 1, Title: req.Title, Body: req.Body, Head: req.Head, Base: req.Base, State: "open"}
		s.pulls = append(s.pulls, pr)
		writeJSON(w, 201, s.pullJSON(pr))
	case r.Method == "PATCH" && strings.HasPrefix(p, "/pulls/"):
		n, _ := strconv.Atoi(path.Base(p))
		if n < 1 || n > len(s.pulls) {
			notFound(w)
			return
		}
		pr := s.pulls[n-1]
		var req struct{ Title, Body, State *string }
		_ = json.Unmarshal(body, &req)
		if req.Title != nil {
			pr.Title = *req.Title
		}
		if req.Body != nil {
			pr.Body = *req.Body
		}
		if req.State != nil {
			pr.State = *req.State
		}
		writeJSON(w, 200, s.pullJSON(pr))
	case strings.HasPrefix(p, "/issues/comments/"):
		id, _ := strconv.ParseInt(path.Base(p), 10, 64)
		i := -1
		for j, c := range s.comments {
			if c.ID == id {
				i = j
			}
		}
		if i < 0 {
			notFound(w)
			return
		}
		switch r.Method {
		case "PATCH":
			var req struct{ Body string }
			_ = json.Unmarshal(body, &req)
			s.comments[i].Body = req.Body
			writeJSON(w, 200, s.commentJSON(s.comments[i]))
		case "DELETE":
			s.comments = append(s.comments[:i], s.comments[i+1:]...)
			w.WriteHeader(http.StatusNoContent)
		default:
			notFound(w)
		}
	case strings.HasPrefix(p, "/issues/") && strings.HasSuffix(p, "/comments"):
		n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(p, "/issues/"), "/comments"))
		if n < 1 || n > len(s.pulls) {
			notFound(w)
			return
		}
		switch r.Method {
		case "GET":
			out := []any{}
			for _, c := range s.comments {
				if c.Number == n {
					out = append(out, s.commentJSON(c))
				}
			}
			writeJSON(w, 200, out)
		case "POST":
			var req struct{ Body string }
			_ = json.Unmarshal(body, &req)
			if len([]rune(req.Body)) > 65536 {
				unprocessable(w, "Body is too long (maximum is 65536 characters)")
				return
			}
			s.nextID++
			c := &Comment{ID: s.nextID, Number: n, Body: req.Body}
			s.comments = append(s.comments, c)
			writeJSON(w, 201, s.commentJSON(c))
		default:
			notFound(w)
		}
	default:
		notFound(w)
	}
}

func (s *Server) descends(sha, ancestor string) bool {
	for sha != "" {
		if sha == ancestor {
			return true
		}
		ps := s.commits[sha].parents
		if len(ps) == 0 {
			return false
		}
		sha = ps[0]
	}
	return false
}

func (s *Server) base() string { return s.Server.URL }

func (s *Server) api(p string) string { return s.base() + "/api/v3" + p }

func (s *Server) refJSON(ref, sha string) map[string]any {
	return map[string]any{"ref": "refs/" + ref, "node_id": "REF_" + sha[:8],
		"url":    s.api("/repos/" + s.Owner + "/" + s.Repo + "/git/refs/" + ref),
		"object": map[string]string{"type": "commit", "sha": sha, "url": s.api("/repos/" + s.Owner + "/" + s.Repo + "/git/commits/" + sha)}}
}

func (s *Server) commitJSON(sha string, c commit) map[string]any {
	parents := []any{}
	for _, p := range c.parents {
		parents = append(parents, map[string]string{"sha": p, "url": s.api("/repos/" + s.Owner + "/" + s.Repo + "/git/commits/" + p)})
	}
	who := map[string]string{"name": "rlctl", "email": "rlctl@example.invalid", "date": time.Unix(0, 0).UTC().Format(time.RFC3339)}
	return map[string]any{"sha": sha, "url": s.api("/repos/" + s.Owner + "/" + s.Repo + "/git/commits/" + sha),
		"author": who, "committer": who, "message": c.message,
		"tree":    map[string]string{"sha": c.tree, "url": s.api("/repos/" + s.Owner + "/" + s.Repo + "/git/trees/" + c.tree)},
		"parents": parents, "verification": map[string]any{"verified": false, "reason": "unsigned"}}
}

func (s *Server) pullJSON(p *PullRequest) map[string]any {
	repo := map[string]any{"name": s.Repo, "full_name": s.Owner + "/" + s.Repo}
	return map[string]any{"id": 5000 + p.Number, "number": p.Number, "state": p.State, "title": p.Title, "body": p.Body,
		"html_url": fmt.Sprintf("%s/%s/%s/pull/%d", s.base(), s.Owner, s.Repo, p.Number),
		"url":      s.api(fmt.Sprintf("/repos/%s/%s/pulls/%d", s.Owner, s.Repo, p.Number)),
		"head":     map[string]any{"ref": p.Head, "sha": s.refs["heads/"+p.Head], "label": s.Owner + ":" + p.Head, "repo": repo},
		"base":     map[string]any{"ref": p.Base, "sha": s.refs["heads/"+p.Base], "label": s.Owner + ":" + p.Base, "repo": repo}}
}

func (s *Server) commentJSON(c *Comment) map[string]any {
	return map[string]any{"id": c.ID, "node_id": fmt.Sprintf("IC_%d", c.ID), "body": c.Body,
		"html_url":  fmt.Sprintf("%s/%s/%s/pull/%d#issuecomment-%d", s.base(), s.Owner, s.Repo, c.Number, c.ID),
		"issue_url": s.api(fmt.Sprintf("/repos/%s/%s/issues/%d", s.Owner, s.Repo, c.Number)),
		"user":      map[string]any{"login": "rlctl-bot", "type": "Bot"}}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func notFound(w http.ResponseWriter) {
	writeJSON(w, http.StatusNotFound, map[string]string{"message": "Not Found", "documentation_url": "https://docs.github.com/rest"})
}

func unprocessable(w http.ResponseWriter, msg string) {
	writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"message": msg, "documentation_url": "https://docs.github.com/rest"})
}
