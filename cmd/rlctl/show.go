package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rlctl/rlctl/contract"
	"github.com/rlctl/rlctl/schema"
)

const showLong = `Show the contract matrix: every rule of a policy repository, one row each.

PATH is a directory of .cue policy files (not its subdirectories; files starting
with '_' or '.' are skipped) or a .cue file, default "."; several paths make one
policy. Rows come by domain name, and within a domain in precedence order (the
order in which descriptor lookup tries the rules). Each row says:

  domain, rule  the domain Envoy names and the rule's name
  match         the descriptor match, outermost entry first: key="value", a value
                ending in '*' for a prefix, or the key alone for any value
  limit         requests/window of each limit (a request must fit all of them),
                with its burst (the token bucket's capacity; "-" for the window
                algorithms, which have none), algorithm and cost (tokens a request
                spends)
  stage, since  the rollout stage (canary with its share of enforcers), the day it
                began, and "held: REASON" when rlctl rollout pause holds the rule
  failure       what the rule does while the store is unavailable: open or closed,
                with the policy's reason
  fallback      the local bucket that caps a fail-open rule meanwhile, or "default"
                (twice each key's recently admitted rate)
  owner, sub_shards, regions, source  the owning team, the key's split into shard
                keys by an attribute, each region's share of the quota, and the
                rule's file:line
Settings a rule inherits from its domain's defaults are shown as they apply.

Output (-o):
  table     a table for a terminal (the default; "text" is the same)
  markdown  a GitHub-flavoured markdown table, for a pull request or a wiki
  json      {"rules": [{"domain", "rule", "match": [{"key", "value", "kind"}],
            "limits": [{"requests", "window", "window_ms", "burst", "algorithm",
            "cost"}], "stage": {"name", "percent", "since", "hold"}, "failure":
            {"mode", "reason", "fallback": {"requests", "window", "window_ms"}},
            "owner", "sub_shards": {"count", "attribute"}, "regions": [{"region",
            "percent"}], "file", "line", "col"}]}; kind is exact, wildcard or any;
            burst is left out for the window algorithms, and empty fields are left
            out
  csv       a header row, then one row per rule: the table's columns, several
            limits separated by "; " in the limit columns, and file and line

--domain and --owner (repeatable, or comma-separated) keep the rules of those
domains and of rules with those owners; both together keep rules that match both.
A value that matches nothing is not an error: the matrix is printed without those
rules (so it may be empty) and a note on stderr names the domains or owners there
are.

Exit codes: 0 the matrix was printed; 1 the policy does not load (its problems are
printed to stderr, each message followed by its file:line:col positions, as render
prints them; rlctl lint reports them as findings); 3 usage or tool error (an
unknown format, a missing path, a directory without .cue files).`

func newShowCmd() *cobra.Command {
	var (
		output string
		filter contract.Filter
	)
	cmd := &cobra.Command{
		Use:   "show [PATH...] [-o table|markdown|json|csv] [--domain D] [--owner O]",
		Short: "Show every rule's contract in one table",
		Long:  showLong,
		RunE: func(cmd *cobra.Command, args []string) error {
			format, err := contract.ParseFormat(output)
			if err != nil {
				return usageErrorf("show: %w", err)
			}
			if len(args) == 0 {
				args = []string{"."}
			}
			m, err := schema.Load(args...)
			if err != nil {
				return loadError(cmd.ErrOrStderr(), "show", err)
			}
			if err := format(cmd.OutOrStdout(), contract.Rows(m, filter)); err != nil {
				return usageErrorf("show: %w", err)
			}
			for _, note := range contract.Unmatched(m, filter) {
				fmt.Fprintf(cmd.ErrOrStderr(), "rlctl: show: %s\n", note)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&output, "output", "o", "table", "output format: "+strings.Join(contract.FormatNames, ", "))
	f.StringSliceVar(&filter.Domains, "domain", nil, "show the rules of domain `D` only (repeatable)")
	f.StringSliceVar(&filter.Owners, "owner", nil, "show the rules whose owner is `O` only (repeatable)")
	return cmd
}
