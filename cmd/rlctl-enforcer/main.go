// Command rlctl-enforcer is the rate-limit sidecar: Envoy's Rate Limit Service (RLS v3) over
// gRPC, enforcing an rlctl policy snapshot. See package enforcer and the README.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/rlctl/rlctl/enforcer"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = "dev"

func main() {
	os.Exit(run())
}

// run is the whole program: SIGTERM and SIGINT shut the enforcer down gracefully, SIGHUP
// reloads its snapshot.
func run() int {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	err := enforcer.Main(ctx, enforcer.Process{Version: version, Args: os.Args[1:], Getenv: os.Getenv,
		Stdout: os.Stdout, Stderr: os.Stderr, Reload: hup})
	if err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(os.Stderr, "rlctl-enforcer: %s\n", line)
		}
	}
	return enforcer.ExitCode(err)
}
