package main

import (
	"fmt"
	"strings"

	"github.com/rlctl/rlctl/finding"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/policytest"
	"github.com/rlctl/rlctl/schema"
	"github.com/spf13/cobra"
)

const testLong = `Run unit tests for rate-limit policies.

Each test file (every *.cue file in the given directories, default policies/tests) names a
policy directory and, per test, a sequence of requests with the decision each should get: the
engine's verdict (ok, over_limit, unmatched), optionally the answer after the rule's stage, the
remaining tokens and the retry-after. Requests are HTTP fields (headers, path, remote_addr, JWT
claims) or an explicit descriptor, at time offsets, with a cost (hits) and a repeat count.
They run through the same descriptor construction and engine as simulate, on a fresh in-memory
store per test. See the policytest package documentation for the file format.

Failed expectations are reported like lint findings, at the request's file:line:col, in the
chosen output format; a summary goes to stderr.

Exit codes: 0 all tests passed, 1 a test failed, 3 usage or tool error (a bad test file, a
policy that does not load).`

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
			}
			paths, err := policytest.Discover(args)
			if err != nil {
				return usageErrorf("test: %w", err)
			}
			var files []*policytest.File
			for _, p := range paths {
				f, err := policytest.Load(p)
				if err != nil {
					return usageErrorf("test: %w", err)
				}
				if policies != "" {
					f.Policies = policies
				}
				files = append(files, f)
			}
			res, err := policytest.Run(files, func(dir string) (*policy.Model, error) { return schema.Load(dir) })
			if err != nil {
				return usageErrorf("test: %w", err)
			}
			finding.Sort(res.Findings)
			rep := &finding.Report{Findings: res.Findings, Rules: []finding.Rule{policytest.Rule}}
			if out != "" {
				if err := finding.WriteFile(out, format, rep); err != nil {
					return usageErrorf("test: %w", err)
				}
			} else if err := format.Write(cmd.OutOrStdout(), rep); err != nil {
				return usageErrorf("test: %w", err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "policy tests: %d passed, %d failed\n", res.Passed, res.Failed)
			if res.Failed > 0 {
				return findings()
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&output, "output", "o", "text", "output format: "+strings.Join(finding.FormatNames, ", "))
	f.StringVar(&out, "out", "", "write the findings to this file instead of stdout")
	f.StringVar(&policies, "policies", "", "test this policy directory instead of the one each test file names")
	return cmd
}
