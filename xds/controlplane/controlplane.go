// Package controlplane owns rlctl's xDS control plane (rlctl serve-xds): it loads a policy
// directory, validates every change to it, and serves the result to a fleet over ADS, State of
// the World, as the resources package xds describes: the enforcer's snapshot and
// envoyproxy/ratelimit's RateLimitConfigs.
//
// # Changes
//
// The directory is watched (fsnotify): a burst of events (an editor's write-and-rename, a git
// checkout, a Kubernetes ConfigMap's symlink swap) is loaded once after Config.Debounce of
// quiet, and the directory is loaded again every Config.Resync in case an event was missed. A
// change is loaded as `rlctl render` loads it (schema.Load, then lint.EngineProblems). A change
// that does not load is refused: it is logged with every problem's position and counted, and
// the last good version keeps being served. A change that leaves the policy's content alone
// (a comment, a blank line) keeps the version, so nothing is pushed; rules put in another order
// are a new version, as declared order decides among competing wildcards (policy.ContentHash).
//
// # Clients
//
// Every node gets the same resources. A client that rejects a version (a NACK) is not sent it
// again on that stream: it gets the next version. Connected clients, responses sent, NACKs and
// the served versions are Prometheus metrics on the admin server, beside /healthz, /readyz and
// /config.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	xdsserver "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfiggrpc "github.com/envoyproxy/go-control-plane/ratelimit/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/rlctl/rlctl/xds"
)

// Config configures a Server. The zero value of a field means its default.
type Config struct {
	// PolicyDir is the policy directory to serve (its .cue files, as rlctl render reads them).
	PolicyDir string
	// Addr is the xDS gRPC listen address (default xds.DefaultAddr; port 0 picks a free port).
	Addr string
	// AdminAddr serves /metrics, /healthz, /readyz and /config (default DefaultAdminAddr;
	// "off" disables it).
	AdminAddr string
	// Debounce is the quiet after a change to the directory before it is loaded (default
	// 100ms).
	Debounce time.Duration
	// Resync loads the directory again at this interval, in case a change was not seen
	// (default 30s; negative turns it off).
	Resync time.Duration
	// ShutdownTimeout bounds Close (default 5s).
	ShutdownTimeout time.Duration
	// Logger receives structured logs; nil means JSON to stderr.
	Logger *slog.Logger
}

// Defaults.
const (
	DefaultAdminAddr       = "127.0.0.1:6071"
	DefaultDebounce        = 100 * time.Millisecond
	DefaultResync          = 30 * time.Second
	DefaultShutdownTimeout = 5 * time.Second
)

// keepaliveMinTime is the most frequent keepalive ping the server accepts: xds.Client pings
// every 30s.
const keepaliveMinTime = 20 * time.Second

