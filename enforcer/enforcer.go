// Package enforcer owns the rate-limit sidecar: an Envoy Rate Limit Service (RLS v3) gRPC
// server that decides each request's descriptors with the engine, leasing tokens from a store
// (in-process memory, or Redis single, Sentinel or Cluster), and everything around it: rollout
// stages, the circuit breaker and failure modes, response headers, Prometheus metrics, health,
// hot reload of the policy snapshot (from its file, or over xDS from rlctl serve-xds: see
// subscribe) and the decision journal.
//
// A daemon is Spawn(ctx, cfg) plus Close, so tests start real in-process instances.
//
// # Matching
//
// Descriptors are matched with policy.Domain.Lookup, compatible with envoyproxy/ratelimit. As
// there, a request for an unknown domain, or a descriptor no rule matches, is OK with a status
// that carries no limit; it is counted as rate_limit_requests_total{rule=""}.
//
// # Decisions
//
// Each matched descriptor spends its cost (the descriptor's hits_addend, else the request's,
// else the rule's cost) from the store key of its domain, rule and entry values. A descriptor's
// limit override replaces the rule's limits with one limit of the override's rate and the rule's
// first algorithm, under a key of its own; it applies only to descriptors a rule matches. The
// rule's stage then decides the answer: shadow admits and counts a shadow block, soft admits
// with a RateLimit-Warning header, canary enforces on the instances whose stable hash of the
// instance ID falls within the rule's percent and is soft elsewhere, enforce rejects.
//
// When the store is unavailable (a timeout, an error, or the open circuit breaker) and the
// local leased tokens are spent, a fail-closed rule denies, and a fail-open rule admits up to a
// local bound, never without one (engine.RulePlan.Decide: the rule's fallback, else twice the
// key's recently admitted rate, else the limit divided by the rule's gateways), counting
// rate_limit_bypassed_total{reason="redis_circuit_open"} (or reason="store_error" for a failure
// before the breaker opens). The breaker counts calls that failed or had no reply by their own
// deadline, not requests that stopped waiting (see guardedStore.detached).
//
// A key over its limit is held locally between batches (engine's dry keys), so an attack on
// one key costs the store about ten calls a second per instance. Lease state is bounded by
// Config.MaxKeys (engine.KeyCap).
package enforcer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/rlctl/rlctl/engine"
	"github.com/rlctl/rlctl/journal"
)

