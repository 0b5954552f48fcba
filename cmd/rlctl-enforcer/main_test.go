package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlctl/rlctl/internal/clitest"
	"github.com/rogpeppe/go-internal/testscript"

	"github.com/rlctl/rlctl/internal/policyfixture"
	"github.com/rlctl/rlctl/policy"
)

// TestMain lets testscript, and TestSignals, run this binary as rlctl-enforcer.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"rlctl-enforcer": func() { os.Exit(run()) },
	})
}

// TestScripts runs the end-to-end CLI scripts in testdata/script. $SNAPSHOT is a valid
// snapshot.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: true,
		Setup: func(env *testscript.Env) error {
			path := filepath.Join(env.WorkDir, "snapshot.json")
			env.Setenv("SNAPSHOT", path)
			return writeSnapshot(path)
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"status": clitest.Status,
		},
	})
}

// writeSnapshot writes a one-rule snapshot to path.
func writeSnapshot(path string) error {
	m := &policy.Model{Domains: []*policy.Domain{{Name: "edge", Rules: []*policy.Rule{{
		Name:        "per-user",
		Match:       []policy.Match{{Key: "user", Kind: policy.MatchAny}},
		Limits:      []policy.Limit{{Requests: 10, WindowMs: 60_000, Burst: 10, Algorithm: policy.TokenBucket, Cost: 1}},
		Stage:       policy.Stage{Name: policy.StageEnforce},
		FailureMode: policy.FailOpen, StoreTimeoutMs: 5,
		Lease: policyfixture.Lease(policyfixture.Bounds(1, 1), policyfixture.TTL(10_000), policyfixture.UnsetWatermark()),
	}}}}}
	var buf bytes.Buffer
	if err := policy.WriteSnapshot(&buf, m); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// TestSignals runs the enforcer as a process: SIGHUP reloads the snapshot and leaves it
// serving; SIGTERM shuts it down cleanly, exit 0.
func TestSignals(t *testing.T) {
	bin, err := exec.LookPath("rlctl-enforcer") // testscript.Main put it on $PATH
	if err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(t.TempDir(), "snapshot.json")
	if err := writeSnapshot(snap); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", snap, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--instance-id", "t")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // by PID; a no-op once it exited
	})
	logs := make(chan string, 100)
	var all strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logs <- sc.Text()
		}
		close(logs)
		exited <- cmd.Wait()
	}()
	// await reads log lines until one has msg, and returns it.
	await := func(msg string) map[string]any {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case line, ok := <-logs:
				if !ok {
					t.Fatalf("the enforcer exited before logging %q:\n%s", msg, all.String())
				}
				all.WriteString(line + "\n")
				var rec map[string]any
				if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg {
					return rec
				}
			case <-timeout:
				t.Fatalf("timed out waiting for %q:\n%s", msg, all.String())
			}
		}
	}
	admin, _ := await("enforcer started")["admin"].(string)

	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	await("config reloaded")
	if got := clitest.Metric(t, admin, `rate_limit_config_reloads_total{result="ok"}`); got != 2 {
		t.Errorf("reloads after SIGHUP: got %v, want 2", got)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if rec := await("enforcer stopped"); rec["error"] != nil {
		t.Errorf("stop: got error %v, want none", rec["error"])
	}
	for range logs {
	}
	if err := <-exited; err != nil {
		t.Errorf("exit after SIGTERM: got %v, want status 0", err)
	}
}
