package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rlctl/rlctl/diff"
	"github.com/rlctl/rlctl/lint"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/rollout"
	"github.com/rlctl/rlctl/schema"
	"github.com/rlctl/rlctl/simulate"
	"github.com/rlctl/rlctl/simulate/accesslog"
	"github.com/rlctl/rlctl/simulate/report"
)

const rolloutLong = `Move rules through their rollout stages: shadow → soft → canary → enforce.

Each rule's stage block (stage: {name: "shadow", since: "2025-06-02"}) says where it is.
rollout reads it, judges the gates of the next stage, and edits it: only the stage's name,
since, canary percent and hold change; the rest of the file, comments and formatting
included, stays as it is. A rule that inherits its stage from its domain's defaults gets a
stage block of its own.

Gates (all of them must pass for a rule to be promoted):
  hold        the rule is not paused (rollout pause writes a hold; resume removes it)
  dwell       the stage's minimum dwell is over: 7 days in shadow and in soft unless the
              domain's governance block says otherwise, counted in days from since to
              --today (UTC). Canary has no dwell, so it advances on evidence only: its
              dwell gate blocks unless --log or --prometheus-url is given.
  simulate    with --log: the share of the rule's would-deny decisions in a replay of the
              log (as rlctl simulate counts them: legitimate identities and shared-NAT
              collateral) is at most --max-false-positive
  prometheus  with --prometheus-url: the enforcers' over-limit share of the rule's
              traffic (rate_limit_requests_total, decisions shadow_over and soft_over,
              and over_limit in canary; the RateLimitRuleWouldDeny alert's series) over
              the stage's dwell (a day in canary) is at most --max-false-positive
A gate that is configured but cannot be evaluated (no traffic, an unreachable
Prometheus, a rule the log never matched) blocks, with the reason. --require GATE
makes the simulate or prometheus gate block when it is not configured.

Each domain may set its own gates in a rollout block: a threshold per gate
(gates: simulate: max_false_positive, gates: prometheus: max_would_deny, in percent),
the prometheus gate's window (instead of the stage's dwell), which gates are required,
and the canary_percent that promote writes (default 5). A flag given on the command
line overrides every domain's setting: --max-false-positive the thresholds, --require
the required gates (--require= requires none), --percent the canary's share.

Rules are named DOMAIN/RULE, or RULE when one domain has it.

Pull requests (--pr, on promote, abort, pause and resume): the edit is committed on the
branch rlctl/rollout/DOMAIN/RULE, from the head of the repository's default branch,
through GitHub's REST API (no push credentials), and a pull request is opened, one per
rule. Running again updates that branch and pull request, never a second one, and keeps
one marker comment with the gate evidence edited in place. The working tree is left as
it is; its policy files must be those of the default branch's head. The token is
GITHUB_TOKEN; the repository is --repo OWNER/NAME, else GITHUB_REPOSITORY, else the
origin remote of the policy directory's repository; --github-url serves GitHub
Enterprise Server.

Exit codes: 0 done, 1 a gate blocks a rule promote was asked to promote, or the policy does not
load (its problems printed as lint prints them), 3 usage or tool error (a bad flag, a GitHub
error: a bad token, a missing repository, a rate limit).`

const rolloutStatusLong = `Show each rule's stage, its since and days in stage, the next stage, and each
gate's state: pass, blocked (with the reason) or not evaluated (with the reason).

-o json writes {"schema": "rlctl.rollout-status/v1", "today", "rules": [{"domain",
"rule", "pos", "stage", "canary_percent", "since", "days_in_stage", "next", "hold",
"gates": [{"name", "state", "reason", "value", "limit"}], "ready"}]}; state is pass,
blocked or not_evaluated, value and limit are shares (0.005 is 0.5%).

Exit codes: 0 shown (whatever the gates say), 1 the policy does not load, 3 usage or tool
error.`

