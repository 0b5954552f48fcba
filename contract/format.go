package contract

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/tw"
)

// A Format writes rows in one output format.
type Format func(w io.Writer, rows []Row) error

// FormatNames lists the output formats, the default first, for help text and error messages.
var FormatNames = []string{"table", "markdown", "json", "csv"}

// ParseFormat returns the format named name. "text" is another name for "table", as every
// command that prints data takes -o text.
func ParseFormat(name string) (Format, error) {
	switch name {
	case "table", "text":
		return WriteTable, nil
	case "markdown":
		return WriteMarkdown, nil
	case "json":
		return WriteJSON, nil
	case "csv":
		return WriteCSV, nil
	}
	return nil, fmt.Errorf("unknown output format %q (want %s)", name, strings.Join(FormatNames, ", "))
}

// column is one column of the table, markdown and CSV forms. Its cell is a list of lines: one a
// limit in the limit columns, so that a rule's limits line up across them; an empty cell is nil.
type column struct {
	name string
	cell func(r Row) []string
}

var columns = []column{
	{"domain", func(r Row) []string { return one(r.Domain) }},
	{"rule", func(r Row) []string { return one(r.Rule) }},
	{"match", func(r Row) []string { return one(matchString(r.Match)) }},
	{"limit", perLimit(func(l Limit) string { return strconv.FormatInt(l.Requests, 10) + "/" + l.Window })},
	{"burst", perLimit(func(l Limit) string {
		if l.Burst == 0 {
			return "-"
		}
		return strconv.FormatInt(l.Burst, 10)
	})},
	{"algorithm", perLimit(func(l Limit) string { return l.Algorithm })},
	{"cost", perLimit(func(l Limit) string { return strconv.FormatInt(l.Cost, 10) })},
	{"stage", func(r Row) []string {
		s := r.Stage.Name
		if r.Stage.Percent != 0 {
			s += fmt.Sprintf(" %d%%", r.Stage.Percent)
		}
		if r.Stage.Hold != "" {
			return []string{s, "held: " + r.Stage.Hold}
		}
		return one(s)
	}},
	{"since", func(r Row) []string { return one(r.Stage.Since) }},
	{"failure", func(r Row) []string {
		if r.Failure.Reason != "" {
			return one(r.Failure.Mode + ": " + r.Failure.Reason)
		}
		return one(r.Failure.Mode)
	}},
	{"fallback", func(r Row) []string {
		switch {
		case r.Failure.Fallback != nil:
			return one(strconv.FormatInt(r.Failure.Fallback.Requests, 10) + "/" + r.Failure.Fallback.Window)
		case r.Failure.Mode == "open":
			return one("default")
		}
		return nil
	}},
	{"owner", func(r Row) []string { return one(r.Owner) }},
	{"sub_shards", func(r Row) []string {
		if r.SubShards == nil {
			return nil
		}
		return one(fmt.Sprintf("%d by %s", r.SubShards.Count, r.SubShards.Attribute))
	}},
	{"regions", func(r Row) []string {
		var s []string
		for _, reg := range r.Regions {
			s = append(s, fmt.Sprintf("%s %d%%", reg.Region, reg.Percent))
		}
		return one(strings.Join(s, ", "))
	}},
	{"source", func(r Row) []string { return one(fmt.Sprintf("%s:%d", r.File, r.Line)) }},
}

func one(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

func perLimit(f func(Limit) string) func(Row) []string {
	return func(r Row) []string {
		s := make([]string, len(r.Limits))
		for i, l := range r.Limits {
			s[i] = f(l)
		}
		return s
	}
}

// matchString writes a match as lint's messages do: outermost level first, key="value" or the
// key alone, joined by " > ".
func matchString(ms []Match) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		if m.Kind == "any" {
			parts[i] = m.Key
		} else {
			parts[i] = fmt.Sprintf("%s=%q", m.Key, m.Value)
		}
	}
	return strings.Join(parts, " > ")
}

// cells returns the rows as text, each cell's lines joined by sep and an empty cell as empty.
func cells(rows []Row, sep string, text func(string) string) [][]string {
	out := make([][]string, len(rows))
	for i, r := range rows {
		out[i] = make([]string, len(columns))
		for j, c := range columns {
			lines := c.cell(r)
			for k := range lines {
				lines[k] = text(lines[k])
			}
			out[i][j] = strings.Join(lines, sep)
		}
	}
	return out
}

