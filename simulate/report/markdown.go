package report

import (
	"fmt"
	"hash/fnv"
	"io"
	"strings"

	"github.com/rlctl/rlctl/internal/printable"
)

// MaxMarkdown is the most characters WriteMarkdown writes: GitHub's limit on a comment body.
const MaxMarkdown = 65535

// maxMarkdownRules bounds the rules table of a comment; rules are sorted by denials, so the
// ones left out denied least.
const maxMarkdownRules = 100

// WriteMarkdown writes r as a pull-request comment: the summary and the rules table in the open,
// per-rule details folded in <details>. When the whole would exceed MaxMarkdown, every rule
// shows the same number of denied identities, the most that fit; if the details do not fit even
// without identities, the least-denying rules' details are left out, and the comment says how
// many. Bad line samples that cannot fit are left out too.
func WriteMarkdown(w io.Writer, r *Report) error {
	head := markdownHead(r)
	if len(head) > MaxMarkdown-noteRoom {
		// Only a pathological report gets here (thousands of thresholds, say): cut it at a line.
		head = head[:MaxMarkdown-noteRoom]
		head = head[:strings.LastIndexByte(head, '\n')+1] + "\n_Report truncated to fit a comment._\n"
		_, err := io.WriteString(w, head)
		return err
	}
	tail := markdownTail(r)
	if len(head)+len(tail) > MaxMarkdown-noteRoom {
		tail = fmt.Sprintf("\n_%d bad lines skipped; see the JSON or HTML report._\n", r.BadLines)
	}
	var rules []ruleDetails
	for _, rl := range r.Rules {
		if d := markdownRule(rl); d.head != "" {
			rules = append(rules, d)
		}
	}
	keep := fitDetails(rules, MaxMarkdown-noteRoom-len(head)-len(tail))
	var b strings.Builder
	b.WriteString(head)
	left := 0
	for i, d := range rules {
		if keep[i] < 0 {
			left++
			continue
		}
		b.WriteString(d.render(keep[i]))
	}
	if left > 0 {
		fmt.Fprintf(&b, "\n_Details of %d more rules left out to fit a comment; see the JSON or HTML report._\n", left)
	}
	b.WriteString(tail)
	_, err := io.WriteString(w, b.String())
	return err
}

// noteRoom is room kept for a note that something was left out.
const noteRoom = 200

// ruleDetails is one rule's folded details, in parts, so that its identities can be cut.
type ruleDetails struct {
	head string   // the summary and the rule's figures
	rows []string // the denied identities' table rows, most denials first
}

func (d ruleDetails) size(rows int) int {
	n := len(d.head) + len(detailsEnd)
	if rows > 0 {
		n += len(identitiesHeader)
	}
	for _, row := range d.rows[:rows] {
		n += len(row)
	}
	if rows < len(d.rows) {
		n += len(identitiesLeftOut(len(d.rows) - rows))
	}
	return n
}

// render writes the details with the first rows identities.
func (d ruleDetails) render(rows int) string {
	var b strings.Builder
	b.WriteString(d.head)
	if rows > 0 {
		b.WriteString(identitiesHeader)
		for _, row := range d.rows[:rows] {
			b.WriteString(row)
		}
	}
	if rows < len(d.rows) {
		b.WriteString(identitiesLeftOut(len(d.rows) - rows))
	}
	b.WriteString(detailsEnd)
	return b.String()
}

const (
	identitiesHeader = "| Identity | Denials | Requests | Note |\n|---|---:|---:|---|\n"
	detailsEnd       = "\n</details>\n"
)

func identitiesLeftOut(n int) string {
	return fmt.Sprintf("\n_%d more denied identities left out to fit a comment._\n", n)
}

