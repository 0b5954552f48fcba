package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
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

// config is a run of one descriptor k=v, one tenant, against target.
func config(target string, concurrency, connections int, d time.Duration) Config {
	return Config{Target: target, Concurrency: concurrency, Connections: connections, Duration: d,
		Domain: "other", Descriptors: []Descriptor{{{"k", "v"}}}, Tenants: 1, MaxUnavailable: 3 * time.Second}
}

// runOK runs cfg and checks the result's counts and percentiles hold together.
func runOK(t *testing.T, cfg Config) *Result {
	t.Helper()
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("run: %v", err)
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

// TestRunForeignRLS runs the load against an RLS that is not rlctl's.
func TestRunForeignRLS(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	f := &foreignRLS{}
	rlsv3.RegisterRateLimitServiceServer(srv, f)
	go srv.Serve(lis)
	defer srv.Stop()

	r := runOK(t, config(lis.Addr().String(), 4, 2, 300*time.Millisecond))
	if r.Errors != 0 || r.OverLimit == 0 || r.OK == 0 {
		t.Errorf("got ok %d, over %d, errors %d; want both codes and no errors", r.OK, r.OverLimit, r.Errors)
	}
	if got := f.domains.Load(); got != "other" {
		t.Errorf("domain: got %v, want other", got)
	}
	// The probe call is not counted; every counted call reached the server.
	if got := f.calls.Load() - 1; got != r.Requests {
		t.Errorf("server saw %d calls, Run counted %d", got, r.Requests)
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

// TestRunCountsAnsweredCalls: failed calls are errors, not requests: the rate and the
// latencies are those of the calls the target answered.
func TestRunCountsAnsweredCalls(t *testing.T) {
	f := &failingRLS{}
	addr, _ := serveRLS(t, f)
	r := runOK(t, config(addr, 4, 1, 300*time.Millisecond))
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

// TestRunTargetGone: when the target goes away mid-run, the workers back off rather than spin,
// and the run stops with a tool error once the target has answered nothing for
// --max-unavailable.
func TestRunTargetGone(t *testing.T) {
	addr, gs := serveRLS(t, &foreignRLS{})
	time.AfterFunc(200*time.Millisecond, gs.Stop)
	cfg := config(addr, 8, 2, time.Minute)
	cfg.MaxUnavailable = 500 * time.Millisecond
	r, err := Run(context.Background(), cfg)
	if err == nil {
		t.Fatalf("got %+v, want an error", r)
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

// TestRunRefused: a refused connection fails the probe at once, without waiting for the
// target to come up.
func TestRunRefused(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	start := time.Now()
	_, err = Run(context.Background(), config(addr, 1, 1, time.Second))
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("got %v, want connection refused", err)
	}
	// The probe used to wait for the connection for its whole timeout.
	if d := time.Since(start); d >= CallTimeout {
		t.Errorf("took %v, want a failure before the %v probe timeout", d, CallTimeout)
	}
}

// TestRunEnforcerRedis runs the load against rlctl-enforcer on a real Redis and checks the
// Redis commands and CPU figures.
func TestRunEnforcerRedis(t *testing.T) {
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
	cfg := config(e.GRPCAddr(), 4, 1, 500*time.Millisecond)
	cfg.Domain = "edge_gateway_limits"
	cfg.Descriptors = []Descriptor{{{"tenant_id", "shopify"}, {"charge", "/v1/payments/charge"}}}
	cfg.RedisURL, cfg.PID = "redis://"+rs.Addr(), os.Getpid()
	r := runOK(t, cfg)
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

func TestParseDescriptor(t *testing.T) {
	tests := []struct {
		in      string
		want    Descriptor
		wantErr string
	}{
		{in: "k=v", want: Descriptor{{"k", "v"}}},
		{in: "tenant_id=a,path=/v1/x=y", want: Descriptor{{"tenant_id", "a"}, {"path", "/v1/x=y"}}},
		{in: "k=", want: Descriptor{{"k", ""}}},
		{in: "novalue", wantErr: `--descriptor "novalue": want key=value,key=value`},
		{in: "=v", wantErr: `--descriptor "=v": want key=value,key=value`},
		{in: "a=b,", wantErr: `--descriptor "a=b,": want key=value,key=value`},
	}
	for _, tt := range tests {
		got, err := ParseDescriptor(tt.in)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("ParseDescriptor(%q): got %v, %v; want error %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseDescriptor(%q): got %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestValidate(t *testing.T) {
	ok := config("127.0.0.1:1", 1, 1, time.Second)
	tests := []struct {
		name    string
		edit    func(*Config)
		wantErr string
	}{
		{"ok", func(*Config) {}, ""},
		{"no domain", func(c *Config) { c.Domain = "" }, "--domain is required"},
		{"no descriptor", func(c *Config) { c.Descriptors = nil }, "at least one --descriptor is required"},
		{"no workers", func(c *Config) { c.Concurrency = 0 }, "--concurrency, --connections, --tenants, --duration and --max-unavailable must be positive"},
		{"no tenants", func(c *Config) { c.Tenants = 0 }, "--concurrency, --connections, --tenants, --duration and --max-unavailable must be positive"},
		{"zero max-unavailable", func(c *Config) { c.MaxUnavailable = 0 }, "--concurrency, --connections, --tenants, --duration and --max-unavailable must be positive"},
		{"negative pid", func(c *Config) { c.PID = -4 }, "--pid -4: want the process ID of the target, above 0"},
	}
	for _, tt := range tests {
		c := ok
		tt.edit(&c)
		err := c.Validate()
		if got := fmt.Sprint(err); (tt.wantErr == "" && err != nil) || (tt.wantErr != "" && got != tt.wantErr) {
			t.Errorf("%s: got %v, want %q", tt.name, err, tt.wantErr)
		}
	}
}

// TestRequestsTenants: --tenants spreads the value of one entry (the first, or TenantKey's) over
// N identities, and leaves every other entry alone.
func TestRequestsTenants(t *testing.T) {
	cfg := config("", 1, 1, time.Second)
	cfg.Descriptors = []Descriptor{{{"a", "x"}}, {{"b", "y"}, {"tenant", "t"}}}
	values := func(cfg Config) []string {
		t.Helper()
		reqs, err := requests(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range reqs {
			var s []string
			for _, d := range r.Descriptors {
				for _, e := range d.Entries {
					s = append(s, e.Key+"="+e.Value)
				}
			}
			got = append(got, strings.Join(s, ","))
		}
		return got
	}
	if got, want := values(cfg), []string{"a=x,b=y,tenant=t"}; !reflect.DeepEqual(got, want) {
		t.Errorf("one tenant: got %q, want %q", got, want)
	}
	cfg.Tenants = 3
	if got, want := values(cfg), []string{"a=x-0,b=y,tenant=t", "a=x-1,b=y,tenant=t", "a=x-2,b=y,tenant=t"}; !reflect.DeepEqual(got, want) {
		t.Errorf("3 tenants: got %q, want %q", got, want)
	}
	cfg.TenantKey = "tenant"
	if got, want := values(cfg), []string{"a=x,b=y,tenant=t-0", "a=x,b=y,tenant=t-1", "a=x,b=y,tenant=t-2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("3 tenants on --tenant-key: got %q, want %q", got, want)
	}
	cfg.TenantKey = "zz"
	if _, err := requests(cfg); err == nil || err.Error() != `--tenant-key "zz" is in no --descriptor` {
		t.Errorf("unknown tenant key: got %v", err)
	}
}

// TestResultWrite: the text and JSON forms are rlctl bench's output, public API.
func TestResultWrite(t *testing.T) {
	cmds, per, cpu := int64(12), 0.5, 7.25
	r := &Result{Target: "127.0.0.1:8081", Concurrency: 4, Requests: 24, DurationS: 1.5, RPS: 16, OK: 20, OverLimit: 4,
		Errors: 1, FirstError: "boom", LatencyUs: Latency{P50: 100, P90: 200, P99: 300, P999: 400, Max: 500},
		RedisCmds: &cmds, RedisPerReq: &per, RedisByCmd: map[string]int64{"evalsha": 12}, CPUUsPerReq: &cpu}
	var text bytes.Buffer
	if err := r.Write(&text, "text"); err != nil {
		t.Fatal(err)
	}
	want := `target       127.0.0.1:8081 (concurrency 4)
requests     24 answered in 1.50s
rps          16
latency      p50 100µs  p90 200µs  p99 300µs  p999 400µs  max 500µs
ok           20
over_limit   4
errors       1
first error  boom
redis        12 commands, 0.5000 per request
cpu          7.2µs per request
`
	if got := text.String(); got != want {
		t.Errorf("text: got\n%s\nwant\n%s", got, want)
	}
	var js bytes.Buffer
	if err := r.Write(&js, "json"); err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{`"requests": 24`, `"duration_s": 1.5`, `"over_limit": 4`, `"first_error": "boom"`,
		`"p999": 400`, `"redis_commands": 12`, `"redis_commands_per_request": 0.5`, `"evalsha": 12`, `"cpu_us_per_request": 7.25`} {
		if !strings.Contains(js.String(), field) {
			t.Errorf("json: no %s in\n%s", field, js.String())
		}
	}
	var back Result
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || !reflect.DeepEqual(&back, r) {
		t.Errorf("json round trip: got %+v, %v; want %+v", back, err, r)
	}
	if err := r.Write(io.Discard, "yaml"); err == nil {
		t.Error("yaml: got no error")
	}
}
