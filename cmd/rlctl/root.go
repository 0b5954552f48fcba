package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

const rootLong = `rlctl manages rate-limit policies as code.

Policies are CUE files in a Git repository. rlctl lints them, runs their unit tests,
replays access logs through the enforcement engine, renders configuration (the
rlctl-enforcer snapshot, Envoy's filters and rate_limits, envoyproxy/ratelimit YAML,
Prometheus alerts), serves it to a fleet over xDS, imports envoyproxy/ratelimit
YAML, and load-tests any Envoy rate limit service.

diff shows the semantic changes between two versions of a policy, and with --log
the requests the change would newly deny or admit.

rollout moves rules through shadow, soft, canary and enforce behind gates (dwell,
a log replay, the enforcers' metrics), editing the policy or opening pull requests.

Exit codes: 0 clean, 1 findings, 2 a difference (diff --exit-code), 3 usage or
tool error.`

// Main runs rlctl with args and returns the process exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err != nil {
		var msg string
		if ee, ok := err.(*exitError); !ok || ee.err != nil {
			msg = err.Error()
		}
		if msg != "" {
			fmt.Fprintf(stderr, "rlctl: %s\n", msg)
		}
	}
	return exitCode(err)
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "rlctl",
		Short:         "Rate-limit policies as code",
		Long:          rootLong,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// Cobra reports bad flags through this hook; they are usage errors (exit 3). Main prefixes
	// every error with "rlctl: ", so the message names the subcommand alone: "rlctl: lint:
	// unknown flag: --bogus", like every other error of the subcommand.
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		hint := fmt.Sprintf("\nRun '%s --help' for usage.", c.CommandPath())
		if name := strings.TrimPrefix(c.CommandPath(), c.Root().Name()+" "); c != c.Root() {
			return usageErrorf("%s: %w%s", name, err, hint)
		}
		return usageErrorf("%w%s", err, hint)
	})
	root.AddCommand(
		newBenchCmd(),
		newVersionCmd(),
		newRenderCmd(),
		newCompletionCmd(root),
		newLintCmd(),
		newSimulateCmd(),
		newReplayCmd(),
		newTestCmd(),
		newGenLogsCmd(),
		newImportCmd(),
		newServeXDSCmd(),
		newDiffCmd(),
		newRolloutCmd(),
		newShowCmd(),
		newWriteDocsCmd(),
	)
	return root
}