// Enforcer is a running sidecar. Its methods are safe for concurrent use.
type Enforcer struct {
	conf       Config
	log        *slog.Logger
	mx         *metrics
	clock      engine.Clock
	cfg        atomic.Pointer[runtimeConfig]
	loadedAt   atomic.Int64
	legacy     bool
	cooldownMs int64
	// unavailableRetryMs is the retry-after of a denial while the store is unavailable.
	unavailableRetryMs int64

	redis    redis.UniversalClient
	breaker  *breaker
	store    *guardedStore
	pipe     *engine.Pipelined // the Redis store when it pipelines, for Close
	order    *order
	leasing  *leasing
	fallback *engine.Memory

	journal     *journal.Writer
	journalFile *os.File
	seq         atomic.Uint64
	inflight    atomic.Int64 // ShouldRateLimit calls in progress
	reloadMu    sync.Mutex   // reloads run one at a time
	gen         int          // config generations loaded, under reloadMu
	lastFailed  bool         // the last snapshot read was rejected, under reloadMu
	lastRead    [32]byte     // SHA-256 of the snapshot file as last read, under reloadMu

	grpc    *grpc.Server
	health  *health.Server
	grpcLn  net.Listener
	admin   *http.Server
	adminLn net.Listener
	ready   atomic.Bool
	started bool // Spawn succeeded: Close logs the stop

	stop      context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// wallClock is the enforcer's engine clock: Unix milliseconds.
var wallClock = engine.ClockFunc(func() int64 { return time.Now().UnixMilli() })

// Spawn starts an enforcer: it loads the snapshot, connects the store, and serves gRPC and the
// admin endpoints until Close. With Config.XDSAddr it does not wait for the control plane: the
// first snapshot arrives later (see subscribe), and until then ShouldRateLimit answers
// UNAVAILABLE and the enforcer is not ready. An error leaves nothing running.
func Spawn(ctx context.Context, c Config) (e *Enforcer, err error) {
	c, err = c.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("enforcer: %w", err)
	}
	e = &Enforcer{conf: c, log: c.Logger, clock: wallClock, legacy: c.LegacyHeaders,
		cooldownMs: c.BreakerCooldown.Milliseconds(), fallback: engine.NewLocalMemory(wallClock, c.MaxKeys)}
	e.unavailableRetryMs = max(e.cooldownMs, 1000)
	e.order = newOrder(e.clock, c.JournalPath != "")
	defer func() {
		if err != nil {
			e.log.Error("enforcer failed to start", "error", err.Error())
			e.Close()
			e = nil
		}
	}()
	if c.JournalPath != "" {
		if err := e.openJournal(); err != nil {
			return e, err
		}
	}
	e.mx = newMetrics(func() float64 { return float64(e.journal.Dropped()) },
		func() float64 { return float64(e.inflight.Load()) })
	inner, detach, err := e.openStore()
	if err != nil {
		return e, err
	}
	e.breaker = newBreaker(c.BreakerFailures, e.cooldownMs, e.clock, func(from, to BreakerState) {
		e.mx.breaker.Set(float64(to))
		e.mx.breakerTrans.WithLabelValues(to.String()).Inc()
		if to == BreakerOpen && e.store != nil {
			e.log.Warn("store circuit breaker", "from", from.String(), "to", to.String(), "last_error", e.store.lastFailure())
			return
		}
		e.log.Warn("store circuit breaker", "from", from.String(), "to", to.String())
	})
	e.store = newGuardedStore(inner, c.StoreTimeout, detach, e.breaker, e.clock, e.order, e.journal, e.mx)
	keys := engine.NewKeyCap(int64(c.MaxKeys))
	e.mx.trackKeys(keys, e.fallback)
	e.leasing = newLeasing(e.store, e.order, e.journal, c.StoreTimeout, c.Store == "redis", keys, e.fallback)
	if c.XDSAddr == "" {
		if err := e.reload(); err != nil {
			return e, err
		}
	} else {
		e.conf.ServerOptions = append(slices.Clip(e.conf.ServerOptions), e.awaitSnapshot())
	}

	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	e.stop = stop
	if err := e.serveGRPC(); err != nil {
		return e, err
	}
	if err := e.serveAdmin(); err != nil {
		return e, err
	}
	if c.XDSAddr != "" {
		if err := e.subscribe(runCtx); err != nil {
			return e, err
		}
	} else if err := e.watch(runCtx); err != nil {
		return e, err
	}
	e.wg.Add(1)
	go func() { defer e.wg.Done(); e.leasing.sweep(runCtx) }()
	e.ready.Store(true)
	e.started = true
	e.log.Info("enforcer started", "grpc", e.GRPCAddr(), "admin", e.AdminAddr(), "store", c.Store,
		"instance", c.InstanceID, "config_version", e.ConfigVersion(), "xds", c.XDSAddr)
	return e, nil
}

// Reload reads the snapshot file now and swaps it in, as a change to the file does (Main calls
// it on SIGHUP). On error the old config keeps serving; the error is also logged and counted in
// rate_limit_config_reloads_total{result="error"}.
func (e *Enforcer) Reload() error {
	if !e.ready.Load() {
		return errors.New("enforcer: reload: not serving")
	}
	return e.reload()
}

// GRPCAddr is the address the RLS gRPC service listens on.
func (e *Enforcer) GRPCAddr() string {
	if e.grpcLn == nil {
		return ""
	}
	return e.grpcLn.Addr().String()
}

