// Package erltest runs envoyproxy/ratelimit's own configuration loader, its config_check_cmd, on
// a directory of configuration files, so that tests check rendered YAML against the real thing.
//
// scripts/ensure-erl.sh installs the binary into $ERL_GOBIN (default out/erl-gobin at the module
// root). When it is missing there the test is skipped, unless the environment has CI=true, where
// a missing binary is a failure.
package erltest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Binary is the name of envoyproxy/ratelimit's configuration checker.
const Binary = "config_check_cmd"

// Service returns the path of envoyproxy/ratelimit's service (its service_cmd), or skips tb
// (fails it under CI=true) when it is not installed.
func Service(tb testing.TB) string {
	tb.Helper()
	return binary(tb, "service_cmd")
}

// Check runs the checker on every file of dir and returns its output, and a non-nil error when
// the loader refused the configuration (the checker exits non-zero: 1 for a refused config, 2
// when the loader panics outside its recover, as it does for an unknown key).
func Check(tb testing.TB, dir string) (string, error) {
	tb.Helper()
	bin := binary(tb, Binary)
	out, err := exec.Command(bin, "-config_dir", dir).CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		tb.Fatalf("erltest: %v", err)
	}
	return string(out), err
}

// binary returns the path of one of envoyproxy/ratelimit's commands, or skips (fails under
// CI=true) when it is not installed.
func binary(tb testing.TB, name string) string {
	tb.Helper()
	dir := os.Getenv("ERL_GOBIN")
	if dir == "" {
		dir = "out/erl-gobin"
	}
	if !filepath.IsAbs(dir) {
		root, err := moduleRoot()
		if err != nil {
			tb.Fatalf("erltest: %v", err)
		}
		dir = filepath.Join(root, dir)
	}
	bin := filepath.Join(dir, name)
	if _, err := os.Stat(bin); err != nil {
		msg := "erltest: " + bin + " is not installed: run scripts/ensure-erl.sh"
		if os.Getenv("CI") == "true" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	return bin
}

// moduleRoot returns the nearest directory at or above the working directory with a go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}
