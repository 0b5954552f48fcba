package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rlctl/rlctl/internal/atomicfile"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/schema"
	"github.com/rlctl/rlctl/simulate"
	"github.com/rlctl/rlctl/simulate/accesslog"
	"github.com/rlctl/rlctl/simulate/report"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

const simulateLong = `Replay access logs through the rate-limit engine to see what a policy would do.

Each record becomes descriptors exactly as the rendered Envoy actions would build them
(headers, JWT claims, remote address whole or /24 and /64, generic keys, path matches and the
identity waterfall). N virtual gateways (--gateways) each run the engine's lease manager against
one in-memory store on a virtual clock; the replies of their background calls (prefetches,
returns) land after --store-latency, and the store never fails or times out. A second,
ideal engine (one global bucket per key, no leasing) runs beside them, so the report shows how
far leasing drifts from the ideal: over- and under-admission and stranded tokens.

JWT claims are decoded from the logged Authorization bearer token WITHOUT verifying the
signature: the log records what the gateway already accepted.

Inputs (--log, repeatable; "-" is stdin; gzip is detected):
  envoy-json  Envoy/Istio JSON access logs: start_time, method, path, response_code,
              x_forwarded_for, downstream_remote_address, user_agent, authority, request_id,
              and request headers under their own names (x-tenant-id or x_tenant_id,
              authorization, x-api-key, x-ja4, ...).
  envoy-text  Envoy's default text format (no request headers beyond X-Forwarded-For).
  jsonl       any JSON lines; map keys with --field NAME=KEY (KEY may be a dotted path).
  csv         with a header row; map columns with --field NAME=COLUMN.
A --field KEY for which no record has a value is warned about (the field would be empty in
every record); one KEY feeds one NAME; --field is refused when every log is in Envoy's text
format, given (--log-format envoy-text) or detected.
Without --log-format the format is detected from the first byte that is not white space: '{'
is JSON, '[' Envoy's text format, anything else CSV. Every record needs a timestamp. Bad
lines are counted, the first few reported with their line numbers, and skipped; more than
--max-bad fails the run, and so do logs without any record. Several logs
(one per gateway, say) are merged by time; a record logged before an earlier one of its own
log is replayed at the later time and counted as reordered. The client address is the
logged downstream remote address, else the rightmost X-Forwarded-For entry (the one the
edge proxy appended; entries left of it are the client's to forge).

False positives: would-deny decisions against identities marked legitimate (the rules' legit
lists and --legit FILE, one descriptor value or KEY=VALUE per line), plus shared-NAT
collateral: denials on an address or subnet key behind which at least --nat-users distinct
users (JWT subjects or TLS fingerprints) were seen.

--fail-if METRIC OP VALUE (repeatable) exits 1 when crossed. OP is one of > >= < <= == !=;
VALUE may end in % for a rate (a metric ending in _rate, a share from 0 to 1). Metrics: ` + "{{metrics}}" + `.
Each crossed threshold is also named on stderr, whatever the format and wherever the report
goes ("rlctl simulate: threshold crossed: false_positive_rate 0.47% > 0.3%"). The report's
warnings (records without the --assign field, an unseen --field key, records replayed late, a
memory bound reached, no user to see shared NAT by) go to stderr too when the report is JSON
or goes to a file.
Without --fail-if nothing is checked: every format says "no thresholds set" (JSON "verdict":
"no_thresholds"), not that the run passed.

Output (-o): table (default), json (schema rlctl.simulate/v1), markdown (a pull-request
comment of at most 65,535 characters) or html (one self-contained page with SVG charts).

--journal FILE (with --snapshot FILE) is deprecated: it runs rlctl replay, which takes the
same flags, and notes so on stderr. Flags of log replay are rejected with it.

Exit codes: 0 replayed within thresholds, 1 a --fail-if threshold was crossed, 3 usage or
tool error (bad flag, unreadable log or policy, more than --max-bad bad lines).`

// Defaults of simulate's replay, which diff's and rollout's replays of a log take too.
const (
	defaultGateways     = 4
	defaultStoreLatency = "1ms"
	defaultLatencySeed  = 1
)