// AdminAddr is the address of the admin HTTP server, or "" when it is off.
func (e *Enforcer) AdminAddr() string {
	if e.adminLn == nil {
		return ""
	}
	return e.adminLn.Addr().String()
}

// ConfigVersion is the version of the snapshot being served.
func (e *Enforcer) ConfigVersion() string {
	if c := e.cfg.Load(); c != nil {
		return c.version
	}
	return ""
}

// BreakerState is the store circuit breaker's state.
func (e *Enforcer) BreakerState() BreakerState {
	if e.breaker == nil {
		return BreakerClosed
	}
	return e.breaker.State()
}

// Close shuts the enforcer down gracefully: it stops accepting calls, finishes those in
// flight, returns unspent leased tokens to the store and flushes the journal, within
// Config.ShutdownTimeout. It is safe to call more than once.
func (e *Enforcer) Close() error {
	e.closeOnce.Do(func() {
		deadline := time.Now().Add(e.conf.ShutdownTimeout)
		e.ready.Store(false)
		if e.health != nil {
			e.health.Shutdown()
		}
		if e.stop != nil {
			e.stop()
		}
		var errs []error
		if e.grpc != nil {
			done := make(chan struct{})
			go func() { e.grpc.GracefulStop(); close(done) }()
			select {
			case <-done:
			case <-time.After(time.Until(deadline) / 2):
				// Calls still running may wait on a journal whose disk hangs (--journal-block):
				// they drop their records now, or Stop would wait for them as GracefulStop did.
				e.journal.Abandon()
				e.grpc.Stop()
				select {
				case <-done:
				case <-time.After(time.Until(deadline)):
					errs = append(errs, errors.New("calls still running at the shutdown deadline"))
				}
			}
		}
		rest := make(chan error, 1)
		go func() {
			var err error
			if e.leasing != nil {
				ctx, cancel := context.WithDeadline(context.Background(), deadline)
				if e.store != nil {
					e.store.waitCalls(ctx) // late replies' tokens join their leases first
				}
				if lerr := e.leasing.Close(ctx); lerr != nil {
					err = fmt.Errorf("returning leases: %w", lerr)
				}
				cancel()
			}
			if e.admin != nil {
				ctx, cancel := context.WithDeadline(context.Background(), deadline)
				_ = e.admin.Shutdown(ctx)
				cancel()
			}
			e.wg.Wait()
			rest <- err
		}()
		select {
		case err := <-rest:
			errs = append(errs, err)
		case <-time.After(time.Until(deadline)):
			// A sweep waiting on a journal whose disk hangs holds its stripe, which the leases'
			// return needs: it drops its record now.
			e.journal.Abandon()
			errs = append(errs, <-rest)
		}
		if e.pipe != nil {
			e.pipe.Close()
		}
		if e.redis != nil {
			_ = e.redis.Close()
		}
		if e.journal != nil {
			// The end record tells a replay that every lease was returned and how many records
			// were lost.
			e.journal.Write(journal.Record{Kind: journal.KindEnd, TimeMs: e.clock.Now(), Dropped: e.journal.Dropped()})
			// Within the shutdown's deadline, or a second when what came before used it up: a
			// journal on a disk that hangs loses its queue rather than hold the process.
			ctx, cancel := context.WithDeadline(context.Background(), later(deadline, time.Now().Add(time.Second)))
			errs = append(errs, e.journal.CloseContext(ctx))
			cancel()
			errs = append(errs, e.journalFile.Close())
		}
		e.closeErr = errors.Join(errs...)
		switch {
		case !e.started:
			// Spawn failed and logs why; nothing was serving, so nothing stopped.
		case e.closeErr != nil:
			e.log.Error("enforcer stopped uncleanly", "error", e.closeErr.Error())
		default:
			e.log.Info("enforcer stopped")
		}
	})
	return e.closeErr
}

