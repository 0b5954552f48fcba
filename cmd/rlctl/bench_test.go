package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rlctl/rlctl/enforcer"
	"github.com/rlctl/rlctl/internal/redistest"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/schema"
)

// foreignRLS is a minimal RLS that is not ours: every third call is OVER_LIMIT.
type foreignRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
	calls   atomic.Int64
	domains atomic.Value
}

func (f *foreignRLS) ShouldRateLimit(_ context.Context, r *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	f.domains.Store(r.Domain)
	if f.calls.Add(1)%3 == 0 {
		return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT}, nil
	}
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}, nil
}

func benchJSON(t *testing.T, o benchOptions) BenchResult {
	t.Helper()
	o.output = "json"
	if o.maxUnavailable == 0 {
		o.maxUnavailable = 3 * time.Second
	}
	var out bytes.Buffer
	if err := runBench(context.Background(), &o, &out); err != nil {
		t.Fatalf("bench: %v", err)
	}
	var r BenchResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("bench output: %v\n%s", err, out.String())
	}
	// Requests are the answered calls; errors are counted apart.
	if r.Requests == 0 || r.OK+r.OverLimit != r.Requests {
		t.Fatalf("counts: requests %d, want ok %d + over %d", r.Requests, r.OK, r.OverLimit)
	}
	if r.LatencyUs.P50 <= 0 || r.LatencyUs.P50 > r.LatencyUs.P99 || r.LatencyUs.P99 > r.LatencyUs.Max {
		t.Errorf("latency percentiles out of order: %+v", r.LatencyUs)
	}
	return r
}

// TestBenchForeignRLS runs bench against an RLS that is not rlctl's.
func TestBenchForeignRLS(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	f := &foreignRLS{}
	rlsv3.RegisterRateLimitServiceServer(srv, f)
	go srv.Serve(lis)
	defer srv.Stop()

	r := benchJSON(t, benchOptions{target: lis.Addr().String(), concurrency: 4, connections: 2, duration: 300 * time.Millisecond,
		domain: "other", descriptors: []string{"k=v"}, tenants: 1})
	if r.Errors != 0 || r.OverLimit == 0 || r.OK == 0 {
		t.Errorf("got ok %d, over %d, errors %d; want both codes and no errors", r.OK, r.OverLimit, r.Errors)
	}
	if got := f.domains.Load(); got != "other" {
		t.Errorf("domain: got %v, want other", got)
	}
	// The probe call is not counted; every counted call reached the server.
	if got := f.calls.Load() - 1; got != r.Requests {
		t.Errorf("server saw %d calls, bench counted %d", got, r.Requests)
	}
}

// failingRLS fails every other call with codes.Internal, answering at once.
type failingRLS struct {
	foreignRLS
	failed atomic.Int64
}

func (f *failingRLS) ShouldRateLimit(ctx context.Context, r *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if f.calls.Load()%2 == 1 {
		f.calls.Add(1)
		f.failed.Add(1)
		return nil, status.Error(codes.Internal, "boom")
	}
	return f.foreignRLS.ShouldRateLimit(ctx, r)
}

// serveRLS serves srv's RLS on a loopback port and returns its address and the gRPC server.
func serveRLS(t *testing.T, srv rlsv3.RateLimitServiceServer) (string, *grpc.Server) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(gs, srv)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	return lis.Addr().String(), gs
}

// TestBenchCountsAnsweredCalls: failed calls are errors, not requests: the rate and the
// latencies are those of the calls the target answered.
func TestBenchCountsAnsweredCalls(t *testing.T) {
	f := &failingRLS{}
	addr, _ := serveRLS(t, f)
	r := benchJSON(t, benchOptions{target: addr, concurrency: 4, connections: 1, duration: 300 * time.Millisecond,
		domain: "other", descriptors: []string{"k=v"}, tenants: 1})
	if r.Errors == 0 || r.FirstError == "" {
		t.Errorf("got %d errors (first %q), want some", r.Errors, r.FirstError)
	}
	if got, want := r.Requests, f.calls.Load()-f.failed.Load()-1; got != want { // the probe is not counted
		t.Errorf("got %d requests, want the %d calls the server answered", got, want)
	}
	if got, want := r.RPS, float64(r.Requests)/r.DurationS; got != want {
		t.Errorf("got rps %v, want answered calls per second %v", got, want)
	}
}

