package controlplane

import (
	"strings"
	"testing"
)

// TestClipBoundsLoggedText: a client's text in a log line is cut to maxLogged bytes: 200 NACKs
// of 1 MB each had been logged whole.
func TestClipBoundsLoggedText(t *testing.T) {
	long := strings.Repeat("x", 1<<20)
	if got := clip(long); len(got) > maxLogged+64 || !strings.Contains(got, "(1048576 bytes)") {
		t.Errorf("clip of 1 MB: %d bytes, %q...", len(got), got[:min(len(got), 80)])
	}
	if got := clip("bad route"); got != "bad route" {
		t.Errorf("clip(%q) = %q", "bad route", got)
	}
}