const rolloutPlanLong = `Say what would be promoted today and why, or why not: every rule that has a next
stage, promoted when all its gates pass (a held rule never is), with the gates that
passed or the ones that block.

-o json writes {"schema": "rlctl.rollout-plan/v1", "today", "steps": [{"domain",
"rule", "from", "to", "promote", "why": [...]}], "enforced"}; enforced counts the
rules already at the last stage.

Exit codes: 0 planned (whatever it promotes), 1 the policy does not load, 3 usage or tool
error.`

const rolloutPromoteLong = `Advance each RULE one stage, in the policy files: the stage's name becomes the next
stage and its since --date (default --today). --to STAGE says which stage is
expected next, and refuses a rule whose next stage is another (stages advance one
step at a time). Entering canary writes the domain's rollout canary_percent
(default 5), or --percent when it is given.

Every gate must pass for every RULE, or nothing is edited and promote exits 1.
--dry-run prints the change as rlctl diff would (-o text, json or markdown) and
writes nothing; with --pr it also opens no pull request.`

const rolloutAbortLong = `Put each RULE back in shadow, since --date (default --today), whatever its stage:
it keeps counting what it would deny and rejects nothing. No gate applies.`

const rolloutPauseLong = `Hold RULE at its stage: the stage block gets hold: "REASON", and plan and promote
leave the rule where it is until rollout resume removes the hold. A hold does not
change what the rule does.`

// rolloutFlags are the flags of rollout and its subcommands.
type rolloutFlags struct {
	policies, today, date, to, reason, output string
	logs                                      []string
	logFormat, promURL                        string
	maxFP                                     string
	require                                   []string
	percent                                   int
	dryRun, pr                                bool
	repo, githubURL                           string
}

func newRolloutCmd() *cobra.Command {
	var rf rolloutFlags
	cmd := &cobra.Command{
		Use:   "rollout",
		Short: "Move rules through shadow, soft, canary and enforce, through pull requests",
		Long:  rolloutLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErrorf("rollout: give a subcommand: status, plan, promote, abort, pause or resume")
		},
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&rf.today, "today", "", "the date gates are judged on, YYYY-MM-DD (default: today, UTC; no later than that for an edit)")
	pf.StringArrayVar(&rf.logs, "log", nil, "access log to replay for the simulate gate (repeatable)")
	pf.StringVar(&rf.logFormat, "log-format", "", "envoy-json, envoy-text, jsonl or csv (default: detected)")
	pf.StringVar(&rf.promURL, "prometheus-url", "", "Prometheus server that scrapes the enforcers, for the prometheus gate")
	pf.StringVar(&rf.maxFP, "max-false-positive", "0.5%", "the simulate and prometheus gates' threshold, a share such as 0.5% or 0.005 (overrides the domains' rollout settings)")
	pf.StringSliceVar(&rf.require, "require", nil, "gates that block when not configured: simulate, prometheus (overrides the domains' rollout settings)")

	status := &cobra.Command{
		Use: "status [PATH]", Short: "Show each rule's stage and gates", Long: rolloutStatusLong,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return rolloutReport(cmd, &rf, args, false) },
	}
	plan := &cobra.Command{
		Use: "plan [PATH]", Short: "Say what would be promoted today, and why", Long: rolloutPlanLong,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return rolloutReport(cmd, &rf, args, true) },
	}
	for _, c := range []*cobra.Command{status, plan} {
		c.Flags().StringVarP(&rf.output, "output", "o", "text", "output format: text or json")
	}
	promote := &cobra.Command{
		Use: "promote RULE...", Short: "Advance rules one stage", Long: rolloutPromoteLong,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return rolloutEdit(cmd, &rf, "promote", args) },
	}
	promote.Flags().StringVar(&rf.to, "to", "", "the stage expected next: soft, canary or enforce")
	promote.Flags().IntVar(&rf.percent, "percent", policy.DefaultCanaryPercent, "the canary's share of enforcers, entering canary (overrides the domain's rollout canary_percent)")
	promote.Flags().StringVarP(&rf.output, "output", "o", "text", "--dry-run's format: text, json or markdown")
	abort := &cobra.Command{
		Use: "abort RULE...", Short: "Put rules back in shadow", Long: rolloutAbortLong,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return rolloutEdit(cmd, &rf, "abort", args) },
	}
	pause := &cobra.Command{
		Use: "pause RULE --reason TEXT", Short: "Hold a rule at its stage", Long: rolloutPauseLong,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return rolloutEdit(cmd, &rf, "pause", args) },
	}
	pause.Flags().StringVar(&rf.reason, "reason", "", "why the rule must not advance (required)")
	resume := &cobra.Command{
		Use: "resume RULE", Short: "Remove a rule's hold", Long: "Remove RULE's hold (rollout pause), so that plan and promote may advance it again.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return rolloutEdit(cmd, &rf, "resume", args) },
	}
	for _, c := range []*cobra.Command{promote, abort, pause, resume} {
		f := c.Flags()
		f.StringVar(&rf.policies, "policies", "policies", "policy directory")
		f.StringVar(&rf.date, "date", "", "the since date to write, YYYY-MM-DD (default: --today)")
		f.BoolVar(&rf.dryRun, "dry-run", false, "print the change and write nothing")
		f.BoolVar(&rf.pr, "pr", false, "commit the change on a branch and open a pull request, through GitHub's API")
		f.StringVar(&rf.repo, "repo", "", "the GitHub repository, OWNER/NAME (default: $GITHUB_REPOSITORY, else the origin remote)")
		f.StringVar(&rf.githubURL, "github-url", "", "GitHub Enterprise Server's address (default: github's public API)")
	}
	cmd.AddCommand(status, plan, promote, abort, pause, resume)
	return cmd
}

