package diff

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/rlctl/rlctl/internal/english"
)

// MarkdownLimit is the size, in bytes, that WriteMarkdown keeps under: GitHub refuses a comment
// or a pull-request body of more than 65,536 characters, and a character is at least a byte.
const MarkdownLimit = 65_536

// foldOver is the number of changes past which a domain's table is folded in <details>.
const foldOver = 10

// WriteMarkdown writes cs for a pull-request comment: a heading with the summary, a table of the
// changes per domain (sign, summary, kind, base and head as `file:line`), the blast radius when
// given (WithBlast), then each Section (WithSection).
//
// A domain's table with more than 10 changes, and the blast radius's top identities, are
// folded in <details>. The whole stays under MarkdownLimit: when it would not, sections are cut
// first to a share of the room, then the changes that do not fit are left out, with a line
// that says how many and how to see them all (rlctl diff).
func WriteMarkdown(w io.Writer, cs []Change, opts ...Option) error {
	o := optionsOf(opts)
	var b strings.Builder
	fmt.Fprintf(&b, "### rlctl diff: %s\n\n", Summarize(cs).counts())

	// What follows the changes is written first, so the changes know their room.
	var tail strings.Builder
	if o.blast != nil {
		writeBlastMarkdown(&tail, o.blast)
	}
	for _, s := range o.sections {
		fmt.Fprintf(&tail, "#### %s\n\n%s\n\n", s.Title, strings.TrimRight(s.Markdown, "\n"))
	}
	const noteRoom = 200
	room := MarkdownLimit - 1 - noteRoom
	t := tail.String()
	if len(t) > room/2 {
		t = cut(t, room/2)
	}
	room -= len(t)

	show := fitRows(cs, room-b.Len())
	left := 0
	for i := 0; i < len(cs); {
		j := i
		for j < len(cs) && cs[j].Domain == cs[i].Domain {
			j++
		}
		var d strings.Builder
		fold := j-i > foldOver
		d.WriteString(domainHeader(cs[i].Domain, j-i, fold))
		shown := 0
		for k, c := range cs[i:j] {
			if !show[i+k] {
				left++
				continue
			}
			d.WriteString(markdownRow(c))
			shown++
		}
		if shown > 0 {
			d.WriteString(domainClosing(fold))
			b.WriteString(d.String())
		}
		i = j
	}
	if left > 0 {
		fmt.Fprintf(&b, "_%s not shown: the comment would pass GitHub's size limit. Run `rlctl diff` to see them all._\n\n",
			english.Plural(left, "more change"))
	}
	b.WriteString(t)
	_, err := io.WriteString(w, strings.TrimRight(b.String(), "\n")+"\n")
	return err
}

// markdownRow is one change's row of its domain's table.
func markdownRow(c Change) string {
	return fmt.Sprintf("| %s | %s | `%s` | %s | %s |\n", sign(c.Kind), MarkdownCell(c.Summary), c.Kind,
		codeOrDash(position(c.Base)), codeOrDash(position(c.Head)))
}

// domainHeader opens a domain's table of n changes, folded in <details> when fold is set.
func domainHeader(domain string, n int, fold bool) string {
	h := fmt.Sprintf("#### `%s`\n\n", domain)
	if fold {
		h += fmt.Sprintf("<details><summary>%s</summary>\n\n", english.Plural(n, "change"))
	}
	return h + "| | Change | Kind | Base | Head |\n|:-:|---|---|---|---|\n"
}

func domainClosing(fold bool) string {
	if fold {
		return "\n</details>\n\n"
	}
	return "\n"
}

// fitRows says which of cs fit in room bytes of tables. When they do not all fit, those that
// change what is admitted (a rule added or removed, a limit, a match, a stage, a failure mode)
// go first, the others (an owner, a store timeout, a since) after, each in order: a changed
// default repeated over two thousand rules filled the comment before, and a limit tightened in
// the next domain went unseen.
func fitRows(cs []Change, room int) []bool {
	show := make([]bool, len(cs))
	order := make([]int, len(cs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(minor(cs[a].Kind), minor(cs[b].Kind)) })
	opened := map[string]bool{}
	total := map[string]int{}
	for _, c := range cs {
		total[c.Domain]++
	}
	used := 0
	for _, i := range order {
		c := cs[i]
		n := len(markdownRow(c))
		if !opened[c.Domain] {
			fold := total[c.Domain] > foldOver
			n += len(domainHeader(c.Domain, total[c.Domain], fold)) + len(domainClosing(fold))
		}
		if used+n > room {
			continue
		}
		used += n
		opened[c.Domain] = true
		show[i] = true
	}
	return show
}

