package docgen

import (
	"context"
	"os"
	"testing"
)

// TestEnforcerDocsUpToDate fails when rlctl-enforcer's page or the metric list in
// docs/enforcer.md no longer matches its flag set or its registry. Run make docs to refresh them.
func TestEnforcerDocsUpToDate(t *testing.T) {
	page, err := EnforcerPage()
	if err != nil {
		t.Fatal(err)
	}
	if committed, err := os.ReadFile("../../docs/cli/rlctl-enforcer.md"); err != nil || string(committed) != string(page) {
		t.Errorf("docs/cli/rlctl-enforcer.md: out of date (run make docs and commit the result)")
	}
	metrics, err := EnforcerMetrics(context.Background(), "../../policies")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/enforcer.md")
	if err != nil {
		t.Fatal(err)
	}
	want, err := ReplaceBlock(doc, MetricsBlock, MetricsTable(metrics))
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != string(doc) {
		t.Errorf("docs/enforcer.md: the metric list is out of date (run make docs and commit the result)")
	}
}