// simulateFlags are simulate's flags as given.
type simulateFlags struct {
	logReplayFlags
	policies, latency, domain, output, out string
	failIf, journals, snapshots            []string
	maxBad                                 int64
	seed                                   uint64
}

// logReplayFlags are the flags of a log replay that simulate and diff share, as given.
type logReplayFlags struct {
	logFormat, assign, legitFile string
	logs, fields                 []string
	gateways, natUsers, top      int
}

// logReplay is what logReplayFlags say, parsed and checked.
type logReplay struct {
	format  accesslog.Format
	mapping accesslog.Mapping
	assign  simulate.Assignment
	legit   []string // the --legit file's values
}

// parse parses and checks the flags, and returns an error for each bad one: the logs (but
// stdin), their format and field mapping, the assignment, --top, --nat-users, --gateways and
// the --legit file.
func (f logReplayFlags) parse() (logReplay, []error) {
	var lr logReplay
	var errs []error
	check := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, checkLogs(f.logs)...)
	var err error
	lr.format, err = accesslog.ParseFormat(f.logFormat)
	check(err)
	lr.mapping, err = accesslog.ParseMapping(f.fields)
	check(err)
	lr.assign, err = simulate.ParseAssignment(f.assign)
	check(err)
	if f.top < 0 {
		check(fmt.Errorf("--top %d: want 0 (none) or more", f.top))
	}
	if f.natUsers < 1 {
		check(fmt.Errorf("--nat-users %d: want at least 1", f.natUsers))
	}
	if f.gateways < 1 || f.gateways > simulate.MaxGateways {
		check(fmt.Errorf("--gateways %d: want 1 to %d", f.gateways, simulate.MaxGateways))
	}
	if f.legitFile != "" {
		lr.legit, err = readLegit(f.legitFile)
		check(err)
	}
	return lr, errs
}

// logSettings are the log replay's flag values, parsed and checked.
type logSettings struct {
	logReplay
	latency    simulate.Latency
	thresholds []simulate.Threshold
}