func (e *Enforcer) openJournal() error {
	// The previous run's journal is what an operator replays after a crash, and a supervisor
	// restarts the enforcer at once: it is kept as FILE.prev rather than truncated.
	if fi, err := os.Stat(e.conf.JournalPath); err == nil && fi.Mode().IsRegular() && fi.Size() > 0 {
		if err := os.Rename(e.conf.JournalPath, e.conf.JournalPath+".prev"); err != nil {
			return fmt.Errorf("enforcer: journal: keeping the previous one: %w", err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(e.conf.JournalPath+".prev", 0o600); err != nil {
				return fmt.Errorf("enforcer: journal: %w", err)
			}
		}
	}
	// Owner only: the journal holds store keys, and so descriptor values as sent, API keys
	// included (the log shows those as digests).
	f, err := os.OpenFile(e.conf.JournalPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("enforcer: journal: %w", err)
	}
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o077 != 0 {
		if err := f.Chmod(0o600); err != nil {
			f.Close()
			return fmt.Errorf("enforcer: journal: %w", err)
		}
	}
	opts := journal.Options{}
	if e.conf.JournalBlock {
		opts.Policy = journal.Block
	}
	w, err := journal.NewWriter(f, journal.Header{Instance: e.conf.InstanceID, StartMs: e.clock.Now(),
		Stripes: journalStripes, UnavailableRetryMs: e.unavailableRetryMs}, opts)
	if err != nil {
		f.Close()
		return fmt.Errorf("enforcer: journal: %w", err)
	}
	e.journal, e.journalFile = w, f
	return nil
}

// openStore connects the configured store. detach is true for network stores.
func (e *Enforcer) openStore() (engine.Store, bool, error) {
	c := e.conf
	if c.Store == "memory" {
		return engine.NewMemory(e.clock), false, nil
	}
	o := &redis.UniversalOptions{
		MasterName:  c.SentinelMaster,
		Password:    c.RedisPassword,
		DialTimeout: max(c.StoreTimeout, 100*time.Millisecond),
		// A request waits at most the store timeout (guardedStore's timer); the call itself
		// may take until its own deadline, so that a reply read late is not a failure.
		ReadTimeout:           callTimeoutOf(c.StoreTimeout),
		WriteTimeout:          callTimeoutOf(c.StoreTimeout),
		ContextTimeoutEnabled: true,
		MaxRetries:            -1, // never retry inside the store timeout (a Cluster's MOVED/ASK redirects still follow)
		DialerRetries:         1,
		PoolSize:              64,
		MinIdleConns:          4,
		PoolTimeout:           callTimeoutOf(c.StoreTimeout),
		Protocol:              2,
		DisableIdentity:       true,
	}
	switch {
	case c.RedisURL != "":
		u, err := redis.ParseURL(c.RedisURL)
		if err != nil {
			return nil, false, fmt.Errorf("enforcer: --redis-url: %w", urlError(err))
		}
		o.Addrs, o.DB, o.Username = []string{u.Addr}, u.DB, u.Username
		if u.Password != "" {
			o.Password = u.Password
		}
		o.TLSConfig = u.TLSConfig
		e.redis = redis.NewClient(o.Simple())
	case len(c.SentinelAddrs) > 0:
		o.Addrs = c.SentinelAddrs
		fo := o.Failover()
		fo.SentinelPassword = c.SentinelPassword // o.Failover leaves it empty
		e.redis = redis.NewFailoverClient(fo)
	default:
		o.Addrs = c.ClusterAddrs
		e.redis = redis.NewClusterClient(o.Cluster())
	}
	quietRedisLog.Do(func() { redis.SetLogger(discardLogger{}) })
	var st engine.Store = engine.NewRedis(e.redis)
	// A Cluster gets no pipelining: go-redis splits a cluster pipeline by node, waits for all of
	// them and retries a node's whole batch (engine.NewPipelined).
	if _, cluster := e.redis.(*redis.ClusterClient); !cluster && c.RedisPipelines > 0 {
		e.pipe = engine.NewPipelined(st.(*engine.Redis), c.RedisPipelines, redisPipelineBatch)
		st = e.pipe
	}
	// Warm up outside the store timeout, through the store requests will use: dial its first
	// connections and load the scripts (EVALSHA falls back to EVAL once), so the first requests
	// do not time out. A Redis that is down now is not fatal: the breaker and failure modes
	// handle it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	warm := []engine.Limit{{Algorithm: engine.TokenBucket, Requests: 1, Window: 1000}}
	key := engine.Key("rlctl-enforcer", "warmup", c.InstanceID)
	if r, err := st.Take(ctx, engine.TakeRequest{Key: key, Limits: warm, Want: 1}); err != nil {
		e.log.Warn("redis warm-up failed; starting anyway", "error", err.Error())
	} else if r.Granted > 0 {
		_ = st.Return(ctx, engine.ReturnRequest{Key: key, Limits: warm, N: r.Granted})
	}
	return st, true, nil
}

func (e *Enforcer) serveGRPC() error {
	ln, err := net.Listen("tcp", e.conf.GRPCAddr)
	if err != nil {
		return fmt.Errorf("enforcer: --grpc-addr: %w", err)
	}
	e.grpcLn = ln
	// Stream workers reuse goroutines across calls and the shared write buffer frees each
	// connection's buffer between writes: both cut the per-call CPU of a unary RPC. gRPC hands a
	// call to a worker only if one is idle and otherwise starts a goroutine, whose stack then
	// grows by copying; with one worker per CPU that happened on most calls at 64 concurrent
	// calls (13 % of the enforcer's CPU in copystack), hence enough workers to keep one idle.
	workers := max(64, 8*runtime.GOMAXPROCS(0))
	opts := append([]grpc.ServerOption{grpc.MaxRecvMsgSize(1 << 20), grpc.MaxConcurrentStreams(1024),
		grpc.NumStreamWorkers(uint32(workers)), grpc.SharedWriteBuffer(true),
		grpc.ForceServerCodecV2(newRLSCodec(e.mx.invalidUTF8))}, e.conf.ServerOptions...)
	e.grpc = grpc.NewServer(opts...)
	rlsv3.RegisterRateLimitServiceServer(e.grpc, service{e: e})
	e.health = health.NewServer()
	e.setServing(e.cfg.Load() != nil) // with --xds, once the first snapshot arrives
	healthpb.RegisterHealthServer(e.grpc, e.health)
	reflection.Register(e.grpc)
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		if err := e.grpc.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			e.log.Error("grpc server", "error", err)
		}
	}()
	return nil
}

// adminReadTimeout bounds the reading of an admin request, body included (a variable for tests).
var adminReadTimeout = 10 * time.Second

func (e *Enforcer) serveAdmin() error {
	if e.conf.AdminAddr == "off" {
		return nil
	}
	ln, err := net.Listen("tcp", e.conf.AdminAddr)
	if err != nil {
		return fmt.Errorf("enforcer: --admin-addr: %w", err)
	}
	e.adminLn = ln
	// Timeouts for the whole request and reply, not only the header: a client that sent a
	// header and then its body a byte every few seconds held its connection, and a few
	// hundred such clients used up the process's file descriptors, gRPC's included.
	e.admin = &http.Server{Handler: e.adminHandler(), ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout: adminReadTimeout, WriteTimeout: 30 * time.Second, IdleTimeout: 60 * time.Second}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		if err := e.admin.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.log.Error("admin server", "error", err)
		}
	}()
	return nil
}

// readFile reads the snapshot, returning its bytes for hashing.
func readFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, errors.New("empty file")
	}
	return b, nil
}

// go-redis logs every failed dial through a process-wide logger; the breaker's state changes
// and the store metrics say the same once, so its lines are dropped.
var quietRedisLog sync.Once

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}

// later returns the later of two times.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
