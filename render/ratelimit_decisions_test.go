package render_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rlctl/rlctl/enforcer"
	"github.com/rlctl/rlctl/erlconfig/erltest"
	"github.com/rlctl/rlctl/internal/redistest"
	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/render"
	"github.com/rlctl/rlctl/schema"
)

// exactPolicy has only rules that the ratelimit target renders exactly: fixed windows of one
// whole unit, one limit each, in the enforce stage; exact, wildcard and key-only matches, nested.
// Its leases are of one token, so that rlctl-enforcer asks the store at every request: with a
// larger lease, a key the store left less than a batch is denied locally while its prefetch is
// in flight, and on a loaded machine the next request can come before the prefetch lands and
// be denied where the store would have granted it. That is leasing's, not the rendering's, and
// the rendering is what this test checks. (The target renders no lease settings.) For the same
// reason the enforcer gets a store timeout of a second, not 5 ms: a store call that misses its
// timeout is decided by the rule's failure mode, not by the store.
const exactPolicy = `package exact

domains: exact: {
	sources: {
		user: {kind: "header", header: "x-user"}
		plan: {kind: "header", header: "x-plan"}
	}
	defaults: {
		stage: {name: "enforce", since: "2026-01-01"}
		lease: {min: 1, max: 1}
	}
	rules: {
		per_user: {
			match: [{key: "user"}]
			limits: [{requests: 7, window: "1m", algorithm: "fixed_window"}]
		}
		vip: {
			match: [{key: "user", value: "vip*"}]
			limits: [{requests: 11, window: "1m", algorithm: "fixed_window"}]
		}
		gold_users: {
			match: [{key: "plan", value: "gold"}, {key: "user"}]
			limits: [{requests: 4, window: "1m", algorithm: "fixed_window"}]
		}
	}
}
`

// TestRatelimitDecidesAsEnforcer backs the ratelimit target's claim of exactness: for rules it
// renders without an approximation, envoyproxy/ratelimit (its service_cmd, on the rendered YAML
// and a Redis of its own) decides every request as rlctl-enforcer (on the snapshot and another
// Redis) does. The same sequence of requests, several descriptors over and under their limits,
// goes to both within one minute's window; every answer must agree.
func TestRatelimitDecidesAsEnforcer(t *testing.T) {
	bin := erltest.Service(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "policy.cue"), []byte(exactPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := schema.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	target, _ := render.Lookup("ratelimit")
	res, err := target.Render(m, render.Options{Strict: true})
	if err != nil {
		t.Fatalf("render --strict: %v (findings %v)", err, res.Findings)
	}
	confDir := filepath.Join(dir, "erl", "ratelimit", "config")
	if err := render.WriteDir(confDir, res.Files); err != nil {
		t.Fatal(err)
	}

	erl := startERL(t, bin, filepath.Join(dir, "erl"), redistest.Start(t).Addr())
	snap := filepath.Join(dir, "snapshot.json")
	var buf bytes.Buffer
	if err := policy.WriteSnapshot(&buf, m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(snap, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	e, err := enforcer.Spawn(context.Background(), enforcer.Config{SnapshotPath: snap, GRPCAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0",
		Store: "redis", RedisURL: "redis://" + redistest.Start(t).Addr() + "/0", InstanceID: "decisions", StoreTimeout: time.Second,
		Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	rl := client(t, e.GRPCAddr())

	// The sequence: most descriptors asked for more than their limit, interleaved.
	type ask struct{ user, plan string }
	counts := []struct {
		a ask
		n int
	}{{ask{"alice", ""}, 15}, {ask{"vip-1", ""}, 18}, {ask{"bob", "gold"}, 9}, {ask{"carol", ""}, 3}, {ask{"vip-2", ""}, 5}, {ask{"dave", "gold"}, 2}}
	var seq []ask
	for round := 0; round < 20; round++ {
		for _, c := range counts {
			if round < c.n {
				seq = append(seq, c.a)
			}
		}
	}
	for attempt := 0; attempt < 2; attempt++ {
		// Stay inside one minute: both count fixed windows aligned to the epoch.
		if s := time.Now().Second(); s > 45 {
			time.Sleep(time.Duration(61-s) * time.Second)
		}
		minute := time.Now().Unix() / 60
		agree, overs := 0, 0
		var mismatches []string
		for i, a := range seq {
			// A fresh user name per attempt, so the second attempt starts from empty windows.
			user := fmt.Sprintf("%s-%d", a.user, attempt)
			if len(a.user) > 3 && a.user[:3] == "vip" {
				user = fmt.Sprintf("vip%d-%s", attempt, a.user)
			}
			req := &rlsv3.RateLimitRequest{Domain: "exact"}
			req.Descriptors = append(req.Descriptors, descriptor("user", user))
			if a.plan != "" {
				req.Descriptors = append(req.Descriptors, descriptor("plan", a.plan, "user", user))
			}
			got := call(t, rl, req)
			want := call(t, erl, req)
			if got == want {
				agree++
			} else {
				mismatches = append(mismatches, fmt.Sprintf("request %d (%s, plan %q): rlctl-enforcer %s, envoyproxy/ratelimit %s", i, user, a.plan, got, want))
			}
			if want == rlsv3.RateLimitResponse_OVER_LIMIT {
				overs++
			}
		}
		if time.Now().Unix()/60 != minute {
			t.Logf("attempt %d crossed a minute boundary; trying again", attempt)
			continue
		}
		t.Logf("%d requests, %d over the limit, %d answers agree", len(seq), overs, agree)
		if overs == 0 {
			t.Fatalf("no request went over its limit: the comparison proves nothing")
		}
		for _, m := range mismatches {
			t.Error(m)
		}
		return
	}
	t.Fatal("every attempt crossed a minute boundary")
}

func descriptor(kv ...string) *commonv3.RateLimitDescriptor {
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func client(t *testing.T, addr string) rlsv3.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

func call(t *testing.T, c rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest) rlsv3.RateLimitResponse_Code {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp.GetOverallCode()
}

// startERL runs envoyproxy/ratelimit's service on the configuration under root
// (root/ratelimit/config/*.yaml) and redisAddr, and returns its gRPC client once it answers.
func startERL(t *testing.T, bin, root, redisAddr string) rlsv3.RateLimitServiceClient {
	t.Helper()
	ports := make([]string, 3)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
		l.Close()
	}
	cmd := exec.Command(bin)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.Env = append(os.Environ(),
		"RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_APPDIRECTORY=config",
		"RUNTIME_WATCH_ROOT=false", "RUNTIME_IGNOREDOTFILES=true",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=SINGLE", "REDIS_URL="+redisAddr,
		"USE_STATSD=false", "DISABLE_STATS=true", "LOG_LEVEL=warn",
		"HOST=127.0.0.1", "PORT="+ports[0], "GRPC_HOST=127.0.0.1", "GRPC_PORT="+ports[1],
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+ports[2])
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
	c := client(t, net.JoinHostPort("127.0.0.1", ports[1]))
	probe := &rlsv3.RateLimitRequest{Domain: "exact", Descriptors: []*commonv3.RateLimitDescriptor{descriptor("user", "probe")}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := c.ShouldRateLimit(ctx, probe)
		cancel()
		if err == nil && len(resp.GetStatuses()) == 1 && resp.GetStatuses()[0].GetCurrentLimit() != nil {
			return c
		}
		select {
		case <-exited:
			t.Fatalf("envoyproxy/ratelimit exited:\n%s", logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("envoyproxy/ratelimit did not serve the configuration in 30s (last: %v, %v)", resp, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
