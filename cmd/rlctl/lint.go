package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rlctl/rlctl/finding"
	"github.com/rlctl/rlctl/lint"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/revision"
	"github.com/rlctl/rlctl/schema"
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

Governance (--base): with --base REF, lint also compares the policies with what
they were at REF and runs the governance rules (RL020 to RL026, RL031) on the change: a
new or tightened rule enters at shadow, a stage advances one step at a time and
not before its dwell (7 days in shadow and in soft unless the domain's governance
block says otherwise), a stage change sets a new since and no since is in the
future, and a critical-path rule made fail-open or removed gives a reason; and a
warning when a rule's counts restart (renamed, its keys or sub-shards changed). REF is
a Git commit, branch or tag of the repository around the PATHs, whose files at
the same paths are loaded (git must be installed); when the value names an
existing directory or .cue file, that is loaded as the base instead. Days count in
UTC up to --today (YYYY-MM-DD, default today), so CI runs are repeatable. Without
--base the governance rules do not run.

Exit codes: 0 no errors (warnings allowed unless --fail-on-warn), 1 errors (or
warnings with --fail-on-warn), 3 usage or tool error (a bad flag, a path that does
not exist or holds no .cue files, an unwritable --out, a --base that does not load).

Rules (rlctl lint --explain ID prints why, how to fix and an example; it takes an
ID or a name in any case, such as rl007 or drift-over-tolerance):
`

func newLintCmd() *cobra.Command {
	var (
		output     string
		out        string
		explain    string
		failOnWarn bool
		base       string
		today      string
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
				for _, name := range []string{"output", "out", "fail-on-warn", "base", "today"} {
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
			opts, err := governanceOptions(cmd, base, today, args)
			if err != nil {
				return err
			}
			fs, err := lint.RunWith(opts, args...)
			if err != nil {
				// Policy problems are findings; anything else (a missing path, no .cue files)
				// is a tool error.
				return usageErrorf("lint: %w", err)
			}
			report := &finding.Report{Findings: fs, Rules: lint.Rules()}
			if out != "" && out != "-" {
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
	f.StringVar(&out, "out", "", "write findings to `FILE` (atomically) instead of stdout; - is stdout")
	f.BoolVar(&failOnWarn, "fail-on-warn", false, "exit 1 on warnings too")
	f.StringVar(&base, "base", "", "also run the governance rules on the change from `REF` (a Git revision, or a directory or .cue file when the value is an existing one)")
	f.StringVar(&today, "today", "", "the day governance counts dwell to, `YYYY-MM-DD` (default: today in UTC); needs --base")
	f.StringVar(&explain, "explain", "", "print the explanation of rule `ID` (such as RL007, rl007 or drift-over-tolerance) and exit; takes no PATH")
	return cmd
}

// governanceOptions loads the base of --base, if given, and the day of --today.
func governanceOptions(cmd *cobra.Command, base, today string, paths []string) (lint.Options, error) {
	if base == "" {
		if cmd.Flags().Changed("today") {
			return lint.Options{}, usageErrorf("lint: --today applies with --base only")
		}
		if cmd.Flags().Changed("base") {
			return lint.Options{}, usageErrorf("lint: --base needs a REF or a DIR")
		}
		return lint.Options{}, nil
	}
	opts := lint.Options{Today: time.Now().UTC()}
	if today != "" {
		t, err := time.Parse(time.DateOnly, today)
		if err != nil {
			return lint.Options{}, usageErrorf("lint: --today %q: want a date YYYY-MM-DD", today)
		}
		opts.Today = t
	}
	m, err := loadBase(base, paths)
	if err != nil {
		return lint.Options{}, usageErrorf("lint: --base %s: %w", base, err)
	}
	opts.Base = m
	return opts, nil
}

// loadBase loads the policies as they are at base: the directory or .cue file base when it is
// an existing one (as a PATH is read), else the paths at Git revision base.
func loadBase(base string, paths []string) (*policy.Model, error) {
	if fi, err := os.Stat(base); err == nil && (fi.IsDir() || (fi.Mode().IsRegular() && strings.HasSuffix(base, ".cue"))) {
		return schema.Load(base)
	}
	return revision.Load(base, paths...)
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
	width := 0
	for _, r := range lint.Rules() {
		width = max(width, len(r.Name))
	}
	for _, r := range lint.Rules() {
		fmt.Fprintf(&b, "  %s  %-7s  %-*s %s\n", r.ID, r.Severity, width, r.Name, r.Summary)
	}
	return strings.TrimSuffix(b.String(), "\n")
}
