package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rlctl/rlctl/diff"
	"github.com/rlctl/rlctl/internal/atomicfile"
	"github.com/rlctl/rlctl/lint"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/revision"
	"github.com/rlctl/rlctl/schema"
	"github.com/rlctl/rlctl/simulate"
	"github.com/rlctl/rlctl/simulate/accesslog"
	"github.com/rlctl/rlctl/simulate/report"
)

const diffLong = `Show the semantic changes between two versions of a policy.

diff loads the policy made of PATH... (directories or .cue files, default ".", as
lint reads them) at a base and at a head, and lists what changed per rule and
domain: rules added, removed or renamed (same match, new name); limits tightened
or loosened, by how much in percent of the rate; window, burst, algorithm and cost;
stage moves (advanced one step, skipped, rolled back, a new since); failure mode,
reason and fallback; the match, and a source that builds another descriptor (a
header renamed), shown on every rule that uses it; lease, sub-shards, regions,
owner and capacity; and the domain's own settings. Each change names its file:line
at base and at head. A rule moved between files or reformatted is unchanged.

Sides: --base and --head each take a Git revision (a commit, branch or tag of the
repository around the PATHs, whose files at those paths are loaded; git must be
installed) or a directory or .cue file: a value that names an existing one is
loaded as it is, and PATH does not apply to it (write refs/heads/NAME for a branch
that has a directory's name). --base defaults to the merge base of HEAD with the
default branch (origin's HEAD, else main, else master); --head to the working tree.

Output (-o), to stdout or --out FILE (written atomically):
  text      terraform-plan style: per domain, "~ RULE: 200/s → 150/s (−25%)  [KIND]"
            (+ added, - removed, ~ changed) over "base FILE:LINE → head FILE:LINE",
            then a summary line: "Plan: 1 added, 2 changed, 0 removed." or
            "No changes." (counted in rules and domains)
  json      {"changes": [{"domain", "rule", "kind", "summary", "before", "after",
            "percent", "base": {"file", "line", "col"}, "head": {...}}],
            "summary": {"added", "changed", "removed", "changes"},
            "blast_radius": {...}} (with --log)
  markdown  a pull-request comment: the summary, a table per domain (folded in
            <details> past 10 changes), the blast radius; under GitHub's 65,536
            characters
{{kinds}}
Negative percentages are written with a minus sign (U+2212) in text and markdown,
and as plain numbers in JSON.

Blast radius (--log FILE, repeatable; not stdin, which cannot be read twice): the
logs are replayed through base and then head with simulate's engine and settings
(--log-format, --field, --gateways, --assign, --legit, --nat-users, --top and
--max-bad mean what they mean for rlctl simulate, with the same defaults; the store
latency is simulate's default, 1ms). Requests are compared one by one, by log and
line: newly denied (some rule rejects it at head at its stage, none did at base),
newly admitted (the reverse), and the same at any stage (newly would deny, no
longer would deny), so a rule in shadow shows what it would do. Per rule, with the
top identities newly denied and simulate's notes on them (denials of legitimate
callers, users seen behind a shared address).

Exit codes: 0 no changes (or changes, without --exit-code), 2 changes (with
--exit-code), 1 a side does not load (its problems are printed on stderr as lint
prints them, under the side's name), 3 usage or tool error (a bad flag, an unknown
revision, a path that does not exist, no default branch for --base, an unreadable
log).`

// diffFlags are diff's flags as given.
type diffFlags struct {
	logReplayFlags
	base, head, output, out string
	exitCode                bool
	maxBad                  int64
}

