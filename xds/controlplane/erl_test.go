package controlplane_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/rlctl/rlctl/internal/clitest"
	"github.com/rlctl/rlctl/internal/redistest"
	"github.com/rlctl/rlctl/xds"
)

// erlPolicy is one fixed-window rule that envoyproxy/ratelimit expresses exactly, n requests a
// minute per user, and one in the soft stage, a request a minute per tenant, which it must admit
// over the limit.
func erlPolicy(n int) string {
	return fmt.Sprintf(`package erl

domains: erl_xds: {
	sources: user: {kind: "header", header: "x-user"}
	sources: tenant: {kind: "header", header: "x-tenant"}
	rules: per_user: {
		owner: "test"
		stage: {name: "enforce", since: "2026-12-03"}
		match: [{key: "user"}]
		limits: [{requests: %d, window: "1m", algorithm: "fixed_window"}]
	}
	rules: per_tenant_soft: {
		owner: "test"
		stage: {name: "soft", since: "2026-12-03"}
		match: [{key: "tenant"}]
		limits: [{requests: 1, window: "1m", algorithm: "fixed_window"}]
	}
}
`, n)
}

// TestERLOverXDS runs the real envoyproxy/ratelimit (its service_cmd, installed by
// scripts/ensure-erl.sh; skipped when missing unless CI=true) with CONFIG_TYPE=GRPC_XDS_SOTW
// against the control plane: it serves the policy's limit, and an edited limit once the control
// plane pushes it.
func TestERLOverXDS(t *testing.T) {
	bin := erlBinary(t)
	rds := redistest.Start(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.cue")
	if err := os.WriteFile(path, []byte(erlPolicy(5)), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, dir, "127.0.0.1:0")

	grpcPort, httpPort, debugPort := freePort(t), freePort(t), freePort(t)
	cmd := exec.Command(bin)
	var logs syncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.Env = append(os.Environ(),
		"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL="+srv.Addr(), "CONFIG_GRPC_XDS_NODE_ID=erl-test",
		"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL=100ms",
		"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=100ms", "XDS_CLIENT_BACKOFF_MAX_INTERVAL=1s",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=SINGLE", "REDIS_URL="+rds.Addr(),
		"USE_STATSD=false", "DISABLE_STATS=true", "LOG_LEVEL=info",
		"HOST=127.0.0.1", "PORT="+strconv.Itoa(httpPort), "GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(grpcPort),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(debugPort))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // by PID
		<-exited
		if t.Failed() {
			t.Logf("envoyproxy/ratelimit's log:\n%s", logs.String())
		}
	})

	client := rlsv3.NewRateLimitServiceClient(dial(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(grpcPort))))
	askKey := func(key, value string) (*rlsv3.RateLimitResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "erl_xds", Descriptors: []*commonv3.RateLimitDescriptor{{
			Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: key, Value: value}},
		}}})
	}
	ask := func(user string) (*rlsv3.RateLimitResponse, error) { return askKey("user", user) }
	limit := func() int {
		resp, err := ask("probe")
		if err != nil || len(resp.GetStatuses()) != 1 {
			return 0
		}
		return int(resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit())
	}
	await := func(want int, d time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		for limit() != want {
			select {
			case <-exited:
				t.Fatalf("envoyproxy/ratelimit exited")
			default:
			}
			if time.Since(start) > d {
				t.Fatalf("envoyproxy/ratelimit: limit %d after %v, want %d", limit(), d, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
		return time.Since(start)
	}
	await(5, 30*time.Second)

	if err := os.WriteFile(path, []byte(erlPolicy(7)), 0o644); err != nil {
		t.Fatal(err)
	}
	d := await(7, 10*time.Second)
	t.Logf("envoyproxy/ratelimit served the edited limit %v after the write", d.Round(time.Millisecond))

	// It enforces the pushed limit: 7 of 8 requests in one minute.
	minute := time.Now().Unix() / 60
	ok := 0
	for range 8 {
		resp, err := ask("u1")
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
			ok++
		}
	}
	if time.Now().Unix()/60 == minute && ok != 7 {
		t.Errorf("envoyproxy/ratelimit admitted %d of 8 requests in one minute, want 7", ok)
	}

	// The soft rule admits every request over its limit: its quota_mode reaches ERL as
	// shadow_mode, which its xDS loader keeps (quota_mode alone it drops, and enforced the limit).
	for i := range 4 {
		resp, err := askKey("tenant", "acme")
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Errorf("soft rule, request %d of 4 at 1 a minute: %v, want OK", i+1, resp.GetOverallCode())
		}
	}
	if got := clitest.Metric(t, srv.AdminAddr(), `rlctl_xds_nacks_total{type_url="`+xds.RateLimitConfigTypeURL+`"}`); got != 0 {
		t.Errorf("NACKs of RateLimitConfig: %v, want 0", got)
	}
}

// erlBinary returns envoyproxy/ratelimit's service_cmd in $ERL_GOBIN (default out/erl-gobin at
// the module root), or skips the test (fails it under CI=true) when it is not installed.
func erlBinary(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("ERL_GOBIN")
	if dir == "" {
		dir = "out/erl-gobin"
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join("..", "..", dir) // this package's directory is two below the root
	}
	bin := filepath.Join(dir, "service_cmd")
	if _, err := os.Stat(bin); err != nil {
		msg := bin + " is not installed: run scripts/ensure-erl.sh"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	abs, err := filepath.Abs(bin)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