func (c Config) withDefaults() Config {
	if c.Addr == "" {
		c.Addr = xds.DefaultAddr
	}
	if c.AdminAddr == "" {
		c.AdminAddr = DefaultAdminAddr
	}
	if c.Debounce <= 0 {
		c.Debounce = DefaultDebounce
	}
	if c.Resync == 0 {
		c.Resync = DefaultResync
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	return c
}

// Server is a running control plane. Its methods are safe for concurrent use.
type Server struct {
	conf     Config
	log      *slog.Logger
	mx       *metrics
	cache    cache.SnapshotCache
	cur      atomic.Pointer[resources]
	loadedAt atomic.Int64 // Unix ms of the last version served
	loadMu   sync.Mutex   // loads run one at a time
	// lastFailed says the last load was refused (loadMu).
	lastFailed bool

	grpc    *grpc.Server
	grpcLn  net.Listener
	admin   *http.Server
	adminLn net.Listener
	ready   atomic.Bool

	stop      context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// Start loads the policy directory and serves it until Close. A policy that does not load is an
// error (schema.Problems, or a policy.Problems of what the enforcer would refuse): there is
// nothing good to serve yet. An error leaves nothing running.
func Start(ctx context.Context, c Config) (s *Server, err error) {
	c = c.withDefaults()
	s = &Server{conf: c, log: c.Logger, mx: newMetrics()}
	r, err := load(c.PolicyDir)
	if err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s.stop = stop
	defer func() {
		if err != nil {
			s.Close()
			s = nil
		}
	}()
	s.cache = cache.NewSnapshotCache(false, everyNode{}, cacheLogger{s.log})
	if err := s.serve(r); err != nil {
		return s, err
	}
	if err := s.serveGRPC(runCtx); err != nil {
		return s, err
	}
	if err := s.serveAdmin(); err != nil {
		return s, err
	}
	if err := s.watch(runCtx); err != nil {
		return s, err
	}
	s.ready.Store(true)
	s.log.Info("xds control plane started", "addr", s.Addr(), "admin", s.AdminAddr(),
		"policies", c.PolicyDir, "version", r.version(xds.SnapshotTypeURL), "domains", len(r.model.Domains))
	return s, nil
}

// serve makes r the resources every node gets.
func (s *Server) serve(r *resources) error {
	if err := s.cache.SetSnapshot(context.Background(), fleetKey, r); err != nil {
		return fmt.Errorf("xds: %w", err)
	}
	old := s.cur.Swap(r)
	s.loadedAt.Store(time.Now().UnixMilli())
	s.mx.served(old, r)
	if v := r.version(xds.RateLimitConfigTypeURL); len(r.erlNotes) > 0 && (old == nil || old.version(xds.RateLimitConfigTypeURL) != v) {
		s.log.Info("the RateLimitConfigs for envoyproxy/ratelimit approximate the policy", "version", v,
			"notes", r.erlNotes)
	}
	return nil
}

// Addr is the address the xDS gRPC server listens on.
func (s *Server) Addr() string {
	if s.grpcLn == nil {
		return ""
	}
	return s.grpcLn.Addr().String()
}

// AdminAddr is the address of the admin HTTP server, or "" when it is off.
func (s *Server) AdminAddr() string {
	if s.adminLn == nil {
		return ""
	}
	return s.adminLn.Addr().String()
}

// Version is the version of the snapshot being served: its content hash.
func (s *Server) Version() string {
	if r := s.cur.Load(); r != nil {
		return r.version(xds.SnapshotTypeURL)
	}
	return ""
}

// Close stops serving: it ends every client's stream (clients keep their last snapshot and
// reconnect), stops the watcher and the admin server, within Config.ShutdownTimeout. It is safe
// to call more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		deadline := time.Now().Add(s.conf.ShutdownTimeout)
		s.ready.Store(false)
		if s.stop != nil {
			s.stop() // ends the ADS streams and the watcher
		}
		if s.grpc != nil {
			done := make(chan struct{})
			go func() { s.grpc.GracefulStop(); close(done) }()
			select {
			case <-done:
			case <-time.After(time.Until(deadline) / 2):
				s.grpc.Stop()
				<-done
			}
		}
		if s.admin != nil {
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			_ = s.admin.Shutdown(ctx)
			cancel()
		}
		s.wg.Wait()
		if s.grpcLn != nil {
			s.log.Info("xds control plane stopped")
		}
	})
	return nil
}

func (s *Server) serveGRPC(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.conf.Addr)
	if err != nil {
		return fmt.Errorf("xds: --addr: %w", err)
	}
	s.grpcLn = ln
	s.grpc = grpc.NewServer(grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
		MinTime: keepaliveMinTime, PermitWithoutStream: true}))
	srv := xdsserver.NewServer(ctx, s.cache, s.callbacks())
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(s.grpc, srv)
	rlsconfiggrpc.RegisterRateLimitConfigDiscoveryServiceServer(s.grpc, srv)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.grpc.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			s.log.Error("xds grpc server", "error", err.Error())
		}
	}()
	return nil
}

// adminReadTimeout bounds the reading of an admin request, body included (a variable for tests).
var adminReadTimeout = 10 * time.Second

func (s *Server) serveAdmin() error {
	if s.conf.AdminAddr == "off" {
		return nil
	}
	ln, err := net.Listen("tcp", s.conf.AdminAddr)
	if err != nil {
		return fmt.Errorf("xds: --admin-addr: %w", err)
	}
	s.adminLn = ln
	// Timeouts for the whole request and reply, not only the header: a client that sent a
	// header and then its body a byte every few seconds held its connection, and a few
	// hundred such clients used up the process's file descriptors, gRPC's included.
	s.admin = &http.Server{Handler: s.adminHandler(), ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout: adminReadTimeout, WriteTimeout: 30 * time.Second, IdleTimeout: 60 * time.Second}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.admin.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("admin server", "error", err.Error())
		}
	}()
	return nil
}

// cacheLogger sends go-control-plane's logs to slog: its info lines (a stale nonce, a watch
// opened) at debug level.
type cacheLogger struct{ log *slog.Logger }

func (l cacheLogger) Debugf(format string, args ...any) { l.debug(format, args) }
func (l cacheLogger) Infof(format string, args ...any)  { l.debug(format, args) }

func (l cacheLogger) debug(format string, args []any) {
	if l.log.Enabled(context.Background(), slog.LevelDebug) {
		l.log.Debug(fmt.Sprintf(format, args...))
	}
}
func (l cacheLogger) Warnf(format string, args ...any) {
	l.log.Warn(fmt.Sprintf(format, args...))
}
func (l cacheLogger) Errorf(format string, args ...any) {
	l.log.Error(fmt.Sprintf(format, args...))
}