func newDiffCmd() *cobra.Command {
	var df diffFlags
	cmd := &cobra.Command{
		Use:   "diff [--base REF|DIR] [--head REF|DIR] [PATH...]",
		Short: "Show the semantic changes between two versions of a policy",
		Long:  strings.Replace(diffLong, "{{kinds}}", kindList(), 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDiff(cmd, df, args)
		},
	}
	f := cmd.Flags()
	f.StringVar(&df.base, "base", "", "the version to compare against: a Git `REF`, or a DIR or .cue file (default: the merge base with the default branch)")
	f.StringVar(&df.head, "head", "", "the version to compare: a Git `REF`, or a DIR or .cue file (default: the working tree)")
	f.StringVarP(&df.output, "output", "o", "text", "output format: text, json or markdown")
	f.StringVar(&df.out, "out", "", "write the output to `FILE` (atomically) instead of stdout; - is stdout")
	f.BoolVar(&df.exitCode, "exit-code", false, "exit 2 when there are changes, 0 when there are none")
	f.StringArrayVar(&df.logs, "log", nil, "access log to replay through both versions for the blast radius (repeatable; gzip is detected)")
	f.StringVar(&df.logFormat, "log-format", "", "envoy-json, envoy-text, jsonl or csv (default: detected)")
	f.StringArrayVar(&df.fields, "field", nil, "map a log key onto a field or header: NAME=KEY (repeatable)")
	f.IntVar(&df.gateways, "gateways", defaultGateways, "virtual gateways, each with its own lease manager")
	f.StringVar(&df.assign, "assign", "round-robin", "gateway assignment: round-robin, hash:FIELD or field:FIELD")
	f.StringVar(&df.legitFile, "legit", "", "file of legitimate descriptor values, one per line (VALUE or KEY=VALUE)")
	f.IntVar(&df.natUsers, "nat-users", 20, "users behind one address or subnet that make its denials shared-NAT collateral")
	f.IntVar(&df.top, "top", 10, "newly denied identities to list per rule (0: none)")
	f.Int64Var(&df.maxBad, "max-bad", 100, "bad log lines tolerated before the run fails (-1: no limit)")
	return cmd
}

// kindList lists the change kinds for the help, wrapped as the rest of it is.
func kindList() string {
	var b strings.Builder
	line := "Kinds:"
	for i, k := range diff.Kinds {
		word := " " + string(k) + ","
		if i == len(diff.Kinds)-1 {
			word = " " + string(k) + "."
		}
		if len(line)+len(word) > 82 {
			b.WriteString(line + "\n")
			line = " "
		}
		line += word
	}
	b.WriteString(line)
	return b.String()
}

func runDiff(cmd *cobra.Command, df diffFlags, paths []string) error {
	switch df.output {
	case "text", "json", "markdown", "md":
	default:
		return usageErrorf("diff: -o %q: want text, json or markdown", df.output)
	}
	blast, err := df.parseBlast(cmd)
	if err != nil {
		return err
	}
	if blast != nil {
		// The heap's advice for the replays runs while the two sides load (as for simulate).
		var restore func()
		blast.memoryReady, restore = simulate.TuneMemory()
		defer restore()
	}
	if len(paths) == 0 {
		paths = []string{"."}
	}
	baseRef := df.base
	if !cmd.Flags().Changed("base") {
		if baseRef, err = revision.DefaultBase(paths[0]); err != nil {
			if errors.Is(err, revision.ErrNotARepository) {
				return usageErrorf("diff: the default --base, a merge base, needs Git: %w; give --base REF|DIR", err)
			}
			return usageErrorf("diff: the default --base: %w", err)
		}
	} else if baseRef == "" {
		return usageErrorf("diff: --base needs a REF or a DIR")
	}
	sides := []struct {
		name, value string
		m           *policy.Model
	}{{name: "base", value: baseRef}, {name: "head", value: df.head}}
	var broken []string
	for i := range sides {
		s := &sides[i]
		s.m, err = loadSide(s.value, paths)
		var probs schema.Problems
		switch {
		case errors.As(err, &probs):
			fmt.Fprintf(cmd.ErrOrStderr(), "rlctl diff: %s (%s) does not load:\n", s.name, sideName(s.value))
			for _, f := range lint.ProblemFindings(probs) {
				fmt.Fprintln(cmd.ErrOrStderr(), f)
			}
			broken = append(broken, s.name)
		case err != nil:
			return usageErrorf("diff: --%s %s: %w", s.name, sideName(s.value), err)
		}
	}
	if len(broken) > 0 {
		verb := "does"
		if len(broken) > 1 {
			verb = "do"
		}
		return &exitError{code: ExitFindings, err: fmt.Errorf("diff: the %s %s not load", strings.Join(broken, " and the "), verb)}
	}
	base, head := sides[0].m, sides[1].m
	if len(base.Domains) == 0 && len(head.Domains) == 0 {
		// A path that is nowhere (a typo) would read as two empty policies: "No changes."
		for _, p := range paths {
			if _, err := os.Stat(p); err != nil {
				at := baseRef
				if df.head != revision.WorkingTree {
					at += " or " + df.head
				}
				return usageErrorf("diff: %s: no such path in the working tree, nor at %s", p, at)
			}
		}
	}
	cs := diff.Compare(base, head)
	var opts []diff.Option
	if blast != nil {
		b, err := blast.run(cmd, base, head)
		if err != nil {
			return err
		}
		opts = append(opts, diff.WithBlast(b))
	}
	write := func(w io.Writer) error {
		switch df.output {
		case "json":
			return diff.WriteJSON(w, cs, opts...)
		case "markdown", "md":
			return diff.WriteMarkdown(w, cs, opts...)
		}
		return diff.WriteText(w, cs, opts...)
	}
	if df.out != "" && df.out != "-" {
		if err := atomicfile.Write(df.out, write); err != nil {
			return usageErrorf("diff: --out %w", err)
		}
	} else if err := write(cmd.OutOrStdout()); err != nil {
		return usageErrorf("diff: %w", err)
	}
	if df.exitCode && len(cs) > 0 {
		return &exitError{code: ExitDifference}
	}
	return nil
}