// todayOf parses --today, or returns the current UTC date.
func (rf *rolloutFlags) todayOf() (time.Time, error) {
	if rf.today == "" {
		t := time.Now().UTC()
		return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC), nil
	}
	t, err := time.Parse(time.DateOnly, rf.today)
	if err != nil {
		return t, usageErrorf("rollout: --today %q: want YYYY-MM-DD", rf.today)
	}
	return t, nil
}

// parseShare reads "0.5%" or "0.005".
func parseShare(s string) (float64, error) {
	v, pct := strings.CutSuffix(strings.TrimSpace(s), "%")
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f >= 0) { // NaN too: every gate would block "over NaN%"
		return 0, fmt.Errorf("--max-false-positive %q: want a share such as 0.5%% or 0.005", s)
	}
	if pct {
		f /= 100
	}
	if f > 1 {
		return 0, fmt.Errorf("--max-false-positive %q: more than 100%%", s)
	}
	return f, nil
}

// gateConfig gathers the gates' evidence for m: the log replay and the Prometheus client.
func (rf *rolloutFlags) gateConfig(cmd *cobra.Command, m *policy.Model) (rollout.Config, error) {
	var cfg rollout.Config
	var err error
	if cfg.Today, err = rf.todayOf(); err != nil {
		return cfg, err
	}
	if cfg.MaxFalsePositive, err = parseShare(rf.maxFP); err != nil {
		return cfg, usageErrorf("rollout: %w", err)
	}
	// Flags given on the command line override the domains' rollout settings.
	cfg.ForceMaxFalsePositive = cmd.Flags().Changed("max-false-positive")
	cfg.ForceRequire = cmd.Flags().Changed("require")
	for _, g := range rf.require {
		if g != rollout.GateSimulate && g != rollout.GatePrometheus {
			return cfg, usageErrorf("rollout: --require %q: want simulate or prometheus", g)
		}
	}
	cfg.Require = rf.require
	if rf.promURL != "" {
		if cfg.Prometheus, err = rollout.NewPrometheus(rf.promURL, nil); err != nil {
			return cfg, usageErrorf("rollout: %w", err)
		}
	}
	if len(rf.logs) > 0 {
		if cfg.Simulation, err = replayForGates(cmd, m, rf.logs, rf.logFormat); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// replayForGates replays logs through m as rlctl simulate does with its defaults.
func replayForGates(cmd *cobra.Command, m *policy.Model, logs []string, logFormat string) (*report.Report, error) {
	format, err := accesslog.ParseFormat(logFormat)
	if err != nil {
		return nil, usageErrorf("rollout: %w", err)
	}
	inputs, total, closeAll, err := openLogs(logs, cmd.InOrStdin())
	if err != nil {
		return nil, usageErrorf("rollout: %w", err)
	}
	defer closeAll()
	latency, err := simulate.ParseLatency(defaultStoreLatency, defaultLatencySeed)
	if err != nil {
		return nil, err
	}
	stop := startProgress(cmd.ErrOrStderr(), total)
	r, err := simulate.Run(cmd.Context(), simulate.RunConfig{
		Sim: simulate.Config{Model: m, Gateways: defaultGateways, Latency: latency}, Log: accesslog.Options{Format: format}, MaxBad: 100,
	}, inputs)
	stop()
	if err != nil {
		return nil, usageErrorf("rollout: --log: %w", err)
	}
	if r.Requests == 0 {
		return nil, usageErrorf("rollout: --log: the logs hold no records to replay (%d bad lines)", r.BadLines)
	}
	return r, nil
}

// rolloutReport runs status, or plan when plan is set.
func rolloutReport(cmd *cobra.Command, rf *rolloutFlags, args []string, plan bool) error {
	name := "status"
	if plan {
		name = "plan"
	}
	if rf.output != "text" && rf.output != "json" {
		return usageErrorf("rollout %s: -o %q: want text or json", name, rf.output)
	}
	dir := "policies"
	if len(args) == 1 {
		dir = args[0]
	}
	m, err := schema.Load(dir)
	if err != nil {
		// A policy that does not load is a finding (exit 1), its problems as lint prints
		// them; a directory that cannot be read is a usage error (exit 3).
		return loadError(cmd.ErrOrStderr(), "rollout "+name, err)
	}
	cfg, err := rf.gateConfig(cmd, m)
	if err != nil {
		return err
	}
	st := rollout.Evaluate(cmd.Context(), m, cfg)
	var v any = st
	write := func(w io.Writer) error { return rollout.WriteStatusText(w, st) }
	if plan {
		p := rollout.PlanOf(st)
		v, write = p, func(w io.Writer) error { return rollout.WritePlanText(w, p) }
	}
	if rf.output == "json" {
		write = func(w io.Writer) error { return rollout.WriteJSON(w, v) }
	}
	if err := write(cmd.OutOrStdout()); err != nil {
		return usageErrorf("rollout %s: %w", name, err)
	}
	return nil
}

// ruleEdit is one rule's edit, and what it does in words ("shadow → soft").
type ruleEdit struct {
	d    *policy.Domain
	r    *policy.Rule
	edit rollout.Edit
	what string
}

// rolloutEdit runs promote, abort, pause or resume.
func rolloutEdit(cmd *cobra.Command, rf *rolloutFlags, verb string, args []string) error {
	prefix := "rollout " + verb + ": "
	// A rule named twice is one rule to edit, once: it was promoted, and printed, twice.
	seen := map[string]bool{}
	args = slices.DeleteFunc(slices.Clone(args), func(a string) bool { dup := seen[a]; seen[a] = true; return dup })
	if verb == "pause" && strings.TrimSpace(rf.reason) == "" {
		return usageErrorf("%s--reason is required: say why the rule must not advance", prefix)
	}
	format := rf.output
	if verb != "promote" || format == "" {
		format = "text"
	}
	if format != "text" && format != "json" && format != "markdown" {
		return usageErrorf("%s-o %q: want text, json or markdown", prefix, format)
	}
	today, err := rf.todayOf()
	if err != nil {
		return err
	}
	// A change judged on a day to come would pass a dwell not yet served, and write a since
	// that has not begun. status and plan may look ahead; an edit may not.
	if real := time.Now().UTC().Format(time.DateOnly); today.Format(time.DateOnly) > real {
		return usageErrorf("%s--today %s is after today's date, %s (UTC): an edit is judged on a day that has come", prefix, rf.today, real)
	}
	since := today.Format(time.DateOnly)
	if rf.date != "" {
		if _, err := time.Parse(time.DateOnly, rf.date); err != nil {
			return usageErrorf("%s--date %q: want YYYY-MM-DD", prefix, rf.date)
		}
		since = rf.date
	}
	if rf.to != "" && policy.StageName(rf.to).Index() < 1 {
		return usageErrorf("%s--to %q: want soft, canary or enforce", prefix, rf.to)
	}
	if rf.percent < 1 || rf.percent > 100 {
		return usageErrorf("%s--percent %d: want 1 to 100", prefix, rf.percent)
	}
	m, err := schema.Load(rf.policies)
	if err != nil {
		return loadError(cmd.ErrOrStderr(), "rollout "+verb, err)
	}
	files, err := rollout.ReadFiles(rf.policies)
	if err != nil {
		return usageErrorf("%s%w", prefix, err)
	}
	var edits, withdraw []ruleEdit
	for _, a := range args {
		d, r, err := rollout.Resolve(m, a)
		if err != nil {
			return usageErrorf("%s%w", prefix, err)
		}
		e := ruleEdit{d: d, r: r, edit: rollout.Edit{Domain: d.Name, Rule: r.Name}}
		from := r.Stage.Name
		switch verb {
		case "promote":
			next, ok := from.Next()
			if !ok {
				return usageErrorf("%s%s/%s is at %s, the last stage", prefix, d.Name, r.Name, from)
			}
			if rf.to != "" && policy.StageName(rf.to) != next {
				return usageErrorf("%s%s/%s: --to %s, but its next stage is %s (stages advance one step at a time)", prefix, d.Name, r.Name, rf.to, next)
			}
			if err := checkSince(d, r, since, today); err != nil {
				return usageErrorf("%s%w", prefix, err)
			}
			e.edit.To, e.edit.Since = next, since
			if next == policy.StageCanary {
				e.edit.Percent = d.Rollout.Canary()
				if cmd.Flags().Changed("percent") {
					e.edit.Percent = rf.percent
				}
			}
			e.what = fmt.Sprintf("%s → %s", from, next)
		case "abort":
			if from == policy.StageShadow {
				if rf.pr && !rf.dryRun {
					// In shadow on the default branch, but a promotion may be open:
					// merged, it would advance the rule. The abort closes it.
					withdraw = append(withdraw, e)
					continue
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "rlctl rollout abort: %s/%s is in shadow already\n", d.Name, r.Name)
				continue
			}
			if err := checkSince(d, r, since, today); err != nil {
				return usageErrorf("%s%w", prefix, err)
			}
			e.edit.To, e.edit.Since = policy.StageShadow, since
			e.what = fmt.Sprintf("%s → shadow (aborted)", from)
		case "pause":
			reason := strings.TrimSpace(rf.reason)
			if r.Stage.Hold == reason {
				fmt.Fprintf(cmd.ErrOrStderr(), "rlctl rollout pause: %s/%s is paused already: %s\n", d.Name, r.Name, reason)
				continue
			}
			e.edit.Hold = &reason
			e.what = fmt.Sprintf("paused in %s: %s", from, reason)
		case "resume":
			if r.Stage.Hold == "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "rlctl rollout resume: %s/%s is not paused\n", d.Name, r.Name)
				continue
			}
			empty := ""
			e.edit.Hold = &empty
			e.what = fmt.Sprintf("resumed in %s", from)
		}
		edits = append(edits, e)
	}
	if len(withdraw) > 0 {
		if err := rolloutWithdraw(cmd, rf, withdraw, since); err != nil {
			return err
		}
	}
	if len(edits) == 0 {
		return nil
	}

	// Promote judges the gates first: one blocked rule, and nothing is edited.
	var st *rollout.Status
	if verb == "promote" {
		cfg, err := rf.gateConfig(cmd, m)
		if err != nil {
			return err
		}
		st = rollout.Evaluate(cmd.Context(), m, cfg)
		blocked := false
		for _, e := range edits {
			for _, rs := range st.Rules {
				if rs.Domain != e.d.Name || rs.Rule != e.r.Name || rs.Ready {
					continue
				}
				blocked = true
				for _, g := range rs.Gates {
					if g.State == rollout.GateBlocked {
						fmt.Fprintf(cmd.ErrOrStderr(), "rlctl rollout promote: %s/%s: gate %s blocks: %s\n", rs.Domain, rs.Rule, g.Name, g.Reason)
					}
				}
			}
		}
		if blocked {
			fmt.Fprintln(cmd.ErrOrStderr(), "rlctl rollout promote: nothing was edited")
			return findings()
		}
	}

	if rf.pr {
		return rolloutPullRequests(cmd, rf, m, files, edits, st, format)
	}
	all := make([]rollout.Edit, len(edits))
	for i, e := range edits {
		all[i] = e.edit
	}
	ed, err := rollout.Prepare(m, files, all)
	if err != nil {
		return usageErrorf("%s%w", prefix, err)
	}
	if rf.dryRun {
		return writeChanges(cmd.OutOrStdout(), ed.Changes, format)
	}
	if err := ed.Write(); err != nil {
		return usageErrorf("%s%w", prefix, err)
	}
	for _, e := range edits {
		fmt.Fprintf(cmd.OutOrStdout(), "%s/%s: %s (%s)\n", e.d.Name, e.r.Name, e.what, strings.Join(editedFiles(ed, e), ", "))
	}
	return nil
}

// checkSince refuses since, the day r's new stage begins, unless lint would take it: on or
// before today (RL024), and after the day r's stage began, or that day when it is today (RL023).
func checkSince(d *policy.Domain, r *policy.Rule, since string, today time.Time) error {
	day := today.Format(time.DateOnly)
	cur := r.Stage.Since
	switch {
	case since > day:
		return fmt.Errorf("%s/%s: --date %s is after today, %s (lint RL024)", d.Name, r.Name, since, day)
	case cur != "" && !lint.SinceMovesOn(cur, since, day):
		return fmt.Errorf("%s/%s: its stage %s began on %s, so the next begins after it, not on %s (lint RL023)", d.Name, r.Name, r.Stage.Name, cur, since)
	}
	return nil
}

// editedFiles names the file that holds e's rule among ed's changed files.
func editedFiles(ed *rollout.Edited, e ruleEdit) []string {
	var out []string
	for _, p := range ed.Paths() {
		for _, r := range ed.Head.Domain(e.d.Name).Rules {
			if r.Name == e.r.Name && r.Stage.Pos.File == p {
				out = append(out, p)
			}
		}
	}
	if len(out) == 0 {
		out = ed.Paths()
	}
	return out
}

func writeChanges(w io.Writer, cs []diff.Change, format string) error {
	var err error
	switch format {
	case "json":
		err = diff.WriteJSON(w, cs)
	case "markdown":
		err = diff.WriteMarkdown(w, cs)
	default:
		err = diff.WriteText(w, cs)
	}
	if err != nil {
		return usageErrorf("rollout: %w", err)
	}
	return nil
}

// rolloutWithdraw closes the open pull request, if any, of each rule that abort found in shadow
// already: its promotion, which merged would have advanced it.
func rolloutWithdraw(cmd *cobra.Command, rf *rolloutFlags, rules []ruleEdit, day string) error {
	gh, err := rf.github()
	if err != nil {
		return usageErrorf("rollout: --pr: %w", err)
	}
	for _, e := range rules {
		name := e.d.Name + "/" + e.r.Name
		comment := fmt.Sprintf("Closed by `rlctl rollout abort` on %s: %s stays in shadow.", day, name)
		pr, err := gh.Withdraw(cmd.Context(), rollout.Branch(e.d.Name, e.r.Name), comment)
		if errors.Is(err, rollout.ErrPending) {
			fmt.Fprintf(cmd.ErrOrStderr(), "rlctl rollout abort: %s is in shadow already: %v\n", name, err)
			continue
		}
		if err != nil {
			return usageErrorf("rollout: --pr: %s: %w", name, err)
		}
		if pr == nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "rlctl rollout abort: %s is in shadow already, and no pull request of it is open\n", name)
			continue
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s: in shadow already: pull request #%d closed (%s)\n", name, pr.Number, pr.URL)
	}
	return nil
}

