package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/spf13/cobra"

	"github.com/rlctl/rlctl/erlconfig"
	"github.com/rlctl/rlctl/internal/atomicfile"
	"github.com/rlctl/rlctl/policy"
)

const importLong = `Import another rate limiter's configuration as rlctl policy.`

const importRatelimitLong = `Import envoyproxy/ratelimit configuration as CUE policy files.

Each FILE is one envoyproxy/ratelimit YAML (or JSON) document; a DIR stands for
its .yaml, .yml and .json files (not its subdirectories). Every domain becomes
one CUE file, DIR/DOMAIN.cue, formatted like cue fmt, in package "policies" (a
leading '_' or '.', which the policy loader skips, and any byte other than a
letter, digit, '_', '.' or '-' are written %XX: _internal is %5Finternal.cue).

What becomes what:
  a descriptor with a rate_limit   a rule: match = the descriptor's key path, one
                                   limit, algorithm fixed_window (so behaviour is
                                   kept), window 1s, 1m, 1h, 1d, 7d (week), 30d
                                   (month) or 365d (year)
  rate_limit name                  the rule's name (made a valid, unique name);
                                   without one, the key path (tenant_acme_path)
  shadow_mode                      stage shadow
  quota_mode                       stage soft (admits, with a warning header)
  unlimited                        no rule: a request no rule matches is admitted
  a '*' inside a value             a literal '*', as in envoyproxy/ratelimit
  every descriptor key             a source, with a TODO: envoyproxy/ratelimit's
                                   YAML does not say how Envoy fills a key. Replace
                                   each placeholder header source with the source
                                   your Envoy rate_limits actions use, then run
                                   rlctl lint.

Refused, with the file:line:col of each: bad YAML, an unknown or misplaced key,
a domain given twice, what envoyproxy/ratelimit's loader refuses, and what rlctl
has no equivalent for: replaces, detailed_metric, value_to_metric,
share_threshold, requests_per_unit 0 (or none) or beyond rlctl's exact integer range,
and an unlimited (or limit-less) descriptor that exempts values from a sibling's
limit. Then rlctl exits 1 and writes nothing: the files are written only when
every input converted, each one atomically. What is imported with a caveat is printed to stderr as a note.

Exit codes: 0 imported (the files written are listed on stdout), 1 refused,
3 usage or tool error (a missing path, a directory without configuration, an
unwritable --out).`

func newImportCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "import",
		Short: "Import another rate limiter's configuration as policy",
		Long:  importLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErrorf("import: name what to import: ratelimit")
		},
	}
	cmd.AddCommand(newImportRatelimitCmd())
	return cmd
}

func newImportRatelimitCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "ratelimit FILE|DIR... --out DIR",
		Short: "Import envoyproxy/ratelimit YAML as CUE policy files",
		Long:  importRatelimitLong,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf("import ratelimit: name at least one FILE or DIR")
			}
			if out == "" {
				return usageErrorf("import ratelimit: --out DIR is required")
			}
			names, err := erlFiles(args)
			if err != nil {
				return usageErrorf("import ratelimit: %w", err)
			}
			var cfgs []*erlconfig.Config
			var probs policy.Problems
			for _, name := range names {
				data, err := os.ReadFile(name)
				if err != nil {
					return usageErrorf("import ratelimit: %w", err)
				}
				c, err := erlconfig.Parse(name, data)
				var ps policy.Problems
				if errors.As(err, &ps) {
					probs = append(probs, ps...)
					continue
				}
				cfgs = append(cfgs, c)
			}
			// The files that parsed are converted even when others did not, so that every
			// problem is reported at once.
			files, notes, err := erlconfig.Import(cfgs)
			var ips policy.Problems
			switch {
			case errors.As(err, &ips):
				probs = append(probs, ips...)
			case err != nil:
				return usageErrorf("import ratelimit: %w", err)
			}
			stderr := cmd.ErrOrStderr()
			if len(probs) > 0 {
				for _, p := range probs {
					fmt.Fprintln(stderr, p.String())
				}
				return findings()
			}
			for _, n := range notes {
				fmt.Fprintf(stderr, "note: %s\n", n)
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return usageErrorf("import ratelimit: --out %w", err)
			}
			for _, f := range files {
				path := filepath.Join(out, f.Name)
				if err := atomicfile.Write(path, func(w io.Writer) error {
					_, err := w.Write(f.Data)
					return err
				}); err != nil {
					return usageErrorf("import ratelimit: --out %w", err)
				}
				fmt.Fprintln(cmd.OutOrStdout(), path)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "the `DIR` to write DOMAIN.cue files into (created when missing)")
	return cmd
}

// erlFiles expands the arguments: a file as it is, a directory as its configuration files,
// sorted.
func erlFiles(args []string) ([]string, error) {
	var names []string
	for _, a := range args {
		fi, err := os.Stat(a)
		if err != nil {
			return nil, err
		}
		if !fi.IsDir() {
			names = append(names, a)
			continue
		}
		entries, err := os.ReadDir(a)
		if err != nil {
			return nil, err
		}
		var found []string
		for _, e := range entries {
			ext := filepath.Ext(e.Name())
			if e.Type().IsRegular() && (ext == ".yaml" || ext == ".yml" || ext == ".json") {
				found = append(found, filepath.Join(a, e.Name()))
			}
		}
		if len(found) == 0 {
			return nil, fmt.Errorf("%s: no envoyproxy/ratelimit configuration (.yaml, .yml or .json files)", a)
		}
		slices.Sort(found)
		names = append(names, found...)
	}
	return names, nil
}
