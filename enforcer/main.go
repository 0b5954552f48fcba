package enforcer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"

	"github.com/spf13/pflag"
)

// ErrUsage wraps errors in the command line or environment.
var ErrUsage = errors.New("usage")

// Main runs rlctl-enforcer with args until ctx is done, then shuts down gracefully. Settings
// come from args, then from the environment twins that getenv reads. It returns nil after a
// clean shutdown, and an error wrapping ErrUsage for a bad command line.
func Main(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	c, err := ParseArgs(args, getenv, stderr)
	if errors.Is(err, pflag.ErrHelp) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	c.Logger = slog.New(slog.NewJSONHandler(stderr, nil))
	if c.GCPercent < -1 {
		return fmt.Errorf("%w: --gc-percent %d: want -1 or more", ErrUsage, c.GCPercent)
	}
	debug.SetGCPercent(c.GCPercent)
	e, err := Spawn(ctx, c)
	if err != nil {
		return err
	}
	<-ctx.Done()
	c.Logger.Info("shutting down", "cause", context.Cause(ctx).Error())
	return e.Close()
}
