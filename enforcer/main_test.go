package enforcer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"github.com/rlctl/rlctl/internal/clitest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestMainHelpAndVersion(t *testing.T) {
	tests := []struct {
		args []string
		want []string // substrings of stdout
	}{
		{[]string{"--help"}, []string{"Usage: rlctl-enforcer --config SNAPSHOT", "--config is required",
			"the policy snapshot (required)", "SIGHUP reloads", "Exit codes: 0", "3 usage error", "--version"}},
		{[]string{"-h"}, []string{"Usage: rlctl-enforcer"}},
		{[]string{"--version"}, []string{"rlctl-enforcer v1.2.3 (go", "/"}},
		// --version needs no --config, and its twin is not read.
		{[]string{"--version", "--store", "foo"}, []string{"rlctl-enforcer v1.2.3"}},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		err := Main(t.Context(), Process{Version: "v1.2.3", Args: tt.args, Getenv: func(string) string { return "" },
			Stdout: &stdout, Stderr: &stderr})
		if err != nil {
			t.Errorf("%q: got %v, want nil", tt.args, err)
		}
		for _, w := range tt.want {
			if !strings.Contains(stdout.String(), w) {
				t.Errorf("%q: stdout does not contain %q:\n%s", tt.args, w, stdout.String())
			}
		}
		if stderr.Len() > 0 {
			t.Errorf("%q: stderr: got %q, want nothing", tt.args, stderr.String())
		}
	}
	// The environment twin of --version is not read: it would turn a sidecar into a one-liner.
	_, err := ParseArgs([]string{"--config", "s.json"}, func(k string) string {
		return map[string]string{"RLCTL_ENFORCER_VERSION": "true", "RLCTL_ENFORCER_HELP": "true"}[k]
	}, &bytes.Buffer{})
	if err != nil {
		t.Errorf("RLCTL_ENFORCER_VERSION: got %v, want it ignored", err)
	}
}

func TestVersionLine(t *testing.T) {
	platform := runtime.Version() + ", " + runtime.GOOS + "/" + runtime.GOARCH
	tests := []struct {
		version  string
		settings []debug.BuildSetting
		want     string
	}{
		{"", nil, "rlctl-enforcer dev (" + platform + ")"},
		{"v1.2.3", []debug.BuildSetting{{Key: "vcs.revision", Value: "4f9c2e1"}},
			"rlctl-enforcer v1.2.3 (" + platform + ", revision 4f9c2e1)"},
		{"v1.2.3", []debug.BuildSetting{{Key: "vcs.revision", Value: "4f9c2e1"}, {Key: "vcs.modified", Value: "true"}},
			"rlctl-enforcer v1.2.3 (" + platform + ", revision 4f9c2e1, modified)"},
	}
	for i, tt := range tests {
		if got := versionLine(tt.version, &debug.BuildInfo{Settings: tt.settings}); got != tt.want {
			t.Errorf("step %d: got %q, want %q", i, got, tt.want)
		}
	}
}

func TestExitCode(t *testing.T) {
	_, usage := ParseArgs([]string{"--store", "foo"}, func(string) string { return "" }, &bytes.Buffer{})
	tests := []struct {
		err  error
		want int
	}{
		{nil, ExitClean},
		{usage, ExitUsage},
		{errors.New("enforcer: --config s.json: no such file"), ExitFailure},
	}
	for _, tt := range tests {
		if got := ExitCode(tt.err); got != tt.want {
			t.Errorf("ExitCode(%v): got %d, want %d", tt.err, got, tt.want)
		}
	}
}

// TestMainFailedStart checks that a start that fails is an exit-1 error and logs the failure,
// not a stop.
func TestMainFailedStart(t *testing.T) {
	var stderr syncBuffer
	err := Main(t.Context(), Process{Args: []string{"--config", filepath.Join(t.TempDir(), "missing.json"),
		"--grpc-addr", "127.0.0.1:0", "--admin-addr", "off"}, Getenv: func(string) string { return "" },
		Stdout: &bytes.Buffer{}, Stderr: &stderr})
	if ExitCode(err) != ExitFailure || !strings.Contains(fmtErr(err), "missing.json") {
		t.Errorf("got %v (exit %d), want an error naming missing.json (exit %d)", err, ExitCode(err), ExitFailure)
	}
	logs := stderr.String()
	if !strings.Contains(logs, `"msg":"enforcer failed to start"`) || !strings.Contains(logs, "missing.json") {
		t.Errorf("logs do not report the failed start:\n%s", logs)
	}
	if strings.Contains(logs, "enforcer stopped") || strings.Contains(logs, `"error":null`) {
		t.Errorf("logs report a stop of an enforcer that never started:\n%s", logs)
	}
}

// TestMainReload runs Main, asks it to reload (SIGHUP), and stops it: the reload keeps it
// serving, and the stop is logged as clean.
func TestMainReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "snapshot.json")
	writeSnapshot(t, path, testModel())
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	reload := make(chan os.Signal)
	var stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- Main(ctx, Process{Args: []string{"--config", path, "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
			"--instance-id", "t"}, Getenv: func(string) string { return "" }, Stdout: &bytes.Buffer{}, Stderr: &stderr, Reload: reload})
	}()
	var admin string
	eventually(t, 5*time.Second, "the enforcer to start", func() bool {
		for _, line := range strings.Split(stderr.String(), "\n") {
			var rec struct{ Msg, Admin string }
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "enforcer started" {
				admin = rec.Admin
				return true
			}
		}
		return false
	})
	if got := clitest.Metric(t, admin, `rate_limit_config_reloads_total{result="ok"}`); got != 1 {
		t.Fatalf("reloads before SIGHUP: got %v, want 1", got)
	}
	select {
	case reload <- syscall.SIGHUP:
	case err := <-done:
		t.Fatalf("Main returned %v before SIGHUP", err)
	}
	eventually(t, 5*time.Second, "the reload", func() bool {
		return clitest.Metric(t, admin, `rate_limit_config_reloads_total{result="ok"}`) == 2
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Main: %v", err)
	}
	logs := stderr.String()
	if !strings.Contains(logs, `"msg":"reloading the snapshot","signal":"hangup"`) || !strings.Contains(logs, `"msg":"enforcer stopped"}`) {
		t.Errorf("logs do not show the reload and a clean stop:\n%s", logs)
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
