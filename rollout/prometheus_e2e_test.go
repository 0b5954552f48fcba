package rollout_test

// This file is an external test package: it starts a real enforcer, which the rollout package
// itself has no reason to import.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rlctl/rlctl/enforcer"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/rollout"
	"github.com/rlctl/rlctl/schema"
)

// e2ePolicy has one rule in shadow whose limit is one request per key an hour: a key's first
// request is admitted and every later one would be denied. The domain's rollout block gives the
// prometheus gate a window of 5 minutes, which covers the whole test, instead of the 7-day
// shadow dwell.
const e2ePolicy = `package policies

domains: shop: {
	sources: client: {kind: "header", header: "x-api-key"}
	rollout: gates: prometheus: window: "5m"
	rules: probe: {
		match: [{key: "client"}]
		limits: [{requests: 1, window: "1h"}]
		stage: {name: "shadow", since: "2025-06-01"}
	}
}
`

// The load: e2eRequests calls from e2eWorkers workers, each pausing e2ePause between calls so
// that the run lasts a few scrapes. Every call carries a descriptor with a key of its own
// (admitted: a fresh bucket holds one token), and every second call also one for the key "hot"
// (over its limit after its first request). So the rule decides 1.5 descriptors a call and would
// deny one in three, whatever the machine's speed.
const (
	e2eRequests = 3000
	e2eWorkers  = 4
	e2ePause    = 3 * time.Millisecond
)

