package main

import (
	"context"
	"runtime/debug"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlctl/rlctl/internal/loadgen"
	"github.com/spf13/cobra"
)

const benchLong = `bench is a load generator for any Envoy Rate Limit Service (RLS v3).

It sends ShouldRateLimit calls from --concurrency workers over --connections gRPC
connections for --duration, and prints the rate, latency percentiles and the OK,
OVER_LIMIT and error counts. The rate and the latencies are those of the calls the
target answered (requests = ok + over_limit); failed calls are counted as errors
apart. A worker whose call finds the target unavailable pauses before the next one
(10ms, doubling up to 200ms), and when the target has answered no call for
--max-unavailable the run stops with an error. Each --descriptor is one descriptor of every request,
written key=value,key=value. --tenants N spreads the value of the first entry of the
first descriptor (or of --tenant-key) over N identities: value-0 ... value-(N-1).

With --redis-url it reads INFO commandstats before and after and prints the Redis
commands per request (every command Redis counted, scripts' inner calls included).
With --pid it reads the target process's CPU time from /proc and prints the CPU
microseconds per request.

Output (-o json) fields: requests, duration_s, rps, ok, over_limit, errors,
first_error, latency_us {p50, p90, p99, p999, max}, redis_commands,
redis_commands_per_request, redis_commandstats, cpu_us_per_request.

Exit codes: 0 the run completed (errors are reported, not fatal), 3 usage or tool error
(bad flags, a --redis-url or --pid that cannot be read, the target unreachable before
the run starts, or answering nothing for --max-unavailable during it). Flags are checked
before the target is tried, and a refused connection fails at once.`

// benchFlags are bench's flags as given.
type benchFlags struct {
	cfg         loadgen.Config
	descriptors []string
	output      string
}

func newBenchCmd() *cobra.Command {
	var bf benchFlags
	cmd := &cobra.Command{
		Use:   "bench --domain DOMAIN --descriptor key=value[,key=value] [flags]",
		Short: "Load-test an Envoy rate limit service",
		Long:  benchLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// --pid 0 given is refused rather than meaning "off".
			return runBench(cmd, bf, cmd.Flags().Changed("pid"))
		},
	}
	f := cmd.Flags()
	c := &bf.cfg
	f.StringVar(&c.Target, "target", "127.0.0.1:8081", "RLS gRPC address host:port")
	f.IntVar(&c.Concurrency, "concurrency", 64, "concurrent workers")
	f.IntVar(&c.Connections, "connections", 4, "gRPC connections the workers share")
	f.DurationVar(&c.Duration, "duration", 10*time.Second, "how long to run")
	f.StringVar(&c.Domain, "domain", "", "rate-limit domain (required)")
	f.StringArrayVar(&bf.descriptors, "descriptor", nil, "a descriptor key=value,key=value (repeatable, required)")
	f.IntVar(&c.Tenants, "tenants", 1, "spread one descriptor value over N identities")
	f.StringVar(&c.TenantKey, "tenant-key", "", "the entry key --tenants spreads (default: the first entry of the first descriptor)")
	f.Uint32Var(&c.Hits, "hits-addend", 0, "request hits_addend (0: unset)")
	f.StringVar(&c.RedisURL, "redis-url", "", "also report Redis commands per request from INFO commandstats")
	f.IntVar(&c.PID, "pid", 0, "also report the CPU µs per request of this process (the RLS), from /proc")
	f.DurationVar(&c.MaxUnavailable, "max-unavailable", 3*time.Second, "stop the run with an error when the target answers no call for this long")
	f.StringVarP(&bf.output, "output", "o", "text", "output format: text or json")
	return cmd
}

// runBench checks every flag, runs the load and prints the result.
func runBench(cmd *cobra.Command, bf benchFlags, pidGiven bool) error {
	cfg := bf.cfg
	for _, s := range bf.descriptors {
		d, err := loadgen.ParseDescriptor(s)
		if err != nil {
			return usageErrorf("bench: %w", err)
		}
		cfg.Descriptors = append(cfg.Descriptors, d)
	}
	switch err := cfg.Validate(); {
	case err != nil:
		return usageErrorf("bench: %w", err)
	case pidGiven && cfg.PID == 0:
		return usageErrorf("bench: --pid 0: want the process ID of the target, above 0")
	case !slices.Contains(loadgen.Formats, bf.output):
		return usageErrorf("bench: -o %q: want text or json", bf.output)
	}
	// The generator shares the machine with what it measures: collecting its garbage less often
	// leaves more CPU to the target.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	// go-redis logs failed dials on its own; bench reports them as its error, once.
	redis.SetLogger(quietRedisLog{})
	res, err := loadgen.Run(cmd.Context(), cfg)
	if err != nil {
		return usageErrorf("bench: %w", err)
	}
	return res.Write(cmd.OutOrStdout(), bf.output)
}

// quietRedisLog drops go-redis's own log lines.
type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}
