//go:build unix

package schema

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestLoadRefusesNamedPipe: a named pipe called *.cue, named or in a directory, is refused at
// once: reading it waited for a writer, and lint hung.
func TestLoadRefusesNamedPipe(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.cue"), []byte("package p\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pipe := filepath.Join(dir, "b.cue")
	if err := syscall.Mkfifo(pipe, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	for _, path := range []string{dir, pipe} {
		if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "b.cue is not a regular file") {
			t.Errorf("Load(%s): got %v, want b.cue refused as not a regular file", path, err)
		}
	}
}

// TestLoadRefusesLinksOutside: a .cue file in a policy directory that is a symbolic link to a
// file outside it is refused before it is read; a link to a file within it is loaded. A pull
// request that CI lints could link a credentials file of the runner, whose values a CUE error
// then printed in the findings.
func TestLoadRefusesLinksOutside(t *testing.T) {
	outside := t.TempDir()
	secret := filepath.Join(outside, "docker.json")
	if err := os.WriteFile(secret, []byte(`{"token": "ghp_secret"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	policy := "package p\n\ndomains: edge: {\n\tsources: tenant: {kind: \"header\", header: \"x-tenant\"}\n\trules: r: {match: [{key: \"tenant\"}], limits: [{requests: 1, window: \"1s\"}]}\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "p.cue"), []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "shared"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "shared", "x.cue"), []byte("package p\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("shared", "x.cue"), filepath.Join(dir, "inside.cue")); err != nil {
		t.Skipf("symlink: %v", err)
	}
	if _, err := Load(dir); err != nil {
		t.Fatalf("a link within the directory: %v", err)
	}
	if err := os.Symlink(secret, filepath.Join(dir, "creds.cue")); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{dir, filepath.Join(dir, "creds.cue")} {
		_, err := Load(path)
		if err == nil || !strings.Contains(err.Error(), "creds.cue is a symbolic link to") || strings.Contains(err.Error(), "ghp_secret") {
			t.Errorf("Load(%s), a link outside: got %v, want creds.cue refused as a link outside, and no value of it", path, err)
		}
	}
	// The file it leads to, named itself, is loaded as any file is.
	if _, err := Load(filepath.Join(dir, "inside.cue")); err != nil && strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("a link within its directory, named: %v", err)
	}
}