// TestPrometheusGateReal runs the prometheus gate against a real Prometheus (Debian's
// prometheus package, /usr/bin/prometheus) that scrapes a real in-process enforcer under
// ShouldRateLimit load: the gate passes with a threshold above the would-deny share the load
// made and blocks with one below it, and the share it reads through the HTTP API is the one
// the enforcer's own counters hold.
func TestPrometheusGateReal(t *testing.T) {
	bin := requirePrometheus(t)
	dir := t.TempDir()
	m, e := startEnforcer(t, dir)
	prom := startPrometheus(t, bin, dir, e.AdminAddr())
	ctx := context.Background()
	sel := `rate_limit_requests_total{domain="shop", rule="probe"}`

	// The enforcer's series start at 0: wait until Prometheus holds them, so that the window's
	// first samples are the zero before any load.
	prom.waitFor(t, "the first scrape of the enforcer", func(v model.Vector) bool { return len(v) > 0 }, "count("+sel+")")

	over, total := driveLoad(t, e)
	wantOver, wantTotal := float64(e2eRequests/2-1), float64(e2eRequests+e2eRequests/2)
	// Each key admits one request an hour: the e2eRequests own keys one each, "hot" one in all.
	if over != wantOver || total != wantTotal {
		t.Errorf("enforcer counters: got %v over of %v decisions, want %v of %v (one admitted per key)", over, total, wantOver, wantTotal)
	}
	share := over / total

	// Wait until Prometheus has scraped the counters as the load left them, and holds a few
	// samples of the run.
	prom.waitFor(t, "a scrape after the load", func(v model.Vector) bool {
		return len(v) == 1 && float64(v[0].Value) == total
	}, "sum("+sel+")")
	prom.waitFor(t, "three samples of the run", func(v model.Vector) bool {
		return len(v) == 1 && v[0].Value >= 3
	}, `min(count_over_time(`+sel+`[5m]))`)

	src, err := rollout.NewPrometheus(prom.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := m.Domain("shop")
	window := rollout.PrometheusWindow(d, policy.StageShadow)
	if window != 5*time.Minute {
		t.Fatalf("window: got %s, want the domain's 5m", window)
	}
	promOver, promTotal, err := src.WouldDeny(ctx, "shop", "probe", policy.StageShadow, window)
	if err != nil {
		t.Fatal(err)
	}
	qo, qt := rollout.WouldDenyQueries("shop", "probe", policy.StageShadow, window)
	t.Logf("prometheus-gate: requests=%d enforcer_over=%v enforcer_total=%v share=%.4f", e2eRequests, over, total, share)
	t.Logf("prometheus-gate: %s = %.1f", qo, promOver)
	t.Logf("prometheus-gate: %s = %.1f", qt, promTotal)

	// Thresholds five points either side of the share, in the domain's settings.
	bp := func(s float64) *int64 { n := int64(math.Round(s * 10000)); return &n }
	for _, tt := range []struct {
		name  string
		max   *int64
		state rollout.GateState
	}{
		{"above the share", bp(share + 0.05), rollout.GatePass},
		{"below the share", bp(share - 0.05), rollout.GateBlocked},
	} {
		d.Rollout.Prometheus.MaxShareBP = tt.max
		st := rollout.Evaluate(ctx, m, rollout.Config{Today: time.Now(), Prometheus: src, MaxFalsePositive: 0.005})
		g := st.Rules[0].Gates[3]
		t.Logf("prometheus-gate: max_would_deny %s: %s: %s", rollout.Percent(float64(*tt.max)/10000), g.State, g.Reason)
		if g.Name != rollout.GatePrometheus || g.State != tt.state {
			t.Errorf("%s: got gate %s %s (%s), want %s", tt.name, g.Name, g.State, g.Reason, tt.state)
			continue
		}
		// increase() extrapolates each series alike, and every series of the rule started at 0
		// in the window, so the share it reads is the counters' share but for rounding.
		if g.Value == nil || math.Abs(*g.Value-share) > 0.005 {
			t.Errorf("%s: got share %v, want %.4f (the enforcer's counters) within 0.5 points", tt.name, g.Value, share)
		}
		if !strings.Contains(g.Reason, "over the last 5m") {
			t.Errorf("%s: got reason %q, want the domain's window of 5m in it", tt.name, g.Reason)
		}
	}
}

// startEnforcer loads e2ePolicy and spawns an enforcer on it: memory store, free loopback
// ports, a store timeout far beyond what a busy machine takes, so that every decision is the
// engine's.
func startEnforcer(t *testing.T, dir string) (*policy.Model, *enforcer.Enforcer) {
	t.Helper()
	pdir := filepath.Join(dir, "policies")
	if err := os.MkdirAll(pdir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pdir, "p.cue"), []byte(e2ePolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := schema.Load(pdir)
	if err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(dir, "snapshot.json")
	f, err := os.Create(snap)
	if err != nil {
		t.Fatal(err)
	}
	if err := policy.WriteSnapshot(f, m); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	e, err := enforcer.Spawn(context.Background(), enforcer.Config{
		SnapshotPath: snap, GRPCAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", Store: "memory",
		StoreTimeout: 5 * time.Second, InstanceID: "rollout-e2e",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return m, e
}

// driveLoad sends the e2e load to e and returns the rule's would-deny and total decisions from
// the enforcer's own /metrics.
func driveLoad(t *testing.T, e *enforcer.Enforcer) (over, total float64) {
	t.Helper()
	cc, err := grpc.NewClient(e.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := rlsv3.NewRateLimitServiceClient(cc)
	desc := func(v string) *commonv3.RateLimitDescriptor {
		return &commonv3.RateLimitDescriptor{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "client", Value: v}}}
	}
	var next atomic.Int64
	var failed atomic.Int64
	var firstErr sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for range e2eWorkers {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < e2eRequests; i = next.Add(1) - 1 {
				req := &rlsv3.RateLimitRequest{Domain: "shop", Descriptors: []*commonv3.RateLimitDescriptor{desc("key-" + strconv.FormatInt(i, 10))}}
				if i%2 == 0 {
					req.Descriptors = append(req.Descriptors, desc("hot"))
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				resp, err := client.ShouldRateLimit(ctx, req)
				cancel()
				switch {
				case err != nil:
					failed.Add(1)
					firstErr.Do(func() { t.Errorf("ShouldRateLimit: %v", err) })
				case resp.OverallCode != rlsv3.RateLimitResponse_OK:
					failed.Add(1)
					firstErr.Do(func() { t.Errorf("ShouldRateLimit: got %s, want OK: a shadow rule rejects nothing", resp.OverallCode) })
				}
				time.Sleep(e2ePause)
			}
		})
	}
	wg.Wait()
	t.Logf("prometheus-gate: load of %d calls took %s, %d failed", e2eRequests, time.Since(start).Round(time.Millisecond), failed.Load())

	resp, err := http.Get("http://" + e.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, mt := range families["rate_limit_requests_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range mt.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["domain"] != "shop" || labels["rule"] != "probe" {
			continue
		}
		v := mt.GetCounter().GetValue()
		total += v
		if labels["decision"] == "shadow_over" || labels["decision"] == "soft_over" {
			over += v
		}
	}
	return over, total
}

// promServer is a prometheus process started by startPrometheus.
type promServer struct {
	url string
	api promv1.API
	log string // its log file, shown when it fails
}

// requirePrometheus returns the prometheus binary on PATH, or skips the test (fails it when
// CI=true) when there is none: scripts/ensure-prometheus.sh installs it.
func requirePrometheus(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("prometheus not on PATH (required when CI=true; make deps installs it): %v", err)
		}
		t.Skipf("prometheus not on PATH (make deps installs it): %v", err)
	}
	return bin
}

