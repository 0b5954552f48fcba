package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

const rootLong = `rlctl manages rate-limit policies as code.

Policies are CUE files in a Git repository. rlctl lints them, diffs two versions,
replays access logs through the enforcement engine, renders Envoy and rate limit
service configuration, and drives staged rollouts.

Exit codes: 0 clean, 1 findings, 2 difference (diff --exit-code), 3 usage or tool error.`

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
	// Cobra reports bad flags through this hook; they are usage errors (exit 3).
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageErrorf("%s: %w\nRun '%s --help' for usage.", c.CommandPath(), err, c.CommandPath())
	})
	root.AddCommand(
		newBenchCmd(),
		newVersionCmd(),
		newRenderCmd(),
		newCompletionCmd(root),
		newLintCmd(),
		newSimulateCmd(),
		newTestCmd(),
		newGenLogsCmd(),
	)
	return root
}
