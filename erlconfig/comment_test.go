package erlconfig

import (
	"strings"
	"testing"

	"github.com/rlctl/rlctl/internal/printable"
	"github.com/rlctl/rlctl/policy"
)

// TestImportCommentsHoldFileNames: a file name with a line break stays inside the comment that
// names it: it would otherwise end the comment and write CUE of its own into the policy.
func TestImportCommentsHoldFileNames(t *testing.T) {
	name := "cfg.yaml\ndomains: evil: {}\n//"
	if got := printable.String(name); strings.ContainsAny(got, "\n\r") {
		t.Errorf("printable.String(%q) = %q: want one line", name, got)
	}
	if got := shortPos(policy.Pos{File: name, Line: 3}); strings.ContainsAny(got, "\n\r") {
		t.Errorf("shortPos = %q: want one line", got)
	}
}