// rolloutPullRequests proposes each edit as its own pull request.
func rolloutPullRequests(cmd *cobra.Command, rf *rolloutFlags, m *policy.Model, files rollout.Files, edits []ruleEdit, st *rollout.Status, format string) error {
	var gh *rollout.GitHub
	if !rf.dryRun {
		var err error
		if gh, err = rf.github(); err != nil {
			return usageErrorf("rollout: --pr: %w", err)
		}
	}
	if st == nil {
		cfg, err := rf.gateConfig(cmd, m)
		if err != nil {
			return err
		}
		st = rollout.Evaluate(cmd.Context(), m, cfg)
	}
	for _, e := range edits {
		ed, err := rollout.Prepare(m, files, []rollout.Edit{e.edit})
		if err != nil {
			return usageErrorf("rollout: %w", err)
		}
		name := e.d.Name + "/" + e.r.Name
		evidence := rollout.EvidenceMarkdown(st, name)
		title, body, err := rollout.PullRequestText(e.d.Name, e.r.Name, e.what, evidence, ed)
		if err != nil {
			return usageErrorf("rollout: %w", err)
		}
		if rf.dryRun {
			if err := writeChanges(cmd.OutOrStdout(), ed.Changes, format); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "would open or update a pull request from %s: %s\n", rollout.Branch(e.d.Name, e.r.Name), title)
			continue
		}
		// Every policy file the gates were judged on goes with the change, edited or not, for
		// Propose to check against the base branch.
		read := map[string]rollout.File{}
		for p, b := range files {
			read[p] = rollout.File{Before: b, After: b}
		}
		for p, f := range ed.Files {
			read[p] = f
		}
		repoFiles, err := rollout.RepoPaths(read)
		if err != nil {
			return usageErrorf("rollout: --pr: %w", err)
		}
		policyDir := ""
		if fi, err := os.Stat(rf.policies); err == nil && fi.IsDir() {
			if policyDir, err = rollout.RepoPath(rf.policies); err != nil {
				return usageErrorf("rollout: --pr: %w", err)
			}
		}
		var comment bytes.Buffer
		fmt.Fprintf(&comment, "### rlctl rollout: gate evidence\n\n%s", evidence)
		pr, err := gh.Propose(cmd.Context(), rollout.Change{
			Branch: rollout.Branch(e.d.Name, e.r.Name), Title: title, Body: body,
			Message: fmt.Sprintf("rollout: %s %s\n\nEdited by rlctl rollout %s on %s.", name, e.what, cmd.Name(), st.Today), Verb: cmd.Name(),
			Files: repoFiles, PolicyDir: policyDir, Comment: comment.String(),
		})
		if errors.Is(err, rollout.ErrPending) {
			fmt.Fprintf(cmd.ErrOrStderr(), "rlctl rollout %s: %s: %v\n", cmd.Name(), name, err)
			return findings()
		}
		if err != nil {
			return usageErrorf("rollout: --pr: %s: %w", name, err)
		}
		state := "updated"
		switch {
		case pr.Created:
			state = "opened"
		case !pr.Pushed:
			state = "unchanged"
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s: %s: pull request #%d %s (%s)\n", name, e.what, pr.Number, state, pr.URL)
	}
	return nil
}

// github returns the client of the --pr flow: token, repository and address.
func (rf *rolloutFlags) github() (*rollout.GitHub, error) {
	cfg := rollout.GitHubConfig{Token: os.Getenv("GITHUB_TOKEN"), URL: rf.githubURL}
	var err error
	switch {
	case rf.repo != "":
		cfg.Owner, cfg.Repo, err = rollout.ParseRepo(rf.repo)
	case os.Getenv("GITHUB_REPOSITORY") != "":
		cfg.Owner, cfg.Repo, err = rollout.ParseRepo(os.Getenv("GITHUB_REPOSITORY"))
	default:
		abs, aerr := filepath.Abs(rf.policies)
		if aerr != nil {
			return nil, aerr
		}
		cfg.Owner, cfg.Repo, err = rollout.OriginRepo(abs)
	}
	if err != nil {
		return nil, err
	}
	if cfg.Token == "" {
		return nil, errors.New("GITHUB_TOKEN is not set")
	}
	return rollout.NewGitHub(cfg)
}
