package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rlctl/rlctl/internal/atomicfile"
	"github.com/rlctl/rlctl/journal"
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
one in-memory store on a virtual clock; store replies land after --store-latency. A second,
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
The format is detected from the first byte when --log-format is not given. Bad lines are
counted, the first few reported with their line numbers, and skipped; more than --max-bad
fails the run.

False positives: would-deny decisions against identities marked legitimate (the rules' legit
lists and --legit FILE, one descriptor value per line), plus shared-NAT collateral: denials on
an address or subnet key behind which at least --nat-users distinct users (JWT subjects or TLS
fingerprints) were seen.

--fail-if METRIC OP VALUE (repeatable) exits 1 when crossed. OP is one of > >= < <= == !=;
VALUE may end in %. Metrics: ` + "{{metrics}}" + `.

Output (-o): table (default), json (schema rlctl.simulate/v1), markdown (a pull-request
comment of at most 65,535 characters) or html (one self-contained page with SVG charts).

Journal replay (--journal FILE, repeatable): instead of access logs, re-run the decisions an
enforcer made (rlctl-enforcer --journal FILE) through the same engine code, fed with the store
replies and times the journal recorded, and list every decision that comes out differently
(file:line, key, rule, recorded and replayed). Each journal's config records name their policy
by content hash: --policies and every --snapshot FILE (rlctl render --target snapshot) are the
candidates. -o text (default) or json (schema rlctl.journal-replay/v1). Exit 1 when anything
differs.

