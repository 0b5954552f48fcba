// Package finding owns the findings that rlctl's checking commands report (lint today, policy
// tests later) and the output formats they are written in: text, json, github and sarif. Each
// format lives in its own file behind the Format interface.
package finding

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/rlctl/rlctl/internal/english"
	"github.com/rlctl/rlctl/policy"
)

// Severity says whether a finding fails a check (error) or only advises (warning).
type Severity string

// The severities.
const (
	Error   Severity = "error"
	Warning Severity = "warning"
)

// Finding is one problem found in a policy repository.
type Finding struct {
	// ID names the check that produced the finding, such as "RL007".
	ID       string
	Severity Severity
	// Pos is where the problem is in the user's policy files; the zero Pos means unknown.
	Pos policy.Pos
	// Domain and Rule name the domain and rule the finding is about; either may be empty.
	Domain string
	Rule   string
	// Message is one line that carries the offending figures.
	Message string
}

// String formats f as one text line, "file:line:col: severity: message [ID]", with any line
// breaks in the message (or file name) turned into spaces so that line-based tools read one finding per line.
func (f Finding) String() string {
	msg := oneLine.Replace(f.Message)
	if p := oneLine.Replace(f.Pos.String()); p != "" {
		return fmt.Sprintf("%s: %s: %s [%s]", p, f.Severity, msg, f.ID)
	}
	return fmt.Sprintf("%s: %s [%s]", f.Severity, msg, f.ID)
}

var oneLine = strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ")

// Rule describes a check that can produce findings: what output formats such as SARIF list as the
// tool's rules, and what `rlctl lint --explain` prints.
type Rule struct {
	ID       string
	Name     string // short kebab-case name, such as "drift-over-tolerance"
	Severity Severity
	// Summary is one sentence.
	Summary string
	// Help is the long explanation: why it matters, how to fix it, an example.
	Help string
	// HelpURI links to more documentation; it may be empty.
	HelpURI string
}

// Report is what a format writes: the findings and the rules that may have produced them.
type Report struct {
	Findings []Finding
	// Rules describe every check that ran, sorted by ID; formats that list a tool's rules
	// (sarif) use them.
	Rules []Rule
	// Tests, when set, counts the tests a run of policy tests (rlctl test) ran; the json format
	// writes it.
	Tests *TestCounts
}

// TestCounts counts a run of policy tests: tests that passed, tests that failed, and problems
// with test files (each also a finding).
type TestCounts struct {
	Passed     int `json:"passed"`
	Failed     int `json:"failed"`
	FileErrors int `json:"file_errors"`
}

// Summary counts a report's findings by severity.
type Summary struct {
	Errors   int `json:"errors"`
	Warnings int `json:"warnings"`
}

// String formats s as "2 errors, 1 warning".
func (s Summary) String() string {
	return english.Plural(s.Errors, "error") + ", " + english.Plural(s.Warnings, "warning")
}

// Summary counts r's findings by severity.
func (r *Report) Summary() Summary {
	var s Summary
	for _, f := range r.Findings {
		if f.Severity == Error {
			s.Errors++
		} else {
			s.Warnings++
		}
	}
	return s
}

// Sort orders findings by file, line, column, ID and message, so output is stable.
func Sort(fs []Finding) {
	slices.SortStableFunc(fs, Compare)
}

// Compare orders two findings by file, line, column, ID and message.
func Compare(a, b Finding) int {
	return cmp.Or(
		cmp.Compare(a.Pos.File, b.Pos.File),
		cmp.Compare(a.Pos.Line, b.Pos.Line),
		cmp.Compare(a.Pos.Col, b.Pos.Col),
		cmp.Compare(a.ID, b.ID),
		cmp.Compare(a.Message, b.Message),
	)
}
