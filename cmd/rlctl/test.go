package main

import (
	"fmt"
	"strings"

	"github.com/rlctl/rlctl/finding"
	"github.com/rlctl/rlctl/internal/english"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/policytest"
	"github.com/rlctl/rlctl/schema"
	"github.com/spf13/cobra"
)

const testLong = `Run unit tests for rate-limit policies.

Each test file names a policy directory and, per test, a sequence of requests with the
decision each should get: the engine's verdict (ok, over_limit, unmatched), optionally the
answer after the rule's stage, the remaining tokens and the retry-after. Requests are HTTP
fields (headers, path, remote_addr, JWT claims) or an explicit descriptor, at time offsets,
with a cost (hits) and a repeat count. They run through the same descriptor construction and
engine as simulate, on a fresh in-memory store per test. See the policytest package
documentation for the file format.

A test file is a .cue file with a top-level policies: or tests: field. Each DIR is a directory
of test files (its *.cue files); a policy directory, one without test files but with a tests
subdirectory, stands for that subdirectory, so "rlctl test policies" runs policies/tests. The
default is policies/tests, or tests when there is no policies/tests here (run from inside the
policy directory). Naming a .cue file that is not a test file (a policy file, say) is
an error that says so. A .cue file that does not parse is neither: among test files it is run,
so that its syntax error is a finding; in a policy directory the tests run and the policy's
load reports it.

The format is closed: a field it does not have (a misspelt one such as headrs) is an error,
not ignored. Problems with a test file (a CUE syntax error, an unknown field, a wrong type, a
bad value) are findings (TEST000) at the file's line and column, like lint's RL000; failed
expectations are findings (TEST001) at the request's position. They are written in the chosen
output format (text, json, github annotations or sarif), to stdout or --out FILE; a summary
("policy tests: 10 passed, 1 failed; 2 errors in test files") goes to stderr; the json format
also has the counts: "tests": {"passed": 10, "failed": 1, "file_errors": 2}. A test that cannot
run, such as one naming a domain the policies lack, is an error in its file, not a failed test.

Exit codes: 0 all tests passed, 1 a test failed or a test file is wrong, 3 usage or tool error
(a bad flag, a path that does not exist or holds no test files, a policy that does not load, an
unwritable --out).`

func newTestCmd() *cobra.Command {
	var output, out, policies string
	cmd := &cobra.Command{
		Use:   "test [DIR|FILE...]",
		Short: "Run policy unit tests",
		Long:  testLong,
		RunE: func(cmd *cobra.Command, args []string) error {
			format, err := finding.ParseFormat(output)
			if err != nil {
				return usageErrorf("test: %w", err)
			}
			if len(args) == 0 {
				args = []string{"policies/tests"}
				if !isDir(args[0]) && isDir("tests") {
					args = []string{"tests"} // run from inside the policy directory
				}
			}
			paths, err := policytest.Discover(args)
			if err != nil {
				return usageErrorf("test: %w", err)
			}
			files, bad, err := policytest.LoadFiles(paths)
			if err != nil {
				return usageErrorf("test: %w", err)
			}
			if policies != "" {
				for _, f := range files {
					f.Policies = policies
				}
			}
			res, err := policytest.Run(files, func(dir string) (*policy.Model, error) { return schema.Load(dir) })
			if err != nil {
				return usageErrorf("test: %w", err)
			}
			fs := append(bad, res.Findings...)
			finding.Sort(fs)
			// Problems with test files are counted apart from failed tests, whether loading or
			// running the file found them.
			errs := len(bad) + res.Errors
			rep := &finding.Report{Findings: fs, Rules: policytest.Rules,
				Tests: &finding.TestCounts{Passed: res.Passed, Failed: res.Failed, FileErrors: errs}}
			if out != "" && out != "-" {
				if err := finding.WriteFile(out, format, rep); err != nil {
					return usageErrorf("test: --out %w", err)
				}
			} else if err := format.Write(cmd.OutOrStdout(), rep); err != nil {
				return usageErrorf("test: %w", err)
			}
			sum := fmt.Sprintf("policy tests: %d passed, %d failed", res.Passed, res.Failed)
			if errs > 0 {
				sum += fmt.Sprintf("; %s in test files", english.Plural(errs, "error"))
			}
			fmt.Fprintln(cmd.ErrOrStderr(), sum)
			if res.Failed > 0 || errs > 0 {
				return findings()
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&output, "output", "o", "text", "output format: "+strings.Join(finding.FormatNames, ", "))
	f.StringVar(&out, "out", "", "write the findings to this file (atomically) instead of stdout; - is stdout")
	f.StringVar(&policies, "policies", "", "test this policy directory instead of the one each test file names")
	return cmd
}