// loadSide loads one side: the working tree of paths for "", else as lint --base does (a
// directory when the value names one, else the paths at that Git revision).
func loadSide(value string, paths []string) (*policy.Model, error) {
	if value == revision.WorkingTree {
		missing := 0
		for _, p := range paths {
			if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
				missing++
			}
		}
		if missing > 0 && missing == len(paths) {
			// Deleted in the working tree (a change that removes the policy): no policy, so
			// that everything the base has is removed. A path that is nowhere is runDiff's error.
			return &policy.Model{}, nil
		}
		return revision.Load(revision.WorkingTree, paths...)
	}
	return loadBase(value, paths)
}

// sideName names a side's value in messages.
func sideName(value string) string {
	if value == revision.WorkingTree {
		return "the working tree"
	}
	return value
}

// blastSettings are the blast radius's settings, parsed and checked.
type blastSettings struct {
	df diffFlags
	logReplay
	// memoryReady waits for simulate.TuneMemory, which runDiff calls before loading the sides.
	memoryReady func()
}

// parseBlast checks the --log flags; nil without --log. Every bad one is reported at once, as
// a usage error.
func (df diffFlags) parseBlast(cmd *cobra.Command) (*blastSettings, error) {
	var errs []error
	check := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(df.logs) == 0 {
		for _, name := range []string{"log-format", "field", "gateways", "assign", "legit", "nat-users", "top", "max-bad"} {
			if cmd.Flags().Changed(name) {
				check(fmt.Errorf("--%s applies with --log only", name))
			}
		}
		return nil, settingErrors("diff", errs)
	}
	bs := &blastSettings{df: df}
	if slices.Contains(df.logs, "-") {
		check(errors.New("--log -: the log is replayed twice, so it must be a file, not stdin"))
	}
	var replayErrs []error
	bs.logReplay, replayErrs = df.logReplayFlags.parse()
	errs = append(errs, replayErrs...)
	if err := settingErrors("diff", errs); err != nil {
		return nil, err
	}
	return bs, nil
}

// run replays the logs through base and head (simulate.Run, with its defaults for what diff
// does not set) and compares the outcomes.
func (bs *blastSettings) run(cmd *cobra.Command, base, head *policy.Model) (*diff.Blast, error) {
	bs.memoryReady()
	latency, err := simulate.ParseLatency(defaultStoreLatency, defaultLatencySeed) // both replays share it
	if err != nil {
		return nil, err
	}
	replay := func(ctx context.Context, m *policy.Model, obs simulate.Observer) (*report.Report, error) {
		inputs, total, closeAll, err := openLogs(bs.df.logs, nil)
		if err != nil {
			return nil, err
		}
		defer closeAll()
		stop := startProgress(cmd.ErrOrStderr(), total)
		defer stop()
		r, err := simulate.Run(ctx, simulate.RunConfig{
			Sim: simulate.Config{Model: m, Gateways: bs.df.gateways, Assign: bs.assign, Latency: latency,
				NATUsers: bs.df.natUsers, Legit: bs.legit, TopN: -1, Observer: obs},
			Log:    accesslog.Options{Format: bs.format, Mapping: bs.mapping},
			MaxBad: bs.df.maxBad,
		}, inputs)
		if err == nil && r.Requests == 0 {
			err = errors.New("the logs hold no records to replay")
		}
		return r, err
	}
	b, err := diff.BlastRadius(cmd.Context(), base, head, topN(bs.df.top), replay)
	if err != nil {
		return nil, usageErrorf("diff: --log: %w%s", err, noTimestampHint(bs.mapping, err.Error()))
	}
	return b, nil
}
