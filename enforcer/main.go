package enforcer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime/debug"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/rlctl/rlctl/internal/buildinfo"
	"github.com/spf13/pflag"
)

// Exit codes of rlctl-enforcer. They are public API, as rlctl's are: never renumber one.
const (
	// ExitClean means a clean shutdown, or --help or --version.
	ExitClean = 0
	// ExitFailure means the enforcer could not start (the snapshot is missing or invalid, an
	// address is in use, the journal cannot be written) or did not shut down cleanly.
	ExitFailure = 1
	// ExitUsage means an unknown flag, or an invalid flag or environment value.
	ExitUsage = 3
)

// ErrUsage wraps errors in the command line or environment.
var ErrUsage = errors.New("usage")

// ExitCode maps the error Main returned onto the process exit code.
func ExitCode(err error) int {
	switch {
	case err == nil:
		return ExitClean
	case errors.Is(err, ErrUsage):
		return ExitUsage
	}
	return ExitFailure
}

// Process is what Main takes from the process it runs in.
type Process struct {
	// Version is the build's version, printed by --version.
	Version string
	// Args are the command-line arguments, without the program name.
	Args []string
	// Getenv reads the environment twins of the flags.
	Getenv func(string) string
	// Stdout receives --help and --version; Stderr the logs.
	Stdout, Stderr io.Writer
	// Reload receives a value for each request to reload the snapshot now (SIGHUP).
	Reload <-chan os.Signal
}

// Main runs rlctl-enforcer until ctx is done, then shuts down gracefully. Settings come from
// p.Args, then from the environment twins. Every setting is checked before anything starts. It
// returns nil after a clean shutdown (or --help, --version), and an error wrapping ErrUsage for a
// bad command line or environment; see ExitCode.
func Main(ctx context.Context, p Process) error {
	c, err := ParseArgs(p.Args, p.Getenv, p.Stdout)
	switch {
	case errors.Is(err, pflag.ErrHelp):
		return nil
	case errors.Is(err, ErrVersion):
		bi, _ := debug.ReadBuildInfo()
		fmt.Fprintln(p.Stdout, versionLine(p.Version, bi))
		return nil
	case err != nil:
		return err
	}
	c.Logger = slog.New(slog.NewJSONHandler(p.Stderr, nil))
	debug.SetGCPercent(c.GCPercent)
	setMemoryLimit(c.Logger, memlimit.FromCgroup)
	e, err := Spawn(ctx, c)
	if err != nil {
		return err
	}
	for {
		select {
		case sig := <-p.Reload:
			c.Logger.Info("reloading the snapshot", "signal", sig.String())
			_ = e.Reload() // a rejected file is logged and counted; the old config keeps serving
		case <-ctx.Done():
			c.Logger.Info("shutting down", "cause", context.Cause(ctx).Error())
			return e.Close()
		}
	}
}

// memoryLimitRatio is the share of the container's memory limit that the Go runtime keeps the
// heap under (GOMEMLIMIT). The rest is for the runtime's own memory, stacks and gRPC buffers.
const memoryLimitRatio = 0.9

// setMemoryLimit sets the Go runtime's soft memory limit to memoryLimitRatio of the memory limit
// that limits reports (the process's cgroup's: a container's limits.memory), unless GOMEMLIMIT is set or
// AUTOMEMLIMIT is "off" (AUTOMEMLIMIT=0.8 picks another share). With --gc-percent's default of
// 400 the heap may grow to five times the live heap between collections: under a flood of keys
// (--max-keys lease states of 1-2 KB, fallback buckets while Redis is away) that passed a
// 384 MiB limit, and the kernel killed the sidecar. Near the limit the collector runs sooner.
func setMemoryLimit(log *slog.Logger, limits memlimit.Provider) {
	limit, err := memlimit.Set(memlimit.WithRatio(memoryLimitRatio), memlimit.WithProvider(limits))
	switch {
	case err != nil:
		log.Warn("no memory limit set for the Go runtime: the cgroup's limit could not be read", "error", err.Error())
	case limit > 0 && limit < math.MaxInt64:
		log.Info("Go runtime memory limit", "bytes", limit)
	}
}

// versionLine is what --version prints: rlctl version's text for this command, with the VCS
// revision that bi (nil when unknown) records.
func versionLine(version string, bi *debug.BuildInfo) string {
	return buildinfo.Of(version, bi).Line("rlctl-enforcer")
}
