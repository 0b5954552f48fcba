package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/rlctl/rlctl/policy"
	"github.com/rlctl/rlctl/xds"
	"github.com/rlctl/rlctl/xds/controlplane"
)

const serveXDSLong = `Serve a policy directory to a fleet over xDS.

serve-xds is an xDS control plane (State of the World, over the Aggregated
Discovery Service). Every node gets the same resources, whatever its node ID:

  type.googleapis.com/rlctl.snapshot.v1.Snapshot
      the snapshot that rlctl render --target snapshot writes, for
      rlctl-enforcer --xds HOST:PORT; versioned by its content_hash.
  type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig
      one per domain, named after it, for envoyproxy/ratelimit with
      CONFIG_TYPE=GRPC_XDS_SOTW and CONFIG_GRPC_XDS_SERVER_URL=HOST:PORT; the
      ratelimit render target's conversion, its approximations logged.

The directory (its .cue files, not its subdirectories) is loaded as rlctl
render loads it, and watched: a burst of changes is loaded once it has been
quiet for --debounce, and the directory is loaded again every --resync in
case a change went unseen. A change that does not load is refused: its
problems are logged with their file:line:col, and the last good version keeps
being served. A change that leaves the policy's meaning alone keeps the
version, and nothing is pushed. Clients that lose the server keep what they
have and reconnect.

The admin server (--admin-addr) serves /metrics (rlctl_xds_*; among them
rlctl_xds_policy_last_load_successful, 0 while the directory does not load),
/healthz, /readyz and /config. Logs are JSON lines on stderr. SIGHUP loads the
directory again. SIGINT and SIGTERM end the streams and stop the server.

Exit codes: 0 stopped by a signal; 1 the policy does not load at start (its
problems are printed as rlctl render prints them); 3 usage or tool error: a bad
flag, a missing directory or one without .cue files, an address in use.`

func newServeXDSCmd() *cobra.Command {
	var c controlplane.Config
	cmd := &cobra.Command{
		Use:   "serve-xds --policies DIR [--addr HOST:PORT] [--admin-addr HOST:PORT|off]",
		Short: "Serve policies to enforcers and envoyproxy/ratelimit over xDS",
		Long:  serveXDSLong,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkServeXDS(c, args); err != nil {
				return err
			}
			if c.Resync == 0 {
				c.Resync = -1 // off
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			// SIGHUP loads the directory again, as the enforcer's reloads its snapshot (and
			// systemd's ExecReload sends); it used to end the process. Caught from before the
			// start, whose log line a supervisor may take as the cue to send it.
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			c.Logger = slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), nil))
			srv, err := controlplane.Start(ctx, c)
			var probs policy.Problems
			switch {
			case errors.As(err, &probs):
				return loadError(cmd.ErrOrStderr(), "serve-xds", probs)
			case err != nil:
				return usageErrorf("serve-xds: %w", err)
			}
			for ctx.Err() == nil {
				select {
				case <-hup:
					srv.Reload("signal")
				case <-ctx.Done():
				}
			}
			c.Logger.Info("shutting down", "cause", context.Cause(ctx).Error())
			return srv.Close()
		},
	}
	f := cmd.Flags()
	f.StringVar(&c.PolicyDir, "policies", "", "the policy `DIR` to serve (required)")
	f.StringVar(&c.Addr, "addr", xds.DefaultAddr, "xDS gRPC listen `HOST:PORT` (18000 is what envoyproxy/ratelimit dials by default)")
	f.StringVar(&c.AdminAddr, "admin-addr", controlplane.DefaultAdminAddr, "admin HTTP `HOST:PORT` for /metrics /healthz /readyz /config (\"off\" disables)")
	f.DurationVar(&c.Debounce, "debounce", controlplane.DefaultDebounce, "quiet after a change before the directory is loaded; above 0")
	f.DurationVar(&c.Resync, "resync", controlplane.DefaultResync, "load the directory again this often in case a change went unseen; 0 turns it off")
	f.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", controlplane.DefaultShutdownTimeout, "graceful shutdown bound; above 0")
	return cmd
}

// checkServeXDS reports every bad setting at once, each naming its flag.
func checkServeXDS(c controlplane.Config, args []string) error {
	var errs []error
	if len(args) > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q: give the directory with --policies", args))
	}
	switch st, err := os.Stat(c.PolicyDir); {
	case c.PolicyDir == "":
		errs = append(errs, errors.New("--policies is required: the policy directory to serve"))
	case errors.Is(err, fs.ErrNotExist):
		errs = append(errs, fmt.Errorf("--policies %s: no such directory", c.PolicyDir))
	case err != nil:
		errs = append(errs, fmt.Errorf("--policies %w", err))
	case !st.IsDir():
		errs = append(errs, fmt.Errorf("--policies %s: not a directory", c.PolicyDir))
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		errs = append(errs, fmt.Errorf("--addr %q: want host:port", c.Addr))
	}
	if _, _, err := net.SplitHostPort(c.AdminAddr); err != nil && c.AdminAddr != "off" {
		errs = append(errs, fmt.Errorf("--admin-addr %q: want host:port, or off", c.AdminAddr))
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
		zero bool // 0 is allowed
	}{{"debounce", c.Debounce, false}, {"resync", c.Resync, true}, {"shutdown-timeout", c.ShutdownTimeout, false}} {
		switch {
		case d.v < 0 && d.zero:
			errs = append(errs, fmt.Errorf("--%s %v: must not be negative", d.flag, d.v))
		case d.v < 0 || (d.v == 0 && !d.zero):
			errs = append(errs, fmt.Errorf("--%s %v: must be above 0", d.flag, d.v))
		}
	}
	return settingErrors("serve-xds", errs)
}
