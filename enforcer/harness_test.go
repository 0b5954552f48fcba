package enforcer

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rlctl/rlctl/internal/clitest"
	"github.com/rlctl/rlctl/internal/policyfixture"
	"github.com/rlctl/rlctl/internal/stalls"
	"github.com/rlctl/rlctl/policy"
)

// TestMain lets the test binary run as the timing tests' stall sampler (stalls.Watch).
func TestMain(m *testing.M) {
	stalls.Main()
	os.Exit(m.Run())
}

// testRule builds a rule matching stage=<name> and any user, n requests per minute.
func testRule(name string, n int64, stage policy.Stage, fm policy.FailureMode) *policy.Rule {
	return &policy.Rule{
		Name: name,
		Match: []policy.Match{
			{Key: "stage", Value: name, Kind: policy.MatchExact},
			{Key: "user", Kind: policy.MatchAny},
		},
		Limits:         []policy.Limit{{Requests: n, WindowMs: 60_000, Burst: n, Algorithm: policy.TokenBucket, Cost: 1}},
		Stage:          stage,
		FailureMode:    fm,
		StoreTimeoutMs: 5,
		Lease:          policyfixture.Lease(policyfixture.Bounds(1, 1), policyfixture.TTL(10_000), policyfixture.UnsetWatermark()),
	}
}

// testModel is the model most tests use: one rule per stage and failure mode.
func testModel() *policy.Model {
	fb := testRule("open-fallback", 3, policy.Stage{Name: policy.StageEnforce}, policy.FailOpen)
	fb.Fallback = &policy.Rate{Requests: 2, WindowMs: 60_000}
	return &policy.Model{Domains: []*policy.Domain{{
		Name: "edge",
		Rules: []*policy.Rule{
			testRule("enforce", 3, policy.Stage{Name: policy.StageEnforce}, policy.FailClosed),
			testRule("shadow", 3, policy.Stage{Name: policy.StageShadow}, policy.FailOpen),
			testRule("soft", 3, policy.Stage{Name: policy.StageSoft}, policy.FailOpen),
			testRule("canary-all", 3, policy.Stage{Name: policy.StageCanary, CanaryPercent: 100}, policy.FailOpen),
			testRule("canary-none", 3, policy.Stage{Name: policy.StageCanary, CanaryPercent: 0}, policy.FailOpen),
			testRule("open", 3, policy.Stage{Name: policy.StageEnforce}, policy.FailOpen),
			fb,
			testRule("big", 1_000_000, policy.Stage{Name: policy.StageEnforce}, policy.FailOpen),
		},
	}}}
}

