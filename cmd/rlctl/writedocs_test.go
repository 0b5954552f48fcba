package main

import (
	"bytes"
	"testing"

	"github.com/rlctl/rlctl/internal/docgen"
)

// TestCommandPagesUpToDate fails when docs/cli no longer matches the commands' help text: a
// page that changed, one missing, or one whose command is gone. Run make docs to refresh them.
func TestCommandPagesUpToDate(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"write-docs", dir}, nil, &stdout, &stderr); code != ExitClean {
		t.Fatalf("rlctl write-docs: exit %d, stderr %s", code, stderr.String())
	}
	problems, err := docgen.Stale("../../docs/cli", dir, "rlctl[._]*")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s (run make docs and commit the result)", p)
	}
}
