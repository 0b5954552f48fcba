package enforcer

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
)

// Config configures an Enforcer. Every field has a command-line flag and an environment twin
// (see Flags); the zero value of a field means its default. (On the command line, where a
// flag's default is explicit, a 0 that means nothing sensible is rejected instead: see
// ParseArgs.)
type Config struct {
	// SnapshotPath is the policy snapshot written by `rlctl render --target snapshot`. It is
	// watched and reloaded when it changes.
	SnapshotPath string
	// XDSAddr, instead of SnapshotPath, subscribes to the snapshot that `rlctl serve-xds`
	// serves at this host:port (see xds.go).
	XDSAddr string
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
	// RedisPassword authenticates to Redis: the single node, the master that Sentinel names, or
	// the Cluster's nodes; prefer the environment variable RLCTL_ENFORCER_REDIS_PASSWORD to a
	// flag. SentinelPassword authenticates to the Sentinels themselves, when they require one
	// (RLCTL_ENFORCER_REDIS_SENTINEL_PASSWORD); many deployments run them without.
	RedisPassword    string
	SentinelPassword string

	// StoreTimeout bounds a request's wait for the store, all its descriptors together
	// (default 5ms): no request waits longer.
	StoreTimeout time.Duration
	// BreakerFailures consecutive store failures open the circuit breaker (default 3).
	BreakerFailures int
	// BreakerCooldown is how long the breaker stays open before a probe (default 1s).
	BreakerCooldown time.Duration
	// RedisPipelines is how many Redis pipelines may be in flight at once (default 4):
	// concurrent store calls queue and share them (engine.Pipelined). Negative sends every call
	// on its own round trip. Redis only.
	RedisPipelines int

	// MaxKeys bounds the keys this instance holds local lease state for (default 100,000);
	// beyond it the lease idle longest is evicted, its unspent tokens given back (engine.KeyCap).
	MaxKeys int

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
	DefaultMaxKeys         = 100_000
	DefaultBreakerFailures = 3
	DefaultBreakerCooldown = time.Second
	DefaultRedisPipelines  = 4
	DefaultShutdownTimeout = 5 * time.Second
	// DefaultGCPercent trades heap headroom for CPU: the enforcer's live heap is a few MB of
	// leases and config, so letting it grow 4x between collections costs little memory and
	// saves 10-20 % of CPU per request (docs/performance.md).
	DefaultGCPercent = 400
)

// redisPipelineBatch caps the store calls in one Redis pipeline.
const redisPipelineBatch = 64

// settingError is an invalid setting, named by its flag so that the message points at what to
// change. It is a usage error.
type settingError struct {
	flag string // the flag's name, without dashes
	msg  string
	env  bool // the value came from the flag's environment twin
	// with is another flag this one cannot be combined with, named after the flag; withEnv: its
	// value came from its environment twin.
	with    string
	withEnv bool
}

func settingf(flag, format string, args ...any) *settingError {
	return &settingError{flag: flag, msg: fmt.Sprintf(format, args...)}
}

func (e *settingError) Error() string {
	msg := e.msg
	if e.with != "" {
		with := "--" + e.with
		if e.withEnv {
			with += " (" + envName(e.with) + ")"
		}
		msg = fmt.Sprintf("cannot be combined with %s: %s", with, e.msg)
	}
	if e.env {
		return fmt.Sprintf("--%s (%s): %s", e.flag, envName(e.flag), msg)
	}
	return fmt.Sprintf("--%s: %s", e.flag, msg)
}

func (e *settingError) Is(target error) bool { return target == ErrUsage }

// withDefaults returns c with defaults applied, or an error naming each bad setting.
func (c Config) withDefaults() (Config, error) {
	c, errs := c.check()
	joined := make([]error, len(errs))
	for i, err := range errs {
		joined[i] = err
	}
	return c, errors.Join(joined...)
}

