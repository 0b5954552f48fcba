package enforcer

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"
)

// EnvPrefix starts the environment twin of every flag: --store-timeout is
// RLCTL_ENFORCER_STORE_TIMEOUT.
const EnvPrefix = "RLCTL_ENFORCER_"

// envName is the environment twin of the flag name.
func envName(flag string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// Flags returns a flag set bound to c. Call ApplyEnv after parsing it.
func Flags(c *Config) *pflag.FlagSet {
	fs := pflag.NewFlagSet("rlctl-enforcer", pflag.ContinueOnError)
	fs.StringVar(&c.SnapshotPath, "config", "", "the policy snapshot (required), written by rlctl render --target snapshot; reloaded when it changes and on SIGHUP")
	fs.StringVar(&c.XDSAddr, "xds", "", "subscribe to the snapshot served by rlctl serve-xds at this host:port, instead of reading --config")
	fs.StringVar(&c.GRPCAddr, "grpc-addr", DefaultGRPCAddr, "RLS v3 gRPC listen address")
	fs.StringVar(&c.AdminAddr, "admin-addr", DefaultAdminAddr, `admin HTTP address for /metrics /healthz /readyz /config ("off" disables)`)
	fs.StringVar(&c.Store, "store", "memory", "token store: memory (single instance) or redis")
	fs.StringVar(&c.RedisURL, "redis-url", "", "single Redis URL, e.g. redis://127.0.0.1:6379/0 (--store redis)")
	fs.StringVar(&c.SentinelMaster, "redis-sentinel-master", "", "Sentinel master name (--store redis)")
	fs.StringSliceVar(&c.SentinelAddrs, "redis-sentinel-addrs", nil, "Sentinel addresses host:port,... (--store redis)")
	fs.StringSliceVar(&c.ClusterAddrs, "redis-cluster-addrs", nil, "Redis Cluster seed addresses host:port,... (--store redis)")
	fs.StringVar(&c.RedisPassword, "redis-password", "", "Redis password; prefer the environment twin (--store redis)")
	fs.StringVar(&c.SentinelPassword, "redis-sentinel-password", "", "password of the Sentinels themselves, when they require one (requirepass in sentinel.conf); prefer the environment twin (--store redis with Sentinel)")
	fs.DurationVar(&c.StoreTimeout, "store-timeout", DefaultStoreTimeout, "the longest a request waits for the store, all its descriptors together; above 0")
	fs.IntVar(&c.BreakerFailures, "breaker-failures", DefaultBreakerFailures, "consecutive store failures that open the circuit breaker; at least 1")
	fs.DurationVar(&c.BreakerCooldown, "breaker-cooldown", DefaultBreakerCooldown, "how long the open breaker waits before a probe; above 0")
	fs.IntVar(&c.RedisPipelines, "redis-pipelines", DefaultRedisPipelines, "Redis pipelines in flight at once, shared by concurrent store calls; -1 sends each call on its own, 0 is rejected (--store redis)")
	fs.IntVar(&c.MaxKeys, "max-keys", DefaultMaxKeys, "most keys this instance tracks lease state for, and fallback buckets while the store is away; beyond it the lease idle longest is evicted and its tokens given back (a bucket, at random); at least 1")
	fs.StringVar(&c.InstanceID, "instance-id", "", "instance identity for canary membership (default $POD_NAME, then hostname)")
	fs.StringVar(&c.JournalPath, "journal", "", "write the decision journal to this file (off by default); an earlier run's journal there is kept as FILE.prev")
	fs.BoolVar(&c.JournalBlock, "journal-block", false, "block decisions instead of dropping journal records when the journal falls behind")
	fs.BoolVar(&c.LegacyHeaders, "legacy-headers", false, "also send X-RateLimit-Limit, -Remaining and -Reset")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", DefaultShutdownTimeout, "graceful shutdown bound; above 0")
	fs.IntVar(&c.GCPercent, "gc-percent", DefaultGCPercent, "Go GC target percentage for the process, overriding GOGC; -1 disables the collector, 0 is rejected")
	return fs
}

// noEnv are the flags without an environment twin: they ask for output, not a setting.
var noEnv = map[string]bool{"help": true, "version": true}

// ApplyEnv sets every flag that was not given on the command line from its environment twin,
// EnvPrefix plus the flag name upper-cased with '-' as '_'. An empty variable counts as unset.
func ApplyEnv(fs *pflag.FlagSet, getenv func(string) string) error {
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || noEnv[f.Name] {
			return
		}
		if v := getenv(envName(f.Name)); v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				var iv *pflag.InvalidValueError
				if errors.As(err, &iv) {
					err = fmt.Errorf("invalid value %q: %w", v, iv.Unwrap())
				}
				errs = append(errs, &settingError{flag: f.Name, msg: err.Error(), env: true})
			}
		}
	})
	return errors.Join(errs...)
}

// ErrVersion is returned by ParseArgs when --version was asked for.
var ErrVersion = errors.New("version requested")

