package enforcer

import (
	"errors"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

func TestParseArgs(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want func(Config) bool
	}{
		{name: "defaults", args: []string{"--config", "s.json"}, want: func(c Config) bool {
			return c.SnapshotPath == "s.json" && c.GRPCAddr == DefaultGRPCAddr && c.StoreTimeout == DefaultStoreTimeout &&
				c.GCPercent == DefaultGCPercent && c.Store == "memory" && c.RedisPipelines == DefaultRedisPipelines
		}},
		{name: "flags", args: []string{"--config", "s.json", "--store-timeout", "7ms", "--gc-percent", "100",
			"--store", "redis", "--redis-url", "redis://127.0.0.1:1/0", "--redis-pipelines", "-1"}, want: func(c Config) bool {
			return c.StoreTimeout == 7*time.Millisecond && c.GCPercent == 100 && c.RedisPipelines == -1
		}},
		{name: "environment twins", args: []string{"--config", "s.json"},
			env: map[string]string{"RLCTL_ENFORCER_GC_PERCENT": "-1", "RLCTL_ENFORCER_STORE": "redis", "RLCTL_ENFORCER_REDIS_URL": "redis://127.0.0.1:1/0",
				"RLCTL_ENFORCER_REDIS_PIPELINES": "8"},
			want: func(c Config) bool {
				return c.GCPercent == -1 && c.Store == "redis" && c.RedisURL == "redis://127.0.0.1:1/0" && c.RedisPipelines == 8
			}},
		{name: "a flag beats its twin", args: []string{"--config", "s.json", "--gc-percent", "200"},
			env:  map[string]string{"RLCTL_ENFORCER_GC_PERCENT": "50"},
			want: func(c Config) bool { return c.GCPercent == 200 }},
		{name: "an empty twin is unset", args: []string{"--config", "s.json"},
			env:  map[string]string{"RLCTL_ENFORCER_STORE_TIMEOUT": "", "RLCTL_ENFORCER_REDIS_URL": ""},
			want: func(c Config) bool { return c.StoreTimeout == DefaultStoreTimeout }},
		{name: "sentinel", args: []string{"--config", "s.json", "--store", "redis", "--redis-sentinel-master", "m",
			"--redis-sentinel-addrs", "127.0.0.1:1,127.0.0.1:2", "--redis-password", "p"},
			want: func(c Config) bool { return c.SentinelMaster == "m" && len(c.SentinelAddrs) == 2 }},
		{name: "no admin server", args: []string{"--config", "s.json", "--admin-addr", "off"},
			want: func(c Config) bool { return c.AdminAddr == "off" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseArgs(tt.args, func(k string) string { return tt.env[k] }, io.Discard)
			if err != nil {
				t.Fatalf("ParseArgs: %v", err)
			}
			if !tt.want(c) {
				t.Errorf("got %+v", c)
			}
		})
	}
}

