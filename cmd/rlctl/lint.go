package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rlctl/rlctl/finding"
	"github.com/rlctl/rlctl/lint"
)

const lintLong = `Check a policy repository for mistakes CUE cannot catch on its own.

lint loads the .cue files of each PATH (a directory, not its subdirectories, or a
.cue file; default ".") and reports every problem as a finding: CUE syntax errors,
schema violations, conflicts and bad values (RL000), and the rules below. Files
whose name starts with '_' or '.' are skipped. Several paths are merged into one
policy, as if their files were in one directory. Each finding names the file, line
and column, its severity and its rule ID.

Output (-o):
  text    file:line:col: severity: message [ID], one line per finding, sorted by
          file and position (the default)
  json    {"findings": [{"id", "severity", "file", "line", "col", "domain",
          "rule", "message"}], "summary": {"errors": N, "warnings": M}}
  github  GitHub Actions annotations: ::error file=F,line=L,col=C,title=ID::message
  sarif   a SARIF 2.1.0 log, for GitHub code scanning

Findings go to stdout, or to --out FILE (written atomically). A summary line
("2 errors, 1 warning") always goes to stderr, whatever the format.

Fix load errors first: a CUE syntax error, a schema violation, a conflict or a bad
value (RL000) stops the policies from loading, and the other rules need the loaded
policies, so they run once those errors are fixed. The checks the loader makes of
loaded policies (RL001, RL003, RL005) are reported with every other finding.

Exit codes: 0 no errors (warnings allowed unless --fail-on-warn), 1 errors (or
warnings with --fail-on-warn), 3 usage or tool error (a bad flag, a path that does
not exist or holds no .cue files, an unwritable --out).

Rules (rlctl lint --explain ID prints why, how to fix and an example; it takes an
ID or a name in any case, such as rl007 or drift-over-tolerance):
`

func newLintCmd() *cobra.Command {
	var (
		output     string
		out        string
		explain    string
		failOnWarn bool
	)
	cmd := &cobra.Command{
		Use:   "lint [PATH...]",
		Short: "Check policies for errors and risky settings",
		Long:  lintLong + ruleTable(),
		RunE: func(cmd *cobra.Command, args []string) error {
			if explain != "" {
				if len(args) > 0 {
					return usageErrorf("lint: --explain takes no PATH: it prints a rule's explanation and lints nothing")
				}
				for _, name := range []string{"output", "out", "fail-on-warn"} {
					if cmd.Flags().Changed(name) {
						return usageErrorf("lint: --explain prints text to stdout: --%s does not apply", name)
					}
				}
				return explainRule(cmd.OutOrStdout(), explain)
			}
			format, err := finding.ParseFormat(output)
			if err != nil {
				return usageErrorf("lint: %w", err)
			}
			if len(args) == 0 {
				args = []string{"."}
			}
			fs, err := lint.Run(args...)
			if err != nil {
				// Policy problems are findings; anything else (a missing path, no .cue files)
				// is a tool error.
				return usageErrorf("lint: %w", err)
			}
			report := &finding.Report{Findings: fs, Rules: lint.Rules()}
			if out != "" {
				if err := finding.WriteFile(out, format, report); err != nil {
					return usageErrorf("lint: --out %w", err)
				}
			} else if err := format.Write(cmd.OutOrStdout(), report); err != nil {
				return usageErrorf("lint: %w", err)
			}
			sum := report.Summary()
			fmt.Fprintln(cmd.ErrOrStderr(), sum)
			if sum.Errors > 0 || (failOnWarn && sum.Warnings > 0) {
				return findings()
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&output, "output", "o", "text", "output format: "+strings.Join(finding.FormatNames, ", "))
	f.StringVar(&out, "out", "", "write findings to `FILE` (atomically) instead of stdout")
	f.BoolVar(&failOnWarn, "fail-on-warn", false, "exit 1 on warnings too")
	f.StringVar(&explain, "explain", "", "print the explanation of rule `ID` (such as RL007, rl007 or drift-over-tolerance) and exit; takes no PATH")
	return cmd
}

// explainRule prints the long explanation of one rule, named by its ID or its name in any case.
func explainRule(w io.Writer, id string) error {
	r, ok := lint.Explain(strings.ToUpper(id))
	if !ok {
		r, ok = lint.Explain(strings.ToLower(id))
	}
	if !ok {
		return usageErrorf("lint: unknown rule %q (see rlctl lint --help for the list)", id)
	}
	fmt.Fprintf(w, "%s %s (%s)\n\n%s\n\n%s\n", r.ID, r.Name, r.Severity, r.Summary, r.Help)
	return nil
}

// ruleTable lists the lint rules for the command's help.
func ruleTable() string {
	var b strings.Builder
	for _, r := range lint.Rules() {
		fmt.Fprintf(&b, "  %s  %-7s  %-21s %s\n", r.ID, r.Severity, r.Name, r.Summary)
	}
	return strings.TrimSuffix(b.String(), "\n")
}