func writeSnapshot(t testing.TB, path string, m *policy.Model) {
	t.Helper()
	var buf bytes.Buffer
	if err := policy.WriteSnapshot(&buf, m); err != nil {
		t.Fatal(err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// instance is an in-process enforcer and a client for it.
type instance struct {
	*Enforcer
	client rlsv3.RateLimitServiceClient
	conn   *grpc.ClientConn
	path   string
	logs   *syncBuffer
}

// spawn starts an enforcer on free ports with m as its snapshot.
func spawn(t testing.TB, m *policy.Model, mod func(*Config)) *instance {
	t.Helper()
	path := filepath.Join(t.TempDir(), "snapshot.json")
	writeSnapshot(t, path, m)
	logs := &syncBuffer{}
	c := Config{SnapshotPath: path, GRPCAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", InstanceID: "test-pod",
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	if mod != nil {
		mod(&c)
	}
	e, err := Spawn(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(e.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	in := &instance{Enforcer: e, client: rlsv3.NewRateLimitServiceClient(conn), conn: conn, path: path, logs: logs}
	t.Cleanup(func() {
		conn.Close()
		e.Close()
	})
	return in
}

// ask sends one request with one descriptor per entry list. A reply that takes over 10s fails
// the test, rather than holding the package until its timeout.
func (in *instance) ask(t testing.TB, domain string, descs ...[]string) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := in.client.ShouldRateLimit(ctx, request(domain, descs...))
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

// request builds a RateLimitRequest; each descriptor is "key=value" strings.
func request(domain string, descs ...[]string) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: domain}
	for _, d := range descs {
		rd := &commonv3.RateLimitDescriptor{}
		for _, kv := range d {
			k, v, _ := strings.Cut(kv, "=")
			rd.Entries = append(rd.Entries, &commonv3.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		req.Descriptors = append(req.Descriptors, rd)
	}
	return req
}

func header(resp *rlsv3.RateLimitResponse, name string) string {
	for _, h := range resp.ResponseHeadersToAdd {
		if h.Key == name {
			return h.Value
		}
	}
	return ""
}

// metric returns the value of the sample line starting with prefix on /metrics, or -1.
func (in *instance) metric(t testing.TB, prefix string) float64 {
	t.Helper()
	return clitest.Metric(t, in.AdminAddr(), prefix)
}

// timingRuns is how many times judgeTiming runs a test while the machine stalls.
const timingRuns = 3

// A timedRun is one run of a test that holds the enforcer to its store timeout: the failures
// of its checks of timing, what the stall sampler saw meanwhile (stalls.Watch), and a line to
// print once the run is the one judged (TestAttack's "attack:" line), if any.
type timedRun struct {
	timing []string
	stalls stalls.Report
	line   string
}

// judgeTiming calls run until a run can be judged. A check of timing (a latency bound, the
// breaker staying closed on a healthy Redis) that fails while a process waiting for the CPU
// waited longer than the store timeout says nothing about the enforcer: the host took the
// machine away. Such a run is logged and run again, up to timingRuns times; when every run
// stalled, the test is skipped with their failures. Checks of what was admitted and of errors
// are the run's own (t.Errorf), judged in every run: a run that failed one is not run again.
//
// Each run gets a testing.TB of its own (a runScope), whose clean-ups (its Redis, enforcers,
// load and sampler) run when the run ends, so that a run that is not judged leaves nothing
// running beside the next.
func judgeTiming(t *testing.T, run func(tb testing.TB) timedRun) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		var r timedRun
		func() {
			scope := &runScope{TB: t}
			defer scope.close()
			r = run(scope)
		}()
		stalled := r.stalls.Stalled(DefaultStoreTimeout)
		t.Logf("run %d: the machine's %v", attempt, r.stalls)
		final := len(r.timing) == 0 || !stalled || t.Failed() || attempt == timingRuns
		if final && r.line != "" {
			fmt.Println(r.line)
		}
		switch {
		case len(r.timing) == 0:
			return
		case !stalled || t.Failed():
			for _, msg := range r.timing {
				t.Error(msg)
			}
			return
		case attempt == timingRuns:
			t.Skipf("timing not judged: the machine stalled past the %v store timeout in each of %d runs; the last one's failures: %s",
				DefaultStoreTimeout, timingRuns, strings.Join(r.timing, "; "))
		}
		t.Logf("run %d not judged, the machine stalled past the %v store timeout: %s", attempt, DefaultStoreTimeout, strings.Join(r.timing, "; "))
		if r.line != "" {
			t.Log(r.line)
		}
	}
}

// runScope is a test's testing.TB for one run of judgeTiming: what the run registers with
// Cleanup is done when the run ends (close), not when the test does.
type runScope struct {
	testing.TB
	cleanups []func()
}

func (s *runScope) Cleanup(f func()) { s.cleanups = append(s.cleanups, f) }

// close runs the clean-ups, the last registered first, as testing does.
func (s *runScope) close() {
	for i := len(s.cleanups) - 1; i >= 0; i-- {
		s.cleanups[i]()
	}
}

// within polls f every 10ms until it holds, up to d, and reports whether it did.
func within(d time.Duration, f func() bool) bool {
	deadline := time.Now().Add(d)
	for !f() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// eventually retries f until it returns true or d passes.
func eventually(t testing.TB, d time.Duration, what string, f func() bool) {
	t.Helper()
	if !within(d, f) {
		t.Fatalf("timed out waiting for %s", what)
	}
}