func newSimulateCmd() *cobra.Command {
	var sf simulateFlags
	cmd := &cobra.Command{
		Use:   "simulate --log FILE... [flags]",
		Short: "Replay access logs through the engine and estimate false positives",
		Long:  strings.ReplaceAll(simulateLong, "{{metrics}}", strings.Join(simulate.MetricNames(), ", ")),
		// lint, render and show take the policy directory as an argument; simulate takes
		// --policies: say so rather than cobra's "unknown command".
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErrorf("simulate: unexpected argument %q: give the policy directory as --policies %s, and the logs as --log FILE", args[0], args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case len(sf.journals) > 0 && len(sf.logs) > 0:
				return usageErrorf("simulate: --journal and --log replay different things: give one")
			case len(sf.journals) == 0 && len(sf.logs) == 0:
				return usageErrorf("simulate: no --log given")
			}
			if len(sf.journals) > 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), simulateJournalDeprecated)
			}
			// Values are checked whichever the mode, so a typo is never hidden by the mode.
			ls, err := sf.parseLogSettings()
			if err != nil {
				return err
			}
			if len(sf.journals) > 0 {
				return simulateJournals(cmd)
			}
			if cmd.Flags().Changed("snapshot") {
				return usageErrorf("simulate: --snapshot applies to --journal replay only")
			}
			return replayLogs(cmd, sf, ls)
		},
	}
	f := cmd.Flags()
	f.StringVar(&sf.policies, "policies", "policies", "policy directory")
	f.StringArrayVar(&sf.logs, "log", nil, `access log to replay (repeatable; "-" is stdin; gzip is detected)`)
	f.StringVar(&sf.logFormat, "log-format", "", "envoy-json, envoy-text, jsonl or csv (default: detected)")
	f.StringArrayVar(&sf.fields, "field", nil, "map a log key onto a field or header: NAME=KEY (repeatable)")
	f.IntVar(&sf.gateways, "gateways", defaultGateways, "virtual gateways, each with its own lease manager (--assign field: makes one per value instead)")
	f.StringVar(&sf.assign, "assign", "round-robin", "gateway assignment: round-robin, hash:FIELD or field:FIELD")
	f.StringVar(&sf.latency, "store-latency", defaultStoreLatency, "store reply latency: a duration or uniform:LO-HI")
	f.Uint64Var(&sf.seed, "seed", defaultLatencySeed, "seed for latency draws")
	f.IntVar(&sf.natUsers, "nat-users", 20, "users behind one address or subnet that make its denials shared-NAT collateral")
	f.StringVar(&sf.legitFile, "legit", "", "file of legitimate descriptor values, one per line (VALUE or KEY=VALUE)")
	f.StringVar(&sf.domain, "domain", "", "replay only this domain")
	f.IntVar(&sf.top, "top", 10, "denied identities to list per rule (0: none)")
	f.StringVarP(&sf.output, "output", "o", "table", "output format: table, json, markdown or html")
	f.StringVar(&sf.out, "out", "", "write the report to this file instead of stdout; - is stdout")
	f.StringArrayVar(&sf.failIf, "fail-if", nil, "exit 1 when METRIC OP VALUE holds, e.g. 'false_positive_rate>0.5%'")
	f.Int64Var(&sf.maxBad, "max-bad", 100, "bad lines tolerated before the run fails (-1: no limit)")
	// Deprecated: rlctl replay. Hidden by hand, not by cobra's MarkDeprecated, whose note would
	// go to stdout and break -o json.
	f.StringArrayVar(&sf.journals, "journal", nil, "deprecated: use rlctl replay --journal")
	f.StringArrayVar(&sf.snapshots, "snapshot", nil, "deprecated: use rlctl replay --snapshot")
	f.Lookup("journal").Hidden = true
	f.Lookup("snapshot").Hidden = true
	return cmd
}

// parseLogSettings parses the log replay's flag values. Every bad one is reported at once, as
// a usage error.
func (sf *simulateFlags) parseLogSettings() (logSettings, error) {
	var ls logSettings
	var errs []error
	check := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	ls.logReplay, errs = sf.logReplayFlags.parse()
	var err error
	ls.latency, err = simulate.ParseLatency(sf.latency, sf.seed)
	check(err)
	for _, f := range sf.failIf {
		for _, e := range strings.Split(f, ",") {
			th, err := simulate.ParseThreshold(e)
			check(err)
			ls.thresholds = append(ls.thresholds, th)
		}
	}
	if len(sf.journals) == 0 && !validOutput(sf.output) { // rlctl replay checks its own
		check(fmt.Errorf("-o %q: want table, json, markdown or html", sf.output))
	}
	return ls, settingErrors("simulate", errs)
}