// minor is 1 for kinds of change that leave what a rule admits and where as it was, 0 for the
// others.
func minor(k Kind) int {
	switch k {
	case KindFailureReason, KindStoreTimeout, KindLease, KindOwner, KindCapacity, KindDriftTolerance,
		KindLegit, KindStageSince, KindStageHold, KindDomainSetting, KindRenamed:
		return 1
	}
	return 0
}

// cut shortens markdown to at most n bytes, at a line's end, and says it did.
func cut(s string, n int) string {
	const more = "\n\n_(cut to fit GitHub's size limit)_\n\n"
	if len(s) <= n {
		return s
	}
	s = s[:max(0, n-len(more))]
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if strings.Count(s, "<details>") > strings.Count(s, "</details>") {
		s += "\n\n</details>"
	}
	return s + more
}

// codeOrDash is s as inline code in a table cell, or a dash for none. A line break would end
// the cell and the code span, and let a file name or a logged value (both a pull request's to
// choose) write markdown and HTML of its own into the comment: it becomes a space.
func codeOrDash(s string) string {
	if s == "" {
		return "—"
	}
	return "`" + codeReplacer.Replace(s) + "`"
}

var codeReplacer = strings.NewReplacer("`", "'", "|", `\|`, "\r\n", " ", "\n", " ", "\r", " ")

// MarkdownCell escapes text for a markdown table cell: markup characters, the cell separator,
// line breaks and HTML; and an @mention or #reference, with a zero-width space after the sign,
// so that a policy's text notifies nobody and links no issue. rollout's pull requests use it
// too.
func MarkdownCell(s string) string {
	return mdReplacer.Replace(s)
}

var mdReplacer = strings.NewReplacer(`\`, `\\`, "`", "\\`", "*", `\*`, "_", `\_`, "[", `\[`, "]", `\]`,
	"|", `\|`, "~", `\~`, "<", "&lt;", ">", "&gt;", "&", "&amp;", "\r\n", " ", "\n", " ", "\r", " ",
	"@", "@&#8203;", "#", "#&#8203;")

// writeBlastMarkdown writes the blast radius: totals, a table per rule, and the top identities
// folded.
func writeBlastMarkdown(w io.Writer, b *Blast) {
	fmt.Fprintf(w, "#### Blast radius: %d requests of %s\n\n", b.Requests, MarkdownCell(joinLogs(b.Logs)))
	for _, warning := range b.Warnings {
		fmt.Fprintf(w, "> **Warning:** %s\n\n", MarkdownCell(warning))
	}
	fmt.Fprintf(w, "**%d newly denied**, %d newly admitted. At any stage (shadow and soft too): %d newly would deny, %d no longer would deny.\n\n",
		b.NewlyDenied, b.NewlyAdmitted, b.NewlyWouldDeny, b.NoLongerWouldDeny)
	if len(b.Rules) == 0 {
		return
	}
	fmt.Fprint(w, "| Rule | Stage | Newly denied | Newly admitted | Newly would deny | No longer would deny |\n|---|---|--:|--:|--:|--:|\n")
	for _, r := range b.Rules {
		fmt.Fprintf(w, "| `%s/%s` | %s | %d | %d | %d | %d |\n", r.Domain, r.Rule, r.Stage, r.NewlyDenied, r.NewlyAdmitted,
			r.NewlyWouldDeny, r.NoLongerWouldDeny)
	}
	fmt.Fprintln(w)
	var rows strings.Builder
	for _, r := range b.Rules {
		for _, id := range r.Top {
			fmt.Fprintf(&rows, "| `%s/%s` | %s | %d | %d | %s |\n", r.Domain, r.Rule, codeOrDash(id.Value), id.NewlyDenied,
				id.NewlyWouldDeny, MarkdownCell(id.Note))
		}
	}
	if rows.Len() > 0 {
		fmt.Fprintf(w, "<details><summary>Top identities newly denied</summary>\n\n| Rule | Identity | Newly denied | Newly would deny | Note |\n|---|---|--:|--:|---|\n%s\n</details>\n\n", rows.String())
	}
}