// fitDetails chooses how many identity rows of each rule to show within budget bytes: the same
// number for every rule, the most that fits. When the details do not fit even without rows, it
// keeps the first rules' details, the most that fit without rows, and marks the rest -1: rules
// are sorted by would-deny, so those left out denied least.
func fitDetails(rules []ruleDetails, budget int) []int {
	keep := make([]int, len(rules))
	size := 0
	for i, d := range rules {
		if size += d.size(0); size > budget {
			for j := i; j < len(rules); j++ {
				keep[j] = -1
			}
			return keep
		}
	}
	most := 0
	for _, d := range rules {
		most = max(most, len(d.rows))
	}
	for k := most; k > 0; k-- {
		size := 0
		for i, d := range rules {
			keep[i] = min(k, len(d.rows))
			size += d.size(keep[i])
		}
		if size <= budget {
			return keep
		}
	}
	clear(keep) // no rows, which fit
	return keep
}

func markdownHead(r *Report) string {
	var b strings.Builder
	t := r.Totals
	status := map[string]string{
		VerdictPass:         "✅ within thresholds",
		VerdictFail:         "❌ a threshold was crossed",
		VerdictNoThresholds: "no thresholds set",
	}[r.Verdict()]
	fmt.Fprintf(&b, "### rlctl simulate: %s\n\n", status)
	fmt.Fprintf(&b, "Replayed **%d** requests (%d bad lines skipped) from %s, %s, through `%s` on %d virtual gateways (%s, store latency %s).\n\n",
		r.Requests, r.BadLines, mdCode(strings.Join(r.Logs, ", ")), window(r), mdEscape(r.Policies), r.Settings.Gateways, r.Settings.Assignment, r.Settings.StoreLatency)
	for _, warning := range Warnings(r) {
		fmt.Fprintf(&b, "> ⚠️ %s\n\n", mdText(warning))
	}
	b.WriteString("| Requests (each counted once) | Count |\n|---|---:|\n")
	fmt.Fprintf(&b, "| Requests would be denied (by any rule) | %d (%s of requests) |\n", t.RequestsWouldDeny, pct(t.DenyRate))
	fmt.Fprintf(&b, "| Requests rejected at their stage | %d |\n", t.RequestsDenied)
	b.WriteString("\n| Rule decisions, summed over rules (a request two rules deny counts twice) | Count |\n|---|---:|\n")
	fmt.Fprintf(&b, "| Would deny | %d |\n", t.WouldDeny)
	fmt.Fprintf(&b, "| Denied given stages | %d |\n", t.Denied)
	fmt.Fprintf(&b, "| Ideal single bucket would deny | %d |\n", t.IdealDeny)
	fmt.Fprintf(&b, "| Over-admission / under-admission | %d / %d |\n", t.OverAdmission, t.UnderAdmission)
	fmt.Fprintf(&b, "| **False positives** | **%d** (%s of would-deny) |\n", t.FalsePositives, pct(t.FalsePositiveRate))
	fmt.Fprintf(&b, "| &nbsp;&nbsp;legitimate identities | %d |\n", t.LegitDenials)
	fmt.Fprintf(&b, "| &nbsp;&nbsp;shared-NAT collateral (≥ %d users) | %d |\n", r.Settings.NATUsers, t.NATCollateral)
	if len(r.Thresholds) == 0 {
		b.WriteString("\nNo thresholds set (`--fail-if`): nothing was checked.\n")
	} else {
		b.WriteString("\n| Threshold (`--fail-if`) | Value |\n|---|---:|\n")
		for _, th := range r.Thresholds {
			mark := "✅"
			if th.Crossed {
				mark = "❌"
			}
			fmt.Fprintf(&b, "| %s `%s` | %s |\n", mark, mdEscape(th.Expr), th.shown(4))
		}
	}
	if len(r.Rules) > 0 {
		b.WriteString("\n| Rule | Stage | Requests | Would deny | Denied | Ideal | Over | Under | Stranded max | False pos |\n")
		b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for i, rl := range r.Rules {
			if i == maxMarkdownRules {
				fmt.Fprintf(&b, "| _%d more rules_ | | | | | | | | | |\n", len(r.Rules)-i)
				break
			}
			fmt.Fprintf(&b, "| `%s/%s` | %s | %d | %d | %d | %d | %d | %d | %d | %d |\n", mdEscape(rl.Domain), mdEscape(rl.Rule),
				rl.Stage, rl.Requests, rl.WouldDeny, rl.Denied, rl.IdealDeny, rl.OverAdmission, rl.UnderAdmission, rl.StrandedMax, rl.FalsePositives)
		}
	}
	b.WriteString(markdownLegend(r))
	b.WriteString("\n")
	return b.String()
}