// replayLogs runs simulate's access log mode.
func replayLogs(cmd *cobra.Command, sf simulateFlags, ls logSettings) error {
	// The heap's advice takes a while and needs no policies: it runs while they load.
	memoryReady, restoreMemory := simulate.TuneMemory()
	defer restoreMemory()
	if !isDir(sf.policies) && !cmd.Flags().Changed("policies") {
		return usageErrorf("simulate: no policy directory %s here: give one with --policies DIR", sf.policies)
	}
	model, err := schema.Load(sf.policies)
	if err != nil {
		// A policy that does not load is a finding (exit 1), printed as lint prints it.
		return loadError(cmd.ErrOrStderr(), "simulate", err)
	}
	if sf.domain != "" && model.Domain(sf.domain) == nil {
		return usageErrorf("simulate: --domain %q: no such domain in %s (have %s)", sf.domain, sf.policies, domainNames(model))
	}
	inputs, total, closeAll, err := openLogs(sf.logs, cmd.InOrStdin())
	if err != nil {
		return usageErrorf("simulate: %w", err)
	}
	defer closeAll()
	memoryReady()
	stop := startProgress(cmd.ErrOrStderr(), total)
	r, err := simulate.Run(cmd.Context(), simulate.RunConfig{
		Sim: simulate.Config{Model: model, Domain: sf.domain, Gateways: sf.gateways, Assign: ls.assign,
			Latency: ls.latency, NATUsers: sf.natUsers, Legit: ls.legit, TopN: topN(sf.top)},
		Log:    accesslog.Options{Format: ls.format, Mapping: ls.mapping},
		MaxBad: sf.maxBad,
	}, inputs)
	stop()
	if err != nil {
		return usageErrorf("simulate: %w%s", err, noTimestampHint(ls.mapping, err.Error()))
	}
	if r.Requests == 0 {
		// Thresholds would hold vacuously: a wrong path or an empty rotation must not pass CI.
		if len(r.BadLineSamples) > 0 {
			b := r.BadLineSamples[0]
			return usageErrorf("simulate: the logs hold no records to replay (%d bad lines; the first, %s:%d: %s)%s",
				r.BadLines, b.File, b.Line, b.Error, noTimestampHint(ls.mapping, b.Error))
		}
		return usageErrorf("simulate: the logs hold no records to replay (%d bad lines)", r.BadLines)
	}
	r.Policies = sf.policies
	simulate.Evaluate(r, ls.thresholds)
	if err := writeReport(cmd, sf.out, func(w io.Writer) error { return report.Write(w, r, sf.output) }); err != nil {
		return err
	}
	// A JSON report holds the warnings' figures but not their words, and a report in a file
	// is not in the terminal: the warnings go to stderr too, as the crossed thresholds do.
	if sf.output == "json" || (sf.out != "" && sf.out != "-") {
		for _, w := range report.Warnings(r) {
			fmt.Fprintf(cmd.ErrOrStderr(), "rlctl simulate: warning: %s\n", w)
		}
	}
	// The report may be in a file or in a format nobody reads in a CI log: say on stderr why
	// the run fails.
	for i, th := range r.Thresholds {
		if th.Crossed {
			fmt.Fprintf(cmd.ErrOrStderr(), "rlctl simulate: threshold crossed: %s\n", describeCrossed(ls.thresholds[i], th.Value))
		}
	}
	if r.Failed {
		return findings()
	}
	return nil
}

// describeCrossed says what a crossed threshold measured, as "metric VALUE OP LIMIT", with the
// limit as written and the value in percent when the limit is.
func describeCrossed(th simulate.Threshold, value float64) string {
	limit := strings.TrimPrefix(strings.ReplaceAll(th.Expr, " ", ""), th.Metric+th.Op)
	unit := ""
	if strings.HasSuffix(limit, "%") {
		value, unit = value*100, "%"
	}
	v := strconv.FormatFloat(value, 'f', -1, 64)
	if value != math.Trunc(value) {
		v = strconv.FormatFloat(value, 'g', 4, 64)
	}
	return fmt.Sprintf("%s %s%s %s %s", th.Metric, v, unit, th.Op, limit)
}

func domainNames(m *policy.Model) string {
	names := make([]string, len(m.Domains))
	for i, d := range m.Domains {
		names[i] = d.Name
	}
	return strings.Join(names, ", ")
}

// writeReport writes a report to --out FILE (atomically), or to stdout when out is "" or "-".
func writeReport(cmd *cobra.Command, out string, write func(io.Writer) error) error {
	if out != "" && out != "-" {
		if err := atomicfile.Write(out, write); err != nil {
			return usageErrorf("%s: --out %w", cmd.Name(), err)
		}
		return nil
	}
	if err := write(cmd.OutOrStdout()); err != nil {
		return usageErrorf("%s: %w", cmd.Name(), err)
	}
	return nil
}

func validOutput(o string) bool {
	for _, f := range report.Formats {
		if f == o {
			return true
		}
	}
	return o == "md"
}

// topN is --top as simulate.Config.TopN says it: 0 there is the default, so none is -1.
func topN(top int) int {
	if top == 0 {
		return -1
	}
	return top
}