Exit codes: 0 replayed within thresholds (or a journal replayed exactly), 1 a --fail-if
threshold was crossed (or a journal decision differs), 3 usage or tool error (bad flag,
unreadable log, journal or policy, more than --max-bad bad lines).`

func newSimulateCmd() *cobra.Command {
	var (
		policies, logFormat, assign, latency, legitFile, domain, output, out string
		logs, fields, failIf, journals, snapshots                            []string
		gateways, natUsers, top                                              int
		maxBad                                                               int64
		seed                                                                 uint64
	)
	cmd := &cobra.Command{
		Use:   "simulate (--log FILE | --journal FILE) [flags]",
		Short: "Replay access logs through the engine and estimate false positives",
		Long:  strings.Replace(simulateLong, "{{metrics}}", strings.Join(simulate.MetricNames(), ", "), 1),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(journals) > 0 {
				if len(logs) > 0 {
					return usageErrorf("simulate: --journal and --log replay different things: give one")
				}
				return replayJournals(cmd, journals, policies, cmd.Flags().Changed("policies"), snapshots, output)
			}
			if len(logs) == 0 {
				return usageErrorf("simulate: no --log given")
			}
			if !validOutput(output) {
				return usageErrorf("simulate: -o %q: want table, json, markdown or html", output)
			}
			format, err := accesslog.ParseFormat(logFormat)
			if err != nil {
				return usageErrorf("simulate: %w", err)
			}
			mapping, err := accesslog.ParseMapping(fields)
			if err != nil {
				return usageErrorf("simulate: %w", err)
			}
			as, err := simulate.ParseAssignment(assign)
			if err != nil {
				return usageErrorf("simulate: %w", err)
			}
			lat, err := simulate.ParseLatency(latency, seed)
			if err != nil {
				return usageErrorf("simulate: %w", err)
			}
			var ths []simulate.Threshold
			for _, f := range failIf {
				for _, e := range strings.Split(f, ",") {
					th, err := simulate.ParseThreshold(e)
					if err != nil {
						return usageErrorf("simulate: %w", err)
					}
					ths = append(ths, th)
				}
			}
			if gateways < 1 {
				return usageErrorf("simulate: --gateways %d: want at least 1", gateways)
			}
			var legit []string
			if legitFile != "" {
				if legit, err = readLegit(legitFile); err != nil {
					return usageErrorf("simulate: %w", err)
				}
			}
			model, err := schema.Load(policies)
			if err != nil {
				return usageErrorf("simulate: loading %s: %w", policies, err)
			}
			inputs, total, closeAll, err := openLogs(logs, cmd.InOrStdin())
			if err != nil {
				return usageErrorf("simulate: %w", err)
			}
			defer closeAll()
			defer debug.SetGCPercent(debug.SetGCPercent(simulate.GCPercent))
			stop := startProgress(cmd.ErrOrStderr(), inputs, total)
			r, err := simulate.Run(cmd.Context(), simulate.RunConfig{
				Sim: simulate.Config{Model: model, Domain: domain, Gateways: gateways, Assign: as, Latency: lat,
					NATUsers: natUsers, Legit: legit, TopN: top},
				Log:    accesslog.Options{Format: format, Mapping: mapping},
				MaxBad: maxBad,
			}, inputs)
			stop()
			if err != nil {
				return usageErrorf("simulate: %w", err)
			}
			r.Policies = policies
			simulate.Evaluate(r, ths)
			if out != "" && out != "-" {
				err = atomicfile.Write(out, func(w io.Writer) error { return report.Write(w, r, output) })
				if err != nil {
					return usageErrorf("simulate: --out %w", err)
				}
			} else if err := report.Write(cmd.OutOrStdout(), r, output); err != nil {
				return usageErrorf("simulate: %w", err)
			}
			if r.Failed {
				return findings()
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&policies, "policies", "policies", "policy directory")
	f.StringArrayVar(&logs, "log", nil, `access log to replay (repeatable; "-" is stdin; gzip is detected)`)
	f.StringVar(&logFormat, "log-format", "", "envoy-json, envoy-text, jsonl or csv (default: detected)")
	f.StringArrayVar(&fields, "field", nil, "map a log key onto a field or header: NAME=KEY (repeatable)")
	f.IntVar(&gateways, "gateways", 4, "virtual gateways, each with its own lease manager")
	f.StringVar(&assign, "assign", "round-robin", "gateway assignment: round-robin, hash:FIELD or field:FIELD")
	f.StringVar(&latency, "store-latency", "1ms", "store reply latency: a duration or uniform:LO-HI")
	f.Uint64Var(&seed, "seed", 1, "seed for latency draws")
	f.IntVar(&natUsers, "nat-users", 20, "users behind one address or subnet that make its denials shared-NAT collateral")
	f.StringVar(&legitFile, "legit", "", "file of legitimate descriptor values, one per line")
	f.StringVar(&domain, "domain", "", "replay only this domain")
	f.IntVar(&top, "top", 10, "denied identities to list per rule")
	f.StringVarP(&output, "output", "o", "table", "output format: table, json, markdown or html")
	f.StringVar(&out, "out", "", "write the report to this file instead of stdout")
	f.StringArrayVar(&failIf, "fail-if", nil, "exit 1 when METRIC OP VALUE holds, e.g. 'false_positive_rate>0.5%'")
	f.Int64Var(&maxBad, "max-bad", 100, "bad lines tolerated before the run fails (-1: no limit)")
	f.StringArrayVar(&journals, "journal", nil, "replay an enforcer's decision journal instead of logs (repeatable)")
	f.StringArrayVar(&snapshots, "snapshot", nil, "with --journal: a policy snapshot the journals may name (repeatable)")
	return cmd
}

// replayJournals runs simulate's journal mode. The models are --policies (unless only
// snapshots were given) and every --snapshot.
func replayJournals(cmd *cobra.Command, paths []string, policies string, policiesSet bool, snapshots []string, output string) error {
	format := output
	if format == "table" {
		format = "text"
	}
	if format != "text" && format != "json" {
		return usageErrorf("simulate: -o %q: want text or json with --journal", output)
	}
	var models []*policy.Model
	if policiesSet || len(snapshots) == 0 {
		m, err := schema.Load(policies)
		if err != nil {
			return usageErrorf("simulate: loading %s: %w", policies, err)
		}
		models = append(models, m)
	}
	for _, p := range snapshots {
		m, err := readSnapshotFile(p)
		if err != nil {
			return usageErrorf("simulate: --snapshot %s: %w", p, err)
		}
		models = append(models, m)
	}
	var inputs []journal.Input
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return usageErrorf("simulate: %w", err)
		}
		defer f.Close()
		inputs = append(inputs, journal.Input{Name: p, R: f})
	}
	r, err := journal.Replay(cmd.Context(), models, inputs)
	if err != nil {
		return usageErrorf("simulate: %w", err)
	}
	if err := journal.WriteReport(cmd.OutOrStdout(), r, format); err != nil {
		return usageErrorf("simulate: %w", err)
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

func validOutput(o string) bool {
	for _, f := range report.Formats {
		if f == o {
			return true
		}
	}
	return o == "md"
}

func readLegit(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var vals []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v := strings.TrimSpace(sc.Text()); v != "" && !strings.HasPrefix(v, "#") {
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
	for _, p := range paths {
		if p == "-" {
			inputs = append(inputs, simulate.Input{Name: "stdin", R: countingReader{stdin, &readBytes}})
			total = -1
			continue
		}
		f, err := os.Open(p)
		if err != nil {
			closeAll()
			return nil, 0, nil, err
		}
		files = append(files, f)
		if st, err := f.Stat(); err == nil && total >= 0 {
			total += st.Size()
		}
		inputs = append(inputs, simulate.Input{Name: p, R: countingReader{f, &readBytes}})
	}
	return inputs, total, closeAll, nil
}

// startProgress shows a progress bar on stderr when it is a terminal, and nothing otherwise.
func startProgress(stderr io.Writer, _ []simulate.Input, total int64) (stop func()) {
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