// markdownLegend returns the legend, folded: what the columns mean.
func markdownLegend(r *Report) string {
	var b strings.Builder
	b.WriteString("\n<details><summary>What the columns mean</summary>\n\n")
	for _, t := range Legend(r) {
		fmt.Fprintf(&b, "- **%s**: %s\n", t.Name, mdText(t.Meaning))
	}
	b.WriteString("\n</details>\n")
	return b.String()
}

// markdownRule returns rl's details, or none when it denied nothing.
func markdownRule(rl *Rule) ruleDetails {
	if len(rl.TopDenied) == 0 && rl.WouldDeny == 0 {
		return ruleDetails{}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "<details><summary><code>%s/%s</code>: %d would-deny, %d false positives</summary>\n\n",
		htmlEscape(rl.Domain), htmlEscape(rl.Rule), rl.WouldDeny, rl.FalsePositives)
	fmt.Fprintf(&b, "Limit %s, stage %s", mdEscape(rl.Limit), rl.Stage)
	if rl.Pos != "" {
		fmt.Fprintf(&b, ", defined at `%s`", mdEscape(rl.Pos))
	}
	fmt.Fprintf(&b, ". Lease max %d, store calls %d, stranded tokens max %d.\n\n", rl.LeaseMax, rl.StoreCalls, rl.StrandedMax)
	d := ruleDetails{head: b.String()}
	for _, id := range rl.TopDenied {
		d.rows = append(d.rows, fmt.Sprintf("| `%s` | %d | %d | %s |\n", mdEscape(id.Value), id.Denials, id.Requests, note(id)))
	}
	return d
}

func markdownTail(r *Report) string {
	if r.BadLines == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n<details><summary>%d bad lines skipped (first %d shown)</summary>\n\n```\n", r.BadLines, len(r.BadLineSamples))
	for _, bl := range r.BadLineSamples {
		fmt.Fprintf(&b, "%s:%d: %s\n    %s\n", printable.String(bl.File), bl.Line, printable.String(bl.Error), strings.ReplaceAll(printable.String(bl.Text), "```", "'''"))
	}
	b.WriteString("```\n\n</details>\n")
	return b.String()
}

// mdEscape makes s safe inside a table cell and inline code.
func mdEscape(s string) string {
	s = printable.String(s)
	s = strings.ReplaceAll(s, "|", `\|`)
	s = strings.ReplaceAll(s, "`", "'")
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 200 {
		// The cut may split a character; a hash of the whole keeps two long values that share
		// their first 200 bytes apart.
		h := fnv.New32a()
		h.Write([]byte(s))
		s = fmt.Sprintf("%s… (%d bytes, fnv %08x)", strings.ToValidUTF8(s[:200], ""), len(s), h.Sum32())
	}
	return s
}

func mdCode(s string) string { return "`" + mdEscape(s) + "`" }

// mdText makes plain text read as itself in a Markdown paragraph: it escapes the characters
// that could start emphasis, code, links, HTML, entities or tables, and joins lines.
func mdText(s string) string {
	var b strings.Builder
	for _, c := range s {
		switch c {
		case '\\', '`', '*', '_', '~', '[', ']', '<', '>', '&', '|', '#':
			b.WriteByte('\\')
		case '\n', '\r':
			c = ' '
		}
		b.WriteRune(c)
	}
	return b.String()
}