// check applies the defaults to c's zero fields and returns every bad setting, named by its
// flag, in flag order.
func (c Config) check() (Config, []*settingError) {
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
	if c.MaxKeys == 0 {
		c.MaxKeys = DefaultMaxKeys
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

	var errs []*settingError
	switch {
	case c.SnapshotPath == "" && c.XDSAddr == "":
		errs = append(errs, settingf("config", "required: the snapshot file written by rlctl render --target snapshot"))
	case c.SnapshotPath != "" && c.XDSAddr != "":
		errs = append(errs, &settingError{flag: "xds", with: "config",
			msg: "the snapshot comes from the file or from the xDS server, give one"})
	case c.XDSAddr != "":
		if _, _, err := net.SplitHostPort(c.XDSAddr); err != nil {
			errs = append(errs, settingf("xds", "%q: want host:port", c.XDSAddr))
		}
	}
	if _, _, err := net.SplitHostPort(c.GRPCAddr); err != nil {
		errs = append(errs, settingf("grpc-addr", "%q: want host:port", c.GRPCAddr))
	}
	if _, _, err := net.SplitHostPort(c.AdminAddr); err != nil && c.AdminAddr != "off" {
		errs = append(errs, settingf("admin-addr", "%q: want host:port, or off", c.AdminAddr))
	}
	switch c.Store {
	case "memory":
		// The Redis flags mean nothing here: rather than let each sidecar silently keep counters
		// of its own, say what is missing. (ParseArgs checks --redis-pipelines, whose zero
		// value is its default.)
		for _, set := range []struct {
			flag string
			set  bool
		}{
			{"redis-url", c.RedisURL != ""},
			{"redis-sentinel-master", c.SentinelMaster != ""},
			{"redis-sentinel-addrs", len(c.SentinelAddrs) > 0},
			{"redis-cluster-addrs", len(c.ClusterAddrs) > 0},
			{"redis-password", c.RedisPassword != ""},
			{"redis-sentinel-password", c.SentinelPassword != ""},
		} {
			if set.set {
				errs = append(errs, redisOnlyError(set.flag))
			}
		}
	case "redis":
		var given []string
		for _, a := range []struct {
			flag string
			set  bool
		}{
			{"redis-url", c.RedisURL != ""},
			{"redis-sentinel-addrs", len(c.SentinelAddrs) > 0},
			{"redis-cluster-addrs", len(c.ClusterAddrs) > 0},
		} {
			if a.set {
				given = append(given, a.flag)
			}
		}
		switch {
		case len(given) == 0:
			errs = append(errs, settingf("store", "redis needs one of --redis-url, --redis-sentinel-addrs (with --redis-sentinel-master) or --redis-cluster-addrs"))
		case len(given) > 1:
			for _, f := range given[1:] {
				errs = append(errs, settingf(f, "cannot be combined with --%s: give one Redis address flag", given[0]))
			}
		}
		if c.RedisURL != "" {
			if _, err := redis.ParseURL(c.RedisURL); err != nil {
				errs = append(errs, settingf("redis-url", "%v", urlError(err)))
			}
		}
		if len(c.SentinelAddrs) > 0 && c.SentinelMaster == "" {
			errs = append(errs, settingf("redis-sentinel-addrs", "needs --redis-sentinel-master"))
		}
		if c.SentinelMaster != "" && len(c.SentinelAddrs) == 0 {
			errs = append(errs, settingf("redis-sentinel-master", "needs --redis-sentinel-addrs"))
		}
		if c.SentinelPassword != "" && len(c.SentinelAddrs) == 0 {
			errs = append(errs, settingf("redis-sentinel-password", "needs --redis-sentinel-addrs"))
		}
	default:
		errs = append(errs, settingf("store", "%q: want memory or redis", c.Store))
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"store-timeout", c.StoreTimeout},
		{"breaker-cooldown", c.BreakerCooldown},
		{"shutdown-timeout", c.ShutdownTimeout},
	} {
		if d.v < 0 {
			errs = append(errs, settingf(d.flag, "%v: must not be negative", d.v))
		}
	}
	if c.BreakerFailures < 0 {
		errs = append(errs, settingf("breaker-failures", "%d: must be at least 1", c.BreakerFailures))
	}
	if c.MaxKeys < 0 {
		errs = append(errs, settingf("max-keys", "%d: must be at least 1", c.MaxKeys))
	}
	if c.JournalBlock && c.JournalPath == "" {
		// Rejected rather than ignored, as the Redis flags are without --store redis.
		errs = append(errs, settingf("journal-block", "applies with a journal only: add --journal FILE"))
	}
	if c.RedisPipelines < -1 {
		errs = append(errs, settingf("redis-pipelines", "%d: want -1 (each call on its own round trip) or at least 1", c.RedisPipelines))
	}
	return c, errs
}

// redisOnlyError is the error for a Redis flag given with the memory store.
func redisOnlyError(flag string) *settingError {
	return settingf(flag, "applies to the Redis store only: add --store redis")
}

// urlError is err of parsing a Redis URL without the URL, which url.Parse's errors quote whole
// and which may hold a password: a password with a '%' that is not an escape is enough.
func urlError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("the URL does not parse: %w", ue.Err)
	}
	return err
}
