package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlctl/rlctl/internal/clitest"
)

// TestServeXDSSignal runs rlctl serve-xds as a process: it starts serving policies/, is ready,
// and SIGTERM stops it cleanly, exit 0.
func TestServeXDSSignal(t *testing.T) {
	bin, err := exec.LookPath("rlctl") // testscript.Main put it on $PATH
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve-xds", "--policies", "../../policies", "--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() }) // by PID; a no-op once it exited
	logs := make(chan string, 100)
	exited := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			logs <- sc.Text()
		}
		close(logs)
		exited <- cmd.Wait()
	}()
	var all strings.Builder
	await := func(msg string) map[string]any {
		t.Helper()
		timeout := time.After(20 * time.Second)
		for {
			select {
			case line, ok := <-logs:
				if !ok {
					t.Fatalf("serve-xds exited before logging %q:\n%s", msg, all.String())
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
	admin, _ := await("xds control plane started")["admin"].(string)
	resp, err := http.Get("http://" + admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/readyz: %d, want 200", resp.StatusCode)
	}

	// SIGHUP loads the directory again and goes on serving; it ended the process.
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for clitest.Metric(t, admin, `rlctl_xds_policy_loads_total{result="unchanged"}`) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("no load after SIGHUP:\n%s", all.String())
		}
		time.Sleep(20 * time.Millisecond)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	await("xds control plane stopped")
	for range logs {
	}
	if err := <-exited; err != nil {
		t.Errorf("exit after SIGTERM: got %v, want status 0", err)
	}
}