// TestParseArgsErrors checks that every invalid flag or environment value is a usage error
// that names the flag, and its twin when the value came from the environment.
func TestParseArgsErrors(t *testing.T) {
	cfg := []string{"--config", "s.json"}
	redis := []string{"--config", "s.json", "--store", "redis", "--redis-url", "redis://127.0.0.1:1/0"}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want []string // the error's lines
	}{
		{name: "no config", args: nil,
			want: []string{"--config: required: the snapshot file written by rlctl render --target snapshot"}},
		{name: "unknown flag", args: []string{"--bogus"}, want: []string{"unknown flag: --bogus"}},
		{name: "arguments", args: append(cfg, "extra"), want: []string{`unexpected arguments ["extra"]`}},
		{name: "unknown store", args: append(cfg, "--store", "foo"), want: []string{`--store: "foo": want memory or redis`}},
		{name: "unknown store from the environment", args: cfg, env: map[string]string{"RLCTL_ENFORCER_STORE": "foo"},
			want: []string{`--store (RLCTL_ENFORCER_STORE): "foo": want memory or redis`}},
		{name: "redis without an address", args: append(cfg, "--store", "redis"),
			want: []string{"--store: redis needs one of --redis-url, --redis-sentinel-addrs (with --redis-sentinel-master) or --redis-cluster-addrs"}},
		{name: "two redis addresses", args: redis, env: map[string]string{"RLCTL_ENFORCER_REDIS_CLUSTER_ADDRS": "127.0.0.1:2"},
			want: []string{"--redis-cluster-addrs (RLCTL_ENFORCER_REDIS_CLUSTER_ADDRS): cannot be combined with --redis-url: give one Redis address flag"}},
		{name: "bad redis url", args: append(cfg, "--store", "redis", "--redis-url", "http://x"),
			want: []string{"--redis-url: redis: invalid URL scheme: http"}},
		// url.Parse quotes the whole URL in its errors: the password went to the pod's logs.
		{name: "redis url that does not parse, with a password", args: cfg,
			env:  map[string]string{"RLCTL_ENFORCER_STORE": "redis", "RLCTL_ENFORCER_REDIS_URL": "redis://:S3cretPw@127.0.0.1:abc/0"},
			want: []string{`--redis-url (RLCTL_ENFORCER_REDIS_URL): the URL does not parse: invalid port ":abc" after host`}},
		{name: "sentinel without master", args: append(cfg, "--store", "redis", "--redis-sentinel-addrs", "127.0.0.1:1"),
			want: []string{"--redis-sentinel-addrs: needs --redis-sentinel-master"}},
		{name: "master without sentinel", args: append(redis, "--redis-sentinel-master", "m"),
			want: []string{"--redis-sentinel-master: needs --redis-sentinel-addrs"}},
		{name: "bad address", args: append(cfg, "--grpc-addr", "localhost", "--admin-addr", "x"),
			want: []string{`--grpc-addr: "localhost": want host:port`, `--admin-addr: "x": want host:port, or off`}},
		{name: "negative breaker failures", args: append(cfg, "--breaker-failures", "-1"),
			want: []string{"--breaker-failures: -1: must be at least 1"}},
		{name: "negative durations", args: append(cfg, "--store-timeout", "-1ms", "--breaker-cooldown", "-1s", "--shutdown-timeout", "-2s"),
			want: []string{"--store-timeout: -1ms: must not be negative", "--breaker-cooldown: -1s: must not be negative",
				"--shutdown-timeout: -2s: must not be negative"}},
		{name: "negative duration from the environment", args: cfg, env: map[string]string{"RLCTL_ENFORCER_STORE_TIMEOUT": "-1ms"},
			want: []string{"--store-timeout (RLCTL_ENFORCER_STORE_TIMEOUT): -1ms: must not be negative"}},
		{name: "twin that does not parse, and more", args: []string{"--store", "foo"}, env: map[string]string{"RLCTL_ENFORCER_BREAKER_COOLDOWN": "soon"},
			want: []string{`--breaker-cooldown (RLCTL_ENFORCER_BREAKER_COOLDOWN): invalid value "soon": time: invalid duration "soon"`,
				"--config: required: the snapshot file written by rlctl render --target snapshot", `--store: "foo": want memory or redis`}},
		{name: "gc percent below -1", args: append(cfg, "--gc-percent", "-2"), want: []string{"--gc-percent: -2: want -1 (collector off) or above 0"}},

		// An explicit 0 is a choice, not "unset": rejected where it means nothing sensible.
		{name: "zero store timeout", args: append(cfg, "--store-timeout", "0"),
			want: []string{"--store-timeout: 0s: must be above 0 (every store call would time out at once)"}},
		{name: "zero breaker failures", args: append(cfg, "--breaker-failures", "0"), want: []string{"--breaker-failures: 0: must be at least 1"}},
		{name: "zero breaker failures from the environment", args: cfg, env: map[string]string{"RLCTL_ENFORCER_BREAKER_FAILURES": "0"},
			want: []string{"--breaker-failures (RLCTL_ENFORCER_BREAKER_FAILURES): 0: must be at least 1"}},
		{name: "zero breaker cooldown", args: append(cfg, "--breaker-cooldown", "0s"), want: []string{"--breaker-cooldown: 0s: must be above 0"}},
		{name: "zero shutdown timeout", args: append(cfg, "--shutdown-timeout", "0"),
			want: []string{"--shutdown-timeout: 0s: must be above 0 (leased tokens would not go back to the store)"}},
		{name: "zero redis pipelines", args: append(redis, "--redis-pipelines", "0"),
			want: []string{"--redis-pipelines: 0: want -1 (each call on its own round trip) or at least 1"}},
		{name: "zero gc percent", args: append(cfg, "--gc-percent", "0"), want: []string{"--gc-percent: 0: want -1 (collector off) or above 0"}},
		{name: "negative redis pipelines", args: append(redis, "--redis-pipelines", "-7"),
			want: []string{"--redis-pipelines: -7: want -1 (each call on its own round trip) or at least 1"}},
		// --journal-block means nothing without a journal.
		{name: "journal block without a journal", args: append(cfg, "--journal-block"),
			want: []string{"--journal-block: applies with a journal only: add --journal FILE"}},
		{name: "empty strings", args: append(cfg, "--grpc-addr", "", "--admin-addr", "", "--store", ""),
			want: []string{`--grpc-addr: "": want host:port`, `--admin-addr: "": want host:port, or off`, `--store: "": want memory or redis`}},

		// Redis flags mean nothing with the memory store.
		{name: "redis url with the memory store", args: append(cfg, "--redis-url", "redis://x:1"),
			want: []string{"--redis-url: applies to the Redis store only: add --store redis"}},
		{name: "redis flags with an explicit memory store", args: append(cfg, "--store", "memory", "--redis-pipelines", "-1",
			"--redis-sentinel-master", "m", "--redis-sentinel-addrs", "a:1", "--redis-cluster-addrs", "b:1"),
			env: map[string]string{"RLCTL_ENFORCER_REDIS_PASSWORD": "secret"},
			want: []string{"--redis-pipelines: applies to the Redis store only: add --store redis",
				"--redis-sentinel-master: applies to the Redis store only: add --store redis",
				"--redis-sentinel-addrs: applies to the Redis store only: add --store redis",
				"--redis-cluster-addrs: applies to the Redis store only: add --store redis",
				"--redis-password (RLCTL_ENFORCER_REDIS_PASSWORD): applies to the Redis store only: add --store redis"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseArgs(tt.args, func(k string) string { return tt.env[k] }, io.Discard)
			if err == nil {
				t.Fatalf("got no error, want %q", tt.want)
			}
			if !errors.Is(err, ErrUsage) || ExitCode(err) != ExitUsage {
				t.Errorf("got %v (exit %d), want a usage error (exit %d)", err, ExitCode(err), ExitUsage)
			}
			got := strings.Split(err.Error(), "\n")
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
		})
	}
}

