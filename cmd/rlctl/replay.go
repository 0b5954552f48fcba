package main

import (
	"io"
	"os"

	"github.com/rlctl/rlctl/journal"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/schema"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

const replayLong = `Replay an enforcer's decision journals and list every decision that comes out differently.

Each --journal FILE (repeatable; "-" is stdin) is a journal an enforcer wrote (rlctl-enforcer
--journal FILE). Its decisions are re-run through the same engine code the enforcer ran (rule plans, stages,
lease managers), with the store answering from the journal's replies and the clock reading the
journal's times. Every decision that comes out differently is listed as "FILE:LINE: instance I:
decision: key K: rule R: recorded ...; replayed ..."; store calls made differently, tokens given
back differently at shutdown, and records the enforcer dropped are listed too. A journal whose
last line was cut off mid-write (the enforcer crashed) is replayed up to it, and the report
says so.

Each journal's config records name their policy by content hash (content_hash of rlctl render
--target snapshot): --policies and every --snapshot FILE are the candidates. --policies is read
when given, or when no --snapshot is.

Output (-o): text (default) or json (schema rlctl.journal-replay/v1), to stdout or --out FILE.

Exit codes: 0 every decision replayed exactly, 1 anything differs (a decision, a store call or
reply, the tokens returned) or the enforcer dropped records, 3 usage or tool error (a bad flag,
an unreadable journal or policy, a journal written before version 2, a config that none of the
given policies has).`

// replayFlags are replay's flags as given.
type replayFlags struct {
	policies, output, out string
	journals, snapshots   []string
	// policiesGiven is whether --policies was given: without it, snapshots alone are the
	// candidates.
	policiesGiven bool
}

// register defines replay's flags on fs. simulate's deprecated --journal mode accepts exactly
// these flags, so this is the one list of them.
func (rf *replayFlags) register(fs *pflag.FlagSet) {
	fs.StringArrayVar(&rf.journals, "journal", nil, `an enforcer's decision journal to replay (repeatable; "-" is stdin)`)
	fs.StringVar(&rf.policies, "policies", "policies", "policy directory the journals may name")
	fs.StringArrayVar(&rf.snapshots, "snapshot", nil, "a policy snapshot the journals may name (repeatable)")
	fs.StringVarP(&rf.output, "output", "o", "text", "output format: text or json")
	fs.StringVar(&rf.out, "out", "", "write the report to this file instead of stdout; - is stdout")
}

func newReplayCmd() *cobra.Command {
	var rf replayFlags
	cmd := &cobra.Command{
		Use:   "replay --journal FILE... [--policies DIR] [--snapshot FILE...] [flags]",
		Short: "Replay an enforcer's decision journal and list the decisions that differ",
		Long:  replayLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rf.policiesGiven = cmd.Flags().Changed("policies")
			return replayJournals(cmd, rf)
		},
	}
	rf.register(cmd.Flags())
	return cmd
}

// replayJournals replays rf.journals against the candidate models and writes the report. Errors
// name cmd: replay, or simulate for its deprecated --journal.
func replayJournals(cmd *cobra.Command, rf replayFlags) error {
	name := cmd.Name()
	if len(rf.journals) == 0 {
		return usageErrorf("%s: no --journal given", name)
	}
	if rf.output != "text" && rf.output != "json" {
		return usageErrorf("%s: -o %q: want text or json", name, rf.output)
	}
	var models []*policy.Model
	if rf.policiesGiven || len(rf.snapshots) == 0 {
		m, err := schema.Load(rf.policies)
		if err != nil && !rf.policiesGiven {
			// The default directory: the user may not know there is one.
			return usageErrorf("%s: no --snapshot given, and the default --policies %q does not load (%w): give --snapshot FILE or --policies DIR", name, rf.policies, err)
		}
		if err != nil {
			return usageErrorf("%s: loading %s: %w", name, rf.policies, err)
		}
		models = append(models, m)
	}
	for _, p := range rf.snapshots {
		m, err := readSnapshotFile(p)
		if err != nil {
			return usageErrorf("%s: --snapshot %s: %w", name, p, err)
		}
		models = append(models, m)
	}
	if err := stdinOnce("--journal", rf.journals); err != nil {
		return usageErrorf("%s: %w", name, err)
	}
	var inputs []journal.Input
	for _, p := range rf.journals {
		if p == "-" {
			inputs = append(inputs, journal.Input{Name: "stdin", R: cmd.InOrStdin()})
			continue
		}
		f, err := os.Open(p)
		if err != nil {
			return usageErrorf("%s: %w", name, fileFlagError("--journal", p, err))
		}
		defer f.Close()
		inputs = append(inputs, journal.Input{Name: p, R: f})
	}
	r, err := journal.Replay(cmd.Context(), models, inputs)
	if err != nil {
		return usageErrorf("%s: %w", name, err)
	}
	if err := writeReport(cmd, rf.out, func(w io.Writer) error { return journal.WriteReport(w, r, rf.output) }); err != nil {
		return err
	}
	if len(r.Mismatches) > 0 {
		return findings()
	}
	return nil
}

func readSnapshotFile(path string) (*policy.Model, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return policy.ReadSnapshot(f)
}

// simulateJournals runs the deprecated simulate --journal as rlctl replay. A flag given must be
// one of replay's: the others belong to log replay and are rejected, naming the flag, since a
// --fail-if that silently never fails a journal replay would pass CI by mistake.
func simulateJournals(cmd *cobra.Command) error {
	var rf replayFlags
	fs := pflag.NewFlagSet("replay", pflag.ContinueOnError)
	rf.register(fs)
	var err error
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if err == nil {
			err = copyFlag(fs, f)
		}
	})
	if err != nil {
		return err
	}
	rf.policiesGiven = fs.Changed("policies")
	return replayJournals(cmd, rf)
}

// copyFlag sets simulate's flag f, as given, on replay's flag set fs.
func copyFlag(fs *pflag.FlagSet, f *pflag.Flag) error {
	to := fs.Lookup(f.Name)
	if to == nil {
		return usageErrorf("simulate: --%s applies to --log replay only", f.Name)
	}
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		to.Changed = true
		return to.Value.(pflag.SliceValue).Replace(sv.GetSlice())
	}
	v := f.Value.String()
	if f.Name == "output" && v == "table" {
		v = "text" // simulate's default format, which --journal always read as text
	}
	if err := fs.Set(f.Name, v); err != nil {
		return usageErrorf("simulate: --%s: %w", f.Name, err)
	}
	return nil
}

// simulateJournalDeprecated is the note simulate --journal prints on stderr.
const simulateJournalDeprecated = "rlctl: simulate --journal is deprecated and will be removed: use rlctl replay --journal (same flags)"