func headers() []string {
	h := make([]string, len(columns))
	for i, c := range columns {
		h[i] = c.name
	}
	return h
}

// failureWidth is where the table wraps a failure reason, so that one long reason does not make
// every row as wide.
const failureWidth = 40

// WriteTable writes rows as a table for a terminal: a rule with several limits has one a line in
// the limit columns, a long failure reason wraps, and an empty cell shows "-".
func WriteTable(w io.Writer, rows []Row) error {
	failure := 0
	for i, c := range columns {
		if c.name == "failure" {
			failure = i
		}
	}
	tbl := tablewriter.NewTable(w,
		tablewriter.WithConfig(tablewriter.Config{
			Header: tw.CellConfig{
				Formatting: tw.CellFormatting{AutoFormat: tw.On},
				Alignment:  tw.CellAlignment{Global: tw.AlignLeft},
			},
			Row: tw.CellConfig{
				Formatting:   tw.CellFormatting{AutoWrap: tw.WrapNormal},
				Alignment:    tw.CellAlignment{Global: tw.AlignLeft},
				ColMaxWidths: tw.CellWidth{PerColumn: tw.NewMapper[int, int]().Set(failure, failureWidth)},
			},
		}),
		// Rules span several lines (limits, a wrapped reason): a line between rows keeps them
		// apart.
		tablewriter.WithRendition(tw.Rendition{Settings: tw.Settings{Separators: tw.Separators{BetweenRows: tw.On}}}),
	)
	tbl.Header(headers())
	body := cells(rows, "\n", func(s string) string { return s })
	for _, r := range body {
		for j := range r {
			if r[j] == "" {
				r[j] = "-"
			}
		}
	}
	if err := tbl.Bulk(body); err != nil {
		return fmt.Errorf("contract: %w", err)
	}
	if err := tbl.Render(); err != nil {
		return fmt.Errorf("contract: %w", err)
	}
	return nil
}

// WriteMarkdown writes rows as a GitHub-flavoured markdown table, for a pull request or a wiki:
// several values in a cell are separated by <br>, the match is code, and '|' is escaped.
func WriteMarkdown(w io.Writer, rows []Row) error {
	var b strings.Builder
	h := headers()
	b.WriteString("| " + strings.Join(h, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat(" --- |", len(h)) + "\n")
	match := 0
	for i, c := range columns {
		if c.name == "match" {
			match = i
		}
	}
	for i, r := range cells(rows, "<br>", markdownText) {
		// The match is code, so that '*' and '_' in values stay as written.
		r[match] = markdownCode(matchString(rows[i].Match))
		for j := range r {
			if r[j] == "" {
				r[j] = "-"
			}
		}
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// markdownText escapes the characters that would end a cell or start markup.
var markdownText = strings.NewReplacer(
	`\`, `\\`, "|", `\|`, "*", `\*`, "_", `\_`, "`", "\\`", "<", "&lt;", ">", "&gt;", "\n", " ",
).Replace

// markdownCode writes s as a code span: inside a table cell only '|' needs escaping.
func markdownCode(s string) string {
	if strings.Contains(s, "`") {
		return markdownText(s)
	}
	return "`" + strings.ReplaceAll(s, "|", `\|`) + "`"
}

// WriteJSON writes rows as {"rules": [...]}, indented.
func WriteJSON(w io.Writer, rows []Row) error {
	b, err := json.MarshalIndent(struct {
		Rules []Row `json:"rules"`
	}{rows}, "", "  ")
	if err != nil {
		return fmt.Errorf("contract: %w", err)
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// WriteCSV writes rows as CSV with a header row, for a spreadsheet: the columns of the table,
// several values in a cell separated by "; ", and the source as file and line columns.
func WriteCSV(w io.Writer, rows []Row) error {
	cw := csv.NewWriter(w)
	h := headers()
	last := len(h) - 1 // source, written as file and line
	if err := cw.Write(append(h[:last:last], "file", "line")); err != nil {
		return fmt.Errorf("contract: %w", err)
	}
	for i, r := range cells(rows, "; ", func(s string) string { return s }) {
		rec := append(r[:last:last], rows[i].File, strconv.Itoa(rows[i].Line))
		if err := cw.Write(rec); err != nil {
			return fmt.Errorf("contract: %w", err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("contract: %w", err)
	}
	return nil
}
