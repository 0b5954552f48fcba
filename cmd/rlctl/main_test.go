package main

import (
	"os"
	"testing"

	"github.com/rlctl/rlctl/internal/clitest"
	"github.com/rlctl/rlctl/rollout/githubtest"
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
			"status": clitest.Status,
			// A fake GitHub for rollout's pull requests (github serve, then github pulls, ...).
			"github": githubtest.ScriptCmd,
		},
	})
}
