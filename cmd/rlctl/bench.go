package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
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

// benchCallTimeout bounds a call that is still in flight when the run ends, and the probe call
// before the run.
const benchCallTimeout = 5 * time.Second

// A worker whose call found the target unavailable pauses before its next call, from
// benchBackoffMin doubling up to benchBackoffMax: a target that went away is not met with a client
// spinning on instant failures.
const (
	benchBackoffMin = 10 * time.Millisecond
	benchBackoffMax = 200 * time.Millisecond
)

type benchOptions struct {
	target      string
	concurrency int
	connections int
	duration    time.Duration
	domain      string
	descriptors []string
	tenants     int
	tenantKey   string
	hits        uint32
	redisURL    string
	pid         int
	pidSet      bool // --pid was given, so 0 is refused rather than meaning "off"
	// maxUnavailable is how long the target may answer no call before the run stops.
	maxUnavailable time.Duration
	output         string
}

// BenchResult is the JSON output of rlctl bench.
type BenchResult struct {
	Target      string `json:"target"`
	Concurrency int    `json:"concurrency"`
	// Requests are the calls the target answered, OK + OverLimit; RPS and LatencyUs are theirs.
	// Failed calls are Errors.
	Requests    int64            `json:"requests"`
	DurationS   float64          `json:"duration_s"`
	RPS         float64          `json:"rps"`
	OK          int64            `json:"ok"`
	OverLimit   int64            `json:"over_limit"`
	Errors      int64            `json:"errors"`
	FirstError  string           `json:"first_error,omitempty"`
	LatencyUs   BenchLatency     `json:"latency_us"`
	RedisCmds   *int64           `json:"redis_commands,omitempty"`
	RedisPerReq *float64         `json:"redis_commands_per_request,omitempty"`
	RedisByCmd  map[string]int64 `json:"redis_commandstats,omitempty"`
	CPUUsPerReq *float64         `json:"cpu_us_per_request,omitempty"`
}

// BenchLatency holds latency percentiles in microseconds.
type BenchLatency struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}

