package finding

import (
	"encoding/json"
	"io"
)

// JSON writes the report as one JSON document. The schema is public API; fields are only ever
// added:
//
//	{
//	  "findings": [
//	    {"id": "RL007", "severity": "error", "file": "policies/api.cue", "line": 12, "col": 3,
//	     "domain": "api", "rule": "tenant", "message": "drift 2.40% over tolerance 2.00%: ..."}
//	  ],
//	  "summary": {"errors": 1, "warnings": 0},
//	  "tests": {"passed": 10, "failed": 1, "file_errors": 0}
//	}
//
// "findings" is always an array (empty when clean). "file", "line" and "col" are omitted when
// unknown, "domain" and "rule" when the finding is not about one. "tests" is only in the report
// of a run of policy tests (rlctl test).
type JSON struct{}

type jsonReport struct {
	Findings []jsonFinding `json:"findings"`
	Summary  Summary       `json:"summary"`
	Tests    *TestCounts   `json:"tests,omitempty"`
}

type jsonFinding struct {
	ID       string   `json:"id"`
	Severity Severity `json:"severity"`
	File     string   `json:"file,omitempty"`
	Line     int      `json:"line,omitempty"`
	Col      int      `json:"col,omitempty"`
	Domain   string   `json:"domain,omitempty"`
	Rule     string   `json:"rule,omitempty"`
	Message  string   `json:"message"`
}

// Write implements Format.
func (JSON) Write(w io.Writer, r *Report) error {
	out := jsonReport{Findings: make([]jsonFinding, 0, len(r.Findings)), Summary: r.Summary(), Tests: r.Tests}
	for _, f := range r.Findings {
		out.Findings = append(out.Findings, jsonFinding{
			ID: f.ID, Severity: f.Severity,
			File: f.Pos.File, Line: f.Pos.Line, Col: f.Pos.Col,
			Domain: f.Domain, Rule: f.Rule, Message: f.Message,
		})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