// fileFlagError is err, met opening or reading file path of flag (--log, say), as users read
// it: "--log FILE: no such file or directory", not the system call's "open FILE: ...".
// stdinOnce refuses "-" (stdin) given more than once to flag among paths: one stream cannot be
// read as two inputs.
func stdinOnce(flag string, paths []string) error {
	n := 0
	for _, p := range paths {
		if p == "-" {
			n++
		}
	}
	if n > 1 {
		return fmt.Errorf(`%s "-" (stdin) given more than once`, flag)
	}
	return nil
}

func fileFlagError(flag, path string, err error) error {
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("%s %s: %w", flag, path, err)
}

func readLegit(path string) (vals []string, err error) {
	defer func() {
		if err != nil {
			err = fileFlagError("--legit", path, err)
		}
	}()
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// Whole-line comments only: a value may hold a '#'. A byte order mark is not part of
		// the first value.
		if v := strings.TrimSpace(strings.TrimPrefix(sc.Text(), "\ufeff")); v != "" && !strings.HasPrefix(v, "#") {
			vals = append(vals, v)
		}
	}
	return vals, sc.Err()
}

// countingReader counts bytes read, for the progress bar.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

var readBytes atomic.Int64

// checkLogs reports each log of paths (but stdin, "-") that cannot be read, before anything is
// replayed, so that it is reported with the other bad settings: openLogs would find it only
// once the policies have loaded.
func checkLogs(paths []string) []error {
	var errs []error
	for _, p := range paths {
		if p == "-" {
			continue
		}
		switch st, err := os.Stat(p); {
		case err != nil:
			errs = append(errs, fileFlagError("--log", p, err))
		case st.IsDir():
			errs = append(errs, fmt.Errorf("--log %s: is a directory", p))
		}
	}
	return errs
}

// noTimestampHint is what to add to an error that quotes a bad line without a timestamp
// (accesslog.ErrNoTimestamp, which reports keep as text) when no --field maps start_time: how
// to map it.
func noTimestampHint(mapping accesslog.Mapping, msg string) string {
	if _, mapped := mapping["start_time"]; mapped || !strings.Contains(msg, accesslog.ErrNoTimestamp.Error()+" (") {
		return ""
	}
	return "; if the time is under another key or column, map it with --field start_time=KEY"
}

// openLogs opens the logs; total is their size in bytes, or -1 when stdin is among them.
func openLogs(paths []string, stdin io.Reader) ([]simulate.Input, int64, func(), error) {
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	var inputs []simulate.Input
	var total int64
	readBytes.Store(0)
	// Merging reads the logs side by side: two readers of one stream would each get pieces
	// of the other's lines.
	if err := stdinOnce("--log", paths); err != nil {
		return nil, 0, nil, err
	}
	for _, p := range paths {
		if p == "-" {
			inputs = append(inputs, simulate.Input{Name: "stdin", R: countingReader{stdin, &readBytes}})
			total = -1
			continue
		}
		f, err := os.Open(p)
		if err != nil {
			closeAll()
			return nil, 0, nil, fileFlagError("--log", p, err)
		}
		files = append(files, f)
		st, err := f.Stat()
		if err == nil && st.IsDir() {
			closeAll()
			return nil, 0, nil, fmt.Errorf("--log %s: is a directory", p)
		}
		if err == nil && total >= 0 {
			total += st.Size()
		}
		inputs = append(inputs, simulate.Input{Name: p, R: countingReader{f, &readBytes}})
	}
	return inputs, total, closeAll, nil
}

// startProgress shows a progress bar on stderr when it is a terminal, and nothing otherwise.
func startProgress(stderr io.Writer, total int64) (stop func()) {
	f, ok := stderr.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return func() {}
	}
	bar := progressbar.NewOptions64(total, progressbar.OptionSetWriter(f), progressbar.OptionShowBytes(true),
		progressbar.OptionSetDescription("replaying"), progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_ = bar.Set64(readBytes.Load())
			}
		}
	}()
	return func() {
		cancel()
		<-done
		_ = bar.Finish()
		_ = bar.Clear()
	}
}
