package main

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestMain lets testscript run this binary as the rlctl command inside scripts.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"rlctl": func() { os.Exit(Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) },
	})
}

// TestScripts runs the end-to-end CLI scripts in testdata/script. Each .txtar file holds the
// commands, the files they read, and their expected output and exit status.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: true,
		Setup: func(env *testscript.Env) error {
			// Scripts that read the example repository find it at $POLICIES.
			wd, err := os.Getwd()
			if err != nil {
				return err
			}
			env.Setenv("POLICIES", wd+"/../../policies")
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"status": cmdStatus,
		},
	})
}

// cmdStatus implements "status CODE COMMAND [ARGS...]": it runs COMMAND like exec, keeps its
// output for stdout and stderr assertions, and fails unless it exits with exactly CODE. Exit
// codes are API, so scripts check them exactly.
func cmdStatus(ts *testscript.TestScript, neg bool, args []string) {
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
