package rollout

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/google/go-github/v60/github"
)

// Marker opens the one comment rlctl keeps on a pull request. Continuation parts (for a body
// longer than GitHub's limit) open with PartMarker(i).
const Marker = "<!-- rlctl-rollout -->"

// MaxComment is the most characters GitHub accepts in a comment body.
const MaxComment = 65536

// PartMarker opens part i (from 2) of a split marker comment.
func PartMarker(i int) string { return fmt.Sprintf("<!-- rlctl-rollout part %d -->", i) }

// Comment keeps body as the pull request's marker comment: the comment that opens with Marker is
// edited in place (created when there is none), so that a re-run never adds a second one. A body
// longer than MaxComment is split: the first comment keeps the start, and each further part,
// folded in a <details> block, is its own marker comment (PartMarker), edited in place too;
// parts left over from a longer body are deleted.
func (g *GitHub) Comment(ctx context.Context, number int, body string) error {
	parts := SplitComment(body)
	existing := map[string]*github.IssueComment{}
	opts := &github.IssueListCommentsOptions{ListOptions: github.ListOptions{PerPage: 100}}
	for {
		cs, resp, err := g.c.Issues.ListComments(ctx, g.owner, g.repo, number, opts)
		if err != nil {
			return g.explain(err)
		}
		for _, c := range cs {
			first, _, _ := strings.Cut(c.GetBody(), "\n")
			if strings.HasPrefix(first, "<!-- rlctl-rollout") && existing[first] == nil {
				existing[first] = c
			}
		}
		if resp.NextPage == 0 {
			break
		}
		opts.Page = resp.NextPage
	}
	for i, p := range parts {
		m := Marker
		if i > 0 {
			m = PartMarker(i + 1)
		}
		c := existing[m]
		delete(existing, m)
		var err error
		switch {
		case c == nil:
			_, _, err = g.c.Issues.CreateComment(ctx, g.owner, g.repo, number, &github.IssueComment{Body: github.String(p)})
		case c.GetBody() != p:
			_, _, err = g.c.Issues.EditComment(ctx, g.owner, g.repo, c.GetID(), &github.IssueComment{Body: github.String(p)})
		}
		if err != nil {
			return g.explain(err)
		}
	}
	for _, c := range existing {
		if _, err := g.c.Issues.DeleteComment(ctx, g.owner, g.repo, c.GetID()); err != nil {
			return g.explain(err)
		}
	}
	return nil
}

// SplitComment returns body as the marker comment's parts, each at most MaxComment characters
// with its marker: one part when it fits, else the first part and continuations folded in
// <details>. Splits fall on line ends where there are any.
func SplitComment(body string) []string {
	first := Marker + "\n"
	if utf8.RuneCountInString(first+body) <= MaxComment {
		return []string{first + body}
	}
	const note = "\n\n_Continued in the next comment._\n"
	var parts []string
	rest := body
	for i := 1; rest != ""; i++ {
		head := first
		tail := ""
		if i > 1 {
			head = PartMarker(i) + "\n<details><summary>Continued (part " + fmt.Sprint(i) + ")</summary>\n\n"
			tail = "\n\n</details>\n"
		}
		room := MaxComment - utf8.RuneCountInString(head+tail+note)
		chunk := cutRunes(rest, room)
		if len(chunk) < len(rest) {
			if nl := strings.LastIndexByte(chunk, '\n'); nl > len(chunk)/2 {
				chunk = chunk[:nl+1]
			}
		}
		rest = rest[len(chunk):]
		if rest != "" {
			tail += note
		}
		parts = append(parts, head+chunk+tail)
	}
	return parts
}

// cutRunes returns the longest prefix of s of at most n runes.
func cutRunes(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[:i]
		}
		n--
	}
	return s
}
