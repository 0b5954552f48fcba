package simulate

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/simulate/accesslog"
	"github.com/rlctl/rlctl/simulate/report"
	"github.com/rlctl/rlctl/simulate/traffic"
)

// The report is the same, byte for byte, whatever GOMAXPROCS is and however many workers Run
// uses, and the same as replaying the records one by one (Replay). The log exercises every
// rule of the example policies (each decides requests, most deny some), four gateways with
// uniform store latency (each shard draws its own), the shared-NAT tracker (NAT collateral),
// legitimate identities and the sampled stranded tokens.
func TestRunDeterministic(t *testing.T) {
	m := examplePolicies(t)
	var log bytes.Buffer
	if err := traffic.Write(&log, traffic.Config{Seed: 5, Lines: 60000}); err != nil {
		t.Fatal(err)
	}
	run := func(procs, workers int) []byte {
		t.Helper()
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		lat, err := ParseLatency("uniform:0.2ms-40ms", 9)
		if err != nil {
			t.Fatal(err)
		}
		r, err := Run(context.Background(), RunConfig{Sim: detConfig(m, lat), MaxBad: -1, Workers: workers},
			[]Input{{Name: "gen.log", R: bytes.NewReader(log.Bytes())}})
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := report.WriteJSON(&out, r); err != nil {
			t.Fatal(err)
		}
		return out.Bytes()
	}
	want := run(1, 1)
	wantReport := checkExercised(t, want)
	for _, c := range []struct{ procs, workers int }{{2, 0}, {8, 0}, {1, 3}, {2, 5}, {4, 64}} {
		if got := run(c.procs, c.workers); !bytes.Equal(got, want) {
			t.Errorf("GOMAXPROCS %d, %d workers: report differs from GOMAXPROCS 1 with 1 worker:\n%s", c.procs, c.workers, firstDiff(got, want))
		}
	}
	// Replay, one record at a time on this goroutine, decides as Run does.
	lat, _ := ParseLatency("uniform:0.2ms-40ms", 9)
	seq := replayLog(t, detConfig(m, lat), log.Bytes())
	if got, want := seq.Totals, wantReport.Totals; got != want {
		t.Errorf("Replay totals differ from Run's:\n%+v\n%+v", got, want)
	}
}

// detConfig is TestRunDeterministic's configuration: the bot's fingerprint, which
// anonymous_sessions denies, is marked legitimate.
func detConfig(m *policy.Model, lat Latency) Config {
	return Config{Model: m, Gateways: 4, Latency: lat, NATUsers: 5,
		Legit: []string{"client=tls_fingerprint:t13d190900_9dc949149365_97f8aa674fd9"}}
}

// checkExercised decodes a report and checks that the log exercised what
// TestRunDeterministic says it does.
func checkExercised(t *testing.T, js []byte) *report.Report {
	t.Helper()
	r := decodeReport(t, js)
	denying := 0
	for _, rl := range r.Rules {
		if rl.Requests == 0 {
			t.Errorf("rule %s decided no request", rl.Rule)
		}
		if rl.WouldDeny > 0 {
			denying++
		}
		if rl.StrandedMax == 0 {
			t.Errorf("rule %s: no stranded tokens sampled", rl.Rule)
		}
	}
	if denying < 3 {
		t.Errorf("%d of %d rules deny anything; want 3 or more", denying, len(r.Rules))
	}
	if r.Totals.NATCollateral == 0 || r.Totals.LegitDenials == 0 || r.Totals.OverAdmission == 0 {
		t.Errorf("totals %+v: want NAT collateral, legit denials and over-admission", r.Totals)
	}
	return r
}

// firstDiff shows where two reports first differ.
func firstDiff(a, b []byte) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	from := max(0, i-200)
	return fmt.Sprintf("...%s\n  vs\n...%s", a[from:min(len(a), i+200)], b[from:min(len(b), i+200)])
}

func decodeReport(t *testing.T, js []byte) *report.Report {
	t.Helper()
	var r report.Report
	if err := json.Unmarshal(js, &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

// replayLog replays log one record at a time with Replay.
func replayLog(t *testing.T, cfg Config, log []byte) *report.Report {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rd, err := accesslog.NewReader("gen.log", bytes.NewReader(log), accesslog.Options{Headers: HeadersFor(cfg.Model)})
	if err != nil {
		t.Fatal(err)
	}
	var rec accesslog.Record
	for rd.Read(&rec) == nil {
		if err := s.Replay(&rec); err != nil {
			t.Fatal(err)
		}
	}
	r, err := s.Finish()
	if err != nil {
		t.Fatal(err)
	}
	r.Finish()
	return r
}

// A run that ends early, on too many bad lines in a gzip log or on its context, returns the
// error and leaves no goroutine behind: not its stages, not the log's read-ahead.
func TestRunStopsEarly(t *testing.T) {
	m := examplePolicies(t)
	var log bytes.Buffer
	zw := gzip.NewWriter(&log)
	if err := traffic.Write(zw, traffic.Config{Seed: 6, Lines: 50000}); err != nil {
		t.Fatal(err)
	}
	zw.Write([]byte("not a record\n"))
	if err := traffic.Write(zw, traffic.Config{Seed: 7, Lines: 50000}); err != nil {
		t.Fatal(err)
	}
	zw.Close()
	before := runtime.NumGoroutine()
	_, err := Run(context.Background(), RunConfig{Sim: Config{Model: m}, MaxBad: 0},
		[]Input{{Name: "bad.log.gz", R: bytes.NewReader(log.Bytes())}})
	if !errors.Is(err, ErrTooManyBad) || !strings.Contains(err.Error(), "bad.log.gz:50001") {
		t.Errorf("too many bad lines: got %v, want ErrTooManyBad at bad.log.gz:50001", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, RunConfig{Sim: Config{Model: m}, MaxBad: -1},
		[]Input{{Name: "bad.log.gz", R: bytes.NewReader(log.Bytes())}}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: got %v, want context.Canceled", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines left behind:\n%s", n-before, buf[:runtime.Stack(buf, true)])
	}
}
