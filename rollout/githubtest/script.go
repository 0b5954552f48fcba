package githubtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/rogpeppe/go-internal/testscript"
)

var servers sync.Map // *testscript.TestScript -> *Server

// ScriptCmd is the testscript command "github", a fake GitHub for CLI scripts:
//
//	github serve OWNER/REPO TOKEN DIR   start one whose main branch holds DIR's files; sets
//	                                     $GITHUB_URL (for --github-url) and $GITHUB_TOKEN
//	github pulls                         print each pull request: #N STATE HEAD -> BASE: TITLE
//	github body N                        print pull request N's body
//	github comments N                    print pull request N's comments, each after "== ID"
//	github file BRANCH PATH              print PATH at the head of BRANCH
//	github fail STATUS [HEADER=VALUE...] answer every request with STATUS from now on
//	github requests                      print each request: METHOD PATH
func ScriptCmd(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) == 0 {
		ts.Fatalf("usage: github serve|pulls|body|comments|file|fail|requests ...")
	}
	if args[0] == "serve" {
		if len(args) != 4 {
			ts.Fatalf("usage: github serve OWNER/REPO TOKEN DIR")
		}
		owner, repo, _ := strings.Cut(args[1], "/")
		files := map[string]string{}
		root := ts.MkAbs(args[3])
		err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
			if err != nil || fi.IsDir() {
				if fi != nil && fi.IsDir() && fi.Name() == ".git" {
					return filepath.SkipDir
				}
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			files[filepath.ToSlash(rel)] = string(b)
			return nil
		})
		ts.Check(err)
		s := New(owner, repo, args[2], files)
		servers.Store(ts, s)
		ts.Defer(func() { s.Close(); servers.Delete(ts) })
		ts.Setenv("GITHUB_URL", s.URL)
		ts.Setenv("GITHUB_TOKEN", args[2])
		return
	}
	v, ok := servers.Load(ts)
	if !ok {
		ts.Fatalf("github: no server: run github serve first")
	}
	s := v.(*Server)
	out := ts.Stdout()
	number := func(i int) int {
		if len(args) <= i {
			ts.Fatalf("github %s: want a pull request number", args[0])
		}
		n, err := strconv.Atoi(args[i])
		ts.Check(err)
		return n
	}
	switch args[0] {
	case "pulls":
		for _, p := range s.PullRequests() {
			fmt.Fprintf(out, "#%d %s %s -> %s: %s\n", p.Number, p.State, p.Head, p.Base, p.Title)
		}
	case "body":
		n := number(1)
		for _, p := range s.PullRequests() {
			if p.Number == n {
				fmt.Fprintln(out, p.Body)
			}
		}
	case "comments":
		for _, c := range s.Comments(number(1)) {
			fmt.Fprintf(out, "== %d\n%s\n", c.ID, c.Body)
		}
	case "file":
		if len(args) != 3 {
			ts.Fatalf("usage: github file BRANCH PATH")
		}
		b, ok := s.File(args[1], args[2])
		if !ok {
			ts.Fatalf("github file: no %s on %s", args[2], args[1])
		}
		fmt.Fprint(out, b)
	case "fail":
		f := &Failure{Status: number(1), Header: map[string]string{}, Message: "failure injected by the test"}
		for _, h := range args[2:] {
			k, v, _ := strings.Cut(h, "=")
			f.Header[k] = v
		}
		s.FailNext(f)
	case "requests":
		var lines []string
		for _, r := range s.Requests() {
			lines = append(lines, r.Method+" "+r.Path)
		}
		fmt.Fprintln(out, strings.Join(lines, "\n"))
	default:
		ts.Fatalf("github: unknown subcommand %q", args[0])
	}
}