// TestBenchTargetGone: when the target goes away mid-run, the workers back off rather than spin,
// and the run stops with a tool error once the target has answered nothing for
// --max-unavailable.
func TestBenchTargetGone(t *testing.T) {
	addr, gs := serveRLS(t, &foreignRLS{})
	time.AfterFunc(200*time.Millisecond, gs.Stop)
	var out bytes.Buffer
	err := runBench(context.Background(), &benchOptions{target: addr, concurrency: 8, connections: 2, duration: time.Minute,
		domain: "other", descriptors: []string{"k=v"}, tenants: 1, maxUnavailable: 500 * time.Millisecond, output: "json"}, &out)
	if code := exitCode(err); code != ExitUsage {
		t.Fatalf("got exit %d (%v), want %d", code, err, ExitUsage)
	}
	if out.Len() != 0 {
		t.Errorf("got output %q, want none", out.String())
	}
	m := regexp.MustCompile(`answered no call for .* \(--max-unavailable 500ms\): stopped after [0-9.]+s with \d+ answered and (\d+) failed calls; the last error: .*Unavailable`).
		FindStringSubmatch(err.Error())
	if m == nil {
		t.Fatalf("got error %q, want it to say the target answered nothing, and the counts", err)
	}
	// Backing off from 10ms to 200ms, 8 workers make a few calls each in 500ms; spinning,
	// they made tens of thousands.
	if failed, _ := strconv.Atoi(m[1]); failed > 400 {
		t.Errorf("got %d failed calls, want the workers to back off", failed)
	}
}

// TestBenchRefused: a refused connection fails the probe at once, without waiting for the
// target to come up.
func TestBenchRefused(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	start := time.Now()
	err = runBench(context.Background(), &benchOptions{target: addr, concurrency: 1, connections: 1, duration: time.Second,
		domain: "other", descriptors: []string{"k=v"}, tenants: 1, maxUnavailable: time.Second, output: "json"}, io.Discard)
	if code := exitCode(err); code != ExitUsage || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("got exit %d, %v; want %d and connection refused", code, err, ExitUsage)
	}
	// The probe used to wait for the connection for its whole timeout.
	if d := time.Since(start); d >= benchCallTimeout {
		t.Errorf("took %v, want a failure before the %v probe timeout", d, benchCallTimeout)
	}
}

// TestBenchEnforcerRedis runs bench against rlctl-enforcer on a real Redis and checks the
// Redis commands and CPU figures.
func TestBenchEnforcerRedis(t *testing.T) {
	rs := redistest.Start(t)
	m, err := schema.Load("../../policies")
	if err != nil {
		t.Fatal(err)
	}
	var snap bytes.Buffer
	if err := policy.WriteSnapshot(&snap, m); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "snapshot.json")
	if err := os.WriteFile(path, snap.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	e, err := enforcer.Spawn(context.Background(), enforcer.Config{SnapshotPath: path, GRPCAddr: "127.0.0.1:0", AdminAddr: "off",
		Store: "redis", RedisURL: "redis://" + rs.Addr() + "/0", StoreTimeout: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()

	// shopify_payments allows 200/s: a closed loop of 4 workers goes over it.
	r := benchJSON(t, benchOptions{target: e.GRPCAddr(), concurrency: 4, connections: 1, duration: 500 * time.Millisecond,
		domain: "edge_gateway_limits", descriptors: []string{"tenant_id=shopify,path=/v1/payments/charge"}, tenants: 1,
		redisURL: "redis://" + rs.Addr(), pid: os.Getpid()})
	if r.Errors != 0 || r.OK == 0 || r.OverLimit == 0 {
		t.Errorf("got ok %d, over %d, errors %d; want both codes and no errors", r.OK, r.OverLimit, r.Errors)
	}
	if r.RedisPerReq == nil || *r.RedisPerReq <= 0 || r.RedisByCmd["evalsha"]+r.RedisByCmd["eval"] == 0 {
		t.Errorf("redis figures: per request %v, by command %v; want the lease script's calls", r.RedisPerReq, r.RedisByCmd)
	}
	if r.CPUUsPerReq == nil || *r.CPUUsPerReq <= 0 {
		t.Errorf("cpu per request: got %v, want > 0", r.CPUUsPerReq)
	}
}
