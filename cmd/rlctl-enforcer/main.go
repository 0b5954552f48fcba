// Command rlctl-enforcer is the rate-limit sidecar: Envoy's Rate Limit Service (RLS v3) over
// gRPC, enforcing an rlctl policy snapshot. See package enforcer and the README.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/rlctl/rlctl/enforcer"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := enforcer.Main(ctx, os.Args[1:], os.Getenv, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "rlctl-enforcer: %v\n", err)
		if errors.Is(err, enforcer.ErrUsage) {
			os.Exit(3)
		}
		os.Exit(1)
	}
}
