package report

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/tw"

	"github.com/rlctl/rlctl/internal/printable"
)

// WriteTable writes r for a terminal: a summary, one table of rules, the top denied identities
// and the bad lines.
func WriteTable(w io.Writer, r *Report) error {
	fmt.Fprintf(w, "requests %d  bad lines %d  window %s  gateways %d (%s)  store latency %s\n",
		r.Requests, r.BadLines, window(r), r.Settings.Gateways, r.Settings.Assignment, r.Settings.StoreLatency)
	for _, warning := range Warnings(r) {
		fmt.Fprintln(w, "warning:", warning)
	}
	t := r.Totals
	fmt.Fprintf(w, "requests would be denied %d (%s), rejected at their stage %d\n",
		t.RequestsWouldDeny, pct(t.DenyRate), t.RequestsDenied)
	fmt.Fprintf(w, "rule decisions: would deny %d  denied %d  ideal %d  over-admission %d  under-admission %d\n",
		t.WouldDeny, t.Denied, t.IdealDeny, t.OverAdmission, t.UnderAdmission)
	fmt.Fprintf(w, "false positives %d (%s of would-deny): legit %d, shared-NAT collateral %d (>= %d users)\n\n",
		t.FalsePositives, pct(t.FalsePositiveRate), t.LegitDenials, t.NATCollateral, r.Settings.NATUsers)

	if len(r.Rules) > 0 {
		tbl := tablewriter.NewTable(w, tablewriter.WithRowAlignmentConfig(tw.CellAlignment{
			PerColumn: []tw.Align{tw.AlignLeft, tw.AlignLeft, tw.AlignRight, tw.AlignRight, tw.AlignRight, tw.AlignRight,
				tw.AlignRight, tw.AlignRight, tw.AlignRight, tw.AlignRight, tw.AlignRight}}))
		tbl.Header("Rule", "Stage", "Requests", "Would deny", "Denied", "Ideal", "Over", "Under", "Stranded max", "Lease max", "False pos")
		var rows [][]string
		for _, rl := range r.Rules {
			rows = append(rows, []string{rl.Domain + "/" + rl.Rule, rl.Stage, itoa(rl.Requests), itoa(rl.WouldDeny),
				itoa(rl.Denied), itoa(rl.IdealDeny), itoa(rl.OverAdmission), itoa(rl.UnderAdmission), itoa(rl.StrandedMax),
				itoa(rl.LeaseMax), itoa(rl.FalsePositives)})
		}
		if err := tbl.Bulk(rows); err != nil {
			return fmt.Errorf("report: %w", err)
		}
		if err := tbl.Render(); err != nil {
			return fmt.Errorf("report: %w", err)
		}
		writeTableLegend(w, r)
	}

	var rows [][]string
	for _, rl := range r.Rules {
		for _, id := range rl.TopDenied {
			rows = append(rows, []string{rl.Domain + "/" + rl.Rule, printable.String(id.Value), itoa(id.Denials), itoa(id.Requests), note(id)})
		}
	}
	if len(rows) > 0 {
		fmt.Fprintln(w, "\nTop denied identities")
		tbl := tablewriter.NewTable(w, tablewriter.WithRowAlignmentConfig(tw.CellAlignment{
			PerColumn: []tw.Align{tw.AlignLeft, tw.AlignLeft, tw.AlignRight, tw.AlignRight, tw.AlignLeft}}))
		tbl.Header("Rule", "Identity", "Denials", "Requests", "Note")
		if err := tbl.Bulk(rows); err != nil {
			return fmt.Errorf("report: %w", err)
		}
		if err := tbl.Render(); err != nil {
			return fmt.Errorf("report: %w", err)
		}
	}
	writeBadLines(w, r, "")
	writeThresholds(w, r, "")
	return nil
}

// writeTableLegend writes what the columns mean under the rules table, the terms aligned.
func writeTableLegend(w io.Writer, r *Report) {
	legend := Legend(r)
	width := 0
	for _, t := range legend {
		width = max(width, len(t.Name))
	}
	for _, t := range legend {
		fmt.Fprintf(w, "  %-*s  %s\n", width, t.Name, t.Meaning)
	}
}

func writeBadLines(w io.Writer, r *Report, indent string) {
	if r.BadLines == 0 {
		return
	}
	fmt.Fprintf(w, "\n%d bad lines skipped", r.BadLines)
	if int64(len(r.BadLineSamples)) < r.BadLines {
		fmt.Fprintf(w, "; the first %d:", len(r.BadLineSamples))
	} else {
		fmt.Fprint(w, ":")
	}
	fmt.Fprintln(w)
	for _, b := range r.BadLineSamples {
		fmt.Fprintf(w, "%s%s:%d: %s\n%s    %s\n", indent, printable.String(b.File), b.Line, printable.String(b.Error), indent, printable.String(b.Text))
	}
}

func writeThresholds(w io.Writer, r *Report, indent string) {
	if r.Verdict() == VerdictNoThresholds {
		fmt.Fprintf(w, "\n%sno thresholds set (--fail-if): nothing was checked\n", indent)
		return
	}
	fmt.Fprintln(w)
	for _, th := range r.Thresholds {
		state := "ok"
		if th.Crossed {
			state = "CROSSED"
		}
		fmt.Fprintf(w, "%sthreshold %s: value %s: %s\n", indent, th.Expr, th.shown(6), state)
	}
}

// Note is what the reports say of a denied identity beside its counts ("40 denials of
// legitimate callers; 1000 users behind it"), for other reports that list identities the same
// way (rlctl diff --log).
func Note(id Identity) string { return note(id) }

// note says what the report knows of a denied identity: how many of its denials were of
// legitimate callers, and how many users were seen behind it when it is an address.
func note(id Identity) string {
	var parts []string
	if id.Legit {
		parts = append(parts, fmt.Sprintf("%d denials of legitimate callers", id.LegitDenials))
	}
	switch {
	case id.UsersCapped:
		parts = append(parts, fmt.Sprintf("%d+ users behind it", id.Users))
	case id.Users == 1:
		parts = append(parts, "1 user behind it")
	case id.Users > 0:
		parts = append(parts, fmt.Sprintf("%d users behind it", id.Users))
	}
	return strings.Join(parts, "; ")
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// window is the replay's time span, with the end's date when it is not the start's.
func window(r *Report) string {
	if r.Requests == 0 {
		return "-"
	}
	start, end := time.UnixMilli(r.StartMs).UTC(), time.UnixMilli(r.EndMs).UTC()
	endFormat := "15:04:05Z"
	if end.Format(time.DateOnly) != start.Format(time.DateOnly) {
		endFormat = "2006-01-02T15:04:05Z"
	}
	return fmt.Sprintf("%s to %s (%s)", start.Format("2006-01-02T15:04:05Z"), end.Format(endFormat), span(r.EndMs-r.StartMs))
}

// span says how long ms milliseconds are: as a Go duration up to two days, in days beyond
// (time.Duration ends at 292 years).
func span(ms int64) string {
	if ms <= 2*86_400_000 {
		return (time.Duration(ms) * time.Millisecond).String()
	}
	return fmt.Sprintf("%.1f days", float64(ms)/86_400_000)
}
