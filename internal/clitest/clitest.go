// Package clitest holds what the tests of the commands and the enforcer share: the testscript
// status command and reading a metric off an admin server.
package clitest

import (
	"errors"
	"os/exec"
	"strconv"

	"github.com/rogpeppe/go-internal/testscript"
)

// Status implements the testscript command "status CODE COMMAND [ARGS...]": it runs COMMAND
// like exec, keeps its output for stdout and stderr assertions, and fails unless it exits
// with exactly CODE. Exit codes are API, so scripts check them exactly.
func Status(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: status CODE COMMAND [ARGS...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("status: bad exit code %q", args[0])
	}
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("status: %v", err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("exit status: got %d, want %d", got, want)
	}
}