func TestSpawnRejectsBadConfig(t *testing.T) {
	_, err := Spawn(t.Context(), Config{SnapshotPath: "s.json", RedisURL: "redis://127.0.0.1:1/0", StoreTimeout: -time.Millisecond})
	want := "enforcer: --redis-url: applies to the Redis store only: add --store redis\n--store-timeout: -1ms: must not be negative"
	if err == nil || err.Error() != want || !errors.Is(err, ErrUsage) {
		t.Errorf("got %v, want %q (a usage error)", err, want)
	}
}

// TestMemoryLimit: the Go runtime's soft memory limit is 90% of the container's memory limit,
// and GOMEMLIMIT wins. Without one, a flood of keys grew the heap (GOGC 400) past a 384 MiB
// limit and the kernel killed the sidecar.
func TestMemoryLimit(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	t.Setenv("GOMEMLIMIT", "")
	t.Setenv("AUTOMEMLIMIT", "") // restored after the test
	os.Unsetenv("AUTOMEMLIMIT")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	setMemoryLimit(log, memlimit.Limit(400<<20))
	if got, want := debug.SetMemoryLimit(-1), int64(400<<20)*9/10; got != want {
		t.Errorf("memory limit under a 400 MiB container: %d, want %d", got, want)
	}
	debug.SetMemoryLimit(math.MaxInt64)
	t.Setenv("GOMEMLIMIT", "300MiB")
	setMemoryLimit(log, memlimit.Limit(400<<20))
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("with GOMEMLIMIT set: the limit became %d, want it left to GOMEMLIMIT", got)
	}
}
