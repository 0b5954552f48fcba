package controlplane_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/rlctl/rlctl/enforcer"
	"github.com/rlctl/rlctl/internal/clitest"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/schema"
	"github.com/rlctl/rlctl/xds"
	"github.com/rlctl/rlctl/xds/controlplane"
)

// syncBuffer is a log sink that tests read while servers write.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// eventually retries f until it returns true or d passes.
func eventually(t *testing.T, d time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// subscriber is an xds.Client whose Apply records what it was sent and may reject it.
type subscriber struct {
	mu       sync.Mutex
	versions []string // every version sent, in order
	reject   func(version string) bool
	client   *xds.Client
}

func subscribe(t *testing.T, addr string, reject func(string) bool) *subscriber {
	t.Helper()
	s := &subscriber{reject: reject}
	c, err := xds.NewClient(xds.ClientOptions{Addr: addr, NodeID: "test", Apply: func(version string, raw []byte) error {
		s.mu.Lock()
		s.versions = append(s.versions, version)
		s.mu.Unlock()
		m, err := policy.ReadSnapshot(strings.NewReader(string(raw)))
		if err != nil {
			return err
		}
		if h, _ := policy.ContentHash(m); h != version {
			return errors.New("version is not the content hash")
		}
		if s.reject != nil && s.reject(version) {
			return errors.New("rejected by the test")
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done; c.Close() })
	s.client = c
	return s
}

func (s *subscriber) sent() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.versions...)
}

// TestSnapshotResource: the snapshot resource is the bytes of rlctl render --target snapshot,
// versioned by their content hash, which the subscriber checks.
func TestSnapshotResource(t *testing.T) {
	dir := policyCopy(t)
	srv := startServer(t, dir, "127.0.0.1:0")
	s := subscribe(t, srv.Addr(), nil)
	eventually(t, 5*time.Second, "the first snapshot", func() bool { return s.client.Version() != "" })
	m, err := schema.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := policy.ContentHash(m)
	if got := s.client.Version(); got != want || srv.Version() != want {
		t.Errorf("version: client %s, server %s, want the content hash %s", got, srv.Version(), want)
	}
}

// TestRefusedChange: a change that does not load is refused and logged with the problem's
// position; the last good version keeps being served, and clients get nothing new. Fixing it
// serves the fix.
func TestRefusedChange(t *testing.T) {
	dir := policyCopy(t)
	logs := &syncBuffer{}
	srv, err := controlplane.Start(context.Background(), controlplane.Config{PolicyDir: dir, Addr: "127.0.0.1:0",
		AdminAddr: "127.0.0.1:0", Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	s := subscribe(t, srv.Addr(), nil)
	eventually(t, 5*time.Second, "the first snapshot", func() bool { return s.client.Version() != "" })
	v1 := srv.Version()

	path := filepath.Join(dir, fleetFile)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(good), fleetLimit(100), `limits: [{requests: "many", window: "1s"}]`, 1)
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the refusal", func() bool {
		return clitest.Metric(t, srv.AdminAddr(), `rlctl_xds_policy_loads_total{result="refused"}`) >= 1
	})
	if got := srv.Version(); got != v1 {
		t.Errorf("version after a bad change: %s, want %s still served", got, v1)
	}
	if l := logs.String(); !strings.Contains(l, "policy change refused") || !strings.Contains(l, fleetFile+":") {
		t.Errorf("logs: want the refusal with the problem's position in %s:\n%s", fleetFile, l)
	}
	lastOK := func() float64 { return clitest.Metric(t, srv.AdminAddr(), "rlctl_xds_policy_last_load_successful") }
	if got := lastOK(); got != 0 {
		t.Errorf("last load successful after the refusal: %v, want 0", got)
	}
	// Reverted, the directory is the version served again: nothing to push, and the last load
	// is a success again (it said so only once another version came).
	if err := os.WriteFile(path, good, 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the revert loaded", func() bool { return lastOK() == 1 })
	if !strings.Contains(logs.String(), "policy restored") {
		t.Errorf("logs: no \"policy restored\" line after the revert")
	}

	if err := os.WriteFile(path, []byte(strings.Replace(string(good), fleetLimit(100), fleetLimit(120), 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the fix served", func() bool { return s.client.Version() != v1 })
	if got, want := s.sent(), []string{v1, srv.Version()}; !slicesEqual(got, want) {
		t.Errorf("versions sent: got %v, want %v", got, want)
	}
}

// TestUnchangedPolicy: a change that leaves the policy's meaning alone (a comment) keeps the
// version, and nothing is pushed.
func TestUnchangedPolicy(t *testing.T) {
	dir := policyCopy(t)
	srv := startServer(t, dir, "127.0.0.1:0")
	s := subscribe(t, srv.Addr(), nil)
	eventually(t, 5*time.Second, "the first snapshot", func() bool { return s.client.Version() != "" })
	pushes := clitest.Metric(t, srv.AdminAddr(), `rlctl_xds_pushes_total{type_url="`+xds.SnapshotTypeURL+`"}`)

	f, err := os.OpenFile(filepath.Join(dir, fleetFile), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(f, "\n// a comment changes no limit\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	eventually(t, 5*time.Second, "the reload", func() bool {
		return clitest.Metric(t, srv.AdminAddr(), `rlctl_xds_policy_loads_total{result="unchanged"}`) >= 1
	})
	if got := clitest.Metric(t, srv.AdminAddr(), `rlctl_xds_pushes_total{type_url="`+xds.SnapshotTypeURL+`"}`); got != pushes {
		t.Errorf("pushes after a comment: %v, want %v", got, pushes)
	}
	if got := s.sent(); len(got) != 1 {
		t.Errorf("versions sent: %v, want only the first", got)
	}
}

// TestNACK: a client that rejects a version is not sent it again; it gets the next one.
func TestNACK(t *testing.T) {
	dir := policyCopy(t)
	srv := startServer(t, dir, "127.0.0.1:0")
	v1 := srv.Version()
	var mu sync.Mutex
	rejected := ""
	// The client rejects the first version after v1.
	s := subscribe(t, srv.Addr(), func(v string) bool {
		mu.Lock()
		defer mu.Unlock()
		if v != v1 && rejected == "" {
			rejected = v
		}
		return v == rejected
	})
	eventually(t, 5*time.Second, "the first snapshot", func() bool { return s.client.Version() != "" })

	path := filepath.Join(dir, fleetFile)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	write := func(n int) {
		t.Helper()
		if err := os.WriteFile(path, []byte(strings.Replace(string(good), fleetLimit(100), fleetLimit(n), 1)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(130)
	eventually(t, 5*time.Second, "the NACK", func() bool {
		return clitest.Metric(t, srv.AdminAddr(), `rlctl_xds_nacks_total{type_url="`+xds.SnapshotTypeURL+`"}`) == 1
	})
	v2 := srv.Version()
	time.Sleep(300 * time.Millisecond) // a resent version would come at once
	if got, want := s.sent(), []string{v1, v2}; !slicesEqual(got, want) {
		t.Errorf("versions sent: got %v, want %v (the rejected one once)", got, want)
	}
	if got := s.client.Version(); got != v1 {
		t.Errorf("client version after a NACK: %s, want %s", got, v1)
	}
	write(140)
	eventually(t, 5*time.Second, "the next version", func() bool { return s.client.Version() != v1 })
	if got := s.client.Version(); got == v2 || got != srv.Version() {
		t.Errorf("client version: %s, want the next one, %s", got, srv.Version())
	}
}

// TestEnforcerAwaitsSnapshot: an enforcer with --xds is not ready, answers UNAVAILABLE and
// reports NOT_SERVING until the first snapshot arrives; then it serves, and its config version
// metric is the xDS version.
func TestEnforcerAwaitsSnapshot(t *testing.T) {
	dir := policyCopy(t)
	addr := stableAddr(t)
	e, err := enforcer.Spawn(context.Background(), enforcer.Config{XDSAddr: addr, GRPCAddr: "127.0.0.1:0",
		AdminAddr: "127.0.0.1:0", InstanceID: "t", Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	conn := dial(t, e.GRPCAddr())
	m := &member{id: "t", e: e, client: rlsNew(conn)}
	health := healthpb.NewHealthClient(conn)

	if _, err := m.ask(context.Background(), "a"); status.Code(err) != codes.Unavailable {
		t.Errorf("ShouldRateLimit before the first snapshot: %v, want UNAVAILABLE", err)
	}
	if r, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil || r.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health before the first snapshot: %v %v, want NOT_SERVING", r, err)
	}
	for _, p := range []string{"/readyz", "/config"} {
		if got := httpStatus(t, e.AdminAddr(), p); got != http.StatusServiceUnavailable {
			t.Errorf("%s before the first snapshot: %d, want 503", p, got)
		}
	}

	srv := startServer(t, dir, addr)
	if !waitLimit(t, m, 100, 10*time.Second) {
		t.FailNow()
	}
	if got := httpStatus(t, e.AdminAddr(), "/readyz"); got != http.StatusOK {
		t.Errorf("/readyz after the first snapshot: %d, want 200", got)
	}
	if r, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health after the first snapshot: %v %v, want SERVING", r, err)
	}
	if got := clitest.Metric(t, e.AdminAddr(), `rate_limit_config_info{version="`+srv.Version()+`"}`); got != 1 {
		t.Errorf("rate_limit_config_info of the xDS version: %v, want 1", got)
	}
	if got := clitest.Metric(t, e.AdminAddr(), "rate_limit_xds_connected"); got != 1 {
		t.Errorf("rate_limit_xds_connected: %v, want 1", got)
	}
	srv.Close()
	eventually(t, 5*time.Second, "the lost stream", func() bool {
		return clitest.Metric(t, e.AdminAddr(), "rate_limit_xds_connected") == 0
	})
	if got := httpStatus(t, e.AdminAddr(), "/readyz"); got != http.StatusOK {
		t.Errorf("/readyz while the control plane is away: %d, want 200 (the last snapshot serves)", got)
	}
}

// stableAddr returns a free loopback address for a control plane that clients dial while it is
// not listening (not yet, or between a stop and a restart). Its port is below the ephemeral
// range: there a client's dial can take the port by connecting to itself (TCP simultaneous
// open, when its ephemeral source port happens to be the destination port), and the control
// plane could not listen on it.
func stableAddr(t *testing.T) string {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	if low <= 10_000 {
		t.Skipf("the ephemeral port range starts at %d: no port below it to use", low)
	}
	for range 100 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(10_000+rand.IntN(low-10_000)))
		if ln, err := net.Listen("tcp", addr); err == nil {
			ln.Close()
			return addr
		}
	}
	t.Fatal("no free loopback port below the ephemeral range")
	return ""
}

func rlsNew(conn *grpc.ClientConn) rlsv3.RateLimitServiceClient {
	return rlsv3.NewRateLimitServiceClient(conn)
}

func httpStatus(t *testing.T, addr, path string) int {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func slicesEqual(a, b []string) bool {
	return strings.Join(a, ",") == strings.Join(b, ",")
}