// startPrometheus starts bin on a free loopback port with its own configuration and storage
// under dir, scraping target every second, and waits until it is ready. The process is stopped
// by its PID when the test ends.
func startPrometheus(t *testing.T, bin, dir, target string) *promServer {
	t.Helper()
	config := filepath.Join(dir, "prometheus.yml")
	yml := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: rlctl-enforcer
    static_configs:
      - targets: [%q]
`, target)
	if err := os.WriteFile(config, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	var lastErr error
	// Another process may take the port between the probe and the start: try again.
	for attempt := range 3 {
		addr, err := freeAddr()
		if err != nil {
			t.Fatal(err)
		}
		p := &promServer{url: "http://" + addr, log: filepath.Join(dir, fmt.Sprintf("prometheus-%d.log", attempt))}
		if lastErr = p.start(t, bin, config, filepath.Join(dir, fmt.Sprintf("tsdb-%d", attempt)), addr); lastErr == nil {
			c, err := api.NewClient(api.Config{Address: p.url})
			if err != nil {
				t.Fatal(err)
			}
			p.api = promv1.NewAPI(c)
			return p
		}
	}
	t.Fatalf("start prometheus: %v", lastErr)
	return nil
}

// startTimeout bounds the wait for Prometheus to become ready and for each condition waitFor
// waits on: generous, for a busy two-core machine.
const startTimeout = 90 * time.Second

func (p *promServer) start(t *testing.T, bin, config, tsdb, addr string) error {
	logf, err := os.Create(p.log)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "--config.file="+config, "--storage.tsdb.path="+tsdb,
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop := func() {
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-done:
			return fmt.Errorf("prometheus exited at start: %s", p.tail())
		default:
		}
		// A Prometheus that accepts and stalls must not hold the loop past its deadline.
		resp, err := (&http.Client{Timeout: 2 * time.Second}).Get(p.url + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Cleanup(stop)
				return nil
			}
		}
		if time.Now().After(deadline) {
			stop()
			return fmt.Errorf("prometheus at %s not ready after %s: %s", addr, startTimeout, p.tail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitFor runs the instant query q until ok holds of its result, or fails the test.
func (p *promServer) waitFor(t *testing.T, what string, ok func(model.Vector) bool, q string) {
	t.Helper()
	deadline := time.Now().Add(startTimeout)
	var last string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		v, _, _, err := p.api.Query(ctx, q, time.Now())
		cancel()
		if err == nil {
			if vec, isVec := v.(model.Vector); isVec && ok(vec) {
				return
			}
			last = v.String()
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %s is %s after %s; prometheus log: %s", what, q, last, startTimeout, p.tail())
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// tail returns the end of the server's log.
func (p *promServer) tail() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	if s := strings.TrimSpace(string(b)); s != "" {
		return s
	}
	return "(empty)"
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", errors.New("no free loopback port: " + err.Error())
	}
	defer l.Close()
	return l.Addr().String(), nil
}
