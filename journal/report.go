package journal

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/rlctl/rlctl/internal/english"
)

// ReportFormats are the formats WriteReport writes.
var ReportFormats = []string{"text", "json"}

// WriteReport writes r to w as text (a summary line, a line per journal and a line per
// mismatch) or as JSON (Report, schema rlctl.journal-replay/v1).
func WriteReport(w io.Writer, r *Report, format string) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	case "text":
	default:
		return fmt.Errorf("journal: report format %q: want text or json", format)
	}
	if _, err := fmt.Fprintf(w, "journal: decisions=%d mismatches=%d\n", r.Decisions, len(r.Mismatches)); err != nil {
		return err
	}
	for _, s := range r.Journals {
		end := "no end record: the enforcer did not shut down gracefully; returned tokens not compared"
		if s.Ended {
			end = "ended"
		}
		if s.CutLine > 0 {
			end += fmt.Sprintf("; its last line, %d, was cut off mid-write and not replayed", s.CutLine)
		}
		if _, err := fmt.Fprintf(w, "%s: instance %s: %s, %s, %s\n", s.Name, s.Instance,
			english.Plural(s.Decisions, "decision"), english.Plural(s.Mismatches, "mismatch"), end); err != nil {
			return err
		}
	}
	for _, m := range r.Mismatches {
		if _, err := fmt.Fprintln(w, m); err != nil {
			return err
		}
	}
	return nil
}
