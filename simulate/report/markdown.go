package report

import (
	"bytes"
	"fmt"
	"io"
	"strings"
)

// MaxMarkdown is the most characters WriteMarkdown writes: GitHub's limit on a comment body.
const MaxMarkdown = 65535

// maxMarkdownRules bounds the rules table of a comment; rules are sorted by denials, so the
// ones left out denied least.
const maxMarkdownRules = 100

// WriteMarkdown writes r as a pull-request comment: the summary and the rules table in the open,
// per-rule details folded in <details>. When the whole would exceed MaxMarkdown, details are
// dropped from the least-denying rules first, and the comment says how many were left out.
func WriteMarkdown(w io.Writer, r *Report) error {
	head := markdownHead(r)
	details := make([]string, 0, len(r.Rules))
	for _, rl := range r.Rules {
		details = append(details, markdownRule(rl))
	}
	tail := markdownTail(r)
	// Keep the most details that fit, leaving room for the note that some were left out.
	const noteRoom = 200
	size := len(head) + len(tail)
	n := 0
	for n < len(details) && size+len(details[n]) <= MaxMarkdown-noteRoom {
		size += len(details[n])
		n++
	}
	if n == len(details) || size <= MaxMarkdown-noteRoom {
		var b bytes.Buffer
		b.WriteString(head)
		for _, d := range details[:n] {
			b.WriteString(d)
		}
		if n < len(details) {
			fmt.Fprintf(&b, "\n_Details of %d more rules left out to fit a comment; see the JSON or HTML report._\n", len(details)-n)
		}
		b.WriteString(tail)
		if b.Len() <= MaxMarkdown {
			_, err := w.Write(b.Bytes())
			return err
		}
	}
	// Even the head is too long: cut it at a line boundary.
	s := head[:MaxMarkdown-100]
	s = s[:strings.LastIndexByte(s, '\n')+1] + "\n_Report truncated to fit a comment._\n"
	_, err := io.WriteString(w, s)
	return err
}

func markdownHead(r *Report) string {
	var b strings.Builder
	t := r.Totals
	status := "✅ within thresholds"
	if r.Failed {
		status = "❌ a threshold was crossed"
	}
	fmt.Fprintf(&b, "### rlctl simulate: %s\n\n", status)
	fmt.Fprintf(&b, "Replayed **%d** requests (%d bad lines skipped) from %s through `%s` on %d virtual gateways (%s, store latency %s).\n\n",
		r.Requests, r.BadLines, mdCode(strings.Join(r.Logs, ", ")), r.Policies, r.Settings.Gateways, r.Settings.Assignment, r.Settings.StoreLatency)
	b.WriteString("| Metric | Value |\n|---|---:|\n")
	fmt.Fprintf(&b, "| Would deny | %d (%s of requests) |\n", t.WouldDeny, pct(t.DenyRate))
	fmt.Fprintf(&b, "| Denied given stages | %d |\n", t.Denied)
	fmt.Fprintf(&b, "| Ideal single bucket would deny | %d |\n", t.IdealDeny)
	fmt.Fprintf(&b, "| Over-admission / under-admission | %d / %d |\n", t.OverAdmission, t.UnderAdmission)
	fmt.Fprintf(&b, "| **False positives** | **%d** (%s of denials) |\n", t.FalsePositives, pct(t.FalsePositiveRate))
	fmt.Fprintf(&b, "| &nbsp;&nbsp;legitimate identities | %d |\n", t.LegitDenials)
	fmt.Fprintf(&b, "| &nbsp;&nbsp;shared-NAT collateral (≥ %d users) | %d |\n", r.Settings.NATUsers, t.NATCollateral)
	for _, th := range r.Thresholds {
		mark := "✅"
		if th.Crossed {
			mark = "❌"
		}
		fmt.Fprintf(&b, "| %s `%s` | %.4g |\n", mark, mdEscape(th.Expr), th.Value)
	}
	if len(r.Rules) > 0 {
		b.WriteString("\n| Rule | Stage | Requests | Would deny | Ideal | Over | Under | Stranded max | False pos |\n")
		b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
		for i, rl := range r.Rules {
			if i == maxMarkdownRules {
				fmt.Fprintf(&b, "| _%d more rules_ | | | | | | | | |\n", len(r.Rules)-i)
				break
			}
			fmt.Fprintf(&b, "| `%s/%s` | %s | %d | %d | %d | %d | %d | %d | %d |\n", mdEscape(rl.Domain), mdEscape(rl.Rule),
				rl.Stage, rl.Requests, rl.WouldDeny, rl.IdealDeny, rl.OverAdmission, rl.UnderAdmission, rl.StrandedMax, rl.FalsePositives)
		}
	}
	b.WriteString("\n")
	return b.String()
}

func markdownRule(rl *Rule) string {
	if len(rl.TopDenied) == 0 && rl.WouldDeny == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "<details><summary><code>%s/%s</code>: %d would-deny, %d false positives</summary>\n\n",
		htmlEscape(rl.Domain), htmlEscape(rl.Rule), rl.WouldDeny, rl.FalsePositives)
	fmt.Fprintf(&b, "Limit %s, stage %s", mdEscape(rl.Limit), rl.Stage)
	if rl.Pos != "" {
		fmt.Fprintf(&b, ", defined at `%s`", mdEscape(rl.Pos))
	}
	fmt.Fprintf(&b, ". Lease max %d, store calls %d, stranded tokens max %d.\n\n", rl.LeaseMax, rl.StoreCalls, rl.StrandedMax)
	if len(rl.TopDenied) > 0 {
		b.WriteString("| Identity | Denials | Requests | Note |\n|---|---:|---:|---|\n")
		for _, id := range rl.TopDenied {
			fmt.Fprintf(&b, "| `%s` | %d | %d | %s |\n", mdEscape(id.Value), id.Denials, id.Requests, note(id))
		}
	}
	b.WriteString("\n</details>\n")
	return b.String()
}

func markdownTail(r *Report) string {
	if r.BadLines == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n<details><summary>%d bad lines skipped (first %d shown)</summary>\n\n```\n", r.BadLines, len(r.BadLineSamples))
	for _, bl := range r.BadLineSamples {
		fmt.Fprintf(&b, "%s:%d: %s\n    %s\n", bl.File, bl.Line, bl.Error, strings.ReplaceAll(bl.Text, "```", "'''"))
	}
	b.WriteString("```\n\n</details>\n")
	return b.String()
}

// mdEscape makes s safe inside a table cell and inline code.
func mdEscape(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	s = strings.ReplaceAll(s, "`", "'")
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

func mdCode(s string) string { return "`" + mdEscape(s) + "`" }