// ParseArgs parses command-line arguments and the environment into a Config and checks every
// setting, so that a bad one is reported before anything starts. The returned error is a usage
// error (errors.Is(err, ErrUsage)) naming each bad flag, and its environment twin when the value
// came from there; pflag.ErrHelp means --help was asked for and the help was printed to out;
// ErrVersion means --version was asked for.
//
// A flag's default is explicit on the command line, so a 0 there is a choice, not "unset": where
// it means nothing sensible (a 0 store timeout would fail every call, 0 breaker failures would
// open the breaker before any) it is rejected rather than quietly replaced by the default.
func ParseArgs(args []string, getenv func(string) string, out io.Writer) (Config, error) {
	var c Config
	fs := Flags(&c)
	help := fs.BoolP("help", "h", false, "print this help and exit")
	version := fs.Bool("version", false, "print the version and exit")
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(out, "%s\nFlags:\n%s", usageText, fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		return c, usageError{err}
	}
	switch {
	case *help:
		fs.Usage()
		return c, pflag.ErrHelp
	case *version:
		return c, ErrVersion
	case fs.NArg() > 0:
		return c, usageError{fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *pflag.Flag) { onCommandLine[f.Name] = true })
	// A twin that does not parse leaves its flag at the default; the other settings are still
	// checked, so that one run reports every mistake.
	envErr := ApplyEnv(fs, getenv)

	var errs []*settingError
	for _, z := range []struct {
		flag string
		zero bool
		msg  string
	}{
		{"grpc-addr", c.GRPCAddr == "", `"": want host:port`},
		{"admin-addr", c.AdminAddr == "", `"": want host:port, or off`},
		{"store", c.Store == "", `"": want memory or redis`},
		{"store-timeout", c.StoreTimeout == 0, "0s: must be above 0 (every store call would time out at once)"},
		{"breaker-failures", c.BreakerFailures == 0, "0: must be at least 1"},
		{"breaker-cooldown", c.BreakerCooldown == 0, "0s: must be above 0"},
		{"redis-pipelines", c.RedisPipelines == 0, "0: want -1 (each call on its own round trip) or at least 1"},
		{"shutdown-timeout", c.ShutdownTimeout == 0, "0s: must be above 0 (leased tokens would not go back to the store)"},
		{"gc-percent", c.GCPercent == 0, "0: want -1 (collector off) or above 0"},
		{"max-keys", c.MaxKeys == 0, "0: must be at least 1"},
	} {
		if z.zero && fs.Changed(z.flag) {
			errs = append(errs, &settingError{flag: z.flag, msg: z.msg})
		}
	}
	if c.GCPercent < -1 {
		errs = append(errs, settingf("gc-percent", "%d: want -1 (collector off) or above 0", c.GCPercent))
	}
	if fs.Changed("redis-pipelines") && (c.Store == "memory" || c.Store == "") {
		errs = append(errs, redisOnlyError("redis-pipelines"))
	}
	// check replaces the zero values rejected above with defaults, so it does not repeat them.
	_, more := c.check()
	errs = append(errs, more...)
	joined := []error{envErr}
	for _, e := range errs {
		e.env = !onCommandLine[e.flag] && fs.Changed(e.flag)
		if e.with != "" {
			e.withEnv = !onCommandLine[e.with] && fs.Changed(e.with)
		}
		joined = append(joined, e)
	}
	if err := errors.Join(joined...); err != nil {
		return c, usageError{err}
	}
	return c, nil
}

// usageError marks an error in the command line or environment.
type usageError struct{ err error }

func (e usageError) Error() string        { return e.err.Error() }
func (e usageError) Unwrap() error        { return e.err }
func (e usageError) Is(target error) bool { return target == ErrUsage }

const usageText = `Usage: rlctl-enforcer --config SNAPSHOT [flags]
       rlctl-enforcer --xds HOST:PORT [flags]

rlctl-enforcer is the rate-limit sidecar: it answers Envoy's Rate Limit Service (RLS v3) over
gRPC, enforcing the policy snapshot rendered by rlctl (rlctl render --target snapshot), and
leases tokens from the store in batches.

--config is required. Or, in its place, --xds: the enforcer subscribes to the snapshot that
rlctl serve-xds serves and applies each new version as a reload does; until the first arrives
it answers UNAVAILABLE and /readyz is 503, and while the server is away it keeps its last
snapshot and reconnects. Every flag but --help and --version has an environment twin
RLCTL_ENFORCER_FLAG_NAME (--store-timeout is RLCTL_ENFORCER_STORE_TIMEOUT); the command line
wins. The Redis flags need --store redis.

Signals: SIGTERM and SIGINT shut down gracefully, within --shutdown-timeout (NOT_SERVING, drain
in-flight calls, return leased tokens, flush the journal). SIGHUP reloads the snapshot now, as a
change to the file does; a bad file is logged and the old config keeps serving (with --xds a
new version is applied when it is served; SIGHUP does nothing).

Exit codes: 0 clean shutdown (and --help, --version); 1 the enforcer could not start (the
snapshot is missing or invalid, an address is in use, the journal cannot be written) or did
not shut down cleanly; 3 usage error: an unknown flag, or an invalid flag or environment value.
`