func newBenchCmd() *cobra.Command {
	o := &benchOptions{}
	cmd := &cobra.Command{
		Use:   "bench --domain DOMAIN --descriptor key=value[,key=value] [flags]",
		Short: "Load-test an Envoy rate limit service",
		Long:  benchLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.pidSet = cmd.Flags().Changed("pid")
			// go-redis logs failed dials on its own; bench reports them as its error, once.
			redis.SetLogger(quietRedisLog{})
			return runBench(cmd.Context(), o, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.target, "target", "127.0.0.1:8081", "RLS gRPC address host:port")
	f.IntVar(&o.concurrency, "concurrency", 64, "concurrent workers")
	f.IntVar(&o.connections, "connections", 4, "gRPC connections the workers share")
	f.DurationVar(&o.duration, "duration", 10*time.Second, "how long to run")
	f.StringVar(&o.domain, "domain", "", "rate-limit domain (required)")
	f.StringArrayVar(&o.descriptors, "descriptor", nil, "a descriptor key=value,key=value (repeatable, required)")
	f.IntVar(&o.tenants, "tenants", 1, "spread one descriptor value over N identities")
	f.StringVar(&o.tenantKey, "tenant-key", "", "the entry key --tenants spreads (default: the first entry of the first descriptor)")
	f.Uint32Var(&o.hits, "hits-addend", 0, "request hits_addend (0: unset)")
	f.StringVar(&o.redisURL, "redis-url", "", "also report Redis commands per request from INFO commandstats")
	f.IntVar(&o.pid, "pid", 0, "also report the CPU µs per request of this process (the RLS), from /proc")
	f.DurationVar(&o.maxUnavailable, "max-unavailable", 3*time.Second, "stop the run with an error when the target answers no call for this long")
	f.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	return cmd
}

func runBench(ctx context.Context, o *benchOptions, stdout io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	switch {
	case o.domain == "":
		return usageErrorf("bench: --domain is required")
	case len(o.descriptors) == 0:
		return usageErrorf("bench: at least one --descriptor is required")
	case o.concurrency < 1 || o.connections < 1 || o.tenants < 1 || o.duration <= 0 || o.maxUnavailable <= 0:
		return usageErrorf("bench: --concurrency, --connections, --tenants, --duration and --max-unavailable must be positive")
	case o.pid < 0 || (o.pidSet && o.pid == 0):
		return usageErrorf("bench: --pid %d: want the process ID of the target, above 0", o.pid)
	case o.output != "text" && o.output != "json":
		return usageErrorf("bench: -o %q: want text or json", o.output)
	}
	// The generator shares the machine with what it measures: collecting its garbage less often
	// leaves more CPU to the target.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	reqs, err := benchRequests(o)
	if err != nil {
		return err
	}
	if _, err := procCPU(o.pid); err != nil {
		return usageErrorf("bench: --pid %d: %w", o.pid, err)
	}
	// Every flag is checked before the target is tried: a bad --redis-url is not reported after
	// a run, nor behind an unreachable target.
	var rdb *redis.Client
	if o.redisURL != "" {
		ropts, err := redis.ParseURL(o.redisURL)
		if err != nil {
			return usageErrorf("bench: --redis-url: %w", err)
		}
		// INFO is read twice; an unreachable Redis is reported at once rather than retried.
		ropts.MaxRetries, ropts.DialerRetries = -1, 1
		rdb = redis.NewClient(ropts)
		defer rdb.Close()
		pctx, cancel := context.WithTimeout(ctx, benchCallTimeout)
		err = rdb.Ping(pctx).Err()
		cancel()
		if err != nil {
			return usageErrorf("bench: --redis-url: %w", err)
		}
	}
	conns := make([]rlsv3.RateLimitServiceClient, o.connections)
	for i := range conns {
		cc, err := grpc.NewClient(o.target, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return usageErrorf("bench: --target %s: %w", o.target, err)
		}
		defer cc.Close()
		conns[i] = rlsv3.NewRateLimitServiceClient(cc)
	}
	// One call first: an unreachable target is a tool error, not a run full of errors. It does
	// not wait for the connection to become ready, so a refused connection fails at once.
	pctx, cancel := context.WithTimeout(ctx, benchCallTimeout)
	_, err = conns[0].ShouldRateLimit(pctx, reqs[0])
	cancel()
	if err != nil {
		return usageErrorf("bench: --target %s: %w", o.target, err)
	}
	var before map[string]int64
	if rdb != nil {
		if before, err = commandStats(ctx, rdb); err != nil {
			return usageErrorf("bench: --redis-url: %w", err)
		}
	}
	cpuBefore, err := procCPU(o.pid)
	if err != nil {
		return usageErrorf("bench: --pid %d: %w", o.pid, err)
	}

	res, err := benchRun(ctx, o, conns, reqs)
	if err != nil {
		return err
	}
	if rdb != nil {
		after, err := commandStats(ctx, rdb)
		if err != nil {
			return usageErrorf("bench: --redis-url: %w", err)
		}
		res.RedisByCmd = map[string]int64{}
		var total int64
		for k, v := range after {
			if d := v - before[k]; d > 0 && k != "info" {
				res.RedisByCmd[k] = d
				total += d
			}
		}
		per := float64(total) / float64(max(res.Requests, 1))
		res.RedisCmds, res.RedisPerReq = &total, &per
	}
	if o.pid > 0 {
		cpuAfter, err := procCPU(o.pid)
		if err != nil {
			return usageErrorf("bench: --pid %d: %w", o.pid, err)
		}
		per := float64((cpuAfter - cpuBefore).Microseconds()) / float64(max(res.Requests, 1))
		res.CPUUsPerReq = &per
	}
	return printBench(stdout, o.output, res)
}

// benchRun runs the workers for o.duration and returns the counts and the latencies of the
// answered calls. It stops early, with a tool error, when the target answers no call for
// o.maxUnavailable.
func benchRun(ctx context.Context, o *benchOptions, conns []rlsv3.RateLimitServiceClient, reqs []*rlsv3.RateLimitRequest) (*BenchResult, error) {
	res := &BenchResult{Target: o.target, Concurrency: o.concurrency}
	var okN, overN, errN atomic.Int64
	var firstErr, lastErr atomic.Value
	lats := make([][]time.Duration, o.concurrency)
	var next atomic.Int64
	start := time.Now()
	end := start.Add(o.duration)
	// lastAnswer is when the target last answered a call, as time since start.
	var lastAnswer atomic.Int64
	// One deadline for every call, not a timer per call: the generator shares the machine with
	// what it measures, so its own cost per request is kept small. Cancelling rctx stops the
	// run, calls in flight included.
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	wctx, cancel := context.WithDeadline(rctx, end.Add(benchCallTimeout))
	defer cancel()
	var wg sync.WaitGroup
	for w := range o.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := conns[w%len(conns)]
			mine := make([]time.Duration, 0, 4096)
			var backoff time.Duration
			for time.Now().Before(end) && rctx.Err() == nil {
				req := reqs[int(next.Add(1)%int64(len(reqs)))]
				t0 := time.Now()
				resp, err := client.ShouldRateLimit(wctx, req)
				d := time.Since(t0)
				if err != nil {
					if rctx.Err() != nil {
						break // the run was stopped: the call did not fail on its own
					}
					errN.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					lastErr.Store(err.Error())
					if c := status.Code(err); c != codes.Unavailable && c != codes.DeadlineExceeded {
						lastAnswer.Store(int64(time.Since(start))) // the target answered, with an error
						continue
					}
					backoff = min(max(2*backoff, benchBackoffMin), benchBackoffMax)
					pause(rctx, backoff)
					continue
				}
				backoff = 0
				lastAnswer.Store(int64(time.Since(start)))
				if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
					overN.Add(1)
				} else {
					okN.Add(1)
				}
				mine = append(mine, d)
			}
			lats[w] = mine
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	var gone time.Duration // how long the target had answered nothing when the run was stopped
	tick := time.NewTicker(max(min(o.maxUnavailable/4, 100*time.Millisecond), time.Millisecond))
	defer tick.Stop()
wait:
	for {
		select {
		case <-done:
			break wait
		case <-tick.C:
			if silent := time.Since(start) - time.Duration(lastAnswer.Load()); silent > o.maxUnavailable {
				gone = silent
				stop()
				<-done
				break wait
			}
		}
	}
	elapsed := time.Since(start)
	if gone > 0 {
		last, _ := lastErr.Load().(string)
		if last == "" {
			last = "calls in flight got no answer"
		}
		return nil, usageErrorf("bench: --target %s answered no call for %s (--max-unavailable %s): stopped after %.1fs with %d answered and %d failed calls; the last error: %s",
			o.target, gone.Round(time.Millisecond), o.maxUnavailable, elapsed.Seconds(), okN.Load()+overN.Load(), errN.Load(), last)
	}

	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	slices.Sort(all)
	res.Requests = int64(len(all))
	res.DurationS = elapsed.Seconds()
	res.RPS = float64(res.Requests) / elapsed.Seconds()
	res.OK, res.OverLimit, res.Errors = okN.Load(), overN.Load(), errN.Load()
	if v, ok := firstErr.Load().(string); ok {
		res.FirstError = v
	}
	pct := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		return float64(all[min(int(p*float64(len(all))), len(all)-1)].Nanoseconds()) / 1e3
	}
	res.LatencyUs = BenchLatency{P50: pct(0.50), P90: pct(0.90), P99: pct(0.99), P999: pct(0.999), Max: pct(1)}
	return res, nil
}

