// Package redistest runs real redis-server processes for tests: a single
// server (Start) or a Redis Cluster of masters (StartCluster), each on free
// loopback ports with its own temporary directory, no persistence, stopped by
// PID when the test ends. It never touches a Redis it did not start.
//
// When redis-server is not on PATH the test is skipped, unless the
// environment has CI=true, where a missing server is a failure.
//
//	srv := redistest.Start(t)
//	store := engine.NewRedis(srv.Client())
//	srv.Pause() // SIGSTOP: the server hangs, connections stay open
//	srv.Resume()
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Binary is the redis-server executable looked up on PATH.
const Binary = "redis-server"

// startTimeout bounds how long Start waits for a server to answer PING.
const startTimeout = 10 * time.Second

// An Option configures Start.
type Option func(*config)

type config struct {
	args     []string
	bus      bool   // the port+10000 cluster bus port must be free too
	sentinel string // sentinel.conf contents: run in sentinel mode
}

// WithArgs passes extra command-line arguments to redis-server, for example
// WithArgs("--maxmemory", "10mb").
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// Server is one redis-server process started by Start. Its methods fail the
// test on error and are safe for concurrent use.
type Server struct {
	tb       testing.TB
	port     int
	dir      string
	args     []string
	sentinel string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{} // closed when cmd has exited
	client *redis.Client
}

// Start starts a redis-server on a free 127.0.0.1 port, waits until it answers
// PING and registers a cleanup that kills it by PID. It skips the test when
// redis-server is missing (fails it when CI=true).
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	requireBinary(tb)
	var c config
	for _, o := range opts {
		o(&c)
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort(c.bus)
		if err != nil {
			tb.Fatalf("redistest: %v", err)
		}
		s := &Server{tb: tb, port: port, dir: tb.TempDir(), args: c.args, sentinel: c.sentinel}
		if lastErr = s.start(); lastErr == nil {
			tb.Cleanup(s.cleanup)
			return s
		}
		// Another process may have taken the port between probe and start.
	}
	tb.Fatalf("redistest: start redis-server: %v", lastErr)
	return nil
}

// requireBinary skips tb when redis-server is not on PATH, or fails it when
// the environment variable CI is "true".
func requireBinary(tb testing.TB) {
	tb.Helper()
	if _, err := exec.LookPath(Binary); err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("redistest: %s not on PATH (required when CI=true): %v", Binary, err)
		}
		tb.Skipf("redistest: %s not on PATH: %v", Binary, err)
	}
}

// Addr is the server's host:port on 127.0.0.1.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port is the server's TCP port.
func (s *Server) Port() int { return s.port }

// Dir is the server's working directory.
func (s *Server) Dir() string { return s.dir }

// PID is the process id of the running server, or 0 when it is stopped.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Client is a go-redis client for the server, created on first use and
// closed at cleanup. It reconnects by itself after Restart. It sets
// ContextTimeoutEnabled, so a context deadline bounds every call, even
// against a paused server (go-redis ignores deadlines otherwise and waits
// for its 3 s ReadTimeout); production clients want the same.
func (s *Server) Client() *redis.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil {
		s.client = redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true})
	}
	return s.client
}

// Kill sends SIGKILL and waits for the process to exit.
func (s *Server) Kill() {
	s.tb.Helper()
	s.signalAndWait(syscall.SIGKILL)
}

// Stop sends SIGTERM (a clean shutdown) and waits for the process to exit.
func (s *Server) Stop() {
	s.tb.Helper()
	s.signalAndWait(syscall.SIGTERM)
}

// Start starts a stopped or killed server again on the same port.
func (s *Server) Start() {
	s.tb.Helper()
	if err := s.start(); err != nil {
		s.tb.Fatalf("redistest: restart on %s: %v", s.Addr(), err)
	}
}

// Restart kills the server and starts it again on the same port, with empty
// data.
func (s *Server) Restart() {
	s.tb.Helper()
	s.Kill()
	s.Start()
}

// Pause sends SIGSTOP: the server keeps its connections but answers nothing,
// like a hung host.
func (s *Server) Pause() {
	s.tb.Helper()
	s.signal(syscall.SIGSTOP)
}

// Resume sends SIGCONT to a paused server.
func (s *Server) Resume() {
	s.tb.Helper()
	s.signal(syscall.SIGCONT)
}

func (s *Server) start() error {
	s.mu.Lock()
	if s.cmd != nil {
		s.mu.Unlock()
		return errors.New("already running")
	}
	args := []string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--logfile", "redis.log", "--daemonize", "no",
	}
	if s.sentinel != "" {
		conf := filepath.Join(s.dir, "sentinel.conf")
		if err := os.WriteFile(conf, []byte(s.sentinel), 0o600); err != nil {
			s.mu.Unlock()
			return err
		}
		args = append([]string{conf, "--sentinel"}, args...)
	} else {
		args = append(args, "--save", "", "--appendonly", "no")
	}
	cmd := exec.Command(Binary, append(args, s.args...)...)
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()

	err := waitPing(s.Addr(), done)
	if err != nil {
		s.signalAndWait(syscall.SIGKILL)
		log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
		return fmt.Errorf("%w\n%s", err, log)
	}
	return nil
}

// waitPing polls addr with PING until it answers, the process exits or
// startTimeout passes.
func waitPing(addr string, exited <-chan struct{}) error {
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer c.Close()
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("redis-server on %s exited: %w", addr, err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s: no PING reply after %v: %w", addr, startTimeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		s.tb.Fatalf("redistest: %s is not running", s.Addr())
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.tb.Fatalf("redistest: signal %v to pid %d: %v", sig, s.cmd.Process.Pid, err)
	}
}

// signalAndWait signals the process by PID and waits until it has exited.
func (s *Server) signalAndWait(sig syscall.Signal) {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd, s.done = nil, nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	if sig != syscall.SIGKILL {
		_ = cmd.Process.Signal(syscall.SIGCONT) // a paused server cannot act on SIGTERM
	}
	<-done
}

func (s *Server) cleanup() {
	s.mu.Lock()
	c := s.client
	s.client = nil
	s.mu.Unlock()
	if c != nil {
		_ = c.Close()
	}
	s.signalAndWait(syscall.SIGKILL)
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago; never
// 6379, which belongs to the machine's own Redis. With bus, port+10000 (the
// cluster bus) was free too.
func freePort(bus bool) (int, error) {
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if port == 6379 || port == 6379-10000 {
			continue
		}
		if !bus {
			return port, nil
		}
		if port+10000 > 65535 {
			continue
		}
		if lb, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000))); err == nil {
			_ = lb.Close()
			return port, nil
		}
	}
	return 0, errors.New("free port: none found")
}
