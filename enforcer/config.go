package enforcer

import (
	"errors"
	"fmt"
	"google.golang.org/grpc"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// Config configures an Enforcer. Every field has a command-line flag and an environment twin
// (see Flags); the zero value of a field means its default.
type Config struct {
	// SnapshotPath is the policy snapshot written by `rlctl render --target snapshot`. It is
	// watched and reloaded when it changes.
	SnapshotPath string
	// GRPCAddr is where the RLS v3 gRPC service listens (default 127.0.0.1:8081; port 0 picks
	// a free port, see Enforcer.GRPCAddr).
	GRPCAddr string
	// AdminAddr serves /metrics, /healthz, /readyz and /config (default 127.0.0.1:6070; "off"
	// disables it).
	AdminAddr string

	// Store is "memory" (default) or "redis".
	Store string
	// RedisURL addresses a single Redis (redis://host:port/db).
	RedisURL string
	// SentinelMaster and SentinelAddrs select a Redis behind Sentinel.
	SentinelMaster string
	SentinelAddrs  []string
	// ClusterAddrs select a Redis Cluster (seed nodes).
	ClusterAddrs []string
	// RedisPassword authenticates to Redis, Sentinel and Cluster nodes; prefer the environment
	// variable RLCTL_ENFORCER_REDIS_PASSWORD to a flag.
	RedisPassword string

	// StoreTimeout bounds every store call (default 5ms): no request waits longer.
	StoreTimeout time.Duration
	// BreakerFailures consecutive store failures open the circuit breaker (default 3).
	BreakerFailures int
	// BreakerCooldown is how long the breaker stays open before a probe (default 1s).
	BreakerCooldown time.Duration
	// RedisPipelines is how many Redis pipelines may be in flight at once (default 4):
	// concurrent store calls queue and share them (engine.Pipelined). Negative sends every call
	// on its own round trip.
	RedisPipelines int

	// InstanceID decides canary membership (default $POD_NAME, then the hostname).
	InstanceID string
	// JournalPath, when set, writes the decision journal there (see package journal).
	JournalPath string
	// JournalBlock makes the journal wait for the disk instead of dropping records when its
	// buffer is full.
	JournalBlock bool
	// LegacyHeaders adds X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset.
	LegacyHeaders bool
	// ServerOptions are added to the gRPC server's own (for example TLS credentials or an
	// interceptor). Not settable by flag.
	ServerOptions []grpc.ServerOption
	// ShutdownTimeout bounds graceful shutdown (default 5s).
	ShutdownTimeout time.Duration
	// GCPercent is the Go garbage collector's target (GOGC) that Main sets for the process
	// (default 400, -1 turns the collector off). Spawn leaves the process's setting alone.
	GCPercent int

	// Logger receives structured logs; nil means JSON to stderr.
	Logger *slog.Logger
}

// Defaults.
const (
	DefaultGRPCAddr        = "127.0.0.1:8081"
	DefaultAdminAddr       = "127.0.0.1:6070"
	DefaultStoreTimeout    = 5 * time.Millisecond
	DefaultBreakerFailures = 3
	DefaultBreakerCooldown = time.Second
	DefaultRedisPipelines  = 4
	DefaultShutdownTimeout = 5 * time.Second
	// DefaultGCPercent trades heap headroom for CPU: the enforcer's live heap is a few MB of
	// leases and config, so letting it grow 4x between collections costs little memory and
	// saves 10-20 % of CPU per request (README, Performance).
	DefaultGCPercent = 400
)

// redisPipelineBatch caps the store calls in one Redis pipeline.
const redisPipelineBatch = 64

// withDefaults returns c with defaults applied, or an error naming the bad setting.
func (c Config) withDefaults() (Config, error) {
	if c.GRPCAddr == "" {
		c.GRPCAddr = DefaultGRPCAddr
	}
	if c.AdminAddr == "" {
		c.AdminAddr = DefaultAdminAddr
	}
	if c.Store == "" {
		c.Store = "memory"
	}
	if c.StoreTimeout == 0 {
		c.StoreTimeout = DefaultStoreTimeout
	}
	if c.BreakerFailures == 0 {
		c.BreakerFailures = DefaultBreakerFailures
	}
	if c.BreakerCooldown == 0 {
		c.BreakerCooldown = DefaultBreakerCooldown
	}
	if c.RedisPipelines == 0 {
		c.RedisPipelines = DefaultRedisPipelines
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.InstanceID == "" {
		c.InstanceID = os.Getenv("POD_NAME")
	}
	if c.InstanceID == "" {
		c.InstanceID, _ = os.Hostname()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	var errs []error
	switch c.Store {
	case "memory":
	case "redis":
		n := 0
		for _, set := range []bool{c.RedisURL != "", len(c.SentinelAddrs) > 0, len(c.ClusterAddrs) > 0} {
			if set {
				n++
			}
		}
		if n != 1 {
			errs = append(errs, errors.New("--store redis needs exactly one of --redis-url, --redis-sentinel-addrs, --redis-cluster-addrs"))
		}
		if len(c.SentinelAddrs) > 0 && c.SentinelMaster == "" {
			errs = append(errs, errors.New("--redis-sentinel-addrs needs --redis-sentinel-master"))
		}
	default:
		errs = append(errs, fmt.Errorf("--store %q: want memory or redis", c.Store))
	}
	if c.SnapshotPath == "" {
		errs = append(errs, errors.New("--config: a snapshot file is required"))
	}
	if c.StoreTimeout < 0 || c.BreakerCooldown < 0 || c.ShutdownTimeout < 0 {
		errs = append(errs, errors.New("durations must not be negative"))
	}
	if c.BreakerFailures < 0 {
		errs = append(errs, fmt.Errorf("--breaker-failures %d: must be at least 1", c.BreakerFailures))
	}
	return c, errors.Join(errs...)
}

// EnvPrefix starts the environment twin of every flag: --store-timeout is
// RLCTL_ENFORCER_STORE_TIMEOUT.
const EnvPrefix = "RLCTL_ENFORCER_"

// Flags returns a flag set bound to c. Call ApplyEnv after parsing it.
func Flags(c *Config) *pflag.FlagSet {
	fs := pflag.NewFlagSet("rlctl-enforcer", pflag.ContinueOnError)
	fs.StringVar(&c.SnapshotPath, "config", "", "policy snapshot file (rlctl render --target snapshot); reloaded on change")
	fs.StringVar(&c.GRPCAddr, "grpc-addr", DefaultGRPCAddr, "RLS v3 gRPC listen address")
	fs.StringVar(&c.AdminAddr, "admin-addr", DefaultAdminAddr, `admin HTTP address for /metrics /healthz /readyz /config ("off" disables)`)
	fs.StringVar(&c.Store, "store", "memory", "token store: memory (single instance) or redis")
	fs.StringVar(&c.RedisURL, "redis-url", "", "single Redis URL, e.g. redis://127.0.0.1:6379/0")
	fs.StringVar(&c.SentinelMaster, "redis-sentinel-master", "", "Sentinel master name")
	fs.StringSliceVar(&c.SentinelAddrs, "redis-sentinel-addrs", nil, "Sentinel addresses host:port,...")
	fs.StringSliceVar(&c.ClusterAddrs, "redis-cluster-addrs", nil, "Redis Cluster seed addresses host:port,...")
	fs.StringVar(&c.RedisPassword, "redis-password", "", "Redis password (prefer the environment twin)")
	fs.DurationVar(&c.StoreTimeout, "store-timeout", DefaultStoreTimeout, "hard timeout of every store call")
	fs.IntVar(&c.BreakerFailures, "breaker-failures", DefaultBreakerFailures, "consecutive store failures that open the circuit breaker")
	fs.DurationVar(&c.BreakerCooldown, "breaker-cooldown", DefaultBreakerCooldown, "how long the open breaker waits before a probe")
	fs.IntVar(&c.RedisPipelines, "redis-pipelines", DefaultRedisPipelines, "Redis pipelines in flight at once, shared by concurrent store calls; -1 sends each call on its own")
	fs.StringVar(&c.InstanceID, "instance-id", "", "instance identity for canary membership (default $POD_NAME, then hostname)")
	fs.StringVar(&c.JournalPath, "journal", "", "write the decision journal to this file (off by default)")
	fs.BoolVar(&c.JournalBlock, "journal-block", false, "block decisions instead of dropping journal records when the journal falls behind")
	fs.BoolVar(&c.LegacyHeaders, "legacy-headers", false, "also send X-RateLimit-Limit, -Remaining and -Reset")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", DefaultShutdownTimeout, "graceful shutdown bound")
	fs.IntVar(&c.GCPercent, "gc-percent", DefaultGCPercent, "Go GC target percentage for the process, overriding GOGC; -1 disables the collector")
	return fs
}

// ApplyEnv sets every flag that was not given on the command line from its environment twin,
// EnvPrefix plus the flag name upper-cased with '-' as '_'.
func ApplyEnv(fs *pflag.FlagSet, getenv func(string) string) error {
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed {
			return
		}
		name := EnvPrefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(name); v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		}
	})
	return errors.Join(errs...)
}

// ParseArgs parses command-line arguments and the environment into a Config. The returned
// error is a usage error; pflag.ErrHelp means --help was asked for and usage was printed to
// stderr.
func ParseArgs(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	var c Config
	fs := Flags(&c)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: rlctl-enforcer [flags]\n\n%s\nEvery flag has an environment twin: %sFLAG_NAME.\n\nFlags:\n%s", usageText, EnvPrefix, fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := ApplyEnv(fs, getenv); err != nil {
		return c, err
	}
	return c, nil
}

const usageText = `rlctl-enforcer is the rate-limit sidecar: it answers Envoy's Rate Limit Service (RLS v3) over
gRPC, enforcing the policy snapshot rendered by rlctl, and leases tokens from Redis in batches.`