// pause waits for d, or until ctx is done.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// quietRedisLog drops go-redis's own log lines.
type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}

// benchRequests builds the requests the workers cycle through: one per tenant.
func benchRequests(o *benchOptions) ([]*rlsv3.RateLimitRequest, error) {
	var descs [][][2]string
	for _, d := range o.descriptors {
		var entries [][2]string
		for _, kv := range strings.Split(d, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return nil, usageErrorf("bench: --descriptor %q: want key=value,key=value", d)
			}
			entries = append(entries, [2]string{k, v})
		}
		descs = append(descs, entries)
	}
	di, ei := 0, 0
	if o.tenantKey != "" {
		di = -1
		for i, d := range descs {
			for j, e := range d {
				if e[0] == o.tenantKey && di < 0 {
					di, ei = i, j
				}
			}
		}
		if di < 0 {
			return nil, usageErrorf("bench: --tenant-key %q is in no --descriptor", o.tenantKey)
		}
	}
	reqs := make([]*rlsv3.RateLimitRequest, o.tenants)
	for t := range reqs {
		req := &rlsv3.RateLimitRequest{Domain: o.domain, HitsAddend: o.hits}
		for i, d := range descs {
			rd := &commonv3.RateLimitDescriptor{}
			for j, e := range d {
				v := e[1]
				if o.tenants > 1 && i == di && j == ei {
					v += "-" + strconv.Itoa(t)
				}
				rd.Entries = append(rd.Entries, &commonv3.RateLimitDescriptor_Entry{Key: e[0], Value: v})
			}
			req.Descriptors = append(req.Descriptors, rd)
		}
		reqs[t] = req
	}
	return reqs, nil
}

// commandStats returns the calls per command from INFO commandstats.
func commandStats(ctx context.Context, c *redis.Client) (map[string]int64, error) {
	s, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		if !ok || !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				out[name] = n
			}
		}
	}
	return out, nil
}

// procCPU is the user+system CPU time of process pid, from /proc/pid/stat (Linux; clock
// ticks are 100 per second there).
func procCPU(pid int) (time.Duration, error) {
	if pid <= 0 {
		return 0, nil
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("no process %d in /proc (it exited, or this is not Linux)", pid)
	}
	if err != nil {
		return 0, err
	}
	// Fields after the ")" that closes the command name: state is field 3, utime 14, stime 15.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	ut, _ := strconv.ParseInt(fields[11], 10, 64)
	st, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

func printBench(w io.Writer, format string, r *BenchResult) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	fmt.Fprintf(w, "target       %s (concurrency %d)\n", r.Target, r.Concurrency)
	fmt.Fprintf(w, "requests     %d answered in %.2fs\n", r.Requests, r.DurationS)
	fmt.Fprintf(w, "rps          %.0f\n", r.RPS)
	fmt.Fprintf(w, "latency      p50 %.0fµs  p90 %.0fµs  p99 %.0fµs  p999 %.0fµs  max %.0fµs\n",
		r.LatencyUs.P50, r.LatencyUs.P90, r.LatencyUs.P99, r.LatencyUs.P999, r.LatencyUs.Max)
	fmt.Fprintf(w, "ok           %d\nover_limit   %d\nerrors       %d\n", r.OK, r.OverLimit, r.Errors)
	if r.FirstError != "" {
		fmt.Fprintf(w, "first error  %s\n", r.FirstError)
	}
	if r.RedisPerReq != nil {
		fmt.Fprintf(w, "redis        %d commands, %.4f per request\n", *r.RedisCmds, *r.RedisPerReq)
	}
	if r.CPUUsPerReq != nil {
		fmt.Fprintf(w, "cpu          %.1fµs per request\n", *r.CPUUsPerReq)
	}
	return nil
}
