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
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

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
	var out bytes.Buffer
	if err := runBench(context.Background(), &o, &out); err != nil {
		t.Fatalf("bench: %v", err)
	}
	var r BenchResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("bench output: %v\n%s", err, out.String())
	}
	if r.Requests == 0 || r.OK+r.OverLimit+r.Errors != r.Requests {
		t.Fatalf("counts: requests %d, ok %d + over %d + errors %d", r.Requests, r.OK, r.OverLimit, r.Errors)
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
