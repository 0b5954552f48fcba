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
